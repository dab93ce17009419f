"""Shared fixtures: the venv environment, a scratch nbgrader course made
once per session, the generated course, and a JupyterLab server started
through the README's lab command. What the tests share that is not a fixture
is in helpers.py; how tests are shared out between pytest-xdist's processes is
in xdist_units.py (a plugin: pyproject.toml's addopts)."""
import fcntl
import os
import shutil
from pathlib import Path

import pytest

from donation_course.authoring import generate
from donation_course.course import Course, venv_env

# helpers' assertions (read_grades, assert_only_tagged_cells_raise) explain
# themselves as a test's own do: rewritten, so this must come before the
# first import of helpers.
pytest.register_assert_rewrite("helpers")

from helpers import make_course, start_lab  # noqa: E402  (after register_assert_rewrite, see above)


@pytest.fixture(scope="session")
def env():
    """Environment for subprocesses: the venv's bin/ first on PATH."""
    return venv_env()


@pytest.fixture(scope="session")
def course_template(tmp_path_factory):
    """A scratch course as `./course grade`'s first step leaves it (the
    grader's own `prepare`: nbgrader's generate_assignment has run, the
    compile cache is filled, the state file records from what). Made once
    per session: the first xdist worker to need it builds it, under a lock,
    in the folder the workers share. See `generated_course`."""
    from donation_course.grading.prepare import prepare

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    course = shared / "course-template"
    with open(shared / "course-template.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not course.exists():
            building = make_course(shared / "course-template.building")
            prepare(Course(building), building / ".grading", say=print)
            building.rename(course)  # complete, or not there
    return course


@pytest.fixture(scope="session")
def generated_course(course_template):
    """generated_course(dest): a copy of `course_template` at dest, for tests
    whose subject is not generating the assignment: each would otherwise pay
    for nbgrader's generate_assignment (about 3.5 s of CPU) on its first
    grading. The graded corpus (grade_corpus) starts from a bare course, so
    that a run's own generating stays covered."""
    def make(dest: Path) -> Path:
        shutil.copytree(course_template, dest)
        return dest

    return make


@pytest.fixture(scope="session")
def released_course(tmp_path_factory):
    """A scratch course on which nbgrader's generate_assignment and
    generate_solution have run once (what `./course regenerate` runs): the
    drift test compares its release/ and solution/ with the committed copies,
    the pipeline tests validate and autograde in it."""
    return generate(tmp_path_factory.mktemp("course"))


@pytest.fixture
def lab_server(env, tmp_path):
    server = start_lab(env, tmp_path)
    yield server
    server.stop()
