"""Wrong answers a learner types, in JupyterLab in Debian's chromium: each
check answers in one paragraph of its own words, with no traceback, no
site-packages path and no XLA log line (issue #28, "feedback for wrong
answers").

The lessons are served as a learner who answered every exercise saves them;
each case replaces one answer with a likely mistake, runs the notebook from
the top as Run All does, and reads the check cell's output as JupyterLab shows
it. The check must fail (a wrong answer never passes) and say what is wrong.
"""
import re
from dataclasses import dataclass

import nbformat
import pytest

pytest.register_assert_rewrite("browser_driver")

from browser_driver import (  # noqa: E402
    find_code_cell,
    open_notebook,
    output_text,
    run_all,
    run_cell,
    save,
    serve,
    set_cell_source,
)
from donation_course.course import NOTEBOOKS, SOLUTIONS  # noqa: E402
from helpers import answered_copy  # noqa: E402

pytestmark = pytest.mark.browser
pytest_plugins = ("browser_driver",)  # its fixtures: browser, page


@dataclass(frozen=True)
class WrongAnswer:
    lesson: str       # notebook file name
    answer: str       # a line of the answer cell as the learner saved it (the solution's, or a practice's placeholder)
    wrong: str        # what the learner types into the answer cell instead
    check: str        # a line of the exercise's check cell
    says: tuple       # words the check's message must contain
    never: tuple = ()  # words it must not contain

    def __str__(self):
        return f"{self.lesson[:2]}-{self.says[0][:20]}"


CASES = [
    # 1.2 (now lesson 1's practice, its answer cell a placeholder): an int that is not the answer was
    # told "the number is an int, not a float".
    WrongAnswer("01_why_donate.ipynb", "alias_bytes = None", "alias_bytes = 8000\n",
                'checks.expect_equal("alias_bytes", alias_bytes', ("alias_bytes",), ("not a float",)),
    # 2.1: donating delta as well printed JAX's UserWarning with a site-packages path above the check.
    WrongAnswer("02_the_contract.ipynb", 'apply_delta = jax.jit(add, donate_argnames="state")',
                "apply_delta = jax.jit(add, donate_argnums=(0, 1))\n",
                'checks.require("apply_delta")', ("delta",), ("UserWarning:",)),
    # 2.2 (now lesson 2's practice): the method itself, not its result, was shown as
    # "<nanobind.nb_bound_method ...>".
    WrongAnswer("02_the_contract.ipynb", "old_is_gone = None",
                "old_shape = old.shape\nold_is_gone = old.is_deleted\n",
                'checks.expect_equal("old_shape", old_shape', ("is_deleted()",), ("nb_bound_method",)),
    # 3.1 (now lesson 3's momentum practice): donating params and grads too printed JAX's UserWarning
    # above the check.
    WrongAnswer("03_pitfalls.ipynb", "momentum_step = None",
                "momentum_step = jax.jit(momentum, donate_argnums=(0, 1, 2))\n",
                'checks.expect_kept("momentum_step", momentum_step', ("params",), ("UserWarning:",)),
    # 4.1: NumPy's habit, arithmetic on whole dicts, gave a raw 20-line TypeError.
    WrongAnswer("04_pytrees.ipynb", "return jax.tree.map(lambda p, g: p - 0.5 * g, params, grads)",
                '@functools.partial(jax.jit, donate_argnames="params")\n'
                "def sgd_update(params, grads):\n"
                "    return params - 0.5 * grads\n",
                'checks.require("sgd_update")', ("leaf by leaf", "TypeError"), ("lambda p, g",)),
    # 5.2: returning the exception instead of its text got "expected a message naming sqrt, got ...".
    WrongAnswer("05_debug_nans.ipynb", "def find_nan(step, params, grad):",
                "def find_nan(step, params, grad):\n"
                "    with jax.debug_nans(True):\n"
                "        try:\n"
                "            jax.jit(step)(params, grad)\n"
                "        except FloatingPointError as exc:\n"
                "            return exc\n"
                "    return None\n",
                'checks.require("find_nan")', ("str(exc)",)),
    # Capstone: a Python int as opt_state's count crashed the public check with an AttributeError
    # ('int' object has no attribute 'unsafe_buffer_pointer').
    WrongAnswer("07_update_with_donate.ipynb", '"count": jnp.zeros((), jnp.int32)}',
                "def init_opt_state(params):\n"
                '    return {"m": jax.tree.map(jnp.zeros_like, params), "count": 0}\n\n\n'
                "def _step(params, opt_state, x, y):\n"
                "    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)\n"
                "    m = jax.tree.map(lambda m, g: BETA * m + g, opt_state['m'], grads)\n"
                "    new_params = jax.tree.map(lambda p, m: p - LR * m, params, m)\n"
                "    return new_params, {'m': m, 'count': opt_state['count'] + 1}, loss\n\n\n"
                'train_step = jax.jit(_step, donate_argnames=("params", "opt_state"))\n'
                "hunt_nans = None\n",
                'checks.require("init_opt_state", "train_step", "hunt_nans")',
                ("opt_state['count'] is an int, not a JAX array",), ("AttributeError", "unsafe_buffer_pointer")),
    # 6.2: constraining to the Explicit mesh's sharding showed JAX's traceback, which suggests `reshard`.
    WrongAnswer("06_shardings.ipynb", "quiet_fixed = jax.jit(lambda v: jax.lax.with_sharding_constraint",
                "quiet_fixed = jax.jit(lambda v: jax.lax.with_sharding_constraint(2.0 * v, split), "
                "donate_argnums=0)\n",
                'checks.require("quiet_fixed")', ("Explicit", "the input's own mesh"),
                ("You probably meant", "auto_split")),
]

