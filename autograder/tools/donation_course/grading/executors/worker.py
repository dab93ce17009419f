"""A long-lived grading worker: one process, one NbGraderAPI, its own copy of
the gradebook. It autogrades and generates feedback for one student at a
time (real nbgrader, in process: no nbgrader or Python start-up per student)
and sends back a StudentResult; the run process is the only writer of the
real gradebook."""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, replace
from pathlib import Path

from ...course import load_config
from ..integrity.audit_log import read_audit
from ..integrity.kernel_zygote import Zygote
from ..integrity.lifetime import PARENT_ENV, die_with
from ..referee.student import close as close_referee
from ..referee.student import prepare as prepare_referee
from ..referee.student import referee_student
from ..reports.messages import cell_messages, diagnose, died_at_startup
from ..results.result import CellGrade, Comment, NotebookResult, StudentResult
from ..run.settings import KERNEL_SETTINGS_ENV, STUDENT_DIR_ENV, KernelSettings
from .early_zygotes import Handoff
from .protocol import Died, Done, Grade, Ready, Stop, receive

KERNEL_NAME = "donation-lab-graded"


@dataclass(frozen=True)
class WorkerJob:
    """What a worker needs: the course, its gradebook copy, the limits, where it logs and works."""

    course: str
    assignment: str
    db: str
    cell_timeout: int
    max_output_bytes: int
    kernel: KernelSettings
    kernel_dir: str   # holds the grading kernelspec (make_kernelspec)
    log: str
    tmp: str          # this worker's scratch folder, removed by the run however it ends
    zygote: Handoff | None = None  # a kernel zygote the run started for this worker (early_zygotes.py)


def make_kernelspec(folder: Path, python: str) -> Path:
    """A kernelspec whose launcher caps and sandboxes the kernel (kernel.py)."""
    spec = folder / "kernels" / KERNEL_NAME
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [python, "-m", "donation_course.grading.integrity.kernel", "-f", "{connection_file}"],
        "display_name": "Python 3 (graded, sandboxed)", "language": "python",
        # interrupt over the control channel: the kernel runs in its own session
        # (bwrap --new-session), where a SIGINT to the launcher's group never arrives
        "interrupt_mode": "message",
    }))
    return folder


def use_kernel_settings(settings: KernelSettings) -> None:
    """The grading kernels this process starts launch with `settings` (kernel.py reads them)."""
    os.environ[KERNEL_SETTINGS_ENV] = settings.to_json()


_zygote: Zygote | None = None  # this process's kernel zygote (integrity/kernel_zygote.py), when kernels fork


def spawn_kernel_zygote(settings: KernelSettings, folder: str, handoff: Handoff | None = None) -> None:
    """Start this process's kernel zygote, if its kernels are sandboxed and forked; it imports meanwhile. With
    `handoff`, adopt the one the run started for this worker instead."""
    global _zygote
    if settings.sandbox and settings.fork:
        if handoff is not None:
            _zygote = Zygote.adopt(handoff.path, handoff.pid, handoff.ready_fd, settings.compile_cache)
            return
        _zygote = Zygote(folder, settings.compile_cache)
        _zygote.spawn()


def prepare_kernel_zygote() -> None:
    """The next kernel is forked from the zygote if it is ready (started again if it died), else started anew."""
    settings = KernelSettings.from_environment()
    path = _zygote.path if _zygote is not None and _zygote.ready() else ""
    if settings.zygote != path:
        use_kernel_settings(replace(settings, zygote=path))


def new_student_dir(base: Path) -> Path:
    """A fresh folder for one student's kernels, named to the launcher: runtime/
    (connection file, sockets: the only folder the sandbox shares with the
    grader; an unsandboxed kernel's home goes in scratch/). Returns runtime/."""
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(mode=0o700, parents=True)
    runtime = base / "runtime"
    runtime.mkdir()
    prepare_referee()  # the worker's referee started, if it is not running
    prepare_kernel_zygote()
    os.environ[STUDENT_DIR_ENV] = str(base)
    os.environ[PARENT_ENV] = str(os.getpid())  # the launchers this process starts die with it (lifetime.py)
    return runtime


