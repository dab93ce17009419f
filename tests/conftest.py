"""Shared fixtures: the venv environment, a scratch nbgrader course made
once per session, the generated course, and a JupyterLab server started
through the README's lab command. What the tests share that is not a fixture
is in helpers.py; how tests are shared out between pytest-xdist's processes is
in xdist_units.py (a plugin: pyproject.toml's addopts)."""
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from donation_course.authoring import generate
from donation_course.course import Course, venv_env

# helpers' assertions (read_grades, assert_only_tagged_cells_raise) explain
# themselves as a test's own do: rewritten, so this must come before the
# first import of helpers.
pytest.register_assert_rewrite("helpers")

# (after register_assert_rewrite, see above)
from helpers import built_once, grade_class, graded_class, make_course, start_lab, timeout_line  # noqa: E402

# --- signals ---------------------------------------------------------------------------------
# The tests that stop a run with Ctrl-C send SIGINT to a command they start. A shell that runs the suite
# as a background job (`./course test &`, nohup, a loop script) starts it with SIGINT ignored; every
# process it starts inherits that, and our commands keep a signal that was ignored at start ignored
# (test_commands.py). Such a run never stops, the test fails after minutes, and its grading processes
# are left to block the next tests. So the suite's own processes (xdist's too: each imports this) take
# SIGINT back, and those tests check the command, not how the suite was started.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# --- tiers: `./course test` runs everything; `./course test --fast` the everyday tier ---------
#
# A test is in the everyday tier unless it is marked `slow` or `browser`.
# Marked `slow` here, whatever its file says, is a test that
# - uses a fixture in SLOW_FIXTURES (directly or through another fixture):
#   `env` is how a test starts the course's commands (./course grade,
#   nbgrader, jupyter), each a real kernel or more; or
# - calls one of SLOW_CALLS in its body, or in a function of its own module
#   that it calls (a sandboxed kernel, a lesson run top to bottom, a fresh
#   Python on 8 devices that waits out a hang).
# A test whose unit cannot be checked without a kernel, and that no other
# everyday test covers, stays in the everyday tier: it is marked `everyday`,
# or named in EVERYDAY (kept here, so that the tier's kernels are counted in
# one place). tests/TIERS.md and README's test paragraph say how to mark a test.
SLOW_FIXTURES = {"env", "released_course", "lab_server"}
SLOW_CALLS = {"run_in_sandbox", "run_notebook", "run_on_eight_devices"}
EVERYDAY = {
    # the sandbox: what a grading kernel can reach (one kernel)
    "test_sandbox.py::test_a_grading_kernel_reaches_nothing_but_its_own_copy",
    # the runtime audit: honest code and library internals leave no record (one kernel)
    "test_sandbox.py::test_the_audit_is_silent_on_honest_code_and_library_internals",
    # ... and what learner code does at run time does: every family, in one kernel they share
    "test_sandbox.py::test_the_audit_records_what_learner_code_does_at_run_time[",
}
FAST_SECONDS = 5.0  # an everyday test slower than this is named at the end of a --fast run


def calls_slow(function, seen=None) -> bool:
    """`function`'s code, or a function of its module that it calls, names one of SLOW_CALLS."""
    seen = set() if seen is None else seen
    if function in seen or not hasattr(function, "__code__"):
        return False
    seen.add(function)
    names, codes = set(), [function.__code__]
    while codes:  # with the lambdas and functions defined inside it
        code = codes.pop()
        names.update(code.co_names)
        codes.extend(c for c in code.co_consts if hasattr(c, "co_names"))
    if names & SLOW_CALLS:
        return True
    module = getattr(function, "__module__", None)
    return any(calls_slow(obj, seen) for name in names
               if callable(obj := function.__globals__.get(name)) and getattr(obj, "__module__", None) == module
               and hasattr(obj, "__code__"))


def is_everyday(item) -> bool:
    """Marked `everyday`, or named in EVERYDAY (a name ending in "[" or "-" names the parameters that begin so)."""
    name = item.nodeid.rpartition("/")[2]
    return bool(item.get_closest_marker("everyday")) or any(
        name == entry or (entry.endswith(("[", "-")) and name.startswith(entry)) for entry in EVERYDAY)


def pytest_addoption(parser):
    parser.addoption("--fast", action="store_true",
                     help="the everyday tier: leave out tests marked slow or browser (see tests/conftest.py)")


def in_everyday_tier(item) -> bool:
    if is_everyday(item):
        return True
    return not (item.get_closest_marker("slow") or item.get_closest_marker("browser"))


def pytest_collection_modifyitems(config, items):
    for item in items:
        if is_everyday(item):
            continue
        if SLOW_FIXTURES & set(item.fixturenames) or calls_slow(getattr(item, "function", None)):
            item.add_marker(pytest.mark.slow)
    if config.getoption("fast"):
        keep = [item for item in items if in_everyday_tier(item)]
        dropped = [item for item in items if not in_everyday_tier(item)]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = keep


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A subprocess or a wait that ran out of time fails (or errors, in a
    fixture) with one line saying so and how loaded the machine was."""
    report = yield
    if call.excinfo is not None and call.excinfo.errisinstance((subprocess.TimeoutExpired, TimeoutError)):
        report.longrepr = timeout_line(call.excinfo.value)
    return report


_slow_everyday = {}


def pytest_runtest_logreport(report):
    if report.when == "call" and report.duration > FAST_SECONDS:
        _slow_everyday[report.nodeid] = report.duration


def pytest_terminal_summary(terminalreporter, config):
    """In a --fast run, the everyday tests that took long: each should be
    marked slow, or everyday if it must stay (no figure is asserted)."""
    if not config.getoption("fast") or not _slow_everyday:
        return
    terminalreporter.section(f"everyday tests over {FAST_SECONDS:.0f} s (mark slow, or everyday if they must stay)")
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
    from donation_course.grading.run.prepare import prepare

    def build(folder: Path) -> None:
        make_course(folder)
        prepare(Course(folder), folder / ".grading", say=print)

    return built_once(tmp_path_factory, "course-template", build)


@pytest.fixture(scope="session")
def generated_course(course_template):
    """generated_course(dest): a copy of `course_template` at dest, for tests
    whose subject is not generating the assignment: each would otherwise pay
    for nbgrader's generate_assignment (about 3.5 s of CPU) and the compile
    cache's filling on its first grading. A run's own generating is covered
    by the tests that grade in a bare course (make_course): test_assignments
    (two assignments generated) and test_selfcheck (`./course check`
    prepares its private course, compile cache and all)."""
    def make(dest: Path) -> Path:
        shutil.copytree(course_template, dest)
        return dest

    return make


@pytest.fixture(scope="session")
def graded_corpus(tmp_path_factory, env, course_template):
    """graded_corpus(corpus): a corpus of the course (a donation_course.corpus
    module: exercise, capstone or debugging) graded once per session as a flat
    LMS folder by `./course grade` in a copy of the course template: a
    helpers.GradedClass. Every test that asks how that corpus is graded reads
    it; the first xdist process to ask grades it, under a lock
    (helpers.built_once), and xdist_units keeps each corpus's module on one
    process. Read it; a test that changes the course works on a copy."""
    def graded(corpus):
        def build(folder: Path) -> None:
            folder.mkdir(parents=True)
            grade_class(folder, shutil.copytree(course_template, folder / "course"), corpus.build, env)

        return graded_class(built_once(tmp_path_factory, f"graded-{corpus.__name__.rpartition('.')[2]}", build))

    return graded


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
