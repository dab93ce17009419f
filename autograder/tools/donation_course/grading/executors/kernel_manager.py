"""The kernel manager of grading kernels: jupyter_client's, looking for a stopped kernel's end more often.

jupyter_client (8.x, as pinned) waits for a stopped kernel as long as it must, until its launcher has exited
(after a kill, or after a shutdown request), but looks every 0.1 s, and a launcher killed a moment ago is
still there at the first look. So every graded notebook ended with about 0.1 s in which its worker did
nothing (measured on the grading benchmark's warm course: 20 submissions on 2 workers took about 1 s less,
docs/performance.md). GradingKernelManager looks every 5 ms. What it waits for, and for how long at most, is
jupyter_client's.
"""
from jupyter_client.manager import AsyncKernelManager

ENDED_POLL = 0.005  # seconds between looks at a stopped kernel's launcher (jupyter_client's: 0.1)


class GradingKernelManager(AsyncKernelManager):
    async def _async_wait(self, pollinterval: float = 0.1) -> None:
        await super()._async_wait(pollinterval=min(pollinterval, ENDED_POLL))
