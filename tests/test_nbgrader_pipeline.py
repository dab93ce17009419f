"""Real nbgrader against the real course: generate, validate, autograde."""
import shutil

from donation_course.course import COURSE, NOTEBOOKS
from helpers import answered_copy, nbgrader

ASSIGNMENT = COURSE.assignment

EXERCISE = f"{COURSE.exercise}.ipynb"  # the graded exercise, found by its answer cell


def test_generate_assignment_releases_every_notebook(released_course):
    released = sorted(p.name for p in (released_course / "release" / ASSIGNMENT).glob("*.ipynb"))
    assert released == sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))


def test_validate_passes_an_answered_learner_notebook(released_course, tmp_path, env):
    nb = answered_copy(EXERCISE, tmp_path / EXERCISE)
    result = nbgrader(released_course, "validate", str(nb), env=env)
    assert "Success! Your notebook passes all the tests." in result.stdout, result.stdout


def test_validate_flags_an_unanswered_learner_notebook(released_course, tmp_path, env):
    nb = shutil.copy(NOTEBOOKS / EXERCISE, tmp_path / EXERCISE)
    result = nbgrader(released_course, "validate", str(nb), env=env, check=False)
    assert "VALIDATION FAILED" in result.stdout, result.stdout
    assert "Success!" not in result.stdout


def test_autograde_scores_a_sample_submission(released_course, env):
    from nbgrader.api import Gradebook

    student = "sample-student"
    answered_copy(EXERCISE, released_course / "submitted" / student / ASSIGNMENT / EXERCISE)
    nbgrader(released_course, "autograde", ASSIGNMENT, "--student", student, "--force", env=env)
    with Gradebook(f"sqlite:///{released_course / 'gradebook.db'}") as gb:
        notebook = gb.find_submission_notebook(EXERCISE[:-len(".ipynb")], ASSIGNMENT, student)
        assert notebook.max_score > 0
        assert notebook.score == notebook.max_score, f"{notebook.score}/{notebook.max_score}"
    assert (released_course / "autograded" / student / ASSIGNMENT / EXERCISE).exists()
