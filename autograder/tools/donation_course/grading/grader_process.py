"""A grading process of a cluster worker, and the task thread's handle on it.

worker.py's grading sets os.environ and chdir's, and the local pool forks
only from a one-thread process: neither fits a dask worker, which runs its
tasks on threads. So each task thread drives a grading process of its own,
`python -m donation_course.grading.grader_process` (a subprocess, not
multiprocessing: a nanny's worker is a daemonic process, which may not
have multiprocessing children), started on a run's first task there and
reused for its next ones: worker.py's `serve` in it (one NbGraderAPI, a
private gradebook copy, each kernel sandboxed by kernel.py as locally),
dying with the dask worker. Its scratch folder (sockets, kernelspec,
gradebook copy) is in /tmp, named to the dask worker's pid.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from pathlib import Path

from .compile_cache import FOLDER as CACHE

SCRATCH_PREFIX = "dlc-"  # in /tmp: a kernel's socket path has at most 107 bytes
OWNER = "owner-pid"      # in a scratch folder: the dask worker process it belongs to
RSS_EVERY = 0.25         # seconds between samples of the grading process tree's memory
IDLE_EXIT = 600          # a grading process that waits this long for a student exits (its client vanished)
READY_WITHIN = 300       # seconds a grading process may take to start


@dataclass
class Grader:
    proc: subprocess.Popen
    conn: Connection
    scratch: Path
    log: Path


def kill_tree(proc: subprocess.Popen | None, pid: int | None = None) -> None:
    """Kill a grading process and everything under it (its kernels)."""
    import psutil

    pid = proc.pid if proc is not None else pid
    try:
        procs = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        procs = []
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass
    if proc is not None:
        proc.kill()
        proc.wait()


def stop(grader: Grader, kill: bool) -> None:
    if not kill:
        try:
            grader.conn.send(None)
            grader.proc.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            pass
    kill_tree(grader.proc)
    grader.conn.close()
    shutil.rmtree(grader.scratch, ignore_errors=True)


def remove_stale_scratch() -> None:
    """Scratch folders of grading processes whose dask worker was killed (nothing else removed them)."""
    import psutil

    for folder in Path("/tmp").glob(f"{SCRATCH_PREFIX}*"):
        try:
            owner = int((folder / OWNER).read_text())
        except (OSError, ValueError):
            continue
        if not psutil.pid_exists(owner):
            shutil.rmtree(folder, ignore_errors=True)


def start(course: Path, job, local_directory: str) -> Grader:
    """A grading process for `course` with `job`'s limits; back once it is ready."""
    from .worker import make_kernelspec

    remove_stale_scratch()
    scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir="/tmp"))
    (scratch / OWNER).write_text(str(os.getpid()))
    logs = Path(local_directory) / "donation-course-logs"
    logs.mkdir(exist_ok=True)
    log = logs / f"grader-{scratch.name}.log"
    shutil.copyfile(course / "gradebook.db", scratch / "worker.db")
    cache = course / CACHE if job.kernel.compile_cache and (course / CACHE).is_dir() else ""
    if cache and not job.kernel.sandbox:  # unsandboxed kernels could write to it: their own copy
        cache = shutil.copytree(cache, scratch / "compile-cache")
    job = replace(job, course=str(course), db=str(scratch / "worker.db"), log=str(log), tmp=str(scratch / "w"),
                  kernel=replace(job.kernel, compile_cache=str(cache)),
                  kernel_dir=str(make_kernelspec(scratch / "jupyter", sys.executable)))
    parent, child = Pipe()
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", __name__, str(child.fileno()), str(os.getpid())],
                                pass_fds=[child.fileno()], stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, env=env)
    child.close()
    grader = Grader(proc, parent, scratch, log)
    try:
        parent.send(job)
        if not parent.poll(READY_WITHIN):
            raise EOFError
        parent.recv()  # ("ready", None)
    except (EOFError, OSError):
        stop(grader, kill=True)
        lines = log.read_text(errors="replace").strip().splitlines() if log.exists() else []
        raise RuntimeError(f"the grading process could not start: {(lines or ['no output'])[-1][:300]}") from None
    return grader


def tree_rss(pid: int) -> int:
    import psutil

    try:
        root = psutil.Process(pid)
        return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])
    except psutil.Error:
        return 0


def wait(grader: Grader, student: str, timeout: int, stopped: Callable[[], bool]):
    """(StudentResult or None if the run stopped, core-seconds or None, peak RSS in bytes)."""
    from .result import StudentResult

    deadline, peak = time.monotonic() + timeout, 0
    while True:
        if grader.conn.poll(RSS_EVERY):
            try:
                message = grader.conn.recv()
                return message[1], message[2]["cpu"], peak
            except (EOFError, OSError):
                return StudentResult.failed(student, "the grading process died (out of memory or killed)"), None, peak
        if stopped():
            return None, None, peak
        if time.monotonic() > deadline:
            kill_tree(grader.proc)
            return StudentResult.timed_out(student, timeout), None, peak
        peak = max(peak, tree_rss(grader.proc.pid))


class MeasuredConnection:
    """serve()'s pipe to the task: waits at most IDLE_EXIT for a student, and
    adds the core-seconds (this process and its reaped kernels) of each one to its result."""

    def __init__(self, conn: Connection):
        self.conn, self.start = conn, 0.0

    @staticmethod
    def cpu() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def recv(self):
        if not self.conn.poll(IDLE_EXIT):
            return None
        message = self.conn.recv()
        self.start = self.cpu()
        return message

    def send(self, message) -> None:
        if message[0] == "done":
            message = (*message, {"cpu": self.cpu() - self.start})
        self.conn.send(message)


def main(fd: int, parent: int) -> None:
    """The grading process: worker.py's serve, which dies with its parent (the dask worker) and its
    kernels with it (bwrap --die-with-parent)."""
    from .worker import serve

    conn = Connection(fd)
    serve(MeasuredConnection(conn), conn.recv(), parent)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
