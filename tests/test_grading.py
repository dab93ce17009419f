"""`./course grade` end to end, always in scratch courses (--course), never in
autograder/: the solved course, zip input, time limits and bad input; plus
unit tests of the hidden checks, the feedback stripping and the input naming
rules. The submissions corpus graded once is test_grading_corpus.py."""
import shutil
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from donation_course.corpus import exercise as corpus
from donation_course.course import COURSE, ROOT, Course
from donation_course.lesson_size import main_path
from helpers import (
    GRADE_LIMITS,
    LIMIT_SCALE,
    assert_only_tagged_cells_raise,
    grade,
    gradebook_scores,
    make_course,
    read_grades,
    run,
)

ASSIGNMENT = COURSE.assignment
COURSE_CMD = ROOT / "course"
EX = corpus.EXERCISE
LIMITS = GRADE_LIMITS


read_csv = read_grades  # also fails on a student listed twice


def test_the_solved_course_gets_full_marks_with_and_without_the_compile_cache(tmp_path, env, generated_course):
    """All seven notebooks, solved (the solutions/ copies), in nbgrader's
    layout, graded as a class is by default (sandboxed, each kernel reading
    the course's compile cache: what the source's hidden tests compiled),
    and with neither sandbox nor cache. Every score must be full and the
    same either way, and no notebook may show a cache error. This is also
    the run of every solution copy top to bottom in a fresh kernel: each
    notebook autograde ran raises only in its cells tagged raises-exception,
    and each of those raises. Only each notebook's main path runs: its
    reference part earns nothing and is set aside (the learner copies' run
    checks that part)."""
    submitted = tmp_path / "submitted"
    dest = submitted / "ann" / ASSIGNMENT
    dest.mkdir(parents=True)
    for nb in sorted((ROOT / "solutions").glob("*.ipynb")):
        shutil.copy(nb, dest / nb.name)
    scores = {}
    for mode, extra in (("default", []), ("neither", ["--no-sandbox", "--no-compile-cache"])):
        course = generated_course(tmp_path / mode)
        assert any((Course(course).compile_cache).iterdir())  # the template's prepare filled it
        grade(env, submitted, "--course", course, "--timeout", "300", "--no-progress", *extra)
        row = read_csv(course / ".grading" / "grades.csv")["ann"]
        assert (row["status"], float(row["total"]), float(row["max"])) == \
            ("ok", COURSE.total_points, COURSE.total_points), row  # every grade cell's points
        assert row["reason"].startswith("sandbox off") == (mode == "neither"), row
        scores[mode] = gradebook_scores(course)
        ran = sorted((course / "autograded").rglob("*.ipynb"))
        assert len(ran) == len(COURSE.notebooks), ran
        for path in ran:
            assert "persistent compilation cache" not in path.read_text(), path
            graded = nbformat.read(path, as_version=4)
            start = len(main_path(graded))  # the reference part is not run when grading (reference_part.py)
            code = [(i, c) for i, c in enumerate(graded.cells) if c.cell_type == "code"]
            assert all(c.execution_count for i, c in code if i < start), path
            assert not any(c.execution_count or c.outputs for i, c in code if i >= start), path
            graded.cells = graded.cells[:start]  # its claims are checked on the learner copies (test_lessons_execute)
            assert_only_tagged_cells_raise(f"{mode}: {path.relative_to(course)}", graded)
    assert scores["default"] == scores["neither"]


# --- input formats, limits and bad input ---------------------------------------

