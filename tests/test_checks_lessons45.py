"""The check cells of exercises 4.1, 4.2 and 5.2, run as the lessons write
them, on the wrong answers learners are likely to type: each gets a message
of one paragraph (the message and its hint) that names the mistake, never a
traceback (5.2's eager call of step, which names sqrt too, included); and
exercise 4.2 has no dead end (its answer cell can always be
run again, and skipping the cells before it changes nothing)."""
import jax
import nbformat
import pytest

from donation_course.course import COURSE
from donation_lab.checks import CheckFailed

LESSON_4, LESSON_5 = "04_pytrees.ipynb", "05_debug_nans.ipynb"


@pytest.fixture(autouse=True)
def debug_modes_off():
    jax.config.update("jax_debug_nans", False)
    yield
    jax.config.update("jax_debug_nans", False)


def source(lesson: str, *ids: str) -> str:
    found = {c.get("id"): c.source for c in nbformat.read(COURSE.source / lesson, as_version=4).cells}
    missing = [i for i in ids if i not in found]
    assert not missing, f"{lesson} has no cell {missing}: update this test"
    return "\n\n".join(found[i] for i in ids)


def run(namespace: dict, code: str, name: str = "answer") -> None:
    exec(compile(code, name, "exec"), namespace)


def check(namespace: dict, lesson: str, cell_id: str) -> str:
    """Run a check cell as written: '' when it passes, else its message."""
    try:
        run(namespace, source(lesson, cell_id), cell_id)
    except CheckFailed as failed:
        return str(failed)
    return ""


def one_paragraph(message: str) -> bool:
    lines = message.splitlines()
    return (0 < len(lines) <= 2 and (len(lines) == 1 or lines[1].startswith("Hint: "))
            and "Traceback" not in message and "File \"" not in message)


# ---- exercise 4.1: sgd_update ----

@pytest.fixture
def lesson_4():
    namespace = {}
    run(namespace, source(LESSON_4, "l4-setup"), "l4-setup")
    return namespace


RIGHT_4_1 = """
@functools.partial(jax.jit, donate_argnames="params")
def sgd_update(params, grads):
    return jax.tree.map(lambda p, g: p - 0.5 * g, params, grads)
"""


@pytest.mark.parametrize("body, operator", [("params - 0.5 * grads", "*: 'float' and 'dict'"),
                                            ("params - grads * 0.5", "*: 'dict' and 'float'"),
                                            ("params - grads", "-: 'dict' and 'dict'")])
def test_subtracting_two_dicts_is_told_to_use_tree_map_in_one_paragraph(lesson_4, body, operator):
    run(lesson_4, RIGHT_4_1.replace("jax.tree.map(lambda p, g: p - 0.5 * g, params, grads)", body))
    message = check(lesson_4, LESSON_4, "l4-q1-check")
    assert message == (f"sgd_update(params, grads) raised TypeError (unsupported operand type(s) for {operator}): "
                       "Python cannot subtract, add or scale whole dicts, as NumPy does arrays. Apply the update leaf "
                       "by leaf, walking params and grads together (lesson 4's train_step does).")
    assert one_paragraph(message)


def test_the_right_sgd_update_passes_and_a_tuple_result_is_named(lesson_4, capsys):
    run(lesson_4, RIGHT_4_1)
    assert check(lesson_4, LESSON_4, "l4-q1-check") == ""
    assert "sgd_update asks to donate exactly ['params']" in capsys.readouterr().out
    run(lesson_4, RIGHT_4_1.replace("return jax.tree.map", "return (jax.tree.map").replace("grads)\n", "grads),)\n"))
    message = check(lesson_4, LESSON_4, "l4-q1-check")
    assert message.startswith("sgd_update(...) returns: a tuple, not a dict with the keys 'w' and 'b'")
    assert one_paragraph(message)