def unsynced_gradebook(db: Path) -> None:
    """This process's connections to `db` (the worker's own copy of the gradebook) do not wait for the disk at
    each commit (SQLite's synchronous=OFF; its journal stays, so a worker killed mid-write leaves it whole):
    nbgrader commits a few dozen times per student, and the copy is scratch. The run process, the only writer of
    the real gradebook, merges each result from the message the worker sends; a new worker starts from a fresh
    copy."""
    import sqlite3

    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    target = os.path.realpath(db)

    def on_connect(dbapi_connection, _record) -> None:
        if isinstance(dbapi_connection, sqlite3.Connection):
            cursor = dbapi_connection.cursor()
            try:
                files = [row[2] for row in cursor.execute("PRAGMA database_list") if row[1] == "main"]
                if files and files[0] and os.path.realpath(files[0]) == target:
                    cursor.execute("PRAGMA synchronous=OFF")
            finally:
                cursor.close()

    event.listen(Engine, "connect", on_connect)


def one_engine_per_database() -> None:
    """Every nbgrader Gradebook this process opens on one database shares one SQLAlchemy engine, and with it the
    engine's cache of compiled statements. nbgrader makes a new engine for each Gradebook (nbgrader.api's
    `create_engine`), and a student's autograde, feedback, referee step and results open about a dozen, so each
    statement was compiled again every time (measured: about 0.6 s less for 20 submissions on 2 workers, alternating
    runs). A Gradebook's close() still disposes of the engine's connections, so none stays open between them; the
    engine, its compiled statements and its `connect` listeners (unsynced_gradebook) stay. Only grading workers do
    this; the run's process, which writes the course's gradebook, keeps nbgrader's way."""
    import nbgrader.api
    from sqlalchemy import create_engine

    engines = {}

    def shared_engine(url, *args, **kwargs):
        key = (str(url), args, tuple(sorted(kwargs.items())))
        if key not in engines:
            engines[key] = create_engine(url, *args, **kwargs)
        return engines[key]

    nbgrader.api.create_engine = shared_engine


def make_api(course: Path, db: Path, cell_timeout: int):
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    cfg = load_config(course)
    cfg.CourseDirectory.root = str(course)
    cfg.CourseDirectory.db_url = f"sqlite:///{db}"
    cfg.Execute.timeout = cell_timeout
    cfg.Execute.interrupt_on_timeout = True
    cfg.Execute.kernel_name = KERNEL_NAME
    # Unix sockets in the kernel's own runtime folder (bound into its sandbox
    # only): no TCP ports, so no port race between parallel kernels either.
    cfg.KernelManager.transport = "ipc"
    # (nbgrader's Execute passes its own kernel_manager_class, so the client is set on the manager)
    cfg.AsyncKernelManager.client_class = "donation_course.grading.executors.fastkernel.GradingKernelClient"
    cfg.Execute.shutdown_kernel = "immediate"  # outputs are collected by then (see fastkernel.py)
    # which cell runs, so that only the checks' own cells hand over on the hand-over budget (fastkernel.py)
    from .fastkernel import note_cell

    cfg.Execute.on_cell_execute = note_cell
    # Plain tracebacks: IPython's default "Context" mode reads and parses the
    # source of every frame (jax's too), ~0.15 s of kernel CPU per failing
    # check; grade cells show only the check's message anyway (feedback.py).
    # Added to the course config's list (no history file, hidden checks at start), never replacing it.
    # No automagic: a one-line cell like `system id` would run as %system (the scan reads it so, too).
    cfg.Execute.extra_arguments = [*cfg.Execute.get("extra_arguments", []), "--InteractiveShell.xmode=Plain",
                                   "--InteractiveShell.automagic=False"]
    from ..reports.feedback import use_grader_feedback

    use_grader_feedback(cfg)
    # The runtime audit's last cell around nbgrader's own execution (audit_log.py)
    from nbgrader.converters import Autograde
    from nbgrader.preprocessors import Execute

    from ..integrity.audit_log import DropNotebookEnd, MarkNotebookEnd, ScoreFromSignedPasses
    from ..integrity.reference_part import PutBackReference, SetAsideReference
    from .fastkernel import GradingExecute

    steps = list(Autograde.class_traits()["autograde_preprocessors"].default())
    at = steps.index(Execute)
    # ... the lessons' reference parts, which earn nothing, not run (reference_part.py),
    # and the grade cells' scores decided by the checks' signed passes, not by the order of their outputs;
    # nbgrader's Execute with the grading kernel manager (fastkernel.py)
    cfg.Autograde.autograde_preprocessors = [*steps[:at], SetAsideReference, MarkNotebookEnd, GradingExecute,
                                             DropNotebookEnd, PutBackReference, ScoreFromSignedPasses,
                                             *steps[at + 1:]]
    coursedir = CourseDirectory(config=cfg)
    return NbGraderAPI(coursedir=coursedir, config=cfg)


