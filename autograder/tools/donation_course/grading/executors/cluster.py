"""The cluster executor: `./course grade --scheduler tcp://HOST:PORT` grades on a running dask.distributed cluster.

It has the local pool's interface (`grade(students)` yields each student's
StudentResult as it finishes; `close()`), so the run merges results the
same way and stays the only writer of the gradebook. No shared file system:

- the client packs the course bundle (bundle.py) and `admit`s each worker
  (cluster_worker.py) as it appears: a worker whose package versions or
  grading code differ from this machine's, or that cannot sandbox a
  kernel, is refused with one line; one that lacks the bundle gets it once;
- a task carries one student's submitted files and the bundle's digest,
  and is restricted to admitted workers; it returns the result, the
  autograded notebooks, nbgrader's feedback HTML and its stretch of the
  grading log, which the client writes into the course;
- at most WINDOW_PER_THREAD tasks per admitted thread are out at once (the
  scheduler never holds a class's notebooks);
- a task whose worker dies runs once more elsewhere (the scheduler's
  allowed-failures is 1 for the run); twice, and the student's result says so;
- Ctrl-C cancels what is out and stops this run's grading processes and
  kernels on every worker; logs/cluster.log has each submission's figures
  and, at the end, their p50 and p95.
"""
from __future__ import annotations

import pickle
import queue
import shutil
import time
import traceback
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

from ... import interrupts
from ...course import CourseError
from ..results.result import StudentResult
from . import bundle, cluster_worker
from .cluster_log import ClusterLog, say
from .protocol import Admitted, CouldNotGrade, Graded, NeedsBundle, NotAdmitted, RunStopped, StudentTask
from .worker import WorkerJob

WINDOW_PER_THREAD = 2
TICK = 1.0              # seconds between looks at the cluster's workers
CONNECT_WITHIN = 15
NO_WORKER_LIMIT = 300   # seconds with no admitted worker before the run stops
MAX_ATTEMPTS = 2        # a submission whose workers keep leaving is given up after this many
DIED_TWICE = ("the grading worker died twice while grading this submission (out of memory, or killed); "
              "no score could be recorded")
GRADER_FAILED = ("the grader itself failed on this submission; your instructor has the full log "
                 "(nothing you submitted was lost)")


def require_scheduler(address: str) -> None:
    """CourseError in one line, before the run stages anything, when nothing listens at a tcp:// address."""
    import socket

    scheme, _, hostport = address.rpartition("://")
    host, _, port = hostport.rpartition(":")
    if scheme not in ("", "tcp") or not port.isdigit():
        return  # tls://, ucx://...: the client's own connection says what is wrong
    try:
        socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=10).close()
    except OSError as exc:
        raise CourseError(f"--scheduler {address}: no Dask scheduler answers there ({exc}); start one with "
                          "`dask scheduler` and workers with `./course worker SCHEDULER`") from None


@dataclass(frozen=True)
class Task:
    student: str
    attempt: int
    workers: frozenset
    sent: int  # bytes of the task's arguments, pickled


def allowed_failures(n: int):
    """For run_on_scheduler: set its allowed-failures to n, return the value it had before any run lowered it.
    The scheduler keeps that value (an attribute of its own) until a run puts it back (`put_back_failures`), so a
    run killed before it could (SIGKILL) leaves the next run the true value to put back, not its own 1. (Closures,
    sent by value: the scheduler needs none of this package to run them.)"""
    def swap(dask_scheduler=None):
        if getattr(dask_scheduler, "_donation_lab_allowed_failures", None) is None:
            dask_scheduler._donation_lab_allowed_failures = dask_scheduler.allowed_failures
        dask_scheduler.allowed_failures = n
        return dask_scheduler._donation_lab_allowed_failures
    return swap


def put_back_failures(n: int):
    """For run_on_scheduler: allowed-failures back to n (what `allowed_failures` returned), the kept value gone."""
    def put_back(dask_scheduler=None):
        dask_scheduler.allowed_failures = n
        dask_scheduler._donation_lab_allowed_failures = None
    return put_back


