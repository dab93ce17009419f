"""A kernel client for grading: it caps a notebook's output, keeps the hidden checks' hand-overs on a budget of
their own (OutputBudget), and drops a fixed wait of jupyter_client.

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

The worker's Execute preprocessor (GradingExecute) starts each kernel with
kernel_manager.GradingKernelManager, which drops jupyter_client's fixed
pauses around a kernel's start and end.
"""
import json
import time
from queue import Empty

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.channels import AsyncZMQSocketChannel
from jupyter_client.utils import ensure_async
from nbgrader.preprocessors import Execute
from traitlets import Type

from ..referee.asks import MAX_HANDOVER_BYTES, MIME
from ..referee.combine import checks_in
from ..referee.received import DROPPED
from .kernel_manager import GradingKernelManager

CAPPED = "\n[output capped by the grader: more than {limit:,} bytes were printed; the rest was dropped]\n"
RICH = ("display_data", "execute_result", "update_display_data")
OUTPUT_BYTES = 64      # what one rich output costs in the notebook besides its data (many small ones add up)
ENVELOPE_BYTES = 1024  # a hand-over record without its entry: answer, check, index (hidden/handover.py)


def handing_over(cell) -> frozenset:
    """{(answer, check)} that this cell's hidden checks hand over to the referee: the calls of asks.CHECKS in a
    locked grade cell (nbgrader has put the instructor's source and metadata back in such a cell before it runs:
    a learner cannot make one), as received.py reads them from the source notebook; empty for any other cell."""
    meta = cell.get("metadata", {}).get("nbgrader") if isinstance(cell.get("metadata"), dict) else None
    if (cell.get("cell_type") != "code" or not isinstance(meta, dict) or meta.get("grade") is not True
            or meta.get("locked") is not True or meta.get("solution") is True
            or not isinstance(meta.get("grade_id"), str)):
        return frozenset()
    return frozenset(checks_in(cell.get("source", "")))


_next_cell = frozenset()  # handing_over(the cell nbclient is about to run), read by GradingKernelClient.execute


def note_cell(cell, **_) -> None:
    """nbclient's Execute.on_cell_execute hook (the worker sets it): called just before each code cell is sent to
    the kernel, so that the client knows which hand-overs that cell's execute request may carry."""
    global _next_cell
    _next_cell = handing_over(cell)


