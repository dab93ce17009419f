"""The kernel manager of grading kernels: jupyter_client's, without its fixed pauses around a kernel's start and
end.

- jupyter_client (8.x, as pinned) waits for a stopped kernel as long as it must, until its launcher has exited
  (after a kill, or after a shutdown request), but looks every 0.1 s, and a launcher killed a moment ago is still
  there at the first look. So every graded notebook ended with about 0.1 s in which its worker did nothing
  (measured on 20 submissions on 2 workers: about 0.6 s less in all, docs/performance.md).
  GradingKernelManager looks every 5 ms.
- jupyter_client's start and shutdown (its `in_pending_state` wrapper) sleep 0.01 s once they are done, "to
  ensure tests can capture the state": 0.02 s of every student. GradingKernelManager's are the same wrapper
  without that sleep.

What it waits for, and for how long at most, is jupyter_client's.
"""
import functools

from jupyter_client.manager import AsyncKernelManager, KernelManager, _get_future

ENDED_POLL = 0.005  # seconds between looks at a stopped kernel's launcher (jupyter_client's: 0.1)


def in_pending_state(method):
    """jupyter_client.manager.in_pending_state (8.10.0), without its 0.01 s sleep before the result is set."""

    @functools.wraps(method)
    async def wrapper(self, *args, **kwargs):
        if self._attempted_start or not self._ready:
            self._ready = _get_future()
        try:
            out = await method(self, *args, **kwargs)
            if self.owns_kernel:
                self._ready.set_result(None)
            return out
        except Exception as e:
            self._ready.set_exception(e)
            self.log.exception(self._ready.exception())
            raise e

    return wrapper


class GradingKernelManager(AsyncKernelManager):
    _async_start_kernel = in_pending_state(KernelManager._async_start_kernel.__wrapped__)
    _async_shutdown_kernel = in_pending_state(KernelManager._async_shutdown_kernel.__wrapped__)
    start_kernel = _async_start_kernel
    shutdown_kernel = _async_shutdown_kernel

    async def _async_wait(self, pollinterval: float = 0.1) -> None:
        await super()._async_wait(pollinterval=min(pollinterval, ENDED_POLL))
