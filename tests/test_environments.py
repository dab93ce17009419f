"""The learner's environment (`./course lab`, as on Binder) holds the
lessons' helpers and none of the instructor's tools; the instructor's holds
both. Binder's environment is checked the same way in test_binder.py.

Slow: the first run builds .venv/learner (a minute or two with warm wheel
caches), which later runs reuse.
"""
import pytest

from conftest import _load_course_script, grading_code_in_environment

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def course_script():
    return _load_course_script()


def test_learner_environment_cannot_import_or_read_the_grading_tools(course_script):
    python, env = course_script.ensure_venv("learner")
    found = grading_code_in_environment(python, env)
    assert found == {"importable": [], "files": []}, found


def test_instructor_environment_has_the_grading_tools(course_script):
    # The other side of the rule: the probe does find them where they belong.
    python, env = course_script.ensure_venv("instructor")
    found = grading_code_in_environment(python, env)
    assert "donation_course" in found["importable"], found
    assert any(f.endswith("hidden/exercise.py") for f in found["files"]), found
