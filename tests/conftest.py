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

# --- tiers: `./course test` runs everything; `./course test --fast` the everyday tier ---------
#
# A test is in the everyday tier unless it is marked `slow` or `browser`. A test
# that uses one of SLOW_FIXTURES (directly or through another fixture) is
# marked `slow` here, whatever its file says: `env` is how a test starts the
# course's commands (./course grade, nbgrader, jupyter), each a real kernel or
# more. A test that cannot check its unit without a kernel, and whose unit no
# everyday test covers, is marked `everyday`: it runs in both tiers.
# tests/TIERS.md (and README's test paragraph) say how to mark a new test.
SLOW_FIXTURES = {"env", "released_course", "lab_server"}
FAST_SECONDS = 5.0  # an everyday test slower than this is named at the end of a --fast run


def pytest_addoption(parser):
    parser.addoption("--fast", action="store_true",
                     help="the everyday tier: leave out tests marked slow or browser (see tests/conftest.py)")


def in_everyday_tier(item) -> bool:
    if item.get_closest_marker("everyday"):
        return True
    return not (item.get_closest_marker("slow") or item.get_closest_marker("browser"))


def pytest_collection_modifyitems(config, items):
    for item in items:
        if SLOW_FIXTURES & set(item.fixturenames) and not item.get_closest_marker("everyday"):
            item.add_marker(pytest.mark.slow)
    if config.getoption("fast"):
        keep = [item for item in items if in_everyday_tier(item)]
        dropped = [item for item in items if not in_everyday_tier(item)]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = keep


_slow_everyday = {}


def pytest_runtest_logreport(report):
    if report.when == "call" and report.duration > FAST_SECONDS:
        _slow_everyday[report.nodeid] = report.duration


def pytest_terminal_summary(terminalreporter, config):
    """In a --fast run, the everyday tests that took long: each should be
    marked slow, or everyday if it must stay (no figure is asserted)."""
    if not config.getoption("fast") or not _slow_everyday:
        return
    terminalreporter.section("everyday tests over %.0f s (mark slow, or everyday if they must stay)" % FAST_SECONDS)
    for nodeid, seconds in sorted(_slow_everyday.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"{seconds:6.1f}s {nodeid}")


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
