"""A course with several assignments: `--assignment` picks one; each keeps
its own state, grades and exports under .grading/<assignment>/, in one
gradebook, and grading one leaves the other's grades as they were."""
import shutil
import warnings

import pytest

from donation_course.corpus import exercise as corpus
from donation_course.course import COURSE, Course, CourseError
from helpers import GRADE_LIMITS, grade, gradebook_scores, make_course, read_grades

EX = corpus.EXERCISE
FIRST, SECOND = COURSE.assignment, "week-2"


def two_assignment_course(tmp_path):
    """The course's assignment, and a second one holding the exercise alone."""
    course = make_course(tmp_path / "course")
    (course / "source" / SECOND).mkdir()
    shutil.copy(course / "source" / FIRST / f"{EX}.ipynb", course / "source" / SECOND)
    return course


def test_a_course_with_two_assignments_grades_each_on_its_own(tmp_path, env):
    course = two_assignment_course(tmp_path)
    corpus.build(tmp_path / "all")
    subs = tmp_path / "subs"
    subs.mkdir()
    shutil.copy(tmp_path / "all" / f"partial_{EX}.ipynb", subs / f"ann_{EX}.ipynb")
    shutil.copy(tmp_path / "all" / f"nodonate_{EX}.ipynb", subs / f"bob_{EX}.ipynb")
    limits = [*GRADE_LIMITS, "--no-compile-cache"]

    unnamed = grade(env, subs, "--course", course, *limits, check=False)
    assert unnamed.returncode != 0
    assert f"several assignments ({FIRST}, {SECOND}): name one with --assignment" in unnamed.stderr, unnamed.stderr
    wrong = grade(env, subs, "--course", course, "--assignment", "week-9", *limits, check=False)
    assert wrong.returncode != 0 and "--assignment week-9: no such assignment" in wrong.stderr, wrong.stderr
    assert not (course / "gradebook.db").exists()  # refused before anything was written

    grade(env, subs, "--course", course, "--assignment", SECOND, *limits)
    second = read_grades(course / ".grading" / SECOND / "grades.csv")
    full, nodonate = COURSE.points[EX], corpus.CASES["nodonate"][1]  # week 2 is the exercise's notebook alone
    assert {s: (float(r["total"]), float(r["max"])) for s, r in second.items()} == \
        {"ann": (full, full), "bob": (nodonate, full)}
    assert (course / ".grading" / SECOND / "state.json").is_file()
    assert not (course / ".grading" / "grades.csv").exists()

    shutil.copy(tmp_path / "all" / f"nodonate_{EX}.ipynb", subs / f"ann_{EX}.ipynb")  # week 1: ann's other try
    grade(env, subs, "--course", course, "--assignment", FIRST, *limits)
    first = read_grades(course / ".grading" / FIRST / "grades.csv")
    assert (float(first["ann"]["total"]), float(first["ann"]["max"])) == (nodonate, COURSE.total_points), first["ann"]
    assert read_grades(course / ".grading" / SECOND / "grades.csv") == second  # week 2 as it was
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        assert {a.name for a in gb.assignments} == {FIRST, SECOND}
        assert gb.find_submission(SECOND, "ann").score == full
    assert gradebook_scores(course)["ann"][EX] == nodonate  # helpers read the course's own assignment
    assert Course(course, SECOND).grading_dir == course / ".grading" / SECOND


def test_files_of_a_one_assignment_run_move_to_their_assignment_by_themselves(tmp_path, capsys):
    """Graded while the course had one assignment, then week-2 is added: the next run moves the grader's
    files into .grading/<the first assignment>/, which the gradebook names; nothing to do by hand."""
    from nbgrader.api import Gradebook

    course = two_assignment_course(tmp_path)
    top = course / ".grading"
    top.mkdir()
    for name in ("state.json", "grades.csv", "logs/timings.json", "compile-cache/x", "lock"):
        (top / name).parent.mkdir(parents=True, exist_ok=True)
        (top / name).write_text(name)
    with pytest.raises(CourseError, match=r"holds the grader's files of a run made when the course had one "
                                          r"assignment, and which one cannot be told .*: move them into "):
        _ = Course(course, SECOND).grading_dir  # no gradebook says whose they are: nothing is moved
    assert (top / "state.json").read_text() == "state.json"
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SQLAlchemy's notes on nbgrader's relationships
        gb.add_assignment(FIRST)
        gb.add_assignment(SECOND)
        gb.add_student("ann")
        gb.add_submission(FIRST, "ann")
    assert Course(course, SECOND).grading_dir == top / SECOND
    assert "moved the grader's files of " + FIRST in capsys.readouterr().err
    assert sorted(p.relative_to(top).as_posix() for p in top.rglob("*") if p.is_file()) == sorted(
        ["lock", *(f"{FIRST}/{n}" for n in ("state.json", "grades.csv", "logs/timings.json", "compile-cache/x"))])
    assert Course(course, FIRST).grading_dir == top / FIRST  # and the first assignment finds them there
    assert (top / FIRST / "state.json").read_text() == "state.json"