class OutputBudget:
    """One kernel's output budget, message by message (`keep`): stream text
    beyond `limit` bytes is dropped (the first message past it carries
    CAPPED, on stdout, since nbgrader zeroes a grade cell that writes to
    stderr), and so are rich outputs (display_data, execute_result,
    update_display_data) past it: the first becomes the CAPPED note, the rest
    never reach the notebook, not even as empty outputs, save the first
    hand-over record among them, left as received.DROPPED so that the student
    is flagged for it as for one below the cap. Other messages
    (status, errors, replies) pass as they are, so grading goes on.

    The hidden checks' hand-overs to the referee (hidden/handover.py) have a
    budget of their own, so that a learner who prints a lot cannot crowd them
    out, but only the records the checks make may use it: a hand-over record
    (a display_data of the type asks.MIME alone) is on it only while a grade
    cell whose checks hand over that answer runs (`handing`, by the parent
    message id of the cell's execute request), once for each (answer, check),
    its entries within asks.MAX_HANDOVER_BYTES per answer, as received.py
    replays them. A second record for the same check in such a cell (a
    learner's function the check calls displayed one too, before or after
    the check's own) reaches the notebook as a small record of its own, so
    that received.py sees the check hand over twice and flags the student;
    any further record, and every record from any other cell, is the
    learner's output and counts against `limit` like any other. In such a
    cell nothing clears the outputs (clear_output is dropped): the checks
    never do, and a learner's function could otherwise take away the
    records that flag it and then show a forged one."""

    def __init__(self, limit: int):
        self.limit = limit
        self.printed = 0
        self.noted = False
        self.dropped = False    # a learner's hand-over record was dropped past the cap (DROPPED sent in its place)
        self.handing = {}       # msg_id of a cell's execute request -> {(answer, check)} its checks hand over
        self.handed = set()     # (answer, check) whose record is on the checks' budget
        self.again = set()      # (answer, check) whose second record was kept as a small record of its own
        self.entry_bytes = {}   # answer -> bytes of its entries on the checks' budget

    def keep(self, msg) -> bool:
        """Whether msg reaches the kernel client (its content capped in place where it must be)."""
        kind, content = msg.get("msg_type"), msg.get("content", {})
        if kind == "stream":
            text = content.get("text", "")
            room = self.limit - self.printed
            self.printed += len(text.encode("utf-8", "replace"))
            if room < len(text):
                content["text"] = text[:max(room, 0)] + ("" if self.noted else CAPPED.format(limit=self.limit))
                content["name"] = "stdout"  # an emptied stderr message must not zero the cell
                self.noted = True
            return True
        parent = msg.get("parent_header")
        parent = parent.get("msg_id") if isinstance(parent, dict) else None
        expected = self.handing.get(parent, frozenset()) if isinstance(parent, str) else frozenset()
        if kind == "clear_output":
            return not expected  # in a cell that hands over, no output of the checks' may be taken away
        if kind not in RICH:
            return True
        data = content.get("data")
        if kind == "display_data" and isinstance(data, dict) and set(data) == {MIME}:
            if self._handed_over(expected, content):
                return True
        self.printed += OUTPUT_BYTES + (sum(len(str(k)) + len(str(v)) for k, v in data.items())
                                        if isinstance(data, dict) else len(str(data)))
        if self.printed <= self.limit:
            return True
        record = isinstance(data, dict) and MIME in data
        if self.noted and not (record and not self.dropped):
            return False  # dropped: past the cap, not even an empty output reaches the notebook
        content["data"], content["metadata"] = {}, {}
        if not self.noted:
            content["data"]["text/plain"] = CAPPED.format(limit=self.limit).strip()
            self.noted = True
        if record and not self.dropped:  # received.py flags the student for it, as for one below the cap
            content["data"][MIME] = DROPPED
            self.dropped = True
        return True

    def _handed_over(self, expected: frozenset, content: dict) -> bool:
        """Whether this hand-over record is on the checks' budget (rewritten in place if it is a check's second);
        False: it is the learner's output."""
        record = content["data"][MIME]
        if not expected or not isinstance(record, dict):
            return False
        key = (record.get("answer"), record.get("check"))
        if not (isinstance(key[0], str) and isinstance(key[1], str)) or key not in expected:
            return False
        if key in self.handed:
            if key in self.again:
                return False
            self.again.add(key)  # received.py: handed over twice, the student flagged, the answer nothing
            content["data"], content["metadata"] = {MIME: {"answer": key[0], "check": key[1], "again": True}}, {}
            return True
        try:
            entry = len(json.dumps(record["entry"])) if "entry" in record else 0
            envelope = len(json.dumps({k: v for k, v in record.items() if k != "entry"}))
        except (TypeError, ValueError, RecursionError):
            return False
        if envelope > ENVELOPE_BYTES or self.entry_bytes.get(key[0], 0) + entry > MAX_HANDOVER_BYTES:
            return False
        self.entry_bytes[key[0]] = self.entry_bytes.get(key[0], 0) + entry
        self.handed.add(key)
        return True


class CappedIOPubChannel(AsyncZMQSocketChannel):
    """IOPub with an output budget per kernel (OutputBudget): a message the budget drops is never returned."""

    limit = 1 << 20  # bytes one notebook may print (the worker sets settings.max_output_bytes)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.budget = OutputBudget(self.limit)

    async def get_msg(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            msg = await super().get_msg(timeout=left)
            if self.budget.keep(msg):
                return msg


class GradingKernelClient(AsyncKernelClient):
    iopub_channel_class = Type(CappedIOPubChannel)

    def execute(self, code, *args, **kwargs):
        """Send an execute request, its msg_id noted with the hand-overs that cell's checks make (note_cell)."""
        global _next_cell
        msg_id = super().execute(code, *args, **kwargs)
        self.iopub_channel.budget.handing[msg_id], _next_cell = _next_cell, frozenset()
        return msg_id

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
                await ensure_async(self.iopub_channel.get_msg(timeout=0))
            except Empty:
                break

    wait_for_ready = _async_wait_for_ready


class GradingExecute(Execute):
    """nbgrader's Execute preprocessor, its kernels managed by GradingKernelManager. nbgrader's Execute passes
    AsyncKernelManager to nbclient as a keyword, which configuration cannot change; a keyword given first is kept
    (its `setdefault`)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("kernel_manager_class", GradingKernelManager)
        super().__init__(*args, **kwargs)
