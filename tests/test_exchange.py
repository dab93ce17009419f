"""nbgrader's exchange, as on a JupyterHub, around `./course grade`: no mocks.

The instructor generates and releases the assignment into a local
`Exchange.root`; three students, each with their own home folder and login,
fetch it, answer, and submit (one twice); the instructor collects with
`--update`, grades nbgrader's own submitted/ with `./course grade`, generates
and releases feedback; every student fetches their feedback. One id holds
`_` and `.` (nbgrader's exchange keeps ids exactly; so must the grader)."""
import subprocess
import sys

import nbformat
import pytest

from donation_course.corpus import exercise as corpus
from donation_course.course import COURSE, EXERCISE_ANSWER, ROOT
from helpers import answered_copy

ASSIGNMENT = COURSE.assignment
EX = COURSE.exercise

STUDENTS = ("ann", "jane_doe", "j.smith")


def nb(cwd, *args, env, check=True):
    r = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=600)
    if check and r.returncode != 0:
        raise AssertionError(f"nbgrader {' '.join(args)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


@pytest.mark.slow
def test_release_fetch_submit_collect_grade_feedback(tmp_path, env, generated_course):
    exchange = tmp_path / "exchange"
    exchange.mkdir()
    course = generated_course(tmp_path / "course")
    flags = [f"--Exchange.root={exchange}", f"--CourseDirectory.course_id={COURSE.course_id}"]
    # (nbgrader's generate_assignment has run: generated_course)
    nb(course, "release_assignment", ASSIGNMENT, *flags, env=env)

    def student_env(sid):
        home = tmp_path / "home" / sid
        home.mkdir(parents=True, exist_ok=True)
        return home, dict(env, HOME=str(home), USER=sid, LOGNAME=sid)

    def as_student(sid):
        # nbgrader names a submission after the OS user (JUPYTERHUB_USER for jovyan);
        # all students here share one OS user, so each says who they are, as nbgrader allows
        return [*flags, f"--CourseDirectory.student_id={sid}"]

    def answer(folder, source):
        """Submit the exercise only (lessons left out, as a learner may), with `source` as the answer."""
        for path in folder.glob("*.ipynb"):
            if path.stem != EX:
                path.unlink()
        book = answered_copy(f"{EX}.ipynb", folder / f"{EX}.ipynb")
        if source is not None:
            notebook = nbformat.read(book, as_version=4)
            for cell in notebook.cells:
                if cell.metadata.get("nbgrader", {}).get("grade_id") == EXERCISE_ANSWER:
                    cell.source = source  # update_with_donate's answer; the capstone stays solved
            nbformat.write(notebook, book)

    answers = {"ann": None, "jane_doe": corpus.CASES["nodonate"][0], "j.smith": corpus.CASES["wrongvalue"][0]}
    for sid in STUDENTS:
        home, senv = student_env(sid)
        nb(home, "fetch_assignment", ASSIGNMENT, *as_student(sid), env=senv)
        answer(home / ASSIGNMENT, answers[sid])
        nb(home, "submit", ASSIGNMENT, *as_student(sid), env=senv)
    # j.smith fixes the answer and submits again: the later submission must be graded
    home, senv = student_env("j.smith")
    answer(home / ASSIGNMENT, None)
    nb(home, "submit", ASSIGNMENT, *as_student("j.smith"), env=senv)

    nb(course, "collect", ASSIGNMENT, "--update", *flags, env=env)
    for sid in STUDENTS:
        assert (course / "submitted" / sid / ASSIGNMENT / "timestamp.txt").is_file()
    kept = {sid: (course / "submitted" / sid / ASSIGNMENT / "timestamp.txt").read_text() for sid in STUDENTS}
    secrets = {sid: (course / "submitted" / sid / ASSIGNMENT / "submission_secret.txt").read_text()
               for sid in STUDENTS}

    r = subprocess.run([str(ROOT / "course"), "grade", "submitted", "--course", ".", "--workers", "2",
                        "--timeout", "200", "--no-progress"], cwd=course, env=env,  # relative to the caller
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        scores = {s.student.id: {n.name: n.score for n in s.notebooks}[EX]
                  for s in gb.find_assignment(ASSIGNMENT).submissions}
    assert scores == {"ann": corpus.MAX, "jane_doe": corpus.CASES["nodonate"][1], "j.smith": corpus.MAX}
    for sid in STUDENTS:  # nbgrader's state intact
        assert (course / "submitted" / sid / ASSIGNMENT / "timestamp.txt").read_text() == kept[sid]
        assert (course / "submitted" / sid / ASSIGNMENT / "submission_secret.txt").read_text() == secrets[sid]

    nb(course, "generate_feedback", ASSIGNMENT, "--force", env=env)
    nb(course, "release_feedback", ASSIGNMENT, *flags, env=env)
    for sid in STUDENTS:
        home, senv = student_env(sid)
        nb(home, "fetch_feedback", ASSIGNMENT, *as_student(sid), env=senv)
        pages = list((home / ASSIGNMENT / "feedback").rglob(f"{EX}.html"))
        assert pages, f"{sid} got no feedback"
        newest = sorted(pages)[-1].read_text(encoding="utf-8")
        assert "BEGIN HIDDEN TESTS" not in newest
    smith = sorted((tmp_path / "home" / "j.smith" / ASSIGNMENT / "feedback").iterdir())
    assert len(smith) >= 1
