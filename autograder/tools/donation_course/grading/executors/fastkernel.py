"""A kernel client for grading that drops a fixed wait of jupyter_client.

Per notebook, jupyter_client (8.x, as pinned) waits for 0.2 s of silence on
IOPub after the kernel answers `kernel_info`, and nbclient's default
"graceful" shutdown asks the kernel to exit and polls until it does. For a
class of hundreds of short notebooks those waits are a large share of the
wall time (measured: 1.1 s -> 0.6 s for a notebook that imports jax). The
worker (worker.py) installs this client through
`AsyncKernelManager.client_class` and sets `Execute.shutdown_kernel =
"immediate"`. Neither changes what a notebook computes:

- nbclient attributes every IOPub message to a cell by its parent message id,
  so start-up messages left on the channel are ignored, not mis-filed; the
  drain below still empties what is already there, just without waiting
  0.2 s for more;
- the outputs are all collected before the kernel is stopped, so killing it
  (`Execute.shutdown_kernel = "immediate"`, set by the worker) loses nothing.
"""
import time
from queue import Empty

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.channels import AsyncZMQSocketChannel
from jupyter_client.utils import ensure_async
from traitlets import Type

from ..referee.asks import ANSWERS, MAX_HANDOVER_BYTES, MIME

CAPPED = "\n[output capped by the grader: more than {limit:,} bytes were printed; the rest was dropped]\n"


class CappedIOPubChannel(AsyncZMQSocketChannel):
    """IOPub with an output budget per kernel: stream text beyond `limit`
    bytes is dropped (the first message past it carries CAPPED, on stdout,
    since nbgrader zeroes a grade cell that writes to stderr), and so are
    rich outputs (display_data, execute_result) past it. The referee's
    hand-overs count against a budget of their own. Other messages
    (status, errors, replies) pass as they are, so grading goes on."""

    limit = 1 << 20  # bytes one notebook may print (the worker sets settings.max_output_bytes)
    printed = 0
    noted = False
    # The hidden checks' hand-overs to the referee (hidden/handover.py) have a budget of their own, so that
    # a learner who prints a lot cannot crowd them out; past it they are dropped like any output.
    handover_limit = len(ANSWERS) * MAX_HANDOVER_BYTES
    handed_over = 0

    async def get_msg(self, timeout=None):
        msg = await super().get_msg(timeout=timeout)
        kind, content = msg.get("msg_type"), msg.get("content", {})
        if kind == "stream":
            text = content.get("text", "")
            room = self.limit - self.printed
            self.printed += len(text.encode("utf-8", "replace"))
            if room < len(text):
                content["text"] = text[:max(room, 0)] + ("" if self.noted else CAPPED.format(limit=self.limit))
                content["name"] = "stdout"  # an emptied stderr message must not zero the cell
                self.noted = True
        elif kind == "display_data" and set(content.get("data", {})) == {MIME}:
            self.handed_over += len(str(content["data"][MIME]))
            if self.handed_over > self.handover_limit:
                content["data"], content["metadata"] = {"text/plain": ""}, {}
        elif kind in ("display_data", "execute_result", "update_display_data"):
            size = sum(len(str(v)) for v in content.get("data", {}).values())
            self.printed += size
            if self.printed > self.limit:
                content["data"] = {"text/plain": "" if self.noted else CAPPED.format(limit=self.limit).strip()}
                content["metadata"] = {}
                self.noted = True
        return msg


class GradingKernelClient(AsyncKernelClient):
    iopub_channel_class = Type(CappedIOPubChannel)

    async def _async_wait_for_ready(self, timeout=None):
        deadline = time.monotonic() + (float("inf") if timeout is None else timeout)
        while True:
            self.kernel_info()
            try:
                msg = await ensure_async(self.shell_channel.get_msg(timeout=1))
            except Empty:
                msg = None
            if msg is not None and msg["msg_type"] == "kernel_info_reply":
                try:  # IOPub connected? (as jupyter_client checks it)
                    await ensure_async(self.iopub_channel.get_msg(timeout=0.2))
                except Empty:
                    pass
                else:
                    self._handle_kernel_info_reply(msg)
                    break
            if not await self._async_is_alive():
                raise RuntimeError("Kernel died before replying to kernel_info")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kernel didn't respond in {timeout:.0f} seconds")
        while True:  # drain what is queued, without waiting for more
            try:
                await ensure_async(self.iopub_channel.get_msg(timeout=0.01))
            except Empty:
                break

    wait_for_ready = _async_wait_for_ready
