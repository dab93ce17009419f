"""The capstone of the graded notebook graded end to end through `./course grade`
(scratch course, 2 workers) on its corpus (donation_course/corpus/capstone.py),
graded once per session with the other corpora (conftest.graded_corpora):
every case gets its expected score, loses points exactly in the grade cells
it should, and its feedback never shows the hidden checks' source nor the
programs handed over to the referee (grading/referee/)."""
import pytest

from donation_course.corpus import capstone as corpus
from donation_course.corpus import exercise as exercise_corpus
from donation_course.course import EXERCISE_ANSWER
from donation_course.grading.referee.asks import MIME
from helpers import ASSIGNMENT, read_grades

GRADE_IDS = corpus.GRADE_IDS  # the grade cells after the capstone's answer cell, read from the source


@pytest.fixture(scope="module")
def graded(graded_corpus):
    """(course, {student: grades.csv row}) of the corpus graded once per session (conftest.graded_corpus)."""
    course = graded_corpus(corpus).course
    return course, read_grades(course / ".grading" / "grades.csv")


def test_the_capstone_is_its_cap_grade_cells_in_the_learner_copy():
    """The capstone's part as the course derives it (the grade cells after its answer cell in the source) is
    every grade cell named cap-* in the released learner copy, with the same points."""
    import nbformat

    nb = nbformat.read(corpus.LEARNER, as_version=4)
    points = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"] for c in nb.cells
              if c.metadata.get("nbgrader", {}).get("grade") and c.metadata["nbgrader"]["grade_id"].startswith("cap-")}
    assert list(points) == GRADE_IDS and sum(points.values()) == corpus.CAPSTONE_MAX > 0
    assert set(corpus.CASES["cap-unanswered"][2]) == set(GRADE_IDS) and corpus.CASES["cap-unanswered"][1] == 0
    assert all(corpus.CASES[s][1] == corpus.CAPSTONE_MAX for s in ("cap-right", "cap-argnums", "cap-separate-debug"))


@pytest.mark.parametrize("student", sorted(corpus.CASES))
def test_each_capstone_answer_gets_its_expected_score(graded, student):
    course, rows = graded
    _, score, losing = corpus.CASES[student]
    row = rows[student]
    assert float(row[corpus.EXERCISE]) == corpus.EXERCISE_POINTS + score, row
    lost = {gid for gid in GRADE_IDS if f"{corpus.EXERCISE}/{gid} (0/" in row["reason"]}
    assert lost == set(losing), row["reason"]
    for gid in [EXERCISE_ANSWER, *exercise_corpus.EXERCISE_GRADES]:  # the exercise is answered right in every case
        assert f"{corpus.EXERCISE}/{gid}" not in row["reason"], row["reason"]
    feedback = (course / ".grading" / "feedback" / f"{student}.html").read_text()
    assert "_dl_capstone" not in feedback and "check_nan_hunt" not in feedback
    # the programs handed over to the referee are taken out of the notebook before the feedback is written
    autograded = course / "autograded" / student / ASSIGNMENT / f"{corpus.EXERCISE}.ipynb"
    assert MIME not in autograded.read_text() and "stablehlo" not in feedback
    if student == "cap-debug-print":  # the referee refuses its program, and says why, unflagged
        assert "custom call" in row["reason"] and row["status"] == "partial", row