# Signs of a raw traceback or of a message that is not the check's own.
RAW = ("Traceback", "site-packages", 'File "', "-" * 20, "Cell In[")


def assert_one_paragraph_message(cell, case) -> str:
    """The check cell's output as shown: the lines of the checks that passed,
    then the failed check's message, which is one paragraph (its hint on the
    paragraph's last line). Returns that message."""
    text = output_text(cell).replace("\u00a0", " ")
    assert text.strip(), f"{case}: the check printed nothing"
    for sign in RAW:
        assert sign not in text, f"{case}: the check's output holds {sign!r}:\n{text}"
    assert re.search(r"^[EWI]\d{4} ", text, re.M) is None, f"{case}: an XLA log line:\n{text}"
    message = cell.locator(".jp-OutputArea-output").last.inner_text().replace("\u00a0", " ").strip()
    assert message and not re.search(r"\n\s*\n", message), f"{case}: more than one paragraph:\n{message}"
    return message


@pytest.fixture(scope="module")
def answered(tmp_path_factory):
    root = tmp_path_factory.mktemp("answered")
    for nb in NOTEBOOKS.glob("*.ipynb"):
        answered_copy(nb.name, root / nb.name)
    return root


@pytest.fixture(scope="module")
def lab(env, answered, tmp_path_factory):
    server = serve(env, tmp_path_factory.mktemp("lab"), answered)
    try:
        yield server
    finally:
        server.stop()


def saved_errors(path, containing) -> list:
    """The error names the saved notebook's cell holding `containing` shows."""
    cell = next(c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code" and containing in c.source)
    return [o.ename for o in cell.outputs if o.output_type == "error"]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_a_wrong_answer_gets_a_message_not_a_traceback(lab, page, answered, case):
    answered_copy(case.lesson, answered / case.lesson)  # every case starts from the answered lesson
    open_notebook(page, lab, case.lesson)
    set_cell_source(page, find_code_cell(page, case.answer), case.wrong)
    run_all(page)  # Run All stops at the failing check: everything above it ran
    text = assert_one_paragraph_message(find_code_cell(page, case.check), case)
    save(page)
    assert saved_errors(answered / case.lesson, case.check) == ["CheckFailed"], f"{case}: not failed by its check"
    for word in case.says:
        assert word in text, f"{case}: the message does not mention {word!r}:\n{text}"
    for word in case.never:
        assert word not in text, f"{case}: the message says {word!r}:\n{text}"


def test_exercise_4_2_recovers_after_an_answer_that_donated_the_tree(lab, page, answered):
    """A first attempt that passes untied_params to a donating function: the
    check says which cell to run again; the right answer, run there, passes."""
    right = next(c.source for c in nbformat.read(SOLUTIONS / "04_pytrees.ipynb", as_version=4).cells
                 if c.metadata.get("nbgrader", {}).get("grade_id") == "l4-q2")
    right = "\n".join(ln for ln in right.splitlines() if "### " not in ln) + "\n"
    donated = right + "sgd_update(untied_params, jax.tree.map(jnp.zeros_like, untied_params))\n"
    answered_copy("04_pytrees.ipynb", answered / "04_pytrees.ipynb")
    open_notebook(page, lab, "04_pytrees.ipynb")
    answer = find_code_cell(page, "untied_params = jax.tree.map")
    set_cell_source(page, answer, donated)
    run_all(page)
    check = find_code_cell(page, 'checks.require("untied_params")')
    text = assert_one_paragraph_message(check, "4.2 after a donating call")
    save(page)
    assert saved_errors(answered / "04_pytrees.ipynb", 'checks.require("untied_params")') == ["CheckFailed"]
    assert "answer cell" in text and "again" in text, text
    set_cell_source(page, answer, right)
    run_cell(page, answer)
    run_cell(page, check)
    text = output_text(check).replace("\u00a0", " ")
    assert "\u2714" in text and "\u2718" not in text and "Error" not in text, text
    save(page)
    assert saved_errors(answered / "04_pytrees.ipynb", 'checks.require("untied_params")') == []
