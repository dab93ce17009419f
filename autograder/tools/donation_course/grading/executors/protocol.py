"""The messages between the run and its grading workers, for both executors: one frozen dataclass per kind.

They pass pickled, between the grader's own processes only: the run and the workers it forks (pool.py), a
dask worker, its zygote and the grading processes forked there (zygote.py, grader_process.py), the client
and a dask worker through Dask (cluster.py, cluster_worker.py). Nothing a learner's kernel wrote is ever one
of them: the kernel's hand-overs reach the referee as bytes (referee/wire.py: JSON lines, never pickles).
Each receiver dispatches on the type (`match`); a kind it does not expect is the grader's own failure.

A grading worker (worker.serve), locally and on a cluster worker:
    run -> worker:  Grade(student) | Stop()
    worker -> run:  Ready() once, then Done(result) per student
    Died(): never sent; what `receive` gives when the other end is gone (killed, out of memory).
A dask worker's zygote (zygote.py):
    Fork(job), the new grading process's pipe end after it -> Forked(pid)
The cluster (cluster.py -> cluster_worker.py, through Dask):
    admit(...), install(...) -> Admitted(threads) | NeedsBundle() | NotAdmitted(why)
    grade_task(StudentTask) -> Graded(...) | CouldNotGrade(why, worker) | RunStopped()
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..results.result import StudentResult


# --- a grading worker
@dataclass(frozen=True)
class Grade:
    """Grade this student (their files are staged in the worker's course)."""
    student: str


@dataclass(frozen=True)
class Stop:
    """No more students: the worker exits."""


@dataclass(frozen=True)
class Ready:
    """The worker has its NbGraderAPI and gradebook copy: it takes students now."""


@dataclass(frozen=True, eq=False)  # equal and hashed by identity: it holds unhashable data
class Done:
    """One student graded (or failed, or not graded: the result says which)."""
    result: StudentResult
    cpu: float | None = None  # the grading process's own core-seconds for it (on a cluster worker; zygote.py)


@dataclass(frozen=True)
class Died:
    """Never sent: the other end of the pipe is gone."""


ToWorker = Grade | Stop
FromWorker = Ready | Done | Died


def receive(conn) -> ToWorker | FromWorker:
    """The next message on `conn`; Died() when its other end is gone."""
    try:
        return conn.recv()
    except (EOFError, OSError):
        return Died()


# --- a dask worker's zygote
@dataclass(frozen=True, eq=False)  # equal and hashed by identity: it holds unhashable data
class Fork:
    """Fork a grading process for `job` (a worker.WorkerJob); its pipe's end follows as a handle."""
    job: object


@dataclass(frozen=True)
class Forked:
    pid: int


# --- the cluster: admitting a dask worker
@dataclass(frozen=True)
class Admitted:
    """Ready to grade, with this many task threads."""
    threads: int


@dataclass(frozen=True)
class NeedsBundle:
    """It lacks this course's bundle: send it (cluster_worker.install)."""


@dataclass(frozen=True)
class NotAdmitted:
    """It must not grade this run, and why (another version, no sandbox, a bad bundle)."""
    why: str


Admission = Admitted | NeedsBundle | NotAdmitted


# --- the cluster: one student's task
@dataclass(frozen=True, eq=False)  # equal and hashed by identity: it holds unhashable data
class StudentTask:
    """What a dask task carries: one student's submitted files and the run's limits."""
    run_id: str
    digest: str            # the course bundle's
    job: object            # worker.WorkerJob: the limits and kernel settings; each worker fills in its paths
    timeout: int           # the whole-submission time limit, in seconds
    student: str
    files: dict[str, bytes] = field(repr=False)  # path under submitted/<student>/<assignment> -> bytes
    submitted_at: float    # time.time() at the client, for the queue wait


@dataclass(frozen=True, eq=False)  # equal and hashed by identity: it holds unhashable data
class Graded:
    """The student's result and what nbgrader wrote, with the figures of its task."""
    result: StudentResult
    files: dict[str, bytes] = field(repr=False)  # autograded/... and feedback/... -> bytes
    log: str               # the student's stretch of the grading process's log
    worker: str            # the dask worker's address
    wait: float            # seconds the task waited in the queue
    wall: float            # seconds it ran
    cpu: float | None      # core-seconds of the grading process and its kernels
    rss: int               # peak resident bytes


@dataclass(frozen=True)
class CouldNotGrade:
    """This worker could not grade at all (not the student's fault): the client refuses it and sends the
    student elsewhere."""
    why: str
    worker: str


@dataclass(frozen=True)
class RunStopped:
    """The run was stopped (end_run) while the task waited or ran."""


TaskReply = Graded | CouldNotGrade | RunStopped
