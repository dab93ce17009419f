"""A pytest plugin: how the suite's tests are shared out between pytest-xdist's
processes (`-n 3` in pyproject.toml's addopts, which loads this module with
`-p xdist_units`; `pythonpath = ["tests"]` puts it on sys.path). Three on the
2-core reference machine: some tests wait (a kernel sleeping out its time
limit, a server or browser starting), and a third process keeps both cores
busy meanwhile (docs/performance.md: 97% busy against 87% with two).

A test is a unit of work on its own, except in the files named in
SHARED_FIXTURE_UNITS, whose tests share an expensive fixture (a graded corpus,
a built environment, a browser, the generated course, a fresh Python on 8
devices): each unit named there runs on one worker, so the fixture is built
once. A file that defines a module- or session-scoped fixture is such a unit
by default (a new file falls in without a word here), unless it is in
NOT_UNITS. (xdist's own `--dist loadgroup` does not group on pytest 9.2:
pytest-xdist issue #1386.)

The scheduler extends pytest-xdist's LoadScopeScheduling through private
methods and attributes (written for pytest-xdist 3.8.0):
tests/test_upstream_private_apis.py fails when an upgrade changes them.
"""
import re
from pathlib import Path

from xdist.scheduler import LoadScopeScheduling

# Files whose shared fixture is cheap and whose tests are long: their tests go out one by one.
NOT_UNITS = {"test_grading.py",  # its module fixture `hidden` only imports the hidden checks
             "test_sandbox.py"}  # `audited` is one kernel; its other tests start dozens of kernels of their own


def files_with_shared_fixtures(folder: Path = Path(__file__).parent) -> dict:
    """{file name: unit} for each test file beside this one that defines a
    module-, package- or session-scoped fixture (other than NOT_UNITS)."""
    shared = re.compile(r"@pytest\.fixture\(\s*scope\s*=\s*[\"'](module|package|session)[\"']")
    return {path.name: path.stem.removeprefix("test_") for path in sorted(folder.glob("test_*.py"))
            if path.name not in NOT_UNITS and shared.search(path.read_text(encoding="utf-8", errors="replace"))}


SHARED_FIXTURE_UNITS = files_with_shared_fixtures() | {
                        "test_grading_corpus.py": "corpus", "test_grading_capstone.py": "capstone",
                        "test_grading_debugging.py": "debugging",
                        "test_binder.py": "binder", "test_browser.py": "browser",
                        "test_browser_wrong_answers.py": "browser_wrong_answers",
                        "test_drift.py": "released_course", "test_nbgrader_pipeline.py": "released_course",
                        "test_cluster.py": "cluster", "test_site.py": "site", "test_deadline_day.py": "deadline_day"}


# Roughly what each long unit takes on 2 shared cores (seconds, from
# `./course test --durations=0`): the scheduler hands out the longest first,
# so no long test starts last while the other worker sits idle. An ordering
# hint only: a wrong figure costs time, never a result.
UNIT_SECONDS = {"corpus": 130, "binder": 95, "browser": 120, "browser_wrong_answers": 150, "capstone": 30,
                "debugging": 125, "released_course": 20, "cluster": 90, "site": 200, "deadline_day": 300,
                "test_grading.py::test_the_solved_course_gets_full_marks_with_and_without_the_compile_cache": 58,
                "test_lms.py::test_lms_exports_grade_like_serial_nbgrader_with_late_penalty": 58,
                "test_benchmarks.py::test_the_grading_benchmark_runs_to_its_table": 60,
                "test_benchmarks.py::test_the_cluster_benchmark_runs_to_its_table": 70,
                "test_benchmarks.py::test_the_lessons_benchmark_runs_to_its_table": 30,
                "test_benchmarks.py::test_the_referee_benchmark_runs_to_its_table": 20,
                "test_exchange.py::test_release_fetch_submit_collect_grade_feedback": 34,
                "test_lms.py::test_interrupted_run_rerun_holds_every_student_once_and_leaves_no_temp": 22,
                "test_grading.py::test_whole_submission_time_limit_stops_an_uninterruptible_loop": 22,
                "test_lms.py::test_corrupt_state_is_reported_in_one_line_and_rebuilt": 15,
                "test_sandbox.py::test_scores_do_not_depend_on_the_instructors_shell_and_outputs_are_capped": 13,
                "test_lms.py::test_extra_file_does_not_destroy_an_nbgrader_submission": 19,
                "test_lessons_execute.py::test_learner_copy_errors_only_where_expected": 5}


# Units that mostly wait (a student sleeping out the whole-submission time
# limit) go out first, beside the graded corpus, whose two grading workers
# keep both cores busy meanwhile; last, they would leave a core idle.
WAITING_UNITS = {"test_grading.py::test_whole_submission_time_limit_stops_an_uninterruptible_loop"}


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its file's shared unit, or itself."""
    path, _, name = nodeid.partition("::")
    filename = path.rsplit("/", 1)[-1]
    return SHARED_FIXTURE_UNITS.get(filename) or f"{filename}::{name}"


SHARED_UNIT_SECONDS = 30  # a shared-fixture unit not in UNIT_SECONDS: long enough to go out early


def unit_seconds(unit: str) -> float:
    default = SHARED_UNIT_SECONDS if unit in SHARED_FIXTURE_UNITS.values() else 1.0
    return UNIT_SECONDS.get(unit, UNIT_SECONDS.get(unit.split("[", 1)[0], default))


class SharedFixtureScheduling(LoadScopeScheduling):
    """Units of work as above: the waiting ones, then the longest first."""

    def __init__(self, config, log=None):
        super().__init__(config, log)
        self._longest_first = False

    def _split_scope(self, nodeid):
        return unit_of(nodeid)

    def _assign_work_unit(self, node):
        # xdist queues units in collection order (or by test count):
        # before the first one goes out, the longest go to the front.
        if not self._longest_first:
            queue = sorted(self.workqueue.items(),
                           key=lambda item: (item[0] not in WAITING_UNITS, -unit_seconds(item[0])))
            self.workqueue.clear()
            self.workqueue.update(queue)
            self._longest_first = True
        super()._assign_work_unit(node)

    def _reschedule(self, node):
        # xdist hands a worker its next unit while it still has two tests
        # to go; then two one-test units pile up behind a long one. Here
        # a worker gets its next unit at its last test (the one xdist's
        # worker holds back until more work or the end arrives).
        if node.shutting_down:
            return
        if not self.workqueue:
            node.shutdown()
            return
        if self._pending_of(self.assigned_work[node]) <= 1:
            self._assign_work_unit(node)


def pytest_xdist_make_scheduler(config, log):
    return SharedFixtureScheduling(config, log)
