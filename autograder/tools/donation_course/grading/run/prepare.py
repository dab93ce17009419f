"""A run's first step on a course: the assignment generated from its source
as it is now, and the compile cache filled from the same source.

Both are redone only when what they were made from changed: the state file
records the source's digest, the cache folder its own (compile_cache.py).
They need nothing of each other (nbgrader's generate_assignment writes
release/ and the gradebook; the fill reads source/ alone), so on a fresh
course they run side by side, each a process of its own. Nothing before the
first kernel needs the cache either: a run prepares with `begin_preparing`,
which returns with the fill still under way, and waits for it
(`Filling.finish`) once its grading workers have started
(steps.Run.executor).
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import time
from collections.abc import Callable, Iterable
from importlib.metadata import version
from pathlib import Path

from ...course import Course, CourseError, load_config
from .compile_cache import EarlyFill, Filling, notebooks_with_hidden_tests, start
from .state import State, load_state, save_state


def digest_files(paths: Iterable[Path]) -> str:
    h = hashlib.sha256()
    for path in sorted(paths, key=lambda p: p.name):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def hidden_checks() -> list:
    """The hidden checks' modules the grade cells import (donation_course.hidden)."""
    from ... import hidden

    return sorted(Path(hidden.__file__).parent.glob("*.py"))


def source_digest(course: Course) -> str:
    """What the grades are made from: the source notebooks, the nbgrader
    config and the hidden checks (an edit to any of them regrades everyone,
    --only-changed included)."""
    return digest_files(course.source_notebooks() + [course.root / "nbgrader_config.py"] + hidden_checks())


def cache_digest(course: Course) -> str:
    """What the compile cache is filled from: the notebooks with hidden tests
    and the checks they call, run with this JAX."""
    return (digest_files(notebooks_with_hidden_tests(course) + hidden_checks())
            + f"-jax-{version('jax')}-jaxlib-{version('jaxlib')}")


@contextlib.contextmanager
def venv_path():
    """This Python's bin/ first on PATH for a while: nbgrader runs `alembic` by name when it makes a gradebook."""
    before = os.environ.get("PATH")
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + (before or "")
    try:
        yield
    finally:
        if before is None:
            del os.environ["PATH"]
        else:
            os.environ["PATH"] = before


@contextlib.contextmanager
def alembic_head_in_process(course: Course):
    """nbgrader stamps a new gradebook with its migrations' head, which it asks of `alembic heads` run as a
    process of its own (nbgrader.api.get_alembic_version, nbgrader 0.9.6): a Python started and alembic imported,
    on a fresh course's critical path. While a course has no gradebook yet, the same head comes from alembic's own
    ScriptDirectory over nbgrader's migration scripts, in this process (test_upstream_private_apis.py compares
    the two)."""
    if course.gradebook.exists():
        yield
        return
    import nbgrader.api
    from alembic.script import ScriptDirectory
    from nbgrader.dbutil import ALEMBIC_DIR

    asked = nbgrader.api.get_alembic_version
    nbgrader.api.get_alembic_version = lambda: ScriptDirectory(ALEMBIC_DIR).get_current_head()
    try:
        yield
    finally:
        nbgrader.api.get_alembic_version = asked


def generate_assignment(course: Course, log: Path) -> None:
    """`nbgrader generate_assignment ASSIGNMENT --force` on the course, through nbgrader's own API in this
    process, which has nbgrader imported already (a process of its own would start Python and import it again,
    about half of a fresh course's generating); its log goes to `log`. CourseError with nbgrader's last ERROR
    line if it fails. It starts no thread: the run's process forks its workers after it (pool.py)."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    config = load_config(course.root)
    config.CourseDirectory.root = str(course.root)
    with venv_path(), alembic_head_in_process(course):
        api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
        result = api.generate_assignment(course.assignment, force=True, create=True)
    text = f"{result.get('log', '')}\n{result.get('error', '')}"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(f"$ nbgrader generate_assignment {course.assignment} --force (in process)\n{text}",
                   encoding="utf-8")
    if not result.get("success"):
        lines = [ln for ln in text.splitlines() if "ERROR" in ln]
        detail = lines[-1].strip() if lines else "no error line"
        raise CourseError(f"nbgrader generate_assignment failed: {detail} (full log: {log})")


def ensure_assignment(course: Course, state: State, log: Path) -> None:
    """Generate the assignment (release/ and the gradebook's entries) unless
    the state says it was generated from the source as it is now."""
    source_hash = source_digest(course)
    if state.source == source_hash and course.gradebook.exists() and course.release.is_dir():
        return
    generate_assignment(course, log)
    state.source = source_hash
    for student in state.students.values():  # a new assignment version: everyone is graded again, and
        student.hash = ""                     # each review still belongs to the answers it was made on


DRAW_SECRET = "draw-secret"


def draw_secret(course: Course) -> str:
    """The course's secret for the length and values the hidden checks draw at grading time (hidden/exercise.py's
    DRAW_SEED_ENV): made once, kept in COURSE/.grading (never in a release or the repository), so every grading
    of the course, on this machine or a cluster, draws the same ones, and no student knows them in advance."""
    import secrets

    path = course.grading_dir / DRAW_SECRET
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    with os.fdopen(fd, "w") as fh:
        fh.write(secrets.token_hex(16))
    return path.read_text().strip()


def begin_preparing(course: Course, out: Path, say: Callable[[str], None], compile_cache: bool = True,
                    notebooks: Iterable[str] | None = None, phases: dict | None = None,
                    early: EarlyFill | None = None) -> tuple[State, Filling | None]:
    """`prepare` without the wait for the fill: the state, and the fill still under way (None if none was
    started), which the caller finishes before any kernel reads the cache, or stops. `early`: a fill's Python
    the run started first (run/early.py): the fill takes it, or it is ended here."""
    phases = {} if phases is None else phases
    draw_secret(course)  # made with the course's first preparation, so copies of a prepared course share it
    path = course.state_file
    state = load_state(path, say)
    filling = start(course, course.compile_cache, cache_digest(course), notebooks, early) if compile_cache else None
    if early is not None and not early.taken:
        early.close()
    began = time.monotonic()
    try:
        ensure_assignment(course, state, out / "logs" / "generate_assignment.log")
        save_state(path, state)
    except BaseException:
        if filling is not None:
            filling.stop()
        raise
    phases["generate_assignment"] = round(time.monotonic() - began, 3)
    return state, (filling if filling is not None and filling.under_way() else None)


def prepare(course: Course, out: Path, say: Callable[[str], None], compile_cache: bool = True,
            notebooks: Iterable[str] | None = None, phases: dict | None = None) -> State:
    """Read the state file (or start afresh), generate the assignment if its
    source changed, save the state; with `compile_cache`, fill the cache
    for `notebooks` (their stems; default: every notebook with hidden tests)
    where it lacks them or what it was filled from changed, beside the
    generating. Returns the state. `phases` gets the seconds of each part:
    generating (generate_assignment) and the wait for the fill after it
    (compile_cache)."""
    phases = {} if phases is None else phases
    state, filling = begin_preparing(course, out, say, compile_cache, notebooks, phases)
    finish_fill(filling, say, phases)
    return state


def finish_fill(filling: Filling | None, say: Callable[[str], None], phases: dict) -> None:
    """Wait for a fill begin_preparing left under way (None: there is none); say its line. `phases` gets the
    seconds waited (compile_cache)."""
    began = time.monotonic()
    line = filling.finish() if filling is not None else ""
    phases["compile_cache"] = round(time.monotonic() - began, 3)
    if line:
        say(line)
