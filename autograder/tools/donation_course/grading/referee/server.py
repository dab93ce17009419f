"""The referee server: one per grading worker, started in the sandbox, that
judges the hand-overs the worker sends (client.py) without ever running
learner code.

It imports JAX once (without starting a backend), then for each student
forks one child for all the answers: the child caps its address space and
CPU time, starts the CPU backend and runs judge.judge on each answer in
turn, writing one verdict per line to a pipe and a line after each answer;
the server stops a child that runs past an answer's wall-clock limit (each
answer has its own, from when the child began it). So a hostile program
can at worst end its own child: the verdicts it had already given stand,
the rest of its answer's are "unjudged" with the cap that stopped it, and
the next answer (in a fresh child) and the next student go on. Answers on
another number of CPU devices (lesson 6's 8) get a child of their own,
since the count is set before a child's backend starts. The child freezes
what it inherited (gc.freeze), so the loop checks' full garbage
collections walk only what the judging made, not JAX's modules. The server
keeps what its children compiled (compiled.py): the next student's honest
answer, the same program, is loaded, not compiled again. Each reply takes
what it kept to the worker, which keeps it on disk for the course and sends
it to the other workers' servers with their next requests.

Its messages are wire.py's, one JSON line each: Ready once, then a Reply for each Request on stdin; a
child writes Verdict, AnswerDone and Compiled lines to its pipe, each read and checked as data.
"""
from __future__ import annotations

import gc
import os
import resource
import select
import signal
import sys
import time

from .compiled import Memo
from .wire import AnswerDone, Compiled, Ready, Reply, Request, line, read_request


def _drop_root() -> None:
    """As root in the sandbox (the grader run as root): become the sandbox's unprivileged uid."""
    if os.getuid() == 0:
        from ..integrity.sandbox import SANDBOX_UID

        os.setgroups([])
        os.setresgid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID)
        os.setresuid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID)


MEMO = Memo()  # programs compiled by this server's children (compiled.py), kept for the next students'
KEPT: list = []  # what MEMO kept while judging the current request: the reply takes it to the worker's disk


def _die_with_parent() -> None:
    import ctypes

    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:
        os._exit(1)


def _child(answers: list, write_fd: int, seconds: int, memory_mb: int) -> None:
    """In the forked child: caps, then each answer's verdicts, one line each, and AnswerDone(i) after
    answer i. Never returns."""
    code = 0
    try:
        _die_with_parent()  # a server that goes takes its child along
        gc.freeze()  # what the server imported is never garbage: the loop checks' full collections skip it
        if memory_mb > 0:
            resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
        cpu = seconds * len(answers) + 1  # each answer's wall-clock limit is the server's to keep
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        from .compiled import install
        from .judge import judge

        install(MEMO.blobs, lambda compiled: os.write(write_fd, line(compiled)))
        for i, (answer, handover) in enumerate(answers):
            for verdict in judge(answer, handover):
                os.write(write_fd, line(verdict))
            os.write(write_fd, line(AnswerDone(i)))
    except MemoryError:
        code = 3
    except BaseException:
        code = 4
    os._exit(code)


def _why(status: int, stopped: bool, seconds: int, memory_mb: int) -> str:
    if stopped:
        return (f"the grader stopped its program after {seconds} s (its time limit): it may loop without end or "
                "take far too long")
    if os.WIFSIGNALED(status) or os.WEXITSTATUS(status) == 3:
        return (f"the grader could not run its program within its caps ({memory_mb} MiB of memory, {seconds} s): "
                "it stopped the grader's process")
    if os.WEXITSTATUS(status) != 0:
        return "the grader could not run its program (it stopped the grader's process)"
    return "the grader could not judge it"