def scan_submission(course: Path, student: str, assignment: str) -> dict:
    """{notebook: ScanResult} for the student's submitted notebooks (scan.py), read before any kernel starts: its
    flags, and the cells it read (the audit flags any other cell that runs)."""
    import nbformat

    from ..integrity.scan import read_notebook

    scans = {}
    for path in sorted((course / "submitted" / student / assignment).glob("*.ipynb")):
        release = course / "release" / assignment / path.name
        try:
            nb = nbformat.read(path, as_version=4)
            rel = nbformat.read(release, as_version=4) if release.exists() else None
        except Exception:
            continue  # not a notebook: nbgrader reports it
        scans[path.stem] = read_notebook(nb, path.stem, rel)
    return scans


def notebook_results(api, course: Path, student: str, assignment: str) -> tuple[dict, str | None] | None:
    """({notebook: NotebookResult}, timestamp) as the worker's gradebook holds them, or None."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(api.coursedir.db_url, api.course_id) as gb:
        try:
            sub = gb.find_submission(assignment, student)
        except MissingEntry:
            return None
        notebooks = {}
        for nb in sub.notebooks:
            auto = course / "autograded" / student / assignment / f"{nb.name}.ipynb"
            msgs = cell_messages(auto) if auto.exists() else {}
            grades = [CellGrade(g.name, g.max_score, g.auto_score, g.manual_score, g.needs_manual_grade,
                                **msgs.get(g.name, {})) for g in nb.grades]
            names = {g.name for g in grades}
            notebooks[nb.name] = NotebookResult(
                grades=grades, comments=[Comment(c.name, c.auto_comment, c.manual_comment) for c in nb.comments],
                graded=auto.exists(), late_penalty=nb.late_submission_penalty,
                solution_errors={k: v["message"] for k, v in msgs.items() if v["error"] and k not in names})
        return notebooks, (sub.timestamp.isoformat() if sub.timestamp else None)


def ensure_folders(job: WorkerJob) -> None:
    """This worker's folders, made again if something removed them (a /tmp cleaner mid-run)."""
    Path(job.tmp + "-tmp").mkdir(parents=True, exist_ok=True)
    if not (Path(job.kernel_dir) / "kernels" / KERNEL_NAME / "kernel.json").is_file():
        make_kernelspec(Path(job.kernel_dir), sys.executable)