def test_zip_input_and_naming_rules(tmp_path):
    """A zip of a flat export, collected and staged by the run's own steps (collect.collect, collect.stage):
    each file goes to the student its name says, ids exactly as named, macOS's junk skipped. That a zip's
    files are graded as those students end to end: test_lms.py's Canvas and Moodle zips (their scores and
    grades.csv's files column)."""
    from donation_course.grading.submissions.collect import collect, stage

    files = tmp_path / "files"
    corpus.build(files)
    archive = tmp_path / "lms.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.write(files / f"partial_{EX}.ipynb", "export/Alice.ipynb")  # <student>.ipynb
        zf.write(files / f"wrongvalue_{EX}.ipynb", f"export/bob_{EX}.ipynb")  # <student>_<notebook>
        zf.writestr("__MACOSX/._junk.ipynb", "junk")
    found, preset = collect(archive, COURSE.notebooks, ASSIGNMENT, tmp_path / "work", exercise=EX)
    assert preset == "flat" and not found.problems, found.problems
    assert {s: {nb: f.rel for nb, f in nbs.items()} for s, nbs in found.students.items()} == {
        "Alice": {EX: "export/Alice.ipynb"}, "bob": {EX: f"export/bob_{EX}.ipynb"}}  # ids exactly as named
    for nbs in found.students.values():
        stage(nbs, tmp_path / "submitted", ASSIGNMENT)
    staged = {p.relative_to(tmp_path / "submitted").as_posix(): p.read_bytes()
              for p in (tmp_path / "submitted").rglob("*.ipynb")}
    assert staged == {f"Alice/{ASSIGNMENT}/{EX}.ipynb": (files / f"partial_{EX}.ipynb").read_bytes(),
                      f"bob/{ASSIGNMENT}/{EX}.ipynb": (files / f"wrongvalue_{EX}.ipynb").read_bytes()}


def test_whole_submission_time_limit_stops_an_uninterruptible_loop(tmp_path, env, generated_course):
    files = tmp_path / "files"
    corpus.build(files)
    for f in files.iterdir():
        if not f.name.startswith("partial_"):
            f.unlink()
    nb = nbformat.read(files / f"partial_{EX}.ipynb", as_version=4)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = ("import time\nwhile True:\n    try:\n        time.sleep(0.2)\n"
                           "    except KeyboardInterrupt:\n        pass\n")
    nbformat.write(nb, files / f"stubborn_{EX}.ipynb")
    course = generated_course(tmp_path / "course")
    # 40 s on a quiet machine: the limit is the whole submission's, partial's too, which takes
    # 3 s on an idle machine and well over 10 s beside a CPU-burning process (scaled with the load)
    limit = round(40 * LIMIT_SCALE)
    grade(env, files, "--course", course, "--workers", "2", "--timeout", str(limit),
          "--cell-timeout", str(limit + 20), "--no-progress")
    rows = read_csv(course / ".grading" / "grades.csv")
    assert rows["stubborn"]["status"] == "timeout" and f"{limit} s" in rows["stubborn"]["reason"]
    assert float(rows["partial"][EX]) == corpus.MAX  # the rest of the class is still graded
    assert gradebook_scores(course)["stubborn"][EX] == 0


@pytest.mark.parametrize("make_input, message", [
    (lambda tmp: tmp / "missing", "no such file or folder"),
    (lambda tmp: (tmp / "notes.txt").write_text("x") and tmp / "notes.txt", "not a folder and not a .zip"),
    (lambda tmp: (tmp / "empty").mkdir() or tmp / "empty", "no .ipynb submissions found"),
])
def test_bad_command_input_gives_one_clear_line(tmp_path, env, make_input, message):
    course = make_course(tmp_path / "course")
    r = grade(env, make_input(tmp_path), "--course", course, check=False)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("course: error:") and message in lines[0], r.stderr


def test_bad_course_and_options_give_one_clear_line(tmp_path, env):
    (tmp_path / "subs").mkdir()
    r = grade(env, tmp_path / "subs", "--course", tmp_path, check=False)
    assert r.returncode == 1 and "not an nbgrader course" in r.stderr and "Traceback" not in r.stderr
    course = make_course(tmp_path / "course")
    r = grade(env, tmp_path / "subs", "--course", course, "--workers", "0", check=False)
    assert r.returncode == 1 and "--workers must be at least 1" in r.stderr


