"""Grading workers, run in parallel: N long-lived processes (worker.py), each
killed and replaced (with its kernel) when its student runs past the
whole-submission time limit or when it dies."""
import multiprocessing as mp
import shutil
import sys
import tempfile
import threading
import time
from multiprocessing.connection import wait
from pathlib import Path

from .compile_cache import FOLDER as CACHE

# Where the kernels' ipc sockets live (in the run's scratch folder): a unix
# socket's path has at most 107 bytes, and a user's TMPDIR may be deeper.
SOCKET_TMP = "/tmp"


class Pool:
    """N long-lived workers; each can be killed (with its kernel) and replaced."""

    def __init__(self, n, course, dbdir, cell_timeout, memory_mb, kernel_dir, logs, compile_cache="",
                 sandbox=True, scratch=""):
        # Workers are forked from this process, which has imported nbgrader
        # already: a worker costs no Python start-up and no imports (about
        # 1 s of CPU each with "spawn", and as much once per run for a fork
        # server's own imports). Forking is sound while this process runs
        # one thread: a run starts none (cli.progress_bar switches tqdm's
        # monitor thread off), and _start refuses to fork otherwise.
        self.ctx = mp.get_context("fork")
        self.args = (course, dbdir, cell_timeout, memory_mb, kernel_dir)
        self.logs = logs
        # the course's read-only compile cache, or "" (compile_cache.py)
        self.compile_cache = compile_cache
        self.sandbox, self.scratch = sandbox, scratch
        self.slots = [self._start(i) for i in range(n)]

    def _start(self, i):
        from .worker import serve

        if threading.active_count() != 1:
            raise RuntimeError(f"grading workers are forked, and this process runs {threading.active_count()} "
                               f"threads: {[t.name for t in threading.enumerate()]}")
        course, dbdir, cell_timeout, memory_mb, kernel_dir = self.args
        db = Path(dbdir) / f"worker-{i}.db"
        shutil.copyfile(Path(course) / "gradebook.db", db)
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=serve, args=(child, str(course), str(db), cell_timeout, memory_mb, kernel_dir,
                                      str(Path(self.logs) / f"worker-{i}.log"), self.compile_cache,
                                      str(Path(self.scratch) / f"w{i}"), self.sandbox),
                                daemon=True)
        proc.start()
        child.close()
        return {"i": i, "proc": proc, "conn": parent, "ready": False, "student": None, "since": None}

    def kill(self, slot):
        import psutil

        try:
            procs = psutil.Process(slot["proc"].pid).children(recursive=True)
        except psutil.Error:
            procs = []
        for p in procs:
            try:
                p.kill()
            except psutil.Error:
                pass
        slot["proc"].kill()
        slot["proc"].join(5)
        slot["conn"].close()

    def replace(self, slot):
        self.kill(slot)
        new = self._start(slot["i"])
        self.slots[self.slots.index(slot)] = new

    def close(self):
        for slot in self.slots:
            try:
                slot["conn"].send(None)
            except OSError:
                pass
        for slot in self.slots:
            slot["proc"].join(10)
            if slot["proc"].is_alive():
                self.kill(slot)


def run_pool(students, course, args, cell_timeout, on_result, progress):
    with tempfile.TemporaryDirectory(prefix="donation-lab-grade-") as tmp, \
            tempfile.TemporaryDirectory(prefix="dlg-", dir=SOCKET_TMP) as scratch:
        from .worker import make_kernelspec

        kernel_dir = make_kernelspec(Path(tmp) / "jupyter", sys.executable)
        logs = Path(args.out_dir) / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        sandbox = not getattr(args, "no_sandbox", False)
        cache = course.root / CACHE
        if args.no_compile_cache or not cache.is_dir():
            cache = ""
        elif not sandbox:
            # Unsandboxed kernels could write to the course's cache (JAX is
            # only told not to): they get this run's copy of it.
            cache = shutil.copytree(cache, Path(tmp) / "compile-cache")
        pool = Pool(max(1, min(args.workers, len(students))), course.root, tmp, cell_timeout, args.memory_mb,
                    str(kernel_dir), str(logs), compile_cache=str(cache), sandbox=sandbox, scratch=scratch)
        queue = list(students)
        pending = len(queue)
        try:
            while pending:
                for slot in pool.slots:
                    if slot["ready"] and slot["student"] is None and queue:
                        slot["student"], slot["since"] = queue.pop(0), time.monotonic()
                        slot["conn"].send(slot["student"])
                conns = {slot["conn"]: slot for slot in pool.slots}
                sentinels = {slot["proc"].sentinel: slot for slot in pool.slots}
                ready = wait(list(conns) + list(sentinels), timeout=1.0)
                now = time.monotonic()
                for obj in ready:
                    slot = conns.get(obj) or sentinels.get(obj)
                    if slot not in pool.slots:
                        continue
                    if obj in conns:
                        try:
                            kind, payload = slot["conn"].recv()
                        except (EOFError, OSError):
                            kind, payload = "dead", None
                    else:
                        if slot["conn"].poll():
                            continue  # read the message first
                        kind, payload = "dead", None
                    if kind == "ready":
                        slot["ready"] = True
                    elif kind == "done":
                        slot["student"] = None
                        pending -= 1
                        on_result(payload)
                        progress()
                    else:  # the worker process died
                        student = slot["student"]
                        pool.replace(slot)
                        if student is not None:
                            pending -= 1
                            on_result({"student": student, "notebooks": {}, "ok": False, "status": "error",
                                       "reason": "the grading process died (out of memory or killed)"})
                            progress()
                for slot in list(pool.slots):
                    if slot["student"] is not None and now - slot["since"] > args.timeout:
                        student = slot["student"]
                        pool.replace(slot)
                        pending -= 1
                        on_result({"student": student, "notebooks": {}, "ok": False, "status": "timeout",
                                   "reason": f"grading took longer than {args.timeout} s (whole-submission "
                                   "time limit); no score could be recorded"})
                        progress()
        except KeyboardInterrupt:  # Ctrl-C: stop now, not after each worker's student
            for slot in pool.slots:
                pool.kill(slot)
            raise
        finally:
            pool.close()
