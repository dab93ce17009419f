"""One `./course grade` run, step by step (grade_class calls them in order).

The run process generates the assignment once into the course's gradebook
(prepare.py), stages the submissions into `submitted/` (collect.py), and
grades them on an executor (pool.py's forked workers: one NbGraderAPI and
a private gradebook copy each, one sandboxed kernel per notebook). It is the
only writer of the real gradebook: it backs it up, then merges each
student's result in one transaction as it arrives (gradebook.py), writes
the learner's page (student_page.py), and at the end grades.csv and
canvas-import.csv for the whole gradebook (report.py).
"""
from __future__ import annotations

import contextlib
import datetime as dt
import errno
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ...course import Course, CourseError
from ..executors import scratch
from ..executors.pool import LocalPool
from ..executors.worker import WorkerJob, make_kernelspec
from ..integrity.audit_log import trusted_cells
from ..integrity.sandbox import course_font_list
from ..integrity.scan_policy import ALLOWED_MODULES
from ..referee.compiled import folder_for
from ..reports.report import row_of, summarize, write_reports
from ..reports.student_page import write_page
from ..results.gradebook import Answers, Deadline, apply_deadlines, assignment_facts, merge_result
from ..results.result import NEEDS_YOU, Status, StudentResult
from ..results.reviews import answer_digest
from ..submissions.collect import collect, notebook_problem, stage
from .deadlines import penalty_plugin, read_extensions
from .early import Early
from .prepare import begin_preparing, digest_files, draw_secret, finish_fill
from .progress import NoProgress, progress_bar
from .settings import GradingSettings
from .state import StudentState, record_student, run_lock, save_state, write_atomic

# Exit codes of `./course grade` (docs/instructor-guide.md, "Exit codes"); argparse's usage errors are 2.
EXIT_ALL_GRADED = 0  # every student graded, and nobody needs you
EXIT_FAILED = 1      # the run failed: one `course: error:` line says why (donation_course.cli.fail)
EXIT_NEEDS_YOU = 3   # graded; some students need you (flagged, pending, invalid, error, timeout, files not
                     # graded): the last line names them, grades.csv's status and reason columns say why

# Where the kernels' ipc sockets live (in the run's scratch folder): a unix
# socket's path has at most 107 bytes, and a user's TMPDIR may be deeper.
SOCKET_TMP = "/tmp"
BACKUPS_KEPT = 3
# Kernels that fail to start for this many students before any starts: the grader stops (a broken sandbox
# or environment), and records none of them rather than a column of zeros.
INFRASTRUCTURE_PROOF = 3


@dataclass(frozen=True)
class GradeRequest:
    """What to grade in this run (the settings say how)."""

    submissions: Path
    students: tuple[str, ...] = ()   # only these (default: everyone found)
    only_changed: bool = False       # skip students whose files are unchanged since they were graded


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def late_timestamp(files: dict, duedate, notes: list, sid: str):
    """nbgrader's timestamp for a student's chosen files: the latest LMS
    timestamp; for a file the LMS only flags late (Canvas's _LATE_, no time),
    one second after the due date, so nbgrader's LateSubmissionPlugin sees it late."""
    stamps = [f.timestamp for f in files.values() if f.timestamp]
    if stamps:
        return max(stamps)
    if any(f.late for f in files.values()):
        if duedate is None:
            notes.append(f"{sid}: flagged late by the LMS, but the assignment has no due date in the "
                         "gradebook; no late penalty can apply")
            return None
        return duedate + dt.timedelta(seconds=1)
    return None