def test_workers_that_cannot_start_stop_the_run_with_one_line_and_no_zeros(tmp_path, env, generated_course):
    """A grader failure (here a course config that breaks in every grading
    worker, before it is ready) stops the run with one line and a non-zero
    exit; no student is recorded, let alone with 0 points."""
    course = generated_course(tmp_path / "course")
    with open(course / "nbgrader_config.py", "a") as fh:
        fh.write("\nimport multiprocessing\nif multiprocessing.parent_process() is not None:\n"
                 "    raise RuntimeError('broken in the worker')\n")
    corpus.build(tmp_path / "corpus")
    subs = tmp_path / "subs"
    subs.mkdir()
    for student in ("partial", "nodonate"):
        shutil.copy(tmp_path / "corpus" / f"{student}_{EX}.ipynb", subs)
    r = grade(env, subs, "--course", course, *GRADE_LIMITS, check=False)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("course: error:")]
    assert len(errors) == 1 and "before they were ready" in errors[0] and "broken in the worker" in errors[0], \
        r.stderr
    assert read_grades(course / ".grading" / "grades.csv") == {}
    assert gradebook_scores(course) == {}


# --- units ---------------------------------------------------------------------

def test_only_a_kernel_lost_before_its_first_cell_is_tried_again():
    from donation_course.grading.reports.messages import died_at_startup

    # the start-up failures of the grading client (fastkernel.py) and jupyter_client
    assert died_at_startup("RuntimeError: Kernel died before replying to kernel_info", "")
    assert died_at_startup("", "RuntimeError: Kernel didn't respond in 60 seconds")
    # nbclient's, when the submission's code kills or hangs the kernel (the corpus's kernelexit log)
    assert not died_at_startup("[ERROR] Kernel died while waiting for execute reply.\n"
                               "nbclient.exceptions.DeadKernelError: Kernel died", "")
    assert not died_at_startup("nbclient.exceptions.UnresponsiveKernelError: Kernel became unresponsive", "")


def test_the_progress_bar_starts_no_thread_and_workers_are_not_forked_beside_one(tmp_path, env):
    """Grading workers are forked from the grader's process (pool.py), which
    must run one thread then. tqdm starts a monitor thread with its first bar;
    the grader's bar does not."""
    import threading

    from donation_course.grading.executors.orphans import _subreaper
    from donation_course.grading.executors.pool import LocalPool
    from donation_course.grading.executors.worker import WorkerJob
    from donation_course.grading.run.settings import GradingSettings

    count = ("import sys, threading\n{make}\nbar = progress_bar(3); bar.update()\n"
             "print(threading.active_count(), file=sys.__stdout__)")
    plain = "from tqdm import tqdm\nprogress_bar = lambda n: tqdm(total=n)"
    ours = "from donation_course.grading.run.progress import progress_bar"
    threads = {name: run([sys.executable, "-c", count.format(make=make)], env).stdout.split()
               for name, make in (("tqdm", plain), ("grader", ours))}
    assert threads == {"tqdm": ["2"], "grader": ["1"]}
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, name="other")
    other.start()
    try:
        with pytest.raises(RuntimeError, match="grading workers are forked.*'other'"):
            job = WorkerJob(course=str(tmp_path), assignment="a", db=str(tmp_path / "w.db"), cell_timeout=6,
                            max_output_bytes=1, kernel=GradingSettings().kernel(""), kernel_dir=str(tmp_path),
                            log=str(tmp_path), tmp=str(tmp_path))
            LocalPool(1, job, timeout=6)
    finally:
        stop.set()
        other.join()
    # the refused pool leaves this process as it was: not the subreaper of what it starts (executors/orphans.py)
    assert not _subreaper()


def test_the_compile_cache_is_filled_again_only_when_what_it_ran_changes(tmp_path):
    from donation_course.course import Course
    from donation_course.grading.run.prepare import cache_digest

    course = Course(make_course(tmp_path / "course"))
    before = cache_digest(course)
    with open(course.root / "nbgrader_config.py", "a") as fh:  # the assignment is generated again, no more
        fh.write('\nc.LateSubmissionPlugin.penalty_method = "zero"\n')
    assert cache_digest(course) == before
    exercise = course.source / f"{EX}.ipynb"
    nb = nbformat.read(exercise, as_version=4)
    nb.cells[-1].source += "\n"
    nbformat.write(nb, exercise)
    assert cache_digest(course) != before


