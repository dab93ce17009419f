"""The local executor: N long-lived grading workers (worker.py) forked from
this process, each killed and replaced (with its kernel) when its student
runs past the whole-submission time limit or when it dies.

`LocalPool.grade(students)` yields one StudentResult per student, in the
order they finish; the run merges each as it arrives.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from multiprocessing.connection import wait
from pathlib import Path

from ... import interrupts
from ...course import CourseError
from ..results.result import StudentResult
from ..run.state import held_locks
from .early_zygotes import EarlyZygotes, Handoff
from .orphans import Orphans
from .protocol import Died, Done, Grade, Ready, Stop, receive
from .worker import WorkerJob, serve

# A worker that dies before it is ready has met a problem of the grader, not
# of a student (a broken nbgrader_config.py, a full disk): after this many
# in a row the run stops with one line.
MAX_EARLY_DEATHS = 3


@dataclass
class Slot:
    i: int
    proc: mp.Process
    conn: object
    ready: bool = False
    student: str | None = None
    since: float = 0.0
    log: str = field(default="")
    zygote: Handoff | None = None  # the kernel zygote the run started for this worker, which it adopted


class LocalPool:
    """N forked workers; each can be killed (with its kernel) and replaced."""

    def __init__(self, n: int, job: WorkerJob, timeout: int, early: EarlyZygotes | None = None):
        # Workers are forked from this process, which has imported nbgrader
        # already: a worker costs no Python start-up and no imports. Forking
        # is sound while this process runs one thread: a run starts none
        # (progress.progress_bar switches tqdm's monitor thread off), and
        # _start refuses to fork otherwise.
        self.ctx = mp.get_context("fork")
        self.job, self.timeout, self.early_deaths = job, timeout, 0
        self.early = early  # kernel zygotes the run started before its workers: each first worker adopts one
        self.orphans = Orphans()  # what a killed worker's processes leave behind comes to this process (orphans.py)
        try:
            self.slots = [self._start(i) for i in range(n)]
        except BaseException:
            self.orphans.release()
            raise
        finally:
            if early is not None:
                early.end_unused()

    def _start(self, i: int) -> Slot:
        if threading.active_count() != 1:
            raise RuntimeError(f"grading workers are forked, and this process runs {threading.active_count()} "
                               f"threads: {[t.name for t in threading.enumerate()]}")
        db = Path(self.job.db).parent / f"worker-{i}.db"
        shutil.copyfile(Path(self.job.course) / "gradebook.db", db)
        kernel = self.job.kernel
        zygote = (self.early.take(i, kernel.sandbox, kernel.fork, kernel.compile_cache)
                  if self.early is not None and not hasattr(self, "slots") else None)  # first workers only
        job = replace(self.job, db=str(db), log=str(Path(self.job.log) / f"worker-{i}.log"),
                      tmp=str(Path(self.job.tmp) / f"w{i}"), zygote=zygote)
        parent, child = self.ctx.Pipe()
        inherited = (parent, *(slot.conn for slot in getattr(self, "slots", [])), *held_locks())
        proc = self.ctx.Process(target=serve, args=(child, job, os.getpid(), inherited), daemon=True)
        proc.start()
        child.close()
        return Slot(i, proc, parent, log=job.log, zygote=zygote)

    def kill(self, slot: Slot) -> list[int]:
        """Kill a worker and every process under it, and wait until they are gone; then end what they left (a
        process started after the list was taken, now handed to this one). Returns the pids of its processes
        still there after the wait (none, unless one cannot be killed)."""
        import psutil

        try:
            procs = psutil.Process(slot.proc.pid).children(recursive=True)
        except psutil.Error:
            procs = []
        for p in procs:
            try:
                p.kill()
            except psutil.Error:
                pass
        # The worker goes before they are waited for: until it is gone, the killed ones are its zombies, which
        # only it would reap; then this process (their subreaper, orphans.py) reaps them in wait_procs.
        slot.proc.kill()
        slot.proc.join(5)
        slot.conn.close()
        if slot.zygote is not None:  # started by this process, so not among the worker's: ended here
            self.early.end(slot.zygote)
        _, alive = psutil.wait_procs(procs, timeout=10)
        self.orphans.end(keep={s.proc.pid for s in self.slots if s is not slot})
        return [p.pid for p in alive]

    def replace(self, slot: Slot) -> None:
        if not slot.ready:
            self.early_deaths += 1
            if self.early_deaths >= MAX_EARLY_DEATHS:
                raise CourseError(f"grading workers died {self.early_deaths} times before they were ready; "
                                  f"the last said: {last_line(slot.log)}")
        self.kill(slot)
        self.slots[self.slots.index(slot)] = self._start(slot.i)

    def close(self) -> None:
        for slot in self.slots:
            try:
                slot.conn.send(Stop())
            except OSError:
                pass
        for slot in self.slots:
            slot.proc.join(10)
            if slot.proc.is_alive():
                self.kill(slot)
        self.orphans.end(keep=set())
        self.orphans.release()

    def grade(self, students: list[str]) -> Iterator[StudentResult]:
        """Grade `students`; yield each result as it comes. Ctrl-C kills every worker at once."""
        queue, pending = list(students), len(students)
        try:
            while pending:
                interrupts.check()  # a Ctrl-C whose KeyboardInterrupt was lost in a finalizer
                for slot in self.slots:
                    if slot.ready and slot.student is None and queue:
                        slot.student, slot.since = queue.pop(0), time.monotonic()
                        slot.conn.send(Grade(slot.student))
                conns = {slot.conn: slot for slot in self.slots}
                sentinels = {slot.proc.sentinel: slot for slot in self.slots}
                for obj in wait(list(conns) + list(sentinels), timeout=1.0):
                    slot = conns.get(obj) or sentinels.get(obj)
                    if slot not in self.slots:
                        continue  # replaced in this round
                    if obj not in conns and slot.conn.poll():
                        continue  # the process ended with a message unread: read the message first
                    match receive(slot.conn) if obj in conns else Died():
                        case Ready():
                            slot.ready, self.early_deaths = True, 0
                        case Done(result=result):
                            slot.student = None
                            pending -= 1
                            # each kernel's bwrap outlives its launcher (killed at the kernel's shutdown) by a moment:
                            # it comes to this process to die, and is reaped here
                            self.orphans.end(keep={s.proc.pid for s in self.slots})
                            yield result
                        case Died():
                            student, slot.student = slot.student, None
                            self.replace(slot)
                            if student is not None:
                                pending -= 1
                                yield StudentResult.failed(student, "the grading process died (out of memory or "
                                                           "killed)")
                        case message:
                            raise RuntimeError(f"grading worker {slot.i} sent {message!r}, which no worker sends")
                now = time.monotonic()
                for slot in list(self.slots):
                    if slot.student is not None and now - slot.since > self.timeout:
                        student = slot.student
                        self.replace(slot)
                        pending -= 1
                        yield StudentResult.timed_out(student, self.timeout)
        except BaseException:  # Ctrl-C or a grader failure: stop now, not after each worker's student
            for slot in self.slots:
                self.kill(slot)
            raise
        finally:
            self.close()


def last_line(log: str) -> str:
    try:
        lines = [ln.strip() for ln in Path(log).read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no log)"
    return lines[-1][:300] if lines else "(nothing)"
