"""Every lesson runs top to bottom in a fresh kernel, as a learner would run it.

- Solution copies: the only errors are in cells tagged `raises-exception`,
  and each of those cells does raise (a meant-to-fail cell that stops failing
  means JAX changed and the lesson text is now wrong). test_grading.py
  grades the solved course (as by default, and with neither sandbox nor
  compile cache) and asserts this on the notebooks autograde ran
  (helpers.assert_only_tagged_cells_raise): running them here as well
  would run every solution once more.
- Learner copies: errors only where expected: tagged cells, unanswered answer
  cells (NotImplementedError), and the test cells of those exercises, which
  say "Not answered yet" rather than failing with a NameError. Each lesson's
  reference part (from its first "Going deeper" heading) runs only here, as
  grading sets it aside: its output claims hold and its tagged cells raise.
"""
import nbformat
import pytest

from donation_course.course import NOTEBOOKS
from donation_course.execute import output_claim_mismatches, run_notebook
from donation_course.lesson_size import main_path
from helpers import RAISES as TAG
from helpers import describe_errors as describe

LESSONS = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))


@pytest.mark.parametrize("name", LESSONS)
def test_learner_copy_errors_only_where_expected(name):
    run = run_notebook(NOTEBOOKS / name)
    unexpected = []
    for e in run.errors:
        if e.is_test and TAG not in e.tags:
            assert e.ename == "CheckFailed" and e.evalue.startswith("Not answered yet"), (
                f"notebooks/{name}, cell {e.cell_id!r}: an unanswered exercise's check should say "
                f"'Not answered yet', got {e.ename}: {e.evalue[:200]}")
            continue
        if TAG in e.tags:
            continue
        if e.is_solution and e.ename == "NotImplementedError":
            continue
        unexpected.append(e)
    assert not unexpected, f"notebooks/{name} raised in unexpected cells:\n{describe(unexpected)}"
    reference = nbformat.v4.new_notebook(cells=run.notebook.cells[len(main_path(run.notebook)):])
    assert output_claim_mismatches(reference) == [], f"notebooks/{name}: its reference part contradicts its prose"
    tagged = {c.id for c in reference.cells if c.cell_type == "code" and TAG in c.metadata.get("tags", [])}
    silent = tagged - {e.cell_id for e in run.errors}
    assert not silent, f"notebooks/{name}: reference cells tagged {TAG} no longer raise: {sorted(silent)}"