def test_an_edit_to_the_hidden_checks_regrades_everyone_and_fills_the_cache_again(tmp_path, monkeypatch):
    from donation_course.grading.run import prepare

    course = Course(make_course(tmp_path / "course"))
    checks = tmp_path / "exercise.py"  # stands for donation_course/hidden/exercise.py
    checks.write_text("def check(): pass\n")
    monkeypatch.setattr(prepare, "hidden_checks", lambda: [checks])
    source, cache = prepare.source_digest(course), prepare.cache_digest(course)
    checks.write_text("def check(): assert False\n")
    assert prepare.source_digest(course) != source  # a new version: --only-changed regrades everyone
    assert prepare.cache_digest(course) != cache
    assert prepare.hidden_checks() == [checks]
    monkeypatch.undo()
    assert {p.name for p in prepare.hidden_checks()} >= {"exercise.py", "capstone.py", "safe.py"}


def test_filling_the_compile_cache_leaves_nothing_in_the_temporary_folder(tmp_path, monkeypatch):
    from donation_course.grading.run.compile_cache import fill

    course = tmp_path / "course"
    course.mkdir()
    shutil.copy(make_course(tmp_path / "full") / "nbgrader_config.py", course)
    cell = nbformat.v4.new_code_cell("### BEGIN HIDDEN TESTS\nimport jax\nprint(jax.jit(lambda x: x + 1)(1))\n"
                                     "### END HIDDEN TESTS")
    (course / "source" / "a").mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(cells=[cell]), course / "source" / "a" / "n.ipynb")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))  # the fill's process and its kernel inherit it
    line = fill(Course(course), tmp_path / "cache", "digest")
    assert line.startswith("compiled the hidden tests' programs"), line
    assert sorted(p.name for p in scratch.iterdir()) == []  # no kernel connection file left behind


def kernel_compiles(course, notebooks: list, cache) -> set:
    """The compile-cache entries a Jupyter kernel leaves that runs each notebook's main path with the grading
    kernels' fixed environment and `cache` writable: what the fill kept when it ran the source in a kernel."""
    import json
    import tempfile

    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager
    from nbclient import NotebookClient

    from donation_course.grading.integrity.sandbox import unsandboxed_env
    from donation_course.grading.run.compile_cache import main_path_notebook, notebooks_with_hidden_tests
    from donation_course.grading.run.prepare import draw_secret

    cache.mkdir()
    with tempfile.TemporaryDirectory() as home:
        (Path(home) / "kernels" / "k").mkdir(parents=True)
        (Path(home) / "kernels" / "k" / "kernel.json").write_text(json.dumps({
            "argv": [sys.executable, "-P", "-m", "donation_course.grading.integrity.kernel_app", "-f",
                     "{connection_file}"], "display_name": "k", "language": "python"}))
        env = unsandboxed_env(home, cache=str(cache), writable=True, draw_seed=draw_secret(course))
        for path in notebooks_with_hidden_tests(course):
            if path.stem in notebooks:
                km = AsyncKernelManager(kernel_name="k", kernel_spec_manager=KernelSpecManager(
                    kernel_dirs=[str(Path(home) / "kernels")]))
                NotebookClient(main_path_notebook(path), km=km, timeout=300, allow_errors=True,
                               resources={"metadata": {"path": home}}).execute(env=env, cleanup_kc=True)
    return {p.name for p in cache.iterdir()}


@pytest.mark.slow  # two lessons run twice
def test_the_fill_keeps_what_a_kernel_running_the_source_compiles(tmp_path):
    """The compile cache's fill runs each notebook's main path in IPython's shell, in a fresh Python
    (fill_cells.py), not in a Jupyter kernel: JAX compiles the same programs under the same keys there, so the
    cache holds the entries a kernel running the source leaves. Lesson 6 (eight devices, set before JAX starts)
    and lesson 7 (the exercise and the capstone); all seven gave the same 125 entries (2026-11-28)."""
    from donation_course.grading.run.compile_cache import STAMP, fill

    course = Course(make_course(tmp_path / "course"))
    lessons = ["06_shardings", EX]
    line = fill(course, tmp_path / "shell", "digest", notebooks=lessons)
    assert line.startswith("compiled the hidden tests' programs of 06_shardings, " + EX), line
    shell = {p.name for p in (tmp_path / "shell").iterdir()} - {STAMP}
    kernel = kernel_compiles(course, lessons, tmp_path / "kernel")
    assert len(shell) > 20 and shell == kernel, sorted(shell ^ kernel)