def test_donating_params_by_number_passes_too_as_the_exercise_says(lesson_4, capsys):
    """l4-q1-text: the check reads what the function does, so donate_argnums=0 (the same request) passes.
    Donating grads as well fails, and JAX's warning about it is quoted in one line, not shown raw."""
    import warnings

    run(lesson_4, RIGHT_4_1.replace('donate_argnames="params"', "donate_argnums=0"))
    assert check(lesson_4, LESSON_4, "l4-q1-check") == ""
    run(lesson_4, RIGHT_4_1.replace('donate_argnames="params"', "donate_argnums=(0, 1)"))
    capsys.readouterr()
    with warnings.catch_warnings(record=True) as escaped:
        warnings.simplefilter("always")
        message = check(lesson_4, LESSON_4, "l4-q1-check")
    assert message.startswith("arguments sgd_update asks to donate: expected ['params'], got ['grads', 'params'].")
    assert escaped == []
    assert 'While the check ran it, JAX warned "Some donated buffers were not usable' in capsys.readouterr().out


# ---- exercise 4.2: untied_params ----

def answer_4_2(namespace: dict, body: str) -> None:
    """Exercise 4.2's answer cell as the learner's copy has it, with `body` as the answer."""
    given = source(LESSON_4, "l4-q2").split("### BEGIN SOLUTION")[0]
    run(namespace, given + body, "l4-q2")


RERUN = ("untied_params: its arrays were already donated, by an earlier run of this check or by a donating call "
         "of your own. Run Exercise 4.2's answer cell again (it makes a fresh tied_params), without passing "
         "untied_params to a donating function there, then run this check.")
COPY_BOTH = "untied_params = jax.tree.map(lambda a: a.copy(), tied_params)"


def test_exercise_4_2_needs_nothing_between_4_1_and_its_answer_cell(lesson_4):
    """Only the lesson's first cell, then the answer and the check: no 'Not
    answered yet' and no NameError from a skipped set-up cell."""
    answer_4_2(lesson_4, COPY_BOTH)
    assert check(lesson_4, LESSON_4, "l4-q2-check") == ""


@pytest.mark.parametrize("answer", [
    COPY_BOTH,
    'untied_params = {"w": tied_params["w"].copy(), "b": tied_params["b"]}',   # one copy is enough
    "untied_params = jax.tree.map(lambda a: a + 0, tied_params)",
])
def test_a_right_answer_passes_and_a_second_check_says_to_run_the_answer_cell_which_then_works(lesson_4, answer):
    answer_4_2(lesson_4, answer)
    assert check(lesson_4, LESSON_4, "l4-q2-check") == ""
    assert check(lesson_4, LESSON_4, "l4-q2-check") == RERUN          # the check donated untied_params
    answer_4_2(lesson_4, COPY_BOTH)                                    # the fix it names works, whatever ran before
    assert check(lesson_4, LESSON_4, "l4-q2-check") == ""


def test_an_answer_that_donates_untied_params_itself_is_told_so_and_recovers(lesson_4):
    run(lesson_4, source(LESSON_4, "l4-shared-fail").rsplit("\napply_grads(", 1)[0])   # apply_grads, grads
    answer_4_2(lesson_4, COPY_BOTH + "\napply_grads(untied_params, grads)")
    assert check(lesson_4, LESSON_4, "l4-q2-check") == RERUN
    answer_4_2(lesson_4, COPY_BOTH)
    assert check(lesson_4, LESSON_4, "l4-q2-check") == ""


@pytest.mark.parametrize("answer, start", [
    ("untied_params = tied_params", "untied_params: 'b' and 'w' are still one array (one buffer)"),
    ("untied_params = dict(tied_params)", "untied_params: 'b' and 'w' are still one array (one buffer)"),
    ("untied_params = jax.tree.map(jnp.asarray, tied_params)",
     "untied_params: 'b' and 'w' are still one array (one buffer)"),
    ("import numpy as np\nuntied_params = jax.tree.map(np.array, tied_params)",
     "untied_params['b'] is a numpy.ndarray, not a JAX array"),
    ("untied_params = jax.tree.map(lambda a: a + 1, tied_params)",
     "untied_params['b'] (values unchanged): expected [0.0, 0.0, 0.0], got [1.0, 1.0, 1.0]."),
    ('untied_params = {"weights": tied_params["w"].copy(), "b": tied_params["b"]}',
     "untied_params's keys: expected ['b', 'w'], got ['b', 'weights']."),
])
def test_wrong_answers_to_4_2_get_one_paragraph_and_leave_tied_params_alive(lesson_4, answer, start):
    answer_4_2(lesson_4, answer)
    message = check(lesson_4, LESSON_4, "l4-q2-check")
    assert message.startswith(start) and one_paragraph(message), message
    assert not lesson_4["zeros"].is_deleted()
    answer_4_2(lesson_4, COPY_BOTH)
    assert check(lesson_4, LESSON_4, "l4-q2-check") == ""


