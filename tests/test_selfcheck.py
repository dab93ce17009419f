"""A self-paced learner's path (issue 22): `./course check` grades their own
notebooks with the hidden tests in a private course, and `./course grade`
takes one notebook file but never turns a lesson file into a student.

Every check runs the real command in a private course under tmp_path (its
--dir, or $DONATION_LAB_CHECK_DIR), never in the repository, and each test
asserts that the instructor's course keeps no trace of it."""
import os
import re
import shutil
from pathlib import Path

import nbformat
import pytest

from donation_course.corpus.exercise import CASES
from donation_course.course import COURSE, EXERCISE_ANSWER, NOTEBOOKS, grade_id
from donation_course.grading.run.selfcheck import DIR_ENV, MARKER, ME
from helpers import COURSE_CMD, GRADE_LIMITS, answered_copy, grade, make_course, read_grades, run

EX = COURSE.exercise
FIRST = COURSE.notebooks[0]
FULL, FIRST_FULL = COURSE.points[EX], COURSE.points[FIRST]  # each notebook's points, from its grade cells


def check(env, *args, private=None):
    """`./course check ARGS` in the private course `private` (or the one $DONATION_LAB_CHECK_DIR names)."""
    where = ["--dir", str(private)] if private else []
    return run([str(COURSE_CMD), "check", *map(str, args), *where], env, check=False)


def instructor_state() -> list:
    """Everything of the instructor's course but its config, source and tools: a check must change none of it."""
    keep = {"source", "tools", "nbgrader_config.py"}
    return sorted((p.relative_to(COURSE.root).as_posix(), p.stat().st_mtime_ns) for p in COURSE.root.rglob("*")
                  if p.relative_to(COURSE.root).parts[0] not in keep)


def students_of(course: Path) -> set:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        return {s.id for s in gb.students}