def test_a_source_that_cannot_run_leaves_no_compile_cache_and_says_so(tmp_path):
    from donation_course.course import Course
    from donation_course.grading.run.compile_cache import fill, notebooks_with_hidden_tests

    course = Course(make_course(tmp_path / "course"))
    for path in notebooks_with_hidden_tests(course):
        if path.stem != EX:
            path.unlink()  # the exercise alone, to keep this short
    exercise = course.source / f"{EX}.ipynb"
    nb = nbformat.read(exercise, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell("import os\nos._exit(3)"))
    nbformat.write(nb, exercise)
    line = fill(course, tmp_path / "cache", "digest")
    assert line.startswith("note: no compile cache (running the source's hidden tests failed") and \
        line.endswith("grading without it"), line
    assert not (tmp_path / "cache").exists() and not (tmp_path / "cache.new").exists()


def test_a_fresh_course_whose_fill_fails_grades_its_class_without_the_cache(tmp_path, env):
    """A run's workers start while the compile cache's fill runs (steps.Run.executor): on a fresh course no
    cache folder exists yet. When that fill fails (here the source's solution ends its kernel), the run says so
    in one line and grades everyone without the cache: each kernel binds an empty folder, which holds no record
    of a fill, so the next run tries again. The students' answers are not the source's, so they run."""
    from donation_course.course import EXERCISE_ANSWER
    from donation_course.grading.run.compile_cache import Filled, filled_from

    course = make_course(tmp_path / "course")
    source = course / "source" / ASSIGNMENT / f"{EX}.ipynb"
    nb = nbformat.read(source, as_version=4)
    (answer,) = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == EXERCISE_ANSWER]
    assert "### BEGIN SOLUTION\n" in answer.source
    answer.source = answer.source.replace("### BEGIN SOLUTION\n", "### BEGIN SOLUTION\nimport os\nos._exit(3)\n")
    nbformat.write(nb, source)
    corpus.build(tmp_path / "corpus")
    subs = tmp_path / "subs"
    subs.mkdir()
    for student in ("partial", "nodonate"):
        shutil.copy(tmp_path / "corpus" / f"{student}_{EX}.ipynb", subs)
    r = grade(env, subs, "--course", course, *LIMITS)
    assert "note: no compile cache (running the source's hidden tests failed" in r.stderr, r.stderr
    rows = read_csv(course / ".grading" / "grades.csv")
    for student in ("partial", "nodonate"):
        _, score, status, _ = corpus.CASES[student]
        assert (float(rows[student]["total"]), rows[student]["status"]) == (score, status), rows[student]
    cache = Course(course).compile_cache
    assert cache.is_dir() and not any(cache.iterdir()) and filled_from(cache) == Filled()
    assert not cache.with_name(cache.name + ".new").exists()


def test_naming_rules_for_flat_exports(tmp_path):
    from donation_course.grading.submissions.collect import collect

    nbs = [EX, "01_why_donate"]  # the exercise is the one named, wherever it sorts
    for name in ("Alice.ipynb", f"bob_{EX}.ipynb", "carol_01_why_donate.ipynb", "dave_12345_late.ipynb"):
        (tmp_path / name).write_text("{}")
    found, preset = collect(tmp_path, nbs, ASSIGNMENT, tmp_path / "work", exercise=EX)
    assert preset == "flat" and not found.problems
    assert {s: sorted(f) for s, f in found.students.items()} == {
        "Alice": [EX], "bob": [EX], "carol": ["01_why_donate"], "dave": [EX]}
    found, _ = collect(tmp_path, nbs, ASSIGNMENT, tmp_path / "work2")  # a course with no graded exercise
    assert {s: sorted(f) for s, f in found.students.items()} == {
        "Alice": [], "bob": [EX], "carol": ["01_why_donate"], "dave": []}  # listed, with why in the CSV
    assert sorted(p.split(":")[0] for p in found.problems) == ["Alice.ipynb", "dave_12345_late.ipynb"], found.problems