# ---- exercise 5.2: find_nan ----

@pytest.fixture
def lesson_5():
    namespace = {}
    run(namespace, source(LESSON_5, "l5-off", "l5-recipe-fn"), "lesson 5")
    return namespace


RIGHT_5_2 = source(LESSON_5, "l5-q2").split("### BEGIN SOLUTION")[1].split("### END SOLUTION")[0]


def test_the_right_find_nan_passes_without_jax_s_rerun_line(lesson_5, capsys):
    run(lesson_5, RIGHT_5_2)
    assert check(lesson_5, LESSON_5, "l5-q2-check") == ""
    out = capsys.readouterr().out
    assert "find_nan on a negative grad returns the error's message, which names sqrt" in out
    assert "de-optimized" not in out


def test_returning_the_exception_is_told_to_return_its_text(lesson_5):
    run(lesson_5, RIGHT_5_2.replace("return str(exc)", "return exc"))
    message = check(lesson_5, LESSON_5, "l5-q2-check")
    assert message == ("find_nan on a negative grad: your answer returned the exception itself (FloatingPointError), "
                       "not its message. Return the text instead: `return str(exc)`.\n"
                       "Hint: return the text of the error debug_nans raises (see Hint 1).")
    assert one_paragraph(message)


@pytest.mark.parametrize("call", ["step(params, grad)", "jax.jit(step)(params, grad)"])
def test_an_eager_call_of_step_fails_and_a_new_jit_of_it_passes(lesson_5, call, capsys):
    """5.2 asks for a new, non-donating jit of step: calling step itself under debug_nans also
    names sqrt and keeps params, but it is not the recipe, and the check says so in one paragraph."""
    run(lesson_5, RIGHT_5_2.replace("jax.jit(step)(params, grad)", call))
    message = check(lesson_5, LESSON_5, "l5-q2-check")
    if call.startswith("jax.jit"):
        assert message == ""
        assert "find_nan runs step through a new jax.jit" in capsys.readouterr().out
    else:
        assert message == ("find_nan's debug run: it called step itself, so step ran op by op, not as the compiled "
                           "program your training runs, where the hunt must look.\nHint: compile a new jit of step "
                           "that donates nothing, as the recipe does (Hint 1).")
        assert one_paragraph(message)


def test_not_catching_the_error_names_it_in_one_paragraph(lesson_5):
    run(lesson_5, "def find_nan(step, params, grad):\n    with jax.debug_nans(True):\n"
                  "        jax.jit(step)(params, grad)\n")
    message = check(lesson_5, LESSON_5, "l5-q2-check")
    assert message == ("find_nan(update, params, grad): calling it raised FloatingPointError: invalid value (nan) "
                       "encountered in sqrt.\nHint: catch the FloatingPointError inside find_nan and return str(exc).")
    assert one_paragraph(message)


def test_the_dict_message_shows_in_a_real_kernel_without_a_traceback():
    """The wrong 4.1 answer typed in a kernel: the check cell's error output is the message alone."""
    from nbclient import NotebookClient
    from nbformat.v4 import new_code_cell, new_notebook

    nb = new_notebook(cells=[new_code_cell(source(LESSON_4, "l4-setup")),
                             new_code_cell(RIGHT_4_1.replace("jax.tree.map(lambda p, g: p - 0.5 * g, params, grads)",
                                                             "params - 0.5 * grads")),
                             new_code_cell(source(LESSON_4, "l4-q1-check"))])
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True).execute()
    error = next(o for o in nb.cells[2].outputs if o.output_type == "error")
    assert error.ename == "CheckFailed"
    assert error.traceback == [error.evalue]
    assert error.evalue.startswith("sgd_update(params, grads) raised TypeError (unsupported operand type(s)")