class Run:
    def __init__(self, course: Course, settings: GradingSettings, request: GradeRequest, early: Early | None = None):
        self.course, self.settings, self.request = course, settings, request
        early = early or Early()  # what was started before the run (early.py): the pool's zygotes, the fill's Python
        self.early_zygotes, self.early_fill = early.zygotes, early.fill
        self.out = settings.output_folder(course)
        self.state_path = course.state_file
        self.start = time.monotonic()
        self.extensions = None  # extensions.csv (deadlines.py), read with the input
        self.merged: list[str] = []  # the students whose result is in the gradebook, in order
        self.phases: dict[str, float] = {}  # seconds per step of the run: logs/timings.json
        self.details: dict[str, float] = {}  # seconds of parts of a step (prepare's), beside them there
        self.filling = None  # the compile cache's fill, from prepare until the workers have started (executor)

    @contextlib.contextmanager
    def timed(self, phase: str):
        start = time.monotonic()
        try:
            yield
        finally:
            self.phases[phase] = round(self.phases.get(phase, 0.0) + time.monotonic() - start, 3)

    def setup_seconds(self) -> float:
        """The steps before the first submission was handed to a worker (the course prepared, the input
        read and staged, the workers started)."""
        return sum(v for k, v in self.phases.items() if k not in ("grading", "reports"))

    def write_timings(self) -> None:
        """How long each step took, setup (everything before the first submission is
        handed to a worker) apart: logs/timings.json, read by benchmarks/bench_grading.py."""
        setup = self.setup_seconds()
        write_atomic(self.out / "logs" / "timings.json",
                     json.dumps({**self.phases, **self.details, "setup": round(setup, 3),
                                 "students": len(self.gradable)}, indent=1))

    def collect(self, workdir: Path) -> None:
        """Find every submission (before nbgrader runs: bad input fails in a moment)."""
        src = self.request.submissions
        self.found, _preset = collect(src.resolve() if src.exists() else src, self.course.notebooks,
                                      self.course.assignment, workdir, lms=self.settings.lms or None,
                                      regex=self.settings.name_regex or None, timezone=self.settings.timezone,
                                      source=self.course.source, exercise=self.course.exercise)
        for line in self.found.notes:
            say(f"note: {line}")
        for line in self.found.problems:
            say(f"problem: {line}")
        self.extensions = read_extensions(self.course)  # a malformed row stops the run here, too

    def handed_in(self) -> set[str]:
        """The notebooks this run's students handed in (those named with --student, else everyone's)."""
        students = self.found.students
        chosen = self.request.students or students
        return {nb for sid in chosen for nb in students.get(sid, {})}

    def prepare(self) -> None:
        # the compile cache gets the programs of the notebooks graded now (a later run adds others)
        parts: dict[str, float] = {}
        self.state, self.filling = begin_preparing(self.course, self.out, say,
                                                   compile_cache=self.settings.compile_cache,
                                                   notebooks=self.handed_in(), phases=parts, early=self.early_fill)
        self.details.update({f"prepare.{k}": v for k, v in parts.items()})
        self.facts = assignment_facts(self.course)
        self.deadline = Deadline(penalty_plugin(self.course), self.extensions)

    def finish_fill(self) -> None:
        """Wait for the compile cache's fill that prepare started, if one is under way; say its line. The wait is
        timed as prepare.compile_cache."""
        filling, self.filling = self.filling, None
        if filling is not None:
            waited: dict[str, float] = {}
            finish_fill(filling, say, waited)
            self.details.update({f"prepare.{k}": v for k, v in waited.items()})

    def stop_fill(self) -> None:
        """Stop a fill still under way (the run failed, or Ctrl-C): the cache folder stays as it was."""
        filling, self.filling = self.filling, None
        if filling is not None:
            filling.stop()

    def plan(self) -> None:
        """Which students to grade, their nbgrader timestamps, their invalid notebooks."""
        students = self.found.students
        if self.request.students:
            missing = [s for s in self.request.students if s not in students]
            if missing:
                raise CourseError(f"--student {', '.join(missing)}: not in {self.request.submissions} "
                                  f"(found {len(students)} students, e.g. {', '.join(sorted(students)[:5])})")
            students = {s: students[s] for s in self.request.students}
        self.timestamps, self.invalid, self.hashes = {}, {}, {}
        for sid, files in students.items():
            notes = []
            self.timestamps[sid] = late_timestamp(files, self.facts.duedate, notes, sid)
            for line in notes:
                say(f"note: {line}")
            ts = self.timestamps[sid].isoformat() if self.timestamps[sid] else ""
            self.hashes[sid] = f"{digest_files([f.path for f in files.values()])}:{ts}:{self.state.source}"
            for nb, f in list(files.items()):
                why = notebook_problem(f.path)  # one line, whatever the file holds
                if why:
                    self.invalid.setdefault(sid, []).append(f"{f.rel}: {why}; not graded")
                    del files[nb]
        unchanged = {sid for sid in students if self.request.only_changed and sid in self.facts.submitted
                     and self.state.students.get(sid, StudentState()).hash == self.hashes[sid]}
        self.todo = [sid for sid in sorted(students) if sid not in unchanged]
        self.skipped = sorted(unchanged)

    def stage(self) -> None:
        self.repaired, submitted = {}, self.course.root / "submitted"
        for sid in self.todo:
            notes = stage(self.found.students[sid], submitted, self.course.assignment,
                          timestamp=self.timestamps[sid], release_dir=self.course.release)
            if notes:
                self.repaired[sid] = notes
        self.gradable = [sid for sid in self.todo
                         if any((submitted / sid / self.course.assignment).glob("*.ipynb"))]

    def deadlines(self) -> None:
        """Extensions and late penalties of the students not graded now, from the due date as it is now
        (the students graded now get theirs as their results land: merge)."""
        for line in apply_deadlines(self.course, self.deadline, skip=frozenset(self.todo)):
            say(f"note: {line}")

    def backup(self) -> None:
        db = self.course.gradebook
        self.backup_path = db.with_name(f"gradebook.db.bak-{dt.datetime.now():%Y%m%d-%H%M%S}")
        shutil.copyfile(db, self.backup_path)
        for old in sorted(self.course.root.glob("gradebook.db.bak-*"))[:-BACKUPS_KEPT]:
            old.unlink()

    def on_result(self, result: StudentResult) -> None:
        """Merge one student's result into the gradebook, keep its summary, write its page."""
        sid = result.student
        if result.log:
            write_atomic(self.out / "logs" / "students" / f"{sid}.log", result.log)  # the instructor's only
        extra = self.invalid.get(sid, []) + self.found.student_problems.get(sid, []) + self.repaired.get(sid, [])
        if sid in self.invalid and result.status in (None, Status.ERROR):
            result.status = Status.INVALID  # nbgrader graded what was left; a submitted file could not be read
        if extra:
            result.reasons.insert(0, "; ".join(extra))
        name = self.found.names.get(sid, "")
        assignment = self.course.root / "submitted" / sid / self.course.assignment
        before = self.state.students.get(sid, StudentState()).summary
        answers = Answers(now={nb: answer_digest(assignment / f"{nb}.ipynb") for nb in result.notebooks
                               if (assignment / f"{nb}.ipynb").is_file()},
                          graded=dict(before.content), reviews=dict(before.reviews))
        result.reasons.extend(merge_result(self.course, result, name=name, deadline=self.deadline, answers=answers))
        self.merged.append(sid)
        submitted = set(self.found.students.get(sid, {})) | {
            nb for nb in self.course.notebooks if (assignment / f"{nb}.ipynb").exists()}
        files = " ".join(f.rel for f in self.found.students.get(sid, {}).values())
        summary = summarize(result, self.course.notebooks, self.facts.max_scores, submitted, files=files,
                            name=name, sandbox=self.settings.sandbox, audit=self.settings.audit)
        if (sid in self.invalid or sid in self.found.student_problems) and summary.status == Status.OK.value:
            summary.status = Status.PARTIAL.value
        summary.content, summary.reviews = answers.graded, answers.reviews
        self.state.students[sid] = StudentState(hash=self.hashes.get(sid, ""), summary=summary)
        record_student(self.state_path, self.state, sid)  # the whole file at the run's end
        self.write_page(result, row_of(self.course, sid, summary))

    def write_page(self, result: StudentResult, row: dict) -> Path:
        """The learner's feedback page (`./course check` gives its own maximum)."""
        return write_page(row, result, self.course, self.out)

    def grade(self) -> None:
        for sid in self.todo:
            if sid not in self.gradable:  # nothing valid to grade
                result = StudentResult.invalid(sid)
                result.timestamp = self.timestamps[sid].isoformat() if self.timestamps.get(sid) else None
                self.on_result(result)
        if not self.gradable:
            self.finish_fill()
            if self.early_zygotes is not None:
                self.early_zygotes.end_unused()
            return
        bar = progress_bar(len(self.gradable)) if self.settings.progress else NoProgress()
        self.start = time.monotonic()
        held: list[StudentResult] = []  # kernels that never started, before any did: the grader's fault?
        started = False
        try:
            with self.executor() as pool, contextlib.closing(pool.grade(self.gradable)) as results:
                self.phases["workers"] = round(time.monotonic() - self.start, 3)
                grading = time.monotonic()
                for result in results:
                    bar.update()
                    if result.infrastructure and not started:
                        held.append(result)
                        if len(held) >= min(INFRASTRUCTURE_PROOF, len(self.gradable)):
                            raise CourseError(
                                f"grading kernels could not start for the first {len(held)} submission(s) "
                                f"({held[-1].reasons[0]}; see {self.out / 'logs'}); nothing was recorded for them")
                        continue
                    started = True
                    for waiting in [*held, result]:
                        self.on_result(waiting)
                    held = []
                self.phases["grading"] = round(time.monotonic() - grading, 3)
        finally:
            bar.close()

    @contextlib.contextmanager
    def executor(self):
        """The local pool, with its scratch folders; removed however the run ends."""
        with tempfile.TemporaryDirectory(prefix="donation-lab-grade-") as tmp, \
                tempfile.TemporaryDirectory(prefix="dlg-", dir=SOCKET_TMP) as scratch:
            kernel_dir = make_kernelspec(Path(tmp) / "jupyter", sys.executable)
            logs = self.out / "logs"
            logs.mkdir(parents=True, exist_ok=True)
            cache = self.course.compile_cache
            # Sandboxed local workers start while the fill finishes: they start their zygote and referee server
            # (each imports JAX) on the core the fill leaves idle, and no kernel reads the cache until the first
            # student is handed over. A copy of the cache (--no-sandbox) or a cluster's bundle needs it filled.
            early = self.filling is not None and self.settings.sandbox and not self.settings.scheduler
            if not early:
                self.finish_fill()
            if not self.settings.compile_cache or not (cache.is_dir() or early):
                cache = ""
            elif not self.settings.sandbox:
                # Unsandboxed kernels could write to the course's cache (JAX is
                # only told not to): they get this run's copy of it.
                cache = shutil.copytree(cache, Path(tmp) / "compile-cache")
            kernel = self.settings.kernel(str(cache), trusted_cells(self.course), sorted(ALLOWED_MODULES),
                                          draw_seed=draw_secret(self.course),
                                          fonts=course_font_list(self.course.grading_dir),
                                          referee_programs=folder_for(self.course.grading_dir))
            job = WorkerJob(course=str(self.course.root), assignment=self.course.assignment,
                            db=str(Path(tmp) / "worker.db"),
                            cell_timeout=self.settings.cell_seconds(self.course.cell_timeout()),
                            max_output_bytes=self.settings.max_output_bytes,
                            kernel=kernel, kernel_dir=str(kernel_dir), log=str(logs), tmp=scratch)
            if self.settings.scheduler:  # a dask.distributed cluster: the same interface (cluster.py)
                from ..executors.cluster import ClusterExecutor

                pool = ClusterExecutor(self, job)
                if self.early_zygotes is not None:
                    self.early_zygotes.end_unused()
            else:
                pool = LocalPool(max(1, min(self.settings.worker_count(), len(self.gradable))), job,
                                 self.settings.timeout, early=self.early_zygotes)
            try:
                if early:
                    self.finish_fill()
                    # a fresh course's fill that failed leaves no folder: an empty one for the kernels to bind
                    cache.mkdir(parents=True, exist_ok=True)
                yield pool
            finally:
                pool.close()

    def write_reports(self) -> list[dict]:
        summaries = {sid: s.summary for sid, s in self.state.students.items()}
        return write_reports(self.course, summaries, self.out, settings=self.settings)