def test_strip_hidden_keeps_public_source_and_learner_message():
    from donation_course.grading.reports.feedback import learner_message, strip_hidden

    src = "x = 1\n### BEGIN HIDDEN TESTS\nsecret()\n### END HIDDEN TESTS\ny = 2"
    out = strip_hidden(src)
    assert "secret" not in out and "x = 1" in out and "y = 2" in out
    assert learner_message({"ename": "HiddenCheckFailed", "evalue": "\u2718 values: wrong"}) == "\u2718 values: wrong"
    assert learner_message({"ename": "NameError", "evalue": "name 'f' is not defined"}).startswith("NameError")


@pytest.fixture(scope="module")
def hidden():
    import jax  # noqa: F401

    from donation_course.hidden import exercise as hidden

    return hidden


def _jit(donate=(0,)):
    import jax

    return jax.jit(lambda state, delta: state + delta, donate_argnums=donate)


def test_hidden_checks_pass_a_correct_answer(hidden, capsys):
    fn = _jit()
    for check in (hidden.check_example, hidden.check_values, hidden.check_invalidation,
                  hidden.check_real_donation, hidden.check_training_loop):
        check(fn)
    out = capsys.readouterr().out
    assert out.count("\u2714 ") == 5 and "passed" not in out.lower()


def test_hidden_over_donation_check_sees_through_a_plain_python_wrapper(hidden):
    import warnings

    over, exact = _jit((0, 1)), _jit((0,))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(hidden.HiddenCheckFailed, match="delta is marked for donation"):
            hidden.check_invalidation(lambda state, delta: over(state, delta))
    hidden.check_invalidation(lambda state, delta: exact(state, delta))


@pytest.mark.parametrize("donate, failing", [
    ((), ["check_invalidation", "check_real_donation", "check_training_loop"]),
    ((1,), ["check_invalidation", "check_real_donation", "check_training_loop"]),
    ((0, 1), ["check_invalidation"]),  # delta requested too: JAX leaves it alive, the request is still wrong
])
def test_hidden_checks_fail_without_donation_of_state(hidden, donate, failing):
    fn = _jit(donate)
    hidden.check_values(_jit(donate))
    for name in failing:
        with pytest.raises(hidden.HiddenCheckFailed):
            getattr(hidden, name)(fn)


def test_hidden_checks_are_not_fooled_by_redefined_helpers(hidden):
    import builtins

    import jax
    import jax.numpy as jnp
    import numpy as np

    wrong = jax.jit(lambda state, delta: state * 0, donate_argnums=(0,))
    saved = (np.allclose, np.array_equal, np.testing.assert_allclose, jnp.allclose, builtins.all)
    np.allclose = np.array_equal = jnp.allclose = lambda *a, **k: True
    np.testing.assert_allclose = lambda *a, **k: None
    builtins.all = lambda *a, **k: True
    try:
        with pytest.raises(hidden.HiddenCheckFailed):
            hidden.check_values(wrong)
        assert np.allclose is saved[0] and builtins.all is saved[4]  # restored
    finally:
        np.allclose, np.array_equal, np.testing.assert_allclose, jnp.allclose, builtins.all = saved
    with pytest.raises(hidden.HiddenCheckFailed):
        hidden.check_example(wrong)


@pytest.mark.parametrize("files, expected", [
    ({"cpu.max": "200000 100000\n"}, 2),                                  # cgroup v2, a 2-CPU pod
    ({"cpu.max": "50000 100000\n"}, 1),                                   # half a core: one worker
    ({"cpu.max": "max 100000\n"}, None),                                  # no limit: the affinity
    ({"cpu/cpu.cfs_quota_us": "100000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 1),  # cgroup v1
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
    ({}, None),                                                           # no cgroup files
])
def test_the_default_worker_count_follows_a_pods_cpu_limit(tmp_path, files, expected):
    import os

    from donation_course.grading.run.settings import available_cores

    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    affinity = len(os.sched_getaffinity(0))
    assert available_cores(tmp_path) == (min(expected, affinity) if expected else affinity)
