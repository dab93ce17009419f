"""What `./course grade` starts before it imports nbgrader (grading/run/early.py): the workers' kernel zygotes
and, on a course with no compile cache yet, the fill's Python. test_kernel_zygote.py shows a grading process
adopting its zygote; here: what the command line starts, and that a fill run by the early Python leaves what a
fill without it leaves."""
import shutil

import nbformat
import pytest

from donation_course.corpus import exercise as corpus
from donation_course.course import Course
from donation_course.grading.run.compile_cache import STAMP, Filling, fill, notebooks_with_hidden_tests
from donation_course.grading.run.early import MAX_ZYGOTES, start_early
from helpers import make_course

EX = corpus.EXERCISE
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """A course generated from the repository's source, never graded: no compile cache folder."""
    return make_course(tmp_path_factory.mktemp("early") / "course")


def started(argv):
    early = start_early(argv)
    try:
        zygotes = early.zygotes
        return (len(zygotes.zygotes) if zygotes else 0, zygotes.compile_cache if zygotes else None,
                early.fill is not None and early.fill.proc.poll() is None)
    finally:
        early.close()


@needs_bwrap
def test_a_run_starts_early_only_what_its_local_workers_and_its_fill_can_take(fresh, tmp_path, capsys):
    """None for a cluster, --no-sandbox, --help, a malformed flag or a course that cannot be read. Zygotes: as
    many as the workers asked for, at most one per --student and at most MAX_ZYGOTES, for the course's cache
    folder. The fill's Python: only where that folder does not exist and the cache is on. Nothing is written in
    the course."""
    cache = str(Course(fresh).compile_cache)
    before = sorted(p.name for p in fresh.iterdir())
    course = ["--course", str(fresh)]
    for argv in (["subs", *course, "--scheduler", "tcp://127.0.0.1:1"], ["subs", *course, "--no-sandbox"],
                 ["subs", *course, "--help"], ["subs", "--course", str(tmp_path / "nothing")],
                 ["subs", *course, "--workers", "many"]):
        assert started(argv) == (0, None, False), argv
    assert capsys.readouterr().err == ""  # a malformed flag is the run's own parser's to report, once
    assert started(["subs", *course, "--workers", "0"]) == (0, None, True)
    assert started(["subs", *course, "--workers", "3", "--student", "a"]) == (1, cache, True)
    assert started(["subs", *course, "--workers", "99", "--no-compile-cache"]) == (MAX_ZYGOTES, "", False)
    assert started(["subs", *course, "--workers", "2"]) == (2, cache, True)
    # nothing is written in the course before the run has read its input (bad input stops it there)
    assert sorted(p.name for p in fresh.iterdir()) == before
    Course(fresh).compile_cache.mkdir(parents=True)
    try:
        assert started(["subs", *course, "--workers", "2"]) == (2, cache, False)
    finally:
        Course(fresh).compile_cache.rmdir()


def test_a_fill_run_by_the_early_python_leaves_what_a_fill_without_it_leaves(fresh, tmp_path):
    """The early Python imports JAX and IPython before it knows the notebook; then it runs the notebook's main
    path as fill_cells does, into the cache folder it was started for, with the course's secret it is handed
    then (the checks compile for the length it draws). Its entries are the ones a fill of the same notebook
    without it leaves, name for name; the folder's stamp is the same; its home is removed."""
    from donation_course.grading.run.compile_cache import EarlyFill

    course = Course(fresh)
    folder = tmp_path / "early" / "compile-cache"
    folder.parent.mkdir()
    early = EarlyFill(folder)
    try:
        filling = Filling(course, folder, "digest", [EX], early)
        assert early.taken and filling.proc is early.proc
        line = filling.finish()
    finally:
        early.close()
    assert line.startswith(f"compiled the hidden tests' programs of {EX}"), line
    assert not shutil.os.path.exists(early.home)
    plain = fill(course, tmp_path / "plain", "digest", notebooks=[EX])
    assert plain.split(":")[0] == line.split(":")[0]
    entries = {p.name for p in folder.iterdir()} - {STAMP}
    assert len(entries) > 10 and entries == {p.name for p in (tmp_path / "plain").iterdir()} - {STAMP}
    assert (folder / STAMP).read_text() == (tmp_path / "plain" / STAMP).read_text()


def test_an_early_fill_python_not_taken_is_ended_and_a_failing_one_says_why(fresh, tmp_path):
    """A fill of two notebooks, or into another folder, starts its own process: the early Python is not taken
    (the run ends it). A notebook that ends the early Python's run fails the fill as run_notebooks says it, and
    leaves no folder."""
    from donation_course.grading.run.compile_cache import EarlyFill

    course = Course(fresh)
    folder = tmp_path / "compile-cache"
    early = EarlyFill(folder)
    try:
        stems = [p.stem for p in notebooks_with_hidden_tests(course)][:2]
        assert len(stems) == 2
        filling = Filling(course, folder, "digest", stems, early)  # two notebooks: a process of its own
        assert not early.taken and filling.proc is not early.proc
        filling.stop()
        other = tmp_path / "other" / "compile-cache"
        other.parent.mkdir()
        filling = Filling(course, other, "digest", [EX], early)  # started for another folder
        assert not early.taken and filling.proc is not early.proc
        filling.stop()
        exercise = course.source / f"{EX}.ipynb"
        kept = exercise.read_bytes()
        nb = nbformat.read(exercise, as_version=4)
        nb.cells.insert(0, nbformat.v4.new_code_cell("import os\nos._exit(3)"))
        nbformat.write(nb, exercise)
        try:
            filling = Filling(course, folder, "digest", [EX], early)
            assert early.taken
            line = filling.finish()
        finally:
            exercise.write_bytes(kept)
    finally:
        early.close()
    assert line == (f"note: no compile cache (running the source's hidden tests failed: {EX}.ipynb ended its run "
                    "(exit status 3)); grading without it"), line
    assert not folder.exists() and not folder.with_name("compile-cache.new").exists()
