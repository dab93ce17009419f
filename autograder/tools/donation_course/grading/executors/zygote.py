"""The zygote: one process per dask worker from which its grading processes are forked.

A dask worker runs tasks on threads, and a process that runs threads must
not fork. So the worker starts this zygote once (`python -m
donation_course.grading.executors.zygote`, a subprocess: a nanny's worker is a
daemonic process, which may not have multiprocessing children). The
zygote imports the grader once, runs one thread, and forks a grading
process (worker.py's `serve`) for each request, as the local pool forks its
workers from the run's process: a run's grading process costs no Python
start-up and no imports.

Each dies with its parent: the zygote with its dask worker (and then kills
its grading processes and removes their scratch folders), a grading process
with the zygote, a kernel with its grading process.
"""
from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import replace
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from multiprocessing.reduction import recv_handle, send_handle
from pathlib import Path

from .protocol import Done, Fork, Forked, Stop

READY_WITHIN = 300       # seconds the zygote may take to start and fork
IDLE_EXIT = 600          # a grading process that waits this long for a student exits (its client vanished)


def kill_tree(pid: int) -> None:
    """Kill a process and everything under it (a grading process and its kernels), and wait until
    they are gone: a dying one could still write into the scratch folder that is removed next."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return
    kill_all(procs)


def kill_all(procs) -> None:
    """SIGKILL each of `procs` (psutil processes; those already gone are skipped), then wait for them."""
    import psutil

    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=10)


class MeasuredConnection:
    """serve()'s pipe to the task: waits at most IDLE_EXIT for a student (then Stop), and
    adds this process's own core-seconds of each one to its Done."""

    def __init__(self, conn: Connection):
        self.conn, self.start = conn, 0.0

    @staticmethod
    def cpu() -> float:
        """This process's own CPU time (its kernels' is sampled from outside: grader_process.wait;
        a kernel shut down by killing its bwrap is never reaped by this process)."""
        t = os.times()
        return t.user + t.system

    def recv(self):
        if not self.conn.poll(IDLE_EXIT):
            return Stop()
        message = self.conn.recv()
        self.start = self.cpu()
        return message

    def send(self, message) -> None:
        if isinstance(message, Done):
            message = replace(message, cpu=self.cpu() - self.start)
        self.conn.send(message)


class Zygote:
    """The dask worker's handle on its zygote."""

    def __init__(self, log: Path):
        parent, child = Pipe()
        env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
        started: queue.Queue = queue.Queue()

        def keep() -> None:  # the zygote's parent-death signal follows the thread that started it: this one,
            with open(log, "ab") as out:  # which lives as long as the zygote (a task thread may not)
                proc = subprocess.Popen([sys.executable, "-m", __name__, str(child.fileno()), str(os.getpid())],
                                        pass_fds=[child.fileno()], stdin=subprocess.DEVNULL, stdout=out,
                                        stderr=subprocess.STDOUT, env=env,
                                        start_new_session=True)  # a signal to the worker's group: it cleans up
            started.put(proc)
            proc.wait()

        threading.Thread(target=keep, name="donation-course-zygote", daemon=True).start()
        self.proc = started.get()
        child.close()
        self.conn, self.lock, self.code = parent, threading.Lock(), ""

    def fork(self, job) -> tuple[int, Connection]:
        """A new grading process for `job`: (its pid, the task's end of its pipe)."""
        ours, theirs = Pipe()
        try:
            with self.lock:
                self.conn.send(Fork(job))
                send_handle(self.conn, theirs.fileno(), self.proc.pid)
                if not self.conn.poll(READY_WITHIN):
                    raise EOFError
                match self.conn.recv():
                    case Forked(pid=pid):
                        return pid, ours
                    case message:
                        raise RuntimeError(f"the zygote answered {message!r} to a fork")
        finally:
            theirs.close()


_ZYGOTE: Zygote | None = None
_ZYGOTE_LOCK = threading.Lock()


def zygote(local_directory: str, code: str = "") -> Zygote:
    """This dask worker's zygote, started if there is none, it died, or (given `code`, the grading
    code's digest as it is on disk now) the code it imported has changed since."""
    global _ZYGOTE
    with _ZYGOTE_LOCK:
        if _ZYGOTE is not None and code and _ZYGOTE.code != code:
            _ZYGOTE.conn.close()  # it exits (and its idle grading processes with it)
            _ZYGOTE = None
        if _ZYGOTE is None or _ZYGOTE.proc.poll() is not None:
            logs = Path(local_directory) / "donation-course-logs"
            logs.mkdir(exist_ok=True)
            _ZYGOTE = Zygote(logs / "zygote.log")
            _ZYGOTE.code = code
        return _ZYGOTE


def name_process(name: bytes) -> None:
    """What ps and top show for this process (PR_SET_NAME): dl-zygote, dl-grader."""
    import ctypes

    try:
        ctypes.CDLL(None).prctl(15, ctypes.c_char_p(name), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def die_with_parent(parent: int, forked: dict[int, str]):
    """When the dask worker dies, however it dies (SIGTERM from PR_SET_PDEATHSIG): kill the grading
    processes forked here, with their kernels, and remove their scratch folders, then exit. Returns that
    ending, for the pipe's end: a killed worker's pipe can close before the signal comes."""
    import ctypes

    import psutil

    def end(*_) -> None:
        for pid, scratch in forked.items():
            try:
                if psutil.Process(pid).ppid() == os.getpid():  # still ours, not a reused pid
                    kill_tree(pid)
            except psutil.Error:
                pass
            shutil.rmtree(scratch, ignore_errors=True)
        os._exit(1)

    signal.signal(signal.SIGTERM, end)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        end()
    return end


def main(fd: int, parent: int) -> None:
    """The zygote: import the grader once, then fork a grading process (worker.py's serve) for each
    job that comes with its pipe's end. One thread, so each fork is sound."""
    from .worker import make_api, serve  # noqa: F401  (imported here, once for all its forks)

    forked: dict[int, str] = {}  # grading process -> its scratch folder
    end = die_with_parent(parent, forked)
    name_process(b"dl-zygote")
    import nbgrader.apps  # noqa: F401
    import nbgrader.converters  # noqa: F401

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # its grading processes are reaped as they end
    conn = Connection(fd)
    while True:
        try:
            request, handle = conn.recv(), recv_handle(conn)
        except (EOFError, OSError):  # the worker died, or let this zygote go: its grading processes go too
            end()
        match request:
            case Fork(job=job):
                pass
            case _:
                raise RuntimeError(f"the zygote got {request!r}; it only forks")
        if threading.active_count() != 1:
            raise RuntimeError(f"the zygote runs {threading.active_count()} threads; it forks from one only")
        me = os.getpid()  # (taken before the fork: the child's getppid() names init if this process died first)
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            name_process(b"dl-grader")
            try:
                serve(MeasuredConnection(Connection(handle)), job, me, inherited=(conn,))
            finally:
                os._exit(0)
        os.close(handle)
        forked[pid] = str(Path(job.tmp).parent)
        conn.send(Forked(pid))


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
