"""The learner's environment (`./course lab`, as on Binder) holds the
lessons' helpers and none of the instructor's tools; the instructor's holds
both. Binder's environment is checked the same way in test_binder.py.

Slow: the first run builds .venv/learner (a minute or two with warm wheel
caches), which later runs reuse.
"""
import pytest

from helpers import grading_code_in_environment, load_course_script, python3_kernel

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def course_script():
    return load_course_script()


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


SLOW_IMPORT_PROBE = """
import importlib.util, json, sys
import nbformat  # imports jsonschema's format checkers, as every nbgrader and Jupyter process does
print(json.dumps({"installed": importlib.util.find_spec("rfc3987_syntax") is not None,
                  "imported": "rfc3987_syntax" in sys.modules}))
"""


@pytest.mark.parametrize("name", ["learner", "instructor"])
def test_no_environment_pays_for_rfc3987_syntax_at_import(course_script, name, tmp_path):
    """binder/drop-slow-imports ran: nbformat's import does not build
    rfc3987-syntax's parsers (about 1.5 s of CPU per process). The other side:
    with such a package on the path, the same probe sees jsonschema import it."""
    import json
    import subprocess

    python, env = course_script.ensure_venv(name)
    probe = lambda extra: json.loads(subprocess.run(  # noqa: E731
        [str(python), "-c", SLOW_IMPORT_PROBE], env={**env, **extra}, capture_output=True, text=True,
        check=True).stdout)
    assert probe({}) == {"installed": False, "imported": False}
    fake = tmp_path / "rfc3987_syntax"
    fake.mkdir()
    (fake / "__init__.py").write_text("def is_valid_syntax(*a, **k):\n    return True\n")
    assert probe({"PYTHONPATH": str(tmp_path)}) == {"installed": True, "imported": True}



@pytest.mark.parametrize("name, version", [("learner", "3.12"), ("instructor", "patch")])
def test_the_learners_python3_kernel_reports_python_as_the_lessons_carry_it(course_script, name, version):
    """binder/lesson-kernel ran: the learner's `python3` kernel is the lessons'
    (donation_lab.kernel) and reports Python as "3.12", as the lessons'
    language_info says, so JupyterLab opens them unmodified on any 3.12.x.
    The other side: the instructor's environment keeps ipykernel's kernel,
    which reports the patch release."""
    import sys

    found = python3_kernel(*course_script.ensure_venv(name))
    if version == "patch":
        assert "donation_lab.kernel" not in found["argv"], found
        assert found["version"] == sys.version.split()[0], found
    else:
        assert "donation_lab.kernel" in found["argv"], found
        assert found["version"] == version, found
