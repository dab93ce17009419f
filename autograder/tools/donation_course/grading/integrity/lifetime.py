"""Each process the grader starts (grading workers, kernel launchers and their bwrap, kernel zygotes) dies with
the process that started it, however that one ends. (A referee server ends when its stdin closes.)

Linux's parent-death signal (prctl PR_SET_PDEATHSIG) kills a child when its parent dies, but only if the
parent is still alive when the child asks for it. A parent that died between the fork and the call (a worker
killed by Ctrl-C while it starts a kernel) has already handed the child to init, and the signal never comes:
the child, and the sandbox it was about to make, would run on with nobody to stop them. So the child checks,
after the call, that its parent is still the process that started it, and ends at once otherwise.

The starting process's pid is taken before the fork: a child that reads getppid() first would read init's pid
once its parent had died, and take init for its parent. It reaches the child as an argument (a kernel zygote's),
in the environment (PARENT_ENV: a kernel launcher, which jupyter_client starts, from worker.new_student_dir), or
through a preexec_fn (DiesWithThisProcess: only from a process that runs one thread, as a launcher does, since
Python code run between fork and exec in a process with threads can deadlock).
"""
import os
import signal

PARENT_ENV = "DONATION_LAB_KERNEL_PARENT"
PR_SET_PDEATHSIG = 1


def die_with(parent: int) -> None:
    """SIGKILL this process when `parent` dies; end it now if `parent` is already gone (no longer its parent)."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: no such signal; the check below still holds
    if os.getppid() != parent:
        os._exit(1)


class DiesWithThisProcess:
    """A preexec_fn for subprocess.Popen: the child dies with the process that starts it (the pid is taken
    now, in the parent)."""

    def __init__(self):
        self.parent = os.getpid()

    def __call__(self) -> None:
        die_with(self.parent)


def die_with_starter() -> None:
    """In a kernel launcher: die with the grading process that started it (PARENT_ENV), or, where that is not
    set (a launcher started by hand), with the parent it has now."""
    die_with(int(os.environ.get(PARENT_ENV) or os.getppid()))