def require_sandbox(settings: GradingSettings) -> None:
    """CourseError in one line when the settings ask for a sandbox this machine cannot give."""
    if settings.sandbox:
        from ..integrity.sandbox import probe

        problem = probe()
        if problem:
            raise CourseError(problem)


def process_seconds() -> float:
    """Seconds since this process started: `./course grade` execs the grader in place, so this is the
    whole wall time the instructor waited, set-up (the environment check, imports) included. Read as the
    kernel keeps it, in clock ticks since boot (/proc/self/stat), against the time since boot: the boot time
    the kernel reports for the wall clock is whole seconds, which put this up to a second out."""
    try:
        ticks = int(scratch.started(os.getpid()))  # (its start in clock ticks since boot; "" without /proc)
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, AttributeError):  # no /proc: from the import of this module
        return time.monotonic() - STARTED


STARTED = time.monotonic()
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def disk_full(exc: BaseException) -> OSError | None:
    """The OSError of a full disk (or quota) behind `exc`, sqlite's 'database or disk is full' included."""
    if isinstance(exc, OSError) and exc.errno in DISK_FULL:
        return exc
    if type(exc).__name__ == "OperationalError" and "disk is full" in str(exc):
        return OSError(errno.ENOSPC, "database or disk is full", "gradebook.db")
    return None