class ClusterExecutor:
    def __init__(self, run, job: WorkerJob):
        from distributed import Client

        self.course, self.settings = run.course, run.settings
        # the local job's limits and kernel settings; each worker fills in its own paths
        self.job = replace(job, course="", db="", log="", tmp="", kernel_dir="")
        self.address, self.run_id = run.settings.scheduler, uuid.uuid4().hex[:12]
        self.log = ClusterLog(run.out / "logs")
        self.bundle = bundle.build(self.course, compile_cache=bool(job.kernel.compile_cache))
        self.mine = bundle.fingerprint()
        self.accepted: dict[str, int] = {}   # address -> threads
        self.refused: dict[str, str] = {}    # address -> why
        self.bundles_sent, self.closed = 0, False
        try:
            self.client = Client(self.address, timeout=CONNECT_WITHIN, set_as_default=False)
        except (OSError, TimeoutError) as exc:
            raise CourseError(f"--scheduler {self.address}: no Dask scheduler answers there ({exc}); start one "
                              "with `dask scheduler` and workers with `./course worker SCHEDULER`") from None
        self.prior_failures = None
        try:
            try:
                self.prior_failures = self.client.run_on_scheduler(allowed_failures(MAX_ATTEMPTS - 1))
            except Exception as exc:  # a scheduler that runs no client code
                say(f"note: the scheduler's allowed-failures could not be set to 1 ({exc}); a submission whose "
                    "worker dies may run more than twice")
            self.log.line(f"run {self.run_id} on {self.address}: course bundle {self.bundle.digest[:16]} "
                          f"({len(self.bundle.data)} bytes gzip'd); this machine: {self.mine}")
            self.admit()
        except BaseException:  # Ctrl-C while workers are admitted: the scheduler as it was, the client closed
            self.close()
            raise

    # --- workers
    def on_workers(self, function, *args, workers: list[str]) -> dict:
        try:
            return self.client.run(function, *args, workers=workers, on_error="return")
        except (OSError, TimeoutError) as exc:
            return dict.fromkeys(workers, exc)

    def admit(self) -> None:
        """Admit the workers that joined since the last look; forget those that left."""
        try:
            live = self.client.nthreads()
        except (OSError, TimeoutError):
            return
        for gone in set(self.accepted) - set(live):
            del self.accepted[gone]
            self.log.line(f"worker {gone} left")
        new = [a for a in live if a not in self.accepted and a not in self.refused]
        if not new:
            return
        answers = self.on_workers(cluster_worker.admit, self.mine, self.bundle.digest, self.job.kernel.sandbox,
                                  workers=new)
        needs = [a for a, answer in answers.items() if isinstance(answer, NeedsBundle)]
        if needs:
            answers.update(self.on_workers(cluster_worker.install, self.bundle.digest, self.bundle.data,
                                           workers=needs))
            self.bundles_sent += len(needs)
        for address, answer in answers.items():
            match answer:
                case Admitted(threads=threads):
                    self.accepted[address] = threads
                    self.log.line(f"worker {address} admitted ({threads} thread(s)"
                                  f"{', bundle sent' if address in needs else ''})")
                case NotAdmitted(why=why):
                    self.refuse(address, why)
                case _:  # an exception (on_error="return"), or a worker that answered nothing we know
                    self.refuse(address, f"it could not be checked: {answer!r}")

    def refuse(self, address: str, why: str) -> None:
        """No more tasks for this worker, and one line saying why."""
        self.accepted.pop(address, None)
        if address not in self.refused:
            self.refused[address] = why
            self.log.line(f"worker {address} refused: {why}")
            say(f"refused worker {address}: {why}")

    def window(self) -> int:
        return max(2, WINDOW_PER_THREAD * sum(self.accepted.values()))

    # --- tasks
    def submit(self, student: str, attempt: int, pending: dict, done: queue.Queue) -> None:
        folder = self.course.root / "submitted" / student / self.course.assignment
        files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
        task = StudentTask(self.run_id, self.bundle.digest, self.job, self.settings.timeout, student, files,
                           time.time())
        future = self.client.submit(cluster_worker.grade_task, task, key=f"grade-{student}-{self.run_id}-{attempt}",
                                    workers=list(self.accepted), allow_other_workers=False, pure=False)
        pending[future] = Task(student, attempt, frozenset(self.accepted), len(pickle.dumps(task)))
        future.add_done_callback(done.put)

    def stranded(self, pending: dict, done: queue.Queue) -> list[StudentResult]:
        """Tasks none of whose workers is left (a restarted worker has a new address): again, on today's."""
        given_up = []
        for future, task in list(pending.items()):
            if self.accepted and not task.workers & set(self.accepted):
                del pending[future]
                future.cancel()
                if task.attempt >= MAX_ATTEMPTS:
                    given_up.append(StudentResult.failed(task.student, DIED_TWICE))
                else:
                    self.submit(task.student, task.attempt + 1, pending, done)
        return given_up

    def grade(self, students: list[str]):
        todo, pending, done = list(students), {}, queue.Queue()
        last_look = idle_since = time.monotonic()
        try:
            while todo or pending:
                interrupts.check()  # a Ctrl-C whose KeyboardInterrupt was lost in a finalizer
                now = time.monotonic()
                if now - last_look >= TICK:
                    last_look = now
                    self.admit()
                    yield from self.stranded(pending, done)
                if self.accepted:
                    idle_since = now
                elif now - idle_since > NO_WORKER_LIMIT:
                    raise CourseError(f"no worker of {self.address} could grade for {NO_WORKER_LIMIT} s"
                                      + (f" ({len(self.refused)} refused: see above)" if self.refused else ""))
                while todo and self.accepted and len(pending) < self.window():
                    self.submit(todo.pop(0), 1, pending, done)
                try:
                    future = done.get(timeout=TICK)
                except queue.Empty:
                    continue
                task = pending.pop(future, None)
                result = self.collect(future, task) if task is not None else None
                if result is not None:
                    yield result
                elif task is not None:  # its worker could not grade: elsewhere, or given up
                    if task.attempt < MAX_ATTEMPTS:
                        self.submit(task.student, task.attempt + 1, pending, done)
                    else:
                        yield StudentResult.failed(task.student, GRADER_FAILED)
        except BaseException:  # Ctrl-C or a failure: nothing of this run goes on running anywhere
            try:
                self.client.cancel(list(pending), force=True)
            finally:
                self.end_run(kill=True)
            raise

    def collect(self, future, task: Task) -> StudentResult | None:
        """The student's result, its files written into the course; None if its worker could not grade."""
        from distributed import KilledWorker

        sid = task.student
        try:
            reply = future.result()
        except KilledWorker:
            reply = StudentResult.failed(sid, DIED_TWICE)
        except Exception as exc:
            say(f"note: the grader failed on {sid} on the cluster: {exc}")
            reply = StudentResult.failed(sid, GRADER_FAILED, log="".join(traceback.format_exception(exc)))
        finally:
            future.release()
        match reply:
            case CouldNotGrade(why=why, worker=worker):
                self.refuse(worker, f"it could not grade ({why})")
                return None
            case RunStopped():
                reply = StudentResult.failed(sid, GRADER_FAILED, log="its run was stopped")
            case Graded() | StudentResult():  # a StudentResult: the task itself failed (above)
                pass
            case _:
                raise RuntimeError(f"a cluster worker answered {reply!r} to the task of {sid}")
        graded = reply if isinstance(reply, Graded) else None
        result = graded.result if graded else reply
        self.write_files(sid, graded.files if graded else {})
        if graded and graded.log:
            self.log.worker_log(graded.worker, sid, task.attempt, graded.log)
        self.log.submission({"student": sid, "worker": graded.worker if graded else "", "attempt": task.attempt,
                             "sent": task.sent, "returned": len(pickle.dumps(reply)),
                             **{key: getattr(graded, key, None) for key in ("wait", "wall", "cpu", "rss")}},
                            result.status or "graded")
        return result

    def write_files(self, sid: str, files: dict[str, bytes]) -> None:
        """The autograded notebooks and feedback HTML, where a local run's nbgrader leaves them."""
        for top in ("autograded", "feedback"):
            shutil.rmtree(self.course.root / top / sid / self.course.assignment, ignore_errors=True)
        for rel, data in files.items():
            top, _, name = rel.partition("/")
            if top not in ("autograded", "feedback") or ".." in Path(name).parts:
                continue
            dest = self.course.root / top / sid / self.course.assignment / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)

    # --- the end
    def end_run(self, kill: bool) -> None:
        if self.accepted:
            self.on_workers(cluster_worker.end_run, self.run_id, kill, workers=list(self.accepted))

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            if self.prior_failures is not None:
                self.client.run_on_scheduler(put_back_failures(self.prior_failures))
            self.end_run(kill=False)
        finally:
            line = self.log.summary(len(self.accepted), len(self.refused), len(self.bundle.data), self.bundles_sent)
            self.log.line(line)
            say(line)
            self.client.close()
