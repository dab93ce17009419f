"""Every notebook is valid nbformat 4.5, ids are unique, learner copies are clean."""
import functools
import json
import subprocess
import sys

import nbformat
import pytest

from donation_course.course import COURSE, NOTEBOOKS, SOLUTIONS

SOURCE = COURSE.source

ALL = sorted(SOURCE.glob("*.ipynb")) + sorted(NOTEBOOKS.glob("*.ipynb")) + sorted(SOLUTIONS.glob("*.ipynb"))


@pytest.mark.parametrize("path", ALL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_valid_nbformat_45_with_unique_cell_ids(path):
    nb = nbformat.read(path, as_version=nbformat.NO_CONVERT)
    nbformat.validate(nb)
    assert (nb.nbformat, nb.nbformat_minor) == (4, 5), f"{path.name} is nbformat {nb.nbformat}.{nb.nbformat_minor}"
    ids = [cell.id for cell in nb.cells]
    assert all(ids), f"{path.name} has a cell without an id"
    assert len(ids) == len(set(ids)), f"{path.name} repeats a cell id"


def test_grade_ids_unique_across_the_assignment():
    seen = {}
    for path in sorted(SOURCE.glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if grade_id:
                assert grade_id not in seen, f"grade_id {grade_id!r} in both {seen[grade_id]} and {path.name}"
                seen[grade_id] = path.name
    assert seen, "the assignment has no nbgrader cells"


def test_every_lesson_has_points():
    for path in sorted(SOURCE.glob("*.ipynb")):
        points = sum(c.metadata.get("nbgrader", {}).get("points", 0) or 0
                     for c in nbformat.read(path, as_version=4).cells
                     if c.metadata.get("nbgrader", {}).get("grade"))
        assert points > 0, f"{path.name} has no graded self-check"


@pytest.mark.parametrize("folder", [NOTEBOOKS, SOLUTIONS], ids=["notebooks", "solutions"])
def test_committed_copies_carry_no_outputs(folder):
    paths = sorted(folder.glob("*.ipynb"))
    assert paths, f"no notebooks in {folder}"
    for path in paths:
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] == "code":
                assert cell["outputs"] == [], f"{path.name} cell {cell['id']} has outputs"
                assert cell["execution_count"] is None, f"{path.name} cell {cell['id']} has an execution count"


def test_learner_copies_have_no_solutions_or_hidden_tests():
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        text = path.read_text()
        for marker in ["BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"]:
            assert marker not in text, f"{path.name} still contains {marker}"


def test_solution_copies_have_answers_and_no_hidden_tests():
    for path in sorted(SOLUTIONS.glob("*.ipynb")):
        text = path.read_text()
        assert "BEGIN HIDDEN TESTS" not in text, f"{path.name} leaks hidden tests"
        assert "NotImplementedError()" not in text, f"{path.name} has an unanswered cell"


@functools.cache
def kernel_language_info() -> dict:
    """The lessons' kernel's language_info (src/donation_lab/kernel.py), read in
    a process of its own (imported here, ipykernel would change how ipywidgets'
    widgets close at this process's exit)."""
    code = "import json; from donation_lab.kernel import LessonKernel; print(json.dumps(LessonKernel.language_info))"
    return json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


@pytest.mark.parametrize("path", ALL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_language_info_is_what_the_kernel_reports(path):
    """JupyterLab writes the kernel's language_info into a notebook it opens and
    marks it modified when that changes anything: every notebook carries the
    whole of it as the lessons' kernel reports it, Python as "3.12" on any
    3.12.x (the browser test opens the lessons and sees no modified marker)."""
    reported = kernel_language_info()
    assert reported["version"] == "3.12", f"the lessons' kernel reports Python {reported['version']}"
    info = dict(nbformat.read(path, as_version=4).metadata.get("language_info", {}))
    assert info == reported, f"{path.name}: {info}"