def grade_class(course: Course, settings: GradingSettings, request: GradeRequest, early: Early | None = None) -> int:
    """Grade the class; the exit code: EXIT_ALL_GRADED, or EXIT_NEEDS_YOU when students (or
    files) wait for the instructor. A failed run raises CourseError (EXIT_FAILED), a full disk too, once
    what was graded is saved."""
    if settings.scheduler:  # each worker's own sandbox is checked when it is admitted (cluster.py)
        from ..executors.cluster import require_scheduler

        require_scheduler(settings.scheduler)
    else:
        require_sandbox(settings)
    run = Run(course, settings, request, early)
    full: OSError | None = None
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="donation-lab-run-") as work, contextlib.ExitStack() as locked:
        with run.timed("collect"):
            run.collect(Path(work))  # bad input stops here, before anything in the course is written
        locked.enter_context(run_lock(course.lock_dir, say))
        locked.callback(run.stop_fill)  # a fill still under way when the run fails: stopped, under the lock
        for step in (run.prepare, run.plan, run.stage, run.backup, run.deadlines):
            with run.timed(step.__name__):
                step()
        run.out.mkdir(parents=True, exist_ok=True)
        try:
            run.grade()
        except Exception as exc:
            full = disk_full(exc)
            if full is None:
                raise
        finally:
            try:
                with run.timed("reports"):
                    rows = run.write_reports()
                    save_state(run.state_path, run.state)
                run.write_timings()
            except Exception as exc:
                if disk_full(exc) is None:
                    raise
                full = full or disk_full(exc)
    if full is not None:
        # a copy names its source first (shutil: filename) and what it wrote second (filename2)
        where = Path(full.filename2 or full.filename) if full.filename else run.out
        folder = (course.root if full.filename == "gradebook.db" else
                  run.out if where == run.out or run.out in where.parents else where.parent)
        raise CourseError(
            f"no space left in {folder} ({full.strerror}); the run stopped: {len(run.merged)} student(s) graded and "
            f"saved in the gradebook {course.gradebook}, {len(run.gradable) - len(run.merged)} not graded; free "
            "some space there, then run the same command again with --only-changed to grade the rest")
    print(f"grades: {run.out / 'grades.csv'} (LMS import files and class report beside it); feedback: "
          f"{run.out / 'feedback'}; gradebook: {course.gradebook} (backup {run.backup_path.name})")
    waiting = {row["student"]: row["status"] for row in rows if row["status"] in NEEDS_YOU}
    for sid in run.found.student_problems:
        waiting.setdefault(sid, "files not graded")
    loose = len(run.found.problems) - sum(len(v) for v in run.found.student_problems.values())
    kinds: dict[str, list[str]] = {}
    for sid, status in sorted(waiting.items()):
        kinds.setdefault(status, []).append(sid)
    who = "; ".join(f"{status}: {', '.join(sids[:5])}{' ...' if len(sids) > 5 else ''}"
                    for status, sids in sorted(kinds.items()))
    print(f"graded {len(run.gradable)} submission(s) in {process_seconds():.1f}s in all "
          f"(set-up {run.setup_seconds():.1f}s) "
          + (f"on the cluster at {settings.scheduler}" if settings.scheduler else
             f"with {settings.worker_count()} worker(s)")
          + (f", {len(run.skipped)} unchanged skipped" if run.skipped else "")
          + f"; {len(waiting)} of {len(rows)} student(s) need you" + (f" ({who})" if who else "")
          + (f"; {loose} file(s) named no student we could grade (the 'problem:' lines above)" if loose > 0 else "")
          + ("; see the status and reason columns of grades.csv" if waiting else ""), flush=True)
    return EXIT_NEEDS_YOU if waiting or loose > 0 else EXIT_ALL_GRADED
