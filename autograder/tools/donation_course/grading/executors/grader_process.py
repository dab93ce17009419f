"""The grading processes of a cluster worker, and a task thread's handle on one.

worker.py's grading sets os.environ and chdir's, and the local pool forks
only from a one-thread process: neither fits a dask worker, which runs its
tasks on threads. So each task thread drives a grading process of its own
(worker.py's `serve`: one NbGraderAPI, a private gradebook copy, each kernel
sandboxed by kernel.py as locally), forked by the worker's zygote
(zygote.py) on a run's first task there and reused for its next ones. Its
scratch folder (sockets, kernelspec, gradebook copy) is in /tmp, named to
the dask worker's pid.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from pathlib import Path

from ...course import Course
from .protocol import Died, Done, Ready, Stop, receive
from .scratch import mark_owner, remove_orphans
from .zygote import kill_tree, zygote

SCRATCH_PREFIX = "dlc-"  # in /tmp: a kernel's socket path has at most 107 bytes
SAMPLE_EVERY = 0.1       # seconds between samples of the kernels' memory and CPU time
READY_WITHIN = 300       # seconds a grading process may take to start


@dataclass
class Grader:
    pid: int
    conn: Connection
    scratch: Path
    log: Path

    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)  # the zygote reaps its children at once: a dead one's pid is gone
            return True
        except OSError:
            return False


def stop(grader: Grader, kill: bool) -> None:
    if not kill:
        try:
            grader.conn.send(Stop())
            deadline = time.monotonic() + 10
            while grader.alive() and time.monotonic() < deadline:
                time.sleep(0.05)
        except OSError:
            pass
    kill_tree(grader.pid)
    grader.conn.close()
    shutil.rmtree(grader.scratch, ignore_errors=True)


def remove_stale_scratch() -> None:
    """Scratch folders of grading processes whose dask worker was killed (nothing else removed them)."""
    remove_orphans(Path("/tmp"), SCRATCH_PREFIX)


def start(course: Path, job, local_directory: str) -> Grader:
    """A grading process for `course` with `job`'s limits; back once it is ready."""
    from .worker import make_kernelspec

    remove_stale_scratch()
    scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir="/tmp"))
    mark_owner(scratch)  # the dask worker process it belongs to
    logs = Path(local_directory) / "donation-course-logs"
    logs.mkdir(exist_ok=True)
    log = logs / f"grader-{scratch.name}.log"
    shutil.copyfile(course / "gradebook.db", scratch / "worker.db")
    cache = Course(course).compile_cache  # a bundle's course: this assignment alone
    cache = cache if job.kernel.compile_cache and cache.is_dir() else ""
    if cache and not job.kernel.sandbox:  # unsandboxed kernels could write to it: their own copy
        cache = shutil.copytree(cache, scratch / "compile-cache")
    job = replace(job, course=str(course), db=str(scratch / "worker.db"), log=str(log), tmp=str(scratch / "w"),
                  kernel=replace(job.kernel, compile_cache=str(cache)),
                  kernel_dir=str(make_kernelspec(scratch / "jupyter", sys.executable)))
    grader = Grader(0, None, scratch, log)
    try:
        grader.pid, grader.conn = zygote(local_directory).fork(job)
        if not grader.conn.poll(READY_WITHIN) or not isinstance(receive(grader.conn), Ready):
            raise EOFError
    except (EOFError, OSError):
        if grader.conn is not None:
            stop(grader, kill=True)
        shutil.rmtree(scratch, ignore_errors=True)
        lines = log.read_text(errors="replace").strip().splitlines() if log.exists() else []
        raise RuntimeError(f"the grading process could not start: {(lines or ['no output'])[-1][:300]}") from None
    return grader


def descendants(pid: int) -> tuple[int, dict[int, float]]:
    """(resident bytes of `pid` and its descendants, {descendant: its CPU seconds}), read from
    /proc/PID/stat and /proc/PID/task/*/children: a few small reads per process of the tree, not a
    scan of every process on the machine (psutil's children())."""
    rss, cpu, todo = 0, {}, [pid]
    page, tick = os.sysconf("SC_PAGE_SIZE"), os.sysconf("SC_CLK_TCK")
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            rss += int(fields[21]) * page
            if p != pid:
                cpu[p] = (int(fields[11]) + int(fields[12])) / tick
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    todo += [int(child) for child in fh.read().split()]
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    return rss, cpu


def wait(grader: Grader, student: str, timeout: int, stopped: Callable[[], bool]):
    """(StudentResult or None if the run stopped, core-seconds or None, peak RSS in bytes). Core-seconds:
    the grading process's own (it measures them) plus its kernels' (sampled here)."""
    from ..results.result import StudentResult

    deadline, peak, kernels = time.monotonic() + timeout, 0, {}
    while True:
        if grader.conn.poll(SAMPLE_EVERY):
            match receive(grader.conn):
                case Done(result=result, cpu=cpu):
                    return result, cpu + sum(kernels.values()), peak
                case Died():
                    return (StudentResult.failed(student, "the grading process died (out of memory or killed)"),
                            None, peak)
                case message:
                    raise RuntimeError(f"a grading process sent {message!r} while it graded {student}")
        if stopped():
            return None, None, peak
        if time.monotonic() > deadline:
            kill_tree(grader.pid)
            return StudentResult.timed_out(student, timeout), None, peak
        rss, cpu = descendants(grader.pid)
        peak = max(peak, rss)
        kernels.update(cpu)  # each kernel's time as last seen (its final fraction of a sample is missed)
