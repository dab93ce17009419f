"""The capstone of notebook 7 graded end to end through `./course grade`
(scratch course, 2 workers) on its corpus (donation_course/corpus/capstone.py):
every case gets its expected score, loses points exactly in the grade cells
it should, and its feedback never shows the hidden checks' source."""
import pytest

from donation_course.corpus import capstone as corpus
from helpers import grade_corpus, read_grades

GRADE_IDS = ["cap-public", "cap-values", "cap-donated-leaves", "cap-buffer-reuse", "cap-untied", "cap-nan-hunt",
             "cap-loop"]


@pytest.fixture(scope="module")
def graded(tmp_path_factory, env, generated_course):
    course, _, _ = grade_corpus(tmp_path_factory.mktemp("capstone"), corpus.build, env, make=generated_course)
    return course, read_grades(course / ".grading" / "grades.csv")


def test_the_capstone_is_worth_capstone_max():
    import nbformat

    nb = nbformat.read(corpus.LEARNER, as_version=4)
    points = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"] for c in nb.cells
              if c.metadata.get("nbgrader", {}).get("grade") and c.metadata["nbgrader"]["grade_id"].startswith("cap-")}
    assert sorted(points) == sorted(GRADE_IDS) and sum(points.values()) == corpus.CAPSTONE_MAX


@pytest.mark.parametrize("student", sorted(corpus.CASES))
def test_each_capstone_answer_gets_its_expected_score(graded, student):
    course, rows = graded
    _, score, losing = corpus.CASES[student]
    row = rows[student]
    assert float(row[corpus.EXERCISE]) == corpus.EXERCISE_POINTS + score, row
    lost = {gid for gid in GRADE_IDS if f"{corpus.EXERCISE}/{gid} (0/" in row["reason"]}
    assert lost == set(losing), row["reason"]
    assert "ex-" not in row["reason"], row["reason"]  # the exercise is answered right in every case
    feedback = (course / ".grading" / "feedback" / f"{student}.html").read_text()
    assert "_dl_capstone" not in feedback and "check_nan_hunt" not in feedback
