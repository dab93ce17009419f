"""The practice questions in the lessons' Going deeper parts: an answer cell
tagged `practice` (not graded), the code cells just above it that set it up,
and the check cell just below it. Each check, run as the source notebook has
it, passes a right answer, and fails the placeholder the answer cell holds and
a likely wrong answer, with the check's own message (a CheckFailed). The right
answers live here, not in the lessons: hints guide, they never hold the answer."""
from dataclasses import dataclass

import nbformat
import pytest

from donation_course.course import COURSE
from donation_lab import checks


@dataclass(frozen=True)
class Practice:
    lesson: str
    given: str    # what the cell needs from the lesson's main path
    right: str
    wrong: str
    says: str     # in the wrong answer's message


PRACTICE = {
    "l1-q2": Practice("01_why_donate",
                      "donating_step = jax.jit(lambda params, grads: params - 0.1 * grads, donate_argnums=0)",
                      "spec = jax.ShapeDtypeStruct((256, 256), jnp.bfloat16)\n"
                      "alias_bytes = donating_step.lower(spec, spec).compile().memory_analysis().alias_size_in_bytes",
                      "alias_bytes = 256 * 256 * 4", "alias_bytes: 262144 is not right yet"),
    "l2-q2": Practice("02_the_contract", "", "old_shape = old.shape\nold_is_gone = old.is_deleted()",
                      "old_shape = old.shape\nold_is_gone = old.is_deleted", "call it: x.is_deleted()"),
    "l3-q1": Practice("03_pitfalls", "", 'momentum_step = jax.jit(momentum, donate_argnames="velocity")',
                      "momentum_step = jax.jit(momentum, donate_argnums=(0, 1, 2))",
                      "momentum_step asks to donate grads and params, but the caller reads them again"),
    "l3-q2": Practice("03_pitfalls", "", "deleted = (True, False, True)", "deleted = (True, True, False)",
                      "deleted: (True, True, False) is not right yet"),
}


def practice_cells(lesson: str, answer_id: str):
    """(setup sources, the answer cell, the check cell) of one practice question."""
    cells = nbformat.read(COURSE.source / f"{lesson}.ipynb", as_version=4).cells
    i = next(k for k, c in enumerate(cells) if c.id == answer_id)
    setup = []
    for cell in reversed(cells[:i]):
        if cell.cell_type != "code":
            break
        setup.insert(0, cell.source)
    return setup, cells[i], cells[i + 1]


def run(lesson: str, answer_id: str, answer: str | None):
    """Run the practice's setup, `answer` (the cell as the lesson has it when None) and its check."""
    setup, cell, check = practice_cells(lesson, answer_id)
    scope = {}
    exec("import warnings\nimport jax\nimport jax.numpy as jnp\nimport numpy as np\n"
         "from donation_lab import checks\n" + PRACTICE[answer_id].given, scope)
    for source in [*setup, cell.source if answer is None else answer, check.source]:
        exec(source, scope)


def test_every_practice_question_is_here_and_only_in_the_reference():
    from donation_course.lesson_size import main_path

    found = {}
    for path in COURSE.source_notebooks():
        nb = nbformat.read(path, as_version=4)
        on_path = {c.id for c in main_path(nb)}
        for cell in nb.cells:
            if "practice" in cell.metadata.get("tags", []):
                assert cell.id not in on_path, f"{path.name}: practice {cell.id} is on the main path"
                assert "nbgrader" not in cell.metadata, f"{path.name}: practice {cell.id} is graded"
                found[cell.id] = path.stem
    assert found == {answer: p.lesson for answer, p in PRACTICE.items()}


@pytest.mark.parametrize("answer_id", PRACTICE)
def test_a_practice_check_passes_a_right_answer(answer_id, capsys):
    p = PRACTICE[answer_id]
    run(p.lesson, answer_id, p.right)
    out = capsys.readouterr().out
    assert out.count("\u2714") >= 1 and "\u2718" not in out, out


@pytest.mark.parametrize("answer_id", PRACTICE)
def test_a_practice_check_fails_the_placeholder_and_a_wrong_answer_with_its_own_message(answer_id):
    p = PRACTICE[answer_id]
    _, _, check = practice_cells(p.lesson, answer_id)
    assert "raises-exception" in check.metadata.get("tags", []), "its placeholder fails: the check must be tagged"
    with pytest.raises(checks.CheckFailed):
        run(p.lesson, answer_id, None)
    with pytest.raises(checks.CheckFailed) as info:
        run(p.lesson, answer_id, p.wrong)
    assert p.says in str(info.value), str(info.value)
    assert p.right.splitlines()[-1] not in str(info.value)  # the message never gives the answer
