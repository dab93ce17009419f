"""Unit tests of the learner-facing self-checks (donation_lab.checks)."""
import warnings

import jax
import jax.numpy as jnp
import pytest

from donation_lab import checks


def test_require_names_what_is_missing_instead_of_a_name_error():
    train_step = object()  # noqa: F841  (defined in the caller's frame)
    checks.require("train_step")
    with pytest.raises(checks.CheckFailed, match=r"^Not answered yet: `sgd_update` is not defined"):
        checks.require("train_step", "sgd_update")
    with pytest.raises(checks.CheckFailed, match=r"`a`, `b` are not defined"):
        checks.require("a", "b")


def test_donation_request_reads_numbers_names_and_pytrees_without_running():
    x = jnp.ones(3)
    by_number = jax.jit(lambda a, b: a + b, donate_argnums=(0, 1))
    by_name = jax.jit(lambda state, delta: state + delta, donate_argnames="state")
    tree = jax.jit(lambda p, g: jax.tree.map(lambda a, b: a - b, p, g), donate_argnums=0)
    assert checks.donation_request(by_number, x, x) == ((True, True), {})
    assert checks.donation_request(by_name, x, x) == ((True, False), {})
    assert checks.donation_request(tree, {"w": x}, {"w": x}) == ((True, False), {})
    assert not x.is_deleted()  # lowering runs nothing
    with pytest.raises(checks.CheckFailed, match="should be a function"):
        checks.donation_request(42, x)


