"""The referee server: one per grading worker, started in the sandbox, that
judges the hand-overs the worker sends (client.py) without ever running
learner code.

It imports JAX once (without starting a backend), then for each answer forks
a child: the child caps its address space and CPU time, starts the CPU
backend and runs judge.judge, writing one verdict per line to a pipe; the
server stops a child that runs past the wall-clock limit. So a hostile
program can at worst end its own child: the verdicts it had already given
stand, the rest are "unjudged" with the cap that stopped it, and the next
answer and the next student go on.

Protocol (stdin, stdout; one JSON object per line): request
{"answers": {name: hand-over or null}, "seconds": s, "memory_mb": m};
reply {"verdicts": [{check, outcome, message}...], "seconds": wall time}.
"""
from __future__ import annotations

import json
import os
import resource
import select
import signal
import sys
import time


def _drop_root() -> None:
    """As root in the sandbox (the grader run as root): become the sandbox's unprivileged uid."""
    if os.getuid() == 0:
        from ..sandbox import SANDBOX_UID

        os.setgroups([])
        os.setresgid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID)
        os.setresuid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID)


def _die_with_parent() -> None:
    import ctypes

    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:
        os._exit(1)


def _child(answer, handover, write_fd: int, seconds: int, memory_mb: int) -> None:
    """In the forked child: caps, then the verdicts, one line each. Never returns."""
    code = 0
    try:
        _die_with_parent()  # a server that goes takes its child along
        if memory_mb > 0:
            resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
        resource.setrlimit(resource.RLIMIT_CPU, (seconds + 1, seconds + 2))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        from .judge import judge

        for verdict in judge(answer, handover):
            os.write(write_fd, (json.dumps(verdict.to_dict()) + "\n").encode())
    except MemoryError:
        code = 3
    except BaseException:
        code = 4
    os._exit(code)


def judge_in_child(answer, handover, seconds: int, memory_mb: int) -> list:
    """The verdicts of one answer, judged in a capped child; those it did not reach are unjudged."""
    from .judge import checks_of
    from .verdict import UNJUDGED, Verdict

    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(answer, handover, write_fd, seconds, memory_mb)
    os.close(write_fd)
    deadline, data, stopped = time.monotonic() + seconds, b"", False
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            stopped = True
            break
        ready, _, _ = select.select([read_fd], [], [], left)
        if ready:
            chunk = os.read(read_fd, 65536)
            if not chunk:
                break
            data += chunk
    os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    verdicts = []
    for line in data.decode(errors="replace").splitlines():
        try:
            verdicts.append(Verdict.from_dict(json.loads(line)))
        except (ValueError, KeyError, TypeError):
            pass  # a line cut by the kill
    if stopped:
        why = (f"the grader stopped its program after {seconds} s (its time limit): it may loop without end or "
               "take far too long")
    elif os.WIFSIGNALED(status) or os.WEXITSTATUS(status) == 3:
        why = (f"the grader could not run its program within its caps ({memory_mb} MiB of memory, {seconds} s): "
               "it stopped the grader's process")
    elif os.WEXITSTATUS(status) != 0:
        why = "the grader could not run its program (it stopped the grader's process)"
    else:
        why = "the grader could not judge it"
    done = {v.check for v in verdicts}
    verdicts += [Verdict(check, UNJUDGED, why + ".") for check in checks_of(answer) if check not in done]
    return verdicts


def serve(request: dict) -> dict:
    from .asks import ANSWERS

    start = time.monotonic()
    seconds, memory_mb = int(request.get("seconds", 20)), int(request.get("memory_mb", 3072))
    verdicts = []
    for name, handover in (request.get("answers") or {}).items():
        if name in ANSWERS:
            verdicts += [v.to_dict() for v in judge_in_child(ANSWERS[name], handover, seconds, memory_mb)]
    return {"verdicts": verdicts, "seconds": time.monotonic() - start}


def main() -> None:
    _die_with_parent()
    if "--sandboxed" in sys.argv[1:]:  # outside the sandbox the interpreter may sit in root's home
        _drop_root()
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything printed by a library goes to stderr, never into the replies
    import jax  # noqa: F401  (once, here: every child forks with it imported; no backend is started here)

    from . import judge  # noqa: F401
    replies.write(json.dumps({"ready": True}) + "\n")
    replies.flush()
    for line in sys.stdin:
        try:
            request = json.loads(line)
        except ValueError:
            request = {}
        replies.write(json.dumps(serve(request)) + "\n")
        replies.flush()


if __name__ == "__main__":
    main()