def grade_one(api, course: Path, assignment: str, student: str, tmp: Path) -> StudentResult:
    scans = scan_submission(course, student, assignment)
    flags = {name: list(scan.flags) for name, scan in scans.items() if scan.flags}
    start = time.monotonic()
    try:
        api.config.KernelManager.ip = str(new_student_dir(tmp) / "kernel-ipc")  # sockets: an absolute path
        res = api.autograde(assignment, student, force=True, create=True)
        if not res.get("success") and died_at_startup(res.get("log", ""), res.get("error", "")):
            api.config.KernelManager.ip = str(new_student_dir(tmp) / "kernel-ipc")
            res = api.autograde(assignment, student, force=True, create=True)
        reasons, log = [], ""
        if res.get("success"):
            # the referee's verdicts join the kernel's scores before the feedback is written (referee/)
            refereed = referee_student(course, assignment, student, api.coursedir.db_url, api.course_id)
            for name, found_flags in refereed.flags.items():
                flags.setdefault(name, []).extend(found_flags)
            fb = api.generate_feedback(assignment, student, force=True)
            if not fb.get("success"):
                reasons.append("feedback could not be generated: " + diagnose(fb.get("log", ""), fb.get("error", "")))
                log = f"{fb.get('log', '')}\n{fb.get('error', '')}"
        else:
            log = f"{res.get('log', '')}\n{res.get('error', '')}"
        autograded = course / "autograded" / student / assignment
        audit = read_audit(tmp, {p.stem: autograded / p.name
                                 for p in sorted((course / "submitted" / student / assignment).glob("*.ipynb"))},
                           scans)
        for name, found_flags in audit.items():
            flags.setdefault(name, []).extend(found_flags)
        found = notebook_results(api, course, student, assignment)
        notebooks, timestamp = found or ({}, None)
        if res.get("success"):
            result = StudentResult.graded(student, notebooks, timestamp, reasons)
        else:
            text = (res.get("log", ""), res.get("error", ""))
            result = StudentResult.failed(student, diagnose(*text), log, notebooks,
                                          infrastructure=died_at_startup(*text))
            result.timestamp = timestamp
        result.log = log
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result.flag(flags)
    result.seconds = time.monotonic() - start
    return result


def serve(conn, job: WorkerJob, parent: int, inherited: tuple = ()) -> None:
    """Worker main loop (protocol.py): Ready, then for each Grade(student) a Done(StudentResult) until Stop.
    `inherited`: the parent's ends of every worker's pipe and its lock file,
    closed here, so that this worker sees EOF when the parent goes and holds
    no lock of the parent's."""
    die_with(parent)  # a grader killed by any signal leaves no worker, and so no kernel, behind
    for obj in inherited:
        try:
            obj.close() if hasattr(obj, "close") else os.close(obj)
        except OSError:
            pass
    os.setsid()
    fd = os.open(job.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)  # nbgrader's and the kernels' chatter goes to the log, not the terminal
    os.environ["JUPYTER_PATH"] = job.kernel_dir + os.pathsep + os.environ.get("JUPYTER_PATH", "")
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    use_kernel_settings(job.kernel)
    # Temporary files of this process (jupyter_client writes each kernel's
    # connection file with mkstemp) go under the run's scratch folder, which
    # the run removes however it ends: a worker killed mid-student (Ctrl-C,
    # time limit) leaves nothing in the user's TMPDIR.
    own_tmp = Path(job.tmp + "-tmp")
    own_tmp.mkdir(parents=True, exist_ok=True)
    os.environ["TMPDIR"] = tempfile.tempdir = str(own_tmp)
    spawn_kernel_zygote(job.kernel, str(own_tmp), job.zygote)
    from .fastkernel import CappedIOPubChannel

    CappedIOPubChannel.limit = job.max_output_bytes
    course = Path(job.course)
    os.chdir(course)
    unsynced_gradebook(Path(job.db))
    one_engine_per_database()
    api = make_api(course, Path(job.db), job.cell_timeout)
    conn.send(Ready())
    try:
        while True:
            match receive(conn):
                case Grade(student=student):
                    pass
                case Stop() | Died():
                    return
                case message:
                    raise RuntimeError(f"a grading worker got {message!r}, which the run never sends")
            try:
                ensure_folders(job)
                conn.send(Done(grade_one(api, course, job.assignment, student, Path(job.tmp))))
            except Exception:
                conn.send(Done(StudentResult.failed(
                    student, "the grader itself failed on this submission; your instructor has the full log "
                    "(nothing you submitted was lost)", log=traceback.format_exc())))
    finally:
        close_referee()  # its server and scratch folder (a forked worker ends without atexit)
        if _zygote is not None:
            _zygote.stop()