def _one_child(answers: list, verdicts: list, seconds: int, memory_mb: int) -> tuple[int, str]:
    """Judge `answers` in order in one capped child, appending each one's verdicts to verdicts[i]; each answer
    has `seconds` of wall-clock time from when the child began it. Returns (how many answers it finished, why it
    stopped before the next one: "" when it finished them all)."""
    from .compiled import keys_of
    from .verdict import Verdict
    from .wire import from_child

    sent = set().union(*(keys_of(handover) for _, handover in answers))  # the memo keeps only these texts' programs
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(answers, write_fd, seconds, memory_mb)
    os.close(write_fd)
    deadline, pending, finished, stopped = time.monotonic() + seconds, b"", 0, False
    while finished < len(answers):
        left = deadline - time.monotonic()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            stopped = True
            break
        if not select.select([read_fd], [], [], left)[0]:
            continue
        chunk = os.read(read_fd, 65536)
        if not chunk:
            break
        *lines, pending = (pending + chunk).split(b"\n")
        for text in lines:
            match from_child(text):  # None: a line cut by the kill, or none of the kinds
                case Compiled() as compiled:
                    if MEMO.offer(compiled, sent) and not compiled.base:
                        KEPT.append(compiled)  # (a program made static at this server's own length stays here)
                case AnswerDone(index=index) if index == finished:
                    finished += 1
                    deadline = time.monotonic() + seconds  # the next answer's own time
                case Verdict() as verdict if finished < len(answers):
                    verdicts[finished].append(verdict)
    os.close(read_fd)
    _, status = os.waitpid(pid, 0)  # (its pipe ended: it is exiting, with the status that says why)
    if finished == len(answers):
        return finished, ""
    return finished, _why(status, stopped, seconds, memory_mb) + "."


def judge_in_children(answers: list, seconds: int, memory_mb: int) -> list:
    """[(Answer, hand-over)] -> their verdicts, one list per answer: judged in one capped child for all of
    them (one fork and one CPU-backend start per student, not per answer). An answer whose child is stopped
    (its time limit, a cap) gets "unjudged" for the checks it did not reach, with the cap that stopped it, and
    the answers after it are judged in a fresh child."""
    from .judge import checks_of
    from .verdict import UNJUDGED, Verdict

    verdicts = [[] for _ in answers]
    start = 0
    while start < len(answers):
        finished, why = _one_child(answers[start:], verdicts[start:], seconds, memory_mb)
        start += finished
        if start < len(answers):  # the answer it was judging when it stopped
            answer, done = answers[start][0], {v.check for v in verdicts[start]}
            verdicts[start] += [Verdict(check, UNJUDGED, why) for check in checks_of(answer) if check not in done]
            start += 1
    return verdicts


def judge_in_child(answer, handover, seconds: int, memory_mb: int) -> list:
    """The verdicts of one answer, judged in a capped child; those it did not reach are unjudged."""
    return judge_in_children([(answer, handover)], seconds, memory_mb)[0]


def serve(request: Request) -> Reply:
    from .asks import ANSWERS

    start = time.monotonic()
    MEMO.preload(request.memo)  # what this course's referees compiled before (compiled.Folder, on the worker's disk)
    KEPT.clear()
    seconds, memory_mb = request.seconds, request.memory_mb
    answers = [(ANSWERS[name], handover) for name, handover in request.answers.items() if name in ANSWERS]
    # answers on the same number of CPU devices share a child (the device count is set before its backend starts)
    groups = {}
    for i, (answer, _) in enumerate(answers):
        groups.setdefault(getattr(answer, "devices", 1), []).append(i)
    judged = [None] * len(answers)
    for indices in groups.values():
        for i, found in zip(indices, judge_in_children([answers[i] for i in indices], seconds, memory_mb),
                            strict=True):
            judged[i] = found
    return Reply(tuple(v for found in judged for v in found), time.monotonic() - start, tuple(KEPT))


def main() -> None:
    _die_with_parent()
    if "--sandboxed" in sys.argv[1:]:  # outside the sandbox the interpreter may sit in root's home
        _drop_root()
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed by a library goes to stderr, never into the replies
    import jax  # noqa: F401  (once, here: every child forks with it imported; no backend is started here)

    from ..integrity.jax_before_fork import prepare_jax_for_forks

    prepare_jax_for_forks()  # what every child's first program would do again

    from . import judge

    judge.warm()  # (its children fork with it)
    replies.write(line(Ready()))
    replies.flush()
    for text in sys.stdin:
        try:
            request = read_request(text)
        except (ValueError, TypeError):
            request = Request({})  # the client waits for a reply to each line: an empty one
        replies.write(line(serve(request)))
        replies.flush()


if __name__ == "__main__":
    main()
