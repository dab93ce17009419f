"""Manual grading is the instructor's: what formgrader records (manual
scores and comments, extra credit, a notebook's flag) survives a run that
was going when it was entered, exactly as serial `nbgrader autograde` keeps
it for the same edits. On the deadline-day class (test_deadline_day.py):
a `--student` regrade keeps them as serial nbgrader does (its ann is
reviewed and flagged in formgrader), and `./course feedback --accept`
puts a flagged result's scores back as automatic scores, cell by cell."""
import shutil
import subprocess
import time

import nbformat

from donation_course.corpus import exercise as corpus
from donation_course.course import COURSE, EXERCISE_ANSWER, ROOT
from helpers import GRADE_LIMITS, grade, nbgrader

ASSIGNMENT = COURSE.assignment
EX = corpus.EXERCISE
CELL, COMMENTED = "ex-donated", EXERCISE_ANSWER


def formgrader_edit(course, student, score=1.5, extra=0.5, comment="see me after class"):
    """What a TA does in formgrader, through the same nbgrader API it uses."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        grade_ = gb.find_grade(CELL, EX, ASSIGNMENT, student)
        grade_.manual_score, grade_.extra_credit = score, extra
        gb.find_comment(COMMENTED, EX, ASSIGNMENT, student).manual_comment = comment
        gb.find_submission_notebook(EX, ASSIGNMENT, student).flagged = True
        gb.db.commit()


def manual_state(course, student) -> dict:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        grade_ = gb.find_grade(CELL, EX, ASSIGNMENT, student)
        return {"auto": grade_.auto_score, "manual": grade_.manual_score, "extra": grade_.extra_credit,
                "needs_manual": grade_.needs_manual_grade,
                "comment": gb.find_comment(COMMENTED, EX, ASSIGNMENT, student).manual_comment,
                "flagged": gb.find_submission_notebook(EX, ASSIGNMENT, student).flagged}


def serial_state(course, tmp_path, student, name, env) -> dict:
    """The same gradebook autograded again by serial nbgrader, in a copy of the course."""
    serial = tmp_path / name
    shutil.copytree(course, serial)
    nbgrader(serial, "autograde", ASSIGNMENT, "--student", student, "--force", env=env)
    return manual_state(serial, student)


def submissions(tmp_path, students):
    corpus.build(tmp_path / "all")
    subs = tmp_path / "subs"
    subs.mkdir()
    for student, key in students.items():
        shutil.copy(tmp_path / "all" / f"{key}_{EX}.ipynb", subs / f"{student}_{EX}.ipynb")
    return subs


def test_a_formgrader_edit_made_during_a_run_is_kept(tmp_path, env, generated_course):
    course = generated_course(tmp_path / "course")
    subs = submissions(tmp_path, {"bob": "nodonate"})
    grade(env, subs, "--course", course, *GRADE_LIMITS)
    # The next run grades a slow student first, then bob again, on one worker:
    # bob's result is merged well after the edit below.
    slow = nbformat.read(tmp_path / "all" / f"partial_{EX}.ipynb", as_version=4)
    answer = next(c for c in slow.cells if c.metadata.get("nbgrader", {}).get("grade_id") == EXERCISE_ANSWER)
    answer.source += "\nimport time\ntime.sleep(5)\n"
    nbformat.write(slow, subs / f"aaa_{EX}.ipynb")
    # GRADE_LIMITS: one worker
    run = subprocess.Popen([str(ROOT / "course"), "grade", str(subs), "--course", str(course), *GRADE_LIMITS],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list(course.glob("gradebook.db.bak-*"))[1:] and time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.1)  # the run's own backup: it has read the gradebook, and grades next
    formgrader_edit(course, "bob")
    edited = manual_state(course, "bob")
    out, err = run.communicate(timeout=300)
    assert run.returncode == 0, err
    ours = manual_state(course, "bob")
    assert {k: ours[k] for k in ("manual", "extra", "comment", "flagged")} == \
        {k: edited[k] for k in ("manual", "extra", "comment", "flagged")}, (ours, edited)
    assert ours == serial_state(course, tmp_path, "bob", "serial", env)