def test_donation_request_of_a_plain_function_is_read_from_what_a_call_does():
    """A plain function around a jax.jit function has no .lower: the check
    calls it on copies and reads deletions and JAX's unusable-donation warning."""
    x = jnp.ones(3)
    step = jax.jit(lambda s, d: s + d, donate_argnums=0)
    both = jax.jit(lambda s, d: s + d, donate_argnums=(0, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step(jnp.ones(3), x), both(jnp.ones(3), jnp.ones(3))  # compiled already: the warning must still be seen
    assert checks.donation_request(lambda s, d: step(s, d), x, x) == ((True, False), {})
    assert checks.donation_request(lambda s, d: both(s, d), x, x) == ((True, True), {})
    assert checks.donation_request(lambda s, d: s + d, x, x) == ((False, False), {})
    assert not x.is_deleted()  # the caller's arrays are never donated


def test_a_hand_deleted_input_is_not_a_donation():
    """`x.delete()` after computing the result deletes the input too, but no
    buffer is reused (the memory donation saves is spent): neither the request
    check of a plain function nor expect_in_place takes it for a donation."""
    def fake(p, g):
        out = p - 0.5 * g
        p.delete()
        return out

    x = jnp.ones(3)
    assert checks.donation_request(fake, x, x) == ((False, False), {})
    with pytest.raises(checks.CheckFailed, match="no output is in the buffer of argument 0"):
        checks.expect_in_place("fake", fake, (x, x))
    real = jax.jit(lambda p, g: p - 0.5 * g, donate_argnums=0)
    checks.expect_in_place("real", real, (x, x))
    checks.expect_in_place("a wrapper", lambda p, g: real(p, g), (x, x))
    with pytest.raises(checks.CheckFailed, match="argument 1"):
        checks.expect_in_place("real", real, (x, x), argnum=1)
    assert not x.is_deleted()  # fresh copies only


def test_expect_donation_request_catches_a_donation_jax_could_not_use(capsys):
    over = jax.jit(lambda state, delta: state + delta, donate_argnums=(0, 1))
    state, delta = jnp.ones(2), jnp.ones(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        over(state, delta)
    assert state.is_deleted() and not delta.is_deleted()  # is_deleted() alone cannot see it
    with pytest.raises(checks.CheckFailed, match=r"expected \['state'\], got \['delta', 'state'\]"):
        checks.expect_donation_request("over", over, (jnp.ones(2), jnp.ones(2)), ("state", "delta"), ["state"])
    exact = jax.jit(lambda state, delta: state + delta, donate_argnums=0)
    checks.expect_donation_request("exact", exact, (jnp.ones(2), jnp.ones(2)), ("state", "delta"), ["state"])
    assert "exact asks to donate exactly ['state'] (public check only" in capsys.readouterr().out


# ---- the core checks: a passing and a failing case each, and their messages ----

def test_expect_equal_passes_on_the_same_value_and_type(capsys):
    checks.expect_equal("alias_bytes", 4000, 4000)
    assert capsys.readouterr().out == "\u2714 alias_bytes is 4000 (public check only).\n"


def test_expect_equal_fails_on_another_value_or_type_and_names_both():
    with pytest.raises(checks.CheckFailed, match=r"^alias_bytes: expected 4000, got 3999\.\nHint: h$"):
        checks.expect_equal("alias_bytes", 3999, 4000, hint="h")
    with pytest.raises(checks.CheckFailed,
                       match=r"^alias_bytes: expected 4000, got 4000\.0 \(a float, not an int\)\.$"):
        checks.expect_equal("alias_bytes", 4000.0, 4000)


def test_expect_equal_never_reveals_the_answer_of_a_prediction():
    with pytest.raises(checks.CheckFailed) as info:
        checks.expect_equal("deleted", (False, False, False), (True, False, True), hint="think", reveal=False)
    message = str(info.value)
    assert "(False, False, False) is not right yet" in message and "Hint: think" in message
    assert "True" not in message


def test_expect_allclose_passes_and_fails_with_shape_values_and_none(capsys):
    checks.expect_allclose("f(x)", jnp.array([1.0, 2.0]), [1.0, 2.0])
    assert capsys.readouterr().out == "\u2714 f(x) gives [1.0, 2.0] (public check only).\n"
    with pytest.raises(checks.CheckFailed, match=r"^f\(x\): expected \[1\.0, 2\.0\], got \[1\.0, 3\.0\]\."):
        checks.expect_allclose("f(x)", jnp.array([1.0, 3.0]), [1.0, 2.0])
    with pytest.raises(checks.CheckFailed, match=r"has the wrong shape: expected \(2,\), got \(3,\)"):
        checks.expect_allclose("f(x)", jnp.ones(3), [1.0, 2.0])
    with pytest.raises(checks.CheckFailed, match=r"(?s)expected .an array., got None.*did your function `return`"):
        checks.expect_allclose("f(x)", None, [1.0])


def test_expect_allclose_on_a_donated_result_says_why_it_cannot_be_read():
    x = jnp.ones(2)
    jax.jit(lambda a: a * 2, donate_argnums=0)(x)
    with pytest.raises(checks.CheckFailed, match="the result cannot be read .*Did you return a donated input"):
        checks.expect_allclose("f(x)", x, [1.0, 1.0])


def test_expect_deleted_passes_on_a_donated_array_and_fails_on_a_live_one(capsys):
    x = jnp.ones(2)
    jax.jit(lambda a: a * 2, donate_argnums=0)(x)
    checks.expect_deleted("x", x)
    assert capsys.readouterr().out == ("\u2714 x is deleted (is_deleted() is True), as a donated array is "
                                       "(public check only).\n")
    with pytest.raises(checks.CheckFailed, match=r"^y is still alive, so its buffer was not donated\.\nHint: h$"):
        checks.expect_deleted("y", jnp.ones(2), hint="h")
    with pytest.raises(checks.CheckFailed, match=r"should be a JAX array: expected 'a jax.Array', got 'list'"):
        checks.expect_deleted("z", [1.0])


def test_expect_deleted_says_the_same_of_an_array_deleted_by_hand_and_claims_no_donation(capsys):
    """is_deleted() cannot tell a donation from x.delete() (lesson 1): the pass
    message says what was checked, and nothing only a donation makes true."""
    donated, by_hand = jnp.ones(2), jnp.ones(2)
    jax.jit(lambda a: a * 2, donate_argnums=0)(donated)
    by_hand.delete()
    checks.expect_deleted("it", donated)
    checks.expect_deleted("it", by_hand)
    first, second = capsys.readouterr().out.splitlines()
    assert first == second == "\u2714 it is deleted (is_deleted() is True), as a donated array is (public check only)."
    for claim in ("was donated", "reused", "buffer", "saved"):
        assert claim not in first


def test_require_points_to_the_answer_cell_wherever_it_is():
    """Lesson 7's check cells sit below a markdown cell or another check cell,
    not below their answer cell: the message names no neighbouring cell."""
    with pytest.raises(checks.CheckFailed) as info:
        checks.require("update_with_donate")
    message = str(info.value)
    assert message == ("Not answered yet: `update_with_donate` is not defined. Write your answer in this exercise's "
                       "answer cell, above this check (the code cell given with `raise NotImplementedError()`), run "
                       "that cell, then run this check again.")
    assert "cell above" not in message


def test_every_require_call_has_its_answer_cell_above_it_defining_what_it_names():
    """What require's message says holds for every check cell that calls it (the
    lessons' learner copies; no hidden check calls it): the nearest answer cell
    above the check holds `raise NotImplementedError()`, and its solution defines
    every name the check requires."""
    import ast
    import json
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    assert not [p for p in (root / "autograder" / "tools").rglob("*.py") if "require(" in p.read_text()]
    seen = 0
    for path in sorted((root / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        solved = {c.get("id"): "".join(c["source"])
                  for c in json.loads((root / "solutions" / path.name).read_text())["cells"]}
        for i, cell in enumerate(cells):
            call = re.search(r"checks\.require\(([^)]*)\)", "".join(cell["source"]))
            if cell["cell_type"] != "code" or not call:
                continue
            names = ast.literal_eval(f"({call.group(1)},)")
            answers = [c for c in cells[:i] if c.get("metadata", {}).get("nbgrader", {}).get("solution")]
            assert answers, (path.name, cell["id"])
            answer = answers[-1]
            assert answer["cell_type"] == "code" and "raise NotImplementedError()" in "".join(answer["source"])
            body = ast.parse(solved[answer["id"]]).body
            defined = {node.name for node in body if isinstance(node, ast.FunctionDef)} | {
                target.id for node in body if isinstance(node, ast.Assign)
                for target in ast.walk(node) if isinstance(target, ast.Name)}
            assert set(names) <= defined, (path.name, cell["id"], answer["id"], names)
            seen += 1
    assert seen >= len(list((root / "notebooks").glob("*.ipynb")))  # every lesson checks at least one answer


def test_no_check_claims_hidden_tests():
    assert "graded" not in checks.PUBLIC_ONLY


# ---- what the learner reads: values at their dtype's precision, no traceback ----

def test_values_print_at_their_dtypes_precision(capsys):
    assert checks.show(jnp.array(0.525, jnp.float32).__array__()) == "0.525"
    assert checks.show(jnp.array([0.525, -1.025, 2.0], jnp.float32).__array__()) == "[0.525, -1.025, 2.0]"
    assert checks.show(jnp.array([0.525], jnp.bfloat16).__array__()) == "[0.523]"  # bfloat16: 8 bits of mantissa
    assert checks.show([jnp.float32(1.5).item(), (3, 2)]) == "[1.5, (3, 2)]"
    assert checks.show((3,)) == "(3,)" and checks.show("an array") == "'an array'"
    with pytest.raises(checks.CheckFailed) as info:
        checks.expect_allclose("new params['w']", jnp.array([0.5, -1.0, 2.0]), [0.525, -1.025, 2.0])
    assert str(info.value) == "new params['w']: expected [0.525, -1.025, 2.0], got [0.5, -1.0, 2.0]."
    checks.expect_allclose("loss", jnp.array(0.0625), 0.0625)
    checks.expect_allclose("new params['w']", jnp.array([0.525, -1.025, 2.0]), [0.525, -1.025, 2.0])
    out = capsys.readouterr().out
    assert "loss gives 0.0625 (" in out and "gives [0.525, -1.025, 2.0] (" in out, out
    assert "0.5249999" not in out


def test_expect_kept_names_what_the_caller_reads_again_and_never_what_to_donate(capsys):
    names = ("velocity", "params", "grads")
    args = (jnp.zeros(3), jnp.ones(3), jnp.ones(3))
    right = jax.jit(lambda v, p, g: 0.9 * v + g, donate_argnums=0)
    checks.expect_kept("step", right, args, names, kept=["params", "grads"])
    checks.expect_in_place("step", right, args, argnum=None)
    assert "velocity" not in capsys.readouterr().out
    greedy = jax.jit(lambda v, p, g: 0.9 * v + g, donate_argnums=(0, 2))  # grads: requested, JAX cannot use it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(checks.CheckFailed, match=r"^step asks to donate grads, but the caller reads it again"):
            checks.expect_kept("step", greedy, args, names, kept=["params", "grads"])
    with pytest.raises(checks.CheckFailed, match="no output is in the buffer of any argument"):
        checks.expect_in_place("step", jax.jit(lambda v, p, g: 0.9 * v + g), args, argnum=None)


def test_a_failed_check_shows_its_message_and_no_traceback_in_a_real_kernel():
    """IPython renders CheckFailed through _render_traceback_: the error
    output's traceback is the message (and hint), nothing of checks.py."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import jax.numpy as jnp\nfrom donation_lab import checks"),
        nbformat.v4.new_code_cell("checks.expect_allclose('f(x)', jnp.array([0.5, 2.0]), [0.525, 2.0], hint='h')"),
        nbformat.v4.new_code_cell("checks.require('never_defined')"),
    ])
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True).execute()
    first, second = (next(o for o in c.outputs if o.output_type == "error") for c in nb.cells[1:])
    assert first.ename == "CheckFailed"
    assert first.traceback == ["f(x): expected [0.525, 2.0], got [0.5, 2.0].", "Hint: h"]
    assert first.evalue == "\n".join(first.traceback)
    assert second.traceback[0].startswith("Not answered yet: `never_defined` is not defined.")
    assert len(second.traceback) == 1


def test_the_hidden_checks_loaded_at_kernel_start_leave_the_device_count_to_the_notebook(env):
    """The audit snapshots (imports) the hidden checks when a grading kernel starts, before the
    notebook's first cell: nothing there may start JAX's backend, or lesson 6's first cell could no
    longer ask for 8 devices (a module-level device_put once did, and every lesson-6 check failed)."""
    import subprocess
    import sys

    code = ("import os, sys\nfrom donation_course.grading.integrity.audit_policy import snapshot\n"
            "snapshot(sys.modules)\n"
            "os.environ['XLA_FLAGS'] = '--xla_force_host_platform_device_count=8'\nimport jax\n"
            "print(len(jax.devices()))\n")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.stdout.strip() == "8", r.stdout + r.stderr


# ---- issue #28: the wrong answers learners type, each with its message (one paragraph, no traceback) ----

def test_a_wrong_number_of_the_right_type_is_not_told_its_type_and_a_float_is(capsys):
    """Lesson 1's practice (alias_bytes, an int): an int that is wrong is only
    wrong; a float is told it is a float; a NumPy int of the right value is
    right; the placeholder None, left as it is, is told to be replaced."""
    with pytest.raises(checks.CheckFailed) as info:
        checks.expect_equal("alias_bytes", 3999, 4000, reveal=False)
    assert str(info.value) == ("alias_bytes: 3999 is not right yet (the answer is not shown, so you can try "
                               "again).")
    with pytest.raises(checks.CheckFailed) as info:
        checks.expect_equal("alias_bytes", 4000.0, 4000, reveal=False)
    assert str(info.value) == "alias_bytes: 4000.0 is a float, but the answer is an int."
    with pytest.raises(checks.CheckFailed, match=r"^alias_bytes: 4000 is an array, but the answer is an int\. "
                                                 r"Convert it: int\(\.\.\.\)\.$"):
        checks.expect_equal("alias_bytes", jnp.asarray(4000).__array__(), 4000, reveal=False)
    with pytest.raises(checks.CheckFailed, match="True is a bool"):
        checks.expect_equal("alias_bytes", True, 1, reveal=False)
    import numpy as np

    for reveal in (False, True):
        with pytest.raises(checks.CheckFailed) as info:
            checks.expect_equal("alias_bytes", None, 4000, reveal=reveal, hint="h")
        assert str(info.value) == ("alias_bytes is still None: replace None with your answer, run that cell, then "
                                   "run this check again.\nHint: h")
    checks.expect_equal("alias_bytes", 4000, 4000, reveal=False)
    checks.expect_equal("alias_bytes", np.int64(4000), 4000, reveal=False)  # np.prod(shape) * 4 is right too
    checks.expect_equal("old_is_gone", np.bool_(True), True, reveal=False)
    checks.expect_equal("result", None, None)  # None is told to be replaced only where the answer is not None
    assert capsys.readouterr().out.count("\u2714 ") == 4


def test_a_method_passed_without_calling_it_is_told_to_call_it(capsys):
    """Lesson 2's practice: `old_is_gone = old.is_deleted` (no brackets) gave
    '<nanobind.nb_bound_method ...> is not right yet'."""
    old = jnp.ones(2)
    with pytest.raises(checks.CheckFailed) as info:
        checks.expect_equal("old_is_gone", old.is_deleted, False, reveal=False, hint="h")
    assert str(info.value) == ("old_is_gone: you passed the method itself, not its result; call it: "
                               "x.is_deleted() (with the brackets).\nHint: h")
    assert "nanobind" not in str(info.value)
    with pytest.raises(checks.CheckFailed, match=r"you passed the method itself, not its result; call it: x\.sum\(\)"):
        checks.expect_allclose("f(x)", old.sum, 2.0)
    with pytest.raises(checks.CheckFailed, match=r"you passed the function train_step itself, not its result"):
        def train_step():
            return None
        checks.expect_allclose("out", train_step, [1.0])
    checks.expect_equal("old_is_gone", old.is_deleted(), False, reveal=False)
    assert capsys.readouterr().out == "\u2714 old_is_gone is False (public check only).\n"


def test_an_exception_returned_instead_of_a_value_is_told_to_return_str_exc():
    """Exercise 5.2 gave "expected a message naming sqrt, got FloatingPointError('...sqrt')": every
    check that compares a value says an exception object is not one (lesson 5's own check,
    expect_error_message, says so for the message it expects)."""
    exc = FloatingPointError("invalid value (nan) encountered in sqrt")
    told = ("find_nan: your answer returned the exception itself (FloatingPointError), not its message. "
            "Return the text instead: `return str(exc)`.")
    for check in (lambda: checks.expect_equal("find_nan", exc, "a message naming sqrt", hint="h"),
                  lambda: checks.expect_equal("find_nan", exc, "a message naming sqrt", hint="h", reveal=False),
                  lambda: checks.fail("find_nan", "a message naming sqrt", exc, hint="h")):
        with pytest.raises(checks.CheckFailed) as info:
            check()
        assert str(info.value) == told + "\nHint: h"
    with pytest.raises(checks.CheckFailed, match="returned the exception itself"):
        checks.expect_allclose("loss", exc, 0.0)
    checks.expect_equal("find_nan", str(exc), "invalid value (nan) encountered in sqrt")


def test_an_exception_in_the_learners_function_is_one_paragraph_naming_its_type_and_first_line(capsys):
    def subtracts_dicts(p, g):
        return p - g["w"]  # given arrays where it expects dicts

    def raises_two_lines(p, g):
        raise ValueError("first line\nsecond line")

    args = (jnp.ones(3), jnp.ones(3))
    with pytest.raises(checks.CheckFailed) as info:
        checks.expect_in_place("step", raises_two_lines, args, hint="h")
    assert str(info.value) == "step: calling it raised ValueError: first line.\nHint: h"
    with pytest.raises(checks.CheckFailed) as info:
        checks.expect_in_place("sgd_update", subtracts_dicts, args)
    assert str(info.value) == ("sgd_update: calling it raised TypeError: JAX does not support string indexing; "
                               "got idx='w'.")
    traced = jax.jit(lambda s, d: s + d["missing"], donate_argnums=0)  # raises while lowering
    for check in (lambda: checks.expect_donation_request("apply_delta", traced, args, ("state", "delta"), ["state"]),
                  lambda: checks.expect_kept("apply_delta", traced, args, ("state", "delta"), ["delta"]),
                  lambda: checks.donation_request(lambda s, d: traced(s, d), *args)):
        with pytest.raises(checks.CheckFailed, match=r"calling it raised (TypeError|IndexError)"):
            check()
    with pytest.raises(checks.CheckFailed, match="should be a function, got an int"):
        checks.expect_kept("apply_delta", 3, args, ("state", "delta"), ["delta"])
    good = jax.jit(lambda p, g: p - g, donate_argnums=0)
    checks.expect_in_place("step", good, args)
    assert capsys.readouterr().out == ("\u2714 step puts its result in the buffer of argument 0, so the donation was "
                                       "used (public check only).\n")


def test_warnings_while_a_check_lowers_or_calls_the_function_stay_inside_the_check(capsys):
    """Exercise 2.1 and lesson 3's momentum practice: JAX's 'not usable' warning, given while a check
    lowers the learner's function, printed above the check with a
    site-packages path. Now the check quotes its first line in its message."""
    names, args = ("velocity", "params", "grads"), (jnp.zeros(3), jnp.ones(3), jnp.ones(3))
    greedy = jax.jit(lambda v, p, g: 0.9 * v + g, donate_argnums=(0, 2))
    over = jax.jit(lambda s, d: s + d, donate_argnums=(0, 1))
    with warnings.catch_warnings(record=True) as escaped:
        warnings.simplefilter("always")
        with pytest.raises(checks.CheckFailed) as kept:
            checks.expect_kept("momentum_step", greedy, args, names, kept=["params", "grads"], hint="h")
        with pytest.raises(checks.CheckFailed) as request:
            checks.expect_donation_request("apply_delta", over, args[:2], ("state", "delta"), ["state"])
        with pytest.raises(checks.CheckFailed) as observed:  # a plain wrapper: called, with caches cleared
            checks.expect_donation_request("apply_delta", lambda s, d: over(s, d), args[:2], ("state", "delta"),
                                           ["state"])
    assert escaped == []
    note = ('While the check ran it, JAX warned "Some donated buffers were not usable: float32[3]" (no output '
            'of the same shape and dtype was left to take that buffer, so JAX kept it).')
    assert str(kept.value) == ("momentum_step asks to donate grads, but the caller reads it again after the call. "
                               + note + "\nHint: h")
    assert str(request.value) == ("arguments apply_delta asks to donate: expected ['state'], got ['delta', "
                                  "'state']. " + note)
    assert "Some donated buffers were not usable" in str(observed.value)
    for message in (kept, request, observed):
        assert "site-packages" not in str(message.value) and "See an explanation" not in str(message.value)
    right = jax.jit(lambda v, p, g: 0.9 * v + g, donate_argnums=0)
    checks.expect_kept("momentum_step", right, args, names, kept=["params", "grads"])
    assert capsys.readouterr().out == ("\u2714 momentum_step donates none of params, grads, which the caller reads "
                                       "again (public check only).\n")


def test_what_a_check_cell_shows_in_a_real_kernel_has_no_warning_log_line_or_traceback():
    """In a notebook: a wrong answer to the momentum practice (its warning at lowering) and a
    function that raises each give the check's message alone: no stderr output,
    no traceback. And what the checks run in `_captured` keeps XLA's log lines
    off the cell: tied leaves given to a donating step make XLA log an error
    line on the process's stderr, which ipykernel shows in the cell."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import jax, jax.numpy as jnp\nfrom donation_lab import checks\n"
                                  "greedy = jax.jit(lambda v, p, g: 0.9 * v + g, donate_argnums=(0, 2))\n"
                                  "tied = jnp.ones(3)\nstep = jax.jit(lambda p: jax.tree.map(lambda a: a - 1, p), "
                                  "donate_argnums=0)"),
        nbformat.v4.new_code_cell("checks.expect_kept('momentum_step', greedy, (jnp.zeros(3), jnp.ones(3), "
                                  "jnp.ones(3)), ('velocity', 'params', 'grads'), kept=['params', 'grads'])"),
        nbformat.v4.new_code_cell("with checks._captured():\n    try:\n        step({'w': tied, 'b': tied})\n"
                                  "    except Exception as exc:\n"
                                  "        raise checks._raised('apply_grads(untied_params, grads)', exc) from None"),
        nbformat.v4.new_code_cell("checks.expect_in_place('sgd_update', lambda p, g: p - g['w'], "
                                  "(jnp.ones(2), jnp.ones(2)))"),
    ])
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True).execute()
    starts = ("momentum_step asks to donate grads",
              "apply_grads(untied_params, grads): calling it raised JaxRuntimeError: INVALID_ARGUMENT: Attempt to "
              "donate the same buffer twice", "sgd_update: calling it raised TypeError")
    for cell, start in zip(nb.cells[1:], starts, strict=True):
        assert [o.output_type for o in cell.outputs] == ["error"], cell.outputs
        error = cell.outputs[0]
        assert error.ename == "CheckFailed" and len(error.traceback) == 1, error.traceback
        assert error.traceback[0].startswith(start), error.traceback
        assert "site-packages" not in error.traceback[0] and "Traceback" not in error.traceback[0]


def test_expect_true_passes_with_its_own_sentence_and_fails_with_its_message(capsys):
    """A ✔ line is a sentence with a verb: expect_true prints `passing` when given
    ("delta is still alive after apply_delta", not "delta after apply_delta")."""
    checks.expect_true("delta after apply_delta", True, "delta was deleted", passing="delta is still alive after "
                                                                                    "apply_delta")
    assert capsys.readouterr().out == "\u2714 delta is still alive after apply_delta (public check only).\n"
    checks.expect_true("the step runs", True, "it raised")
    assert capsys.readouterr().out == "\u2714 the step runs (public check only).\n"
    with pytest.raises(checks.CheckFailed) as info:
        checks.expect_true("delta after apply_delta", False, "delta was deleted, but the caller still reads it",
                           hint="h", passing="delta is still alive after apply_delta")
    assert str(info.value) == "delta after apply_delta: delta was deleted, but the caller still reads it\nHint: h"
    assert capsys.readouterr().out == ""


def test_expect_own_buffers_names_a_python_int_leaf_and_a_shared_buffer(capsys):
    """The capstone's public check: an optimizer state holding a Python int gets a
    one-paragraph message naming that leaf (not an AttributeError from
    unsafe_buffer_pointer), a tied leaf gets one naming both, and untied JAX
    arrays pass with a sentence."""
    params = {"w": jnp.ones(3), "b": jnp.array(0.25)}
    own = {"m": jax.tree.map(jnp.zeros_like, params), "count": jnp.zeros((), jnp.int32)}
    checks.expect_own_buffers({"params": params, "opt_state": own}, hint="h")
    assert capsys.readouterr().out == ("\u2714 every leaf of params and opt_state has a buffer of its own "
                                       "(public check only).\n")
    with pytest.raises(checks.CheckFailed) as info:
        checks.expect_own_buffers({"params": params, "opt_state": {**own, "count": 0}}, hint="h")
    assert str(info.value) == ("opt_state['count'] is an int, not a JAX array: it has no buffer, so a step cannot "
                               "donate it or reuse its memory.\nHint: h")
    with pytest.raises(checks.CheckFailed) as info:
        checks.expect_own_buffers({"params": params, "opt_state": {"m": params, "count": own["count"]}})
    assert str(info.value) == ("params['b'] and opt_state['m']['b'] share one buffer, so a step donating params "
                               "and opt_state would give that buffer away twice.")
    assert capsys.readouterr().out == ""