def with_answer(path: Path, source: str, dest: Path) -> Path:
    """A copy of the learner's notebook at `path` with the exercise's answer cell replaced by `source`."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if grade_id(cell) == EXERCISE_ANSWER:
            cell.source = source
    dest.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, dest)
    return dest


def one_error_line(r) -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 1 and "Traceback" not in r.stderr and len(lines) == 1, r.stderr
    assert lines[0].startswith("course: error:"), lines
    return lines[0]


@pytest.mark.slow
def test_check_scores_the_solved_and_a_non_donating_exercise_out_of_what_was_checked(tmp_path, env,
                                                                                      generated_course):
    before = instructor_state()
    private = generated_course(tmp_path / "private")  # as a first check leaves it: prepared, cache filled
    (private / MARKER).write_text("")
    solved = answered_copy(f"{EX}.ipynb", tmp_path / "mine" / f"{EX}.ipynb")

    r = check(env, solved, private=private)
    assert r.returncode == 0, r.stderr
    assert f"{EX}: {FULL:g} of {FULL:g}" in r.stdout and "\u2718" not in r.stdout, r.stdout
    assert r.stdout.count("\u2714") == len(COURSE.grade_ids[EX])  # every check, with its message
    for nb in COURSE.notebooks:
        if nb != EX:
            assert f"  {nb}: not given" in r.stdout, r.stdout
    page = Path(re.search(r"^feedback: (.+)$", r.stdout, re.M)[1])
    assert page.is_file() and f"Score: {FULL:g} / {FULL:g}" in page.read_text()

    # A browser's copy name, an answer that does not donate, and a solved lesson beside it.
    wrong = with_answer(solved, CASES["nodonate"][0], tmp_path / "downloads" / f"{EX} (1).ipynb")
    lesson = answered_copy(f"{FIRST}.ipynb", tmp_path / "mine" / f"{FIRST}.ipynb")
    r = check(env, wrong, lesson, private=private)
    assert r.returncode == 0, r.stderr
    score = float(re.search(rf"^{EX}: ([\d.]+) of {FULL:g}$", r.stdout, re.M)[1])
    assert score == CASES["nodonate"][1] < FULL, r.stdout
    failing = [ln for ln in r.stdout.splitlines() if ln.startswith("  \u2718")]
    donated = f"  \u2718 ex-donated (0/{COURSE.grades[EX]['ex-donated']:g}):"
    assert any(ln.startswith(donated) and CASES["nodonate"][3] in ln for ln in failing), r.stdout
    assert f"{FIRST}: {FIRST_FULL:g} of {FIRST_FULL:g}" in r.stdout, r.stdout
    assert f"total: {score + FIRST_FULL:g} of {FULL + FIRST_FULL:g}" in r.stdout, r.stdout
    assert f"  {FIRST}: not given" not in r.stdout and f"  {COURSE.notebooks[1]}: not given" in r.stdout
    assert f"Score: {score + FIRST_FULL:g} / {FULL + FIRST_FULL:g}" in page.read_text()

    assert students_of(private) == {ME}  # no lesson, no file name, ever became a student
    assert instructor_state() == before


@pytest.mark.slow
def test_check_names_what_it_did_not_check_and_grades_nothing_unanswered(tmp_path, env):
    before = instructor_state()
    private = tmp_path / "private"
    (tmp_path / "notes.ipynb").write_text(NOTEBOOKS.joinpath(f"{FIRST}.ipynb").read_text())
    r = run([str(COURSE_CMD), "check", NOTEBOOKS, tmp_path / "notes.ipynb"], {**env, DIR_ENV: str(private)},
            check=False)  # a first check: it makes the private course where the variable says
    assert r.returncode == 0, r.stderr
    assert "nothing to check" in r.stdout and "notes.ipynb: not a notebook of this course" in r.stdout
    for nb in COURSE.notebooks:
        assert re.search(rf"^  {nb}: unanswered", r.stdout, re.M), r.stdout
    assert (private / "release").is_dir() and students_of(private) == set()
    assert instructor_state() == before

    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.txt").write_text("mine")
    refused = one_error_line(check(env, private=tmp_path / "mine"))
    assert "not a private check course" in refused
    assert one_error_line(check(env, private=COURSE.root)).endswith("a private course of their own")
    assert "no such file" in one_error_line(check(env, tmp_path / "gone.ipynb", private=private))


@pytest.mark.slow
def test_grade_takes_one_notebook_file_as_its_students(tmp_path, env, generated_course):
    course = generated_course(tmp_path / "course")
    mine = answered_copy(f"{EX}.ipynb", tmp_path / f"jdoe_{EX}.ipynb")
    grade(env, mine, "--course", course, *GRADE_LIMITS)
    rows = read_grades(course / ".grading" / "grades.csv")
    assert set(rows) == {"jdoe"} and float(rows["jdoe"][EX]) == FULL and rows["jdoe"]["files"] == mine.name


@pytest.mark.parametrize("name", [f"{EX}.ipynb", f"{EX} (1).ipynb", f"{FIRST}-Copy1.ipynb"])
def test_grade_refuses_a_lesson_file_in_one_line(tmp_path, env, name):
    course = make_course(tmp_path / "course")
    lesson = tmp_path / "downloads" / name
    lesson.parent.mkdir()
    shutil.copyfile(NOTEBOOKS / f"{FIRST if FIRST in name else EX}.ipynb", lesson)
    line = one_error_line(grade(env, lesson, "--course", course, check=False))
    assert "./course check" in line and "<student>_" in line and "no student id" in line
    assert sorted(os.listdir(course)) == ["nbgrader_config.py", "source"]  # nothing graded, nothing written


def test_grade_of_a_folder_of_lesson_files_grades_nobody(tmp_path, env):
    course = make_course(tmp_path / "course")
    line = one_error_line(grade(env, NOTEBOOKS, "--course", course, check=False))
    assert "nobody graded" in line and all(f"{nb}.ipynb" in line for nb in COURSE.notebooks)
    assert sorted(os.listdir(course)) == ["nbgrader_config.py", "source"]


def test_a_lesson_file_beside_students_files_is_a_problem_not_a_student(tmp_path):
    from donation_course.grading.lms import collect_files

    for name in (f"{EX}.ipynb", f"ann_{EX}.ipynb", f"{FIRST} (2).ipynb", "bob.ipynb"):
        (tmp_path / name).write_text("{}")
    found, preset = collect_files(tmp_path, COURSE.notebooks, COURSE.assignment, exercise=COURSE.exercise)
    assert preset == "flat" and sorted(found.students) == ["ann", "bob"]
    assert sorted(found.lesson_files) == [f"{FIRST} (2).ipynb", f"{EX}.ipynb"]
    assert all("./course check" in p for p in found.problems) and len(found.problems) == 2
