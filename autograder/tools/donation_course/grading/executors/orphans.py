"""What a killed grading worker's processes leave behind is handed to the run's process, which ends it.

Each process under a worker dies with its parent (integrity/lifetime.py), but bubblewrap leaves one gap that no
check of ours can close: its process that becomes the sandbox's init asks for its parent-death signal only after
it has mounted the sandbox, and before that it waits for its parent (the outer bwrap) to let it go on. An outer
bwrap killed in that moment (its launcher killed, with the worker, by Ctrl-C or a time limit) leaves that process
waiting for good: a `bwrap`, asleep, with nobody to wake or end it.

So the run's process makes itself the "child subreaper" of everything under it (Linux's
PR_SET_CHILD_SUBREAPER): a process whose parent dies is handed to it rather than to init. After it has killed a
worker, `Orphans.end` kills and reaps every process so handed over, and again for what those leave in turn,
until none is left; after each student too, since every kernel's bwrap is handed over as it dies (its launcher
is killed at the kernel's shutdown), and would otherwise stay a zombie until the run ends. A process handed
over is told from the run's own children by its pid: not a worker's, not one the run had before it started the
workers.
"""
from __future__ import annotations

import time

PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 36, 37
END_WITHIN = 10  # seconds to end what was handed over (SIGKILL: normally milliseconds)


def _subreaper(on: bool | None = None) -> bool:
    """Whether this process is handed its descendants whose parent dies (not inherited by what it forks); with
    `on`, set it first. False where Linux's prctl is not there: orphans then go to init, as before."""
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
        if on is not None and prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) != 0:
            return False
        state = ctypes.c_int(0)
        return prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(state), 0, 0, 0) == 0 and bool(state.value)
    except (OSError, AttributeError):
        return False


class Orphans:
    """The processes handed to this one since it was made (see the module's docstring)."""

    def __init__(self):
        import psutil

        self.me = psutil.Process()
        self.was_subreaper = _subreaper()
        self.subreaper = _subreaper(True)
        self.before = {p.pid for p in self.me.children()}  # the run's own, made before the workers: never touched

    def release(self) -> None:
        """This process as it was before (a pool made inside another program, a test's process, leaves it so)."""
        if self.subreaper and not self.was_subreaper:
            _subreaper(False)
        self.subreaper = False

    def end(self, keep: set) -> list:
        """Kill and reap every process handed over, except the pids in `keep` (the live workers), until none is
        left (killing one can hand over its own children). Returns the pids ended."""
        import psutil

        from .zygote import kill_all

        ended, deadline = [], time.monotonic() + END_WITHIN
        while self.subreaper and time.monotonic() < deadline:
            try:
                handed = [p for p in self.me.children() if p.pid not in keep and p.pid not in self.before]
            except psutil.Error:
                break
            if not handed:
                break
            kill_all(handed)  # SIGKILL, then wait: a dead one is reaped here (it is this process's child now)
            ended += [p.pid for p in handed]
        return ended
