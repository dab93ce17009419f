"""What runs on a cluster worker (a `dask worker` process) for `./course grade --scheduler`.

The client calls, through `client.run`: `admit` (refuse this worker, or
say whether it needs the course bundle), `install` (the bundle's bytes,
once per digest; bundle.py) and `end_run` (stop this run's grading
processes; kill=True: at once, for Ctrl-C). `grade_task` is the task: one
student's files in (a StudentTask); the result, the autograded notebooks,
nbgrader's feedback HTML and the student's stretch of the grading log out
(Graded). The messages are protocol.py's. Each task
thread grades through a grading process of its own (grader_process.py),
in a course folder unpacked from the bundle in this worker's own folder.
"""
from __future__ import annotations

import asyncio
import shutil
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import bundle, grader_process
from .protocol import (
    Admission,
    Admitted,
    CouldNotGrade,
    Grade,
    Graded,
    NeedsBundle,
    NotAdmitted,
    RunStopped,
    StudentTask,
)
from .zygote import zygote

LOG_TAIL = 64 << 10  # at most this much of a student's stretch of the grading log goes back
END_WITHIN = 60      # seconds end_run waits for the run's tasks here to stop (one whose grading process starts)
LOADED_CODE = bundle.fingerprint()["code"]  # the grading code this worker imported (a changed checkout is refused)


@dataclass
class RunState:
    graders: dict[int, grader_process.Grader] = field(default_factory=dict)  # task thread -> its grading process
    stopped: bool = False
    tasks: int = 0  # its tasks in hand here: end_run waits until each has stopped and removed its files


_RUNS: dict[str, RunState] = {}
_ENDED: set[str] = set()
_LOCK = threading.Lock()


def bundle_base(dask_worker) -> Path:
    """Where this machine's workers keep bundles: beside their own folders, so a restarted worker finds them."""
    return Path(dask_worker.local_directory).parent / "donation-course-bundles"


def course_dir(dask_worker, digest: str) -> Path:
    return Path(dask_worker.local_directory) / f"course-{digest[:16]}"


def _admit(client: dict, digest: str, sandbox: bool, dask_worker) -> Admission:
    here = bundle.fingerprint()
    why = bundle.differences(client, here)
    if not why and here["code"] != LOADED_CODE:
        why = "its grading code changed on disk after the worker started: restart the worker"
    if not why and sandbox:
        from ..integrity.sandbox import probe

        why = probe()
    if why:
        return NotAdmitted(why)
    tar = bundle.cached(bundle_base(dask_worker), digest)
    if tar is None and not (course_dir(dask_worker, digest) / bundle.READY).exists():
        return NeedsBundle()
    if tar is not None:
        bundle.unpack(tar, course_dir(dask_worker, digest))
    return _admitted(dask_worker, here["code"])


def _admitted(dask_worker, code: str) -> Admitted:
    zygote(dask_worker.local_directory, code)  # its imports start now, while the first tasks come
    return Admitted(dask_worker.state.nthreads)


async def admit(client: dict, digest: str, sandbox: bool, dask_worker=None) -> Admission:
    """NotAdmitted(why), NeedsBundle() or Admitted(threads) (ready to grade)."""
    return await asyncio.to_thread(_admit, client, digest, sandbox, dask_worker)


def _install(digest: str, data: bytes, dask_worker) -> Admitted | NotAdmitted:
    try:
        tar = bundle.install(bundle_base(dask_worker), digest, data)
    except ValueError as exc:
        return NotAdmitted(str(exc))
    bundle.unpack(tar, course_dir(dask_worker, digest))
    return _admitted(dask_worker, LOADED_CODE)


async def install(digest: str, data: bytes, dask_worker=None) -> Admitted | NotAdmitted:
    return await asyncio.to_thread(_install, digest, data, dask_worker)


def _end_run(run_id: str, kill: bool) -> int:
    with _LOCK:
        _ENDED.add(run_id)
        state = _RUNS.pop(run_id, None)
    if state is None:
        return 0
    state.stopped = True
    for grader in list(state.graders.values()):
        grader_process.stop(grader, kill)
    deadline = time.monotonic() + END_WITHIN  # a task sees `stopped` within grader_process.SAMPLE_EVERY, or
    while state.tasks and time.monotonic() < deadline:  # once the grading process it starts is ready
        time.sleep(0.05)
    return len(state.graders)


async def end_run(run_id: str, kill: bool = False, dask_worker=None) -> int:
    """Stop this run's grading processes (and their kernels) and remove their scratch folders; back once each
    task of the run here has stopped and removed its student's files."""
    return await asyncio.to_thread(_end_run, run_id, kill)


def _outputs(course: Path, student: str, assignment: str) -> dict[str, bytes]:
    """The autograded notebooks (and timestamp) and nbgrader's feedback HTML, by path under the course."""
    files = {}
    for top in ("autograded", "feedback"):
        folder = course / top / student / assignment
        for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
            if path.is_file() and (top == "feedback" or path.suffix == ".ipynb" or path.name == "timestamp.txt"):
                files[f"{top}/{path.relative_to(folder).as_posix()}"] = path.read_bytes()
    return files


def grade_task(task: StudentTask) -> Graded | CouldNotGrade | RunStopped:
    """The task: grade one student. RunStopped if the run was stopped meanwhile; CouldNotGrade if this
    worker could not grade at all (the client refuses it and sends the student elsewhere)."""
    from distributed import get_worker

    started, worker = time.time(), get_worker()
    with _LOCK:
        if task.run_id in _ENDED:
            return RunStopped()
        state = _RUNS.setdefault(task.run_id, RunState())
        state.tasks += 1
    try:
        return replace(_grade(state, worker, task), wait=max(0.0, started - task.submitted_at),
                       wall=time.time() - started)
    except _Stopped:
        return RunStopped()
    except Exception as exc:
        return CouldNotGrade(f"{type(exc).__name__}: {exc}", worker.address)
    finally:
        with _LOCK:
            state.tasks -= 1


class _Stopped(Exception):
    pass


def _grade(state: RunState, worker, task: StudentTask) -> Graded:
    job, student = task.job, task.student
    course = course_dir(worker, task.digest)
    if not (course / bundle.READY).exists():
        raise RuntimeError(f"the course bundle is not unpacked at {course}")
    assignment = job.assignment
    folders = [course / top / student for top in ("submitted", "autograded", "feedback")]
    try:
        grader = state.graders.get(threading.get_ident())
        if grader is None or not grader.alive():
            if grader is not None:
                grader_process.stop(grader, kill=True)
            grader = state.graders[threading.get_ident()] = grader_process.start(course, job, worker.local_directory)
            if state.stopped:  # end_run came while it started
                grader_process.stop(grader, kill=True)
                raise _Stopped
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)
        for rel, data in task.files.items():
            if ".." in Path(rel).parts or Path(rel).is_absolute():
                raise ValueError(f"unsafe file name in the task: {rel!r}")
            dest = course / "submitted" / student / assignment / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
        offset = grader.log.stat().st_size
        grader.conn.send(Grade(student))
        result, cpu, rss = grader_process.wait(grader, student, task.timeout, lambda: state.stopped)
        if result is None:
            raise _Stopped
        with open(grader.log, "rb") as fh:
            fh.seek(max(offset, grader.log.stat().st_size - LOG_TAIL))
            log = fh.read().decode(errors="replace")
        return Graded(result, _outputs(course, student, assignment), log, worker.address, wait=0.0, wall=0.0,
                      cpu=cpu, rss=rss)
    finally:
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)


