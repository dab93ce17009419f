"""Ctrl-C, SIGTERM and SIGHUP stop a command in one way, whenever they come.

Each of the three raises Stopped in the main thread: a KeyboardInterrupt,
so everything that cleans up after Ctrl-C (the grader's pools, dask's
client) does so for all three. The command unwinds through its `finally`
blocks (workers and kernels end, temporary folders go, the lock is
released) and exits 128 + the signal: 130 for Ctrl-C, 143 for SIGTERM,
129 for SIGHUP. A signal the command was started with ignored (`nohup`,
a background job of a script) stays ignored.

Python runs a handler between two bytecodes of the main thread, wherever
that thread is, finalizers included (a `__del__`, a weakref callback, run
when the last reference to an object goes or by the garbage collector:
the grader's main thread drops dask futures and SQLAlchemy sessions by
the hundred). An exception raised in a finalizer is printed as
"Exception ignored in ..." and lost, and the command would go on as if no
signal had come. So the handler also records the signal: the loops that
wait for students call `check()`, which raises it again, and `exit_code`
says 128 + the signal for a command that ended after a signal was lost.
"""
from __future__ import annotations

import signal

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_received = 0  # the first of SIGNALS that came since `install`, 0 if none


class Stopped(KeyboardInterrupt):
    """Ctrl-C, SIGTERM (kill, a batch queue's time limit) or SIGHUP (a closed terminal, an SSH drop)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _handler(signum, _frame):
    global _received
    _received = _received or signum
    raise Stopped(signum)


def install() -> dict:
    """The handler for each of SIGNALS not ignored now; returns the handlers it replaced."""
    global _received
    _received, before = 0, {}
    for signum in SIGNALS:
        if signal.getsignal(signum) != signal.SIG_IGN:
            before[signum] = signal.signal(signum, _handler)
    return before


def uninstall(before: dict) -> None:
    global _received
    for signum, handler in before.items():
        signal.signal(signum, handler)
    _received = 0


def check() -> None:
    """Raise Stopped if one of SIGNALS came (again, if its first raise was lost in a finalizer)."""
    if _received:
        raise Stopped(_received)


def received() -> int:
    return _received


def exit_code(exc: BaseException | None = None) -> int:
    """128 + the signal that stopped the command (`exc`: the KeyboardInterrupt it unwound with)."""
    signum = getattr(exc, "signum", 0) or _received or signal.SIGINT
    return 128 + int(signum)
