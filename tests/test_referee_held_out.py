"""Answers right only on the inputs the grader is known to use (issue 32, red-team A7 and A3), judged in process.

A7: a jax.jit answer special-cased on the lengths the referee asks for (asks.py is public) or on the values it
runs (a fixed seed was public too). The referee now draws its values per process from the OS's randomness
(judge._SECRET), and runs the exercise's values and training loop at lengths it draws itself, on the one program
jax.export lowers for every length n (asks.SYMBOLIC), which no trace-time Python in the learner's kernel sees;
the kernel's own checks run at lengths drawn at grading time too, so the two verdicts agree for such an answer.
Each side: a forgery that earns no more than the same wrong answer honestly, an honest answer (and its
variants) that keeps every point.

A3: lesson 5's find_nan returning a constant ("sqrt", or JAX's message for sqrt). The grading kernel runs it on
steps whose NaN comes from operations it draws at grading time (hidden/lessons.py), and the referee reads whether
each text names its operation as JAX's debug_nans error does.
"""
import json
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from donation_course.grading.referee import asks, judge, programs
from donation_course.grading.referee.verdict import FAIL, PASS, UNJUDGED
from donation_course.hidden import handover, lessons

EXERCISE_CHECKS = judge.checks_of(asks.EXERCISE)
PUBLIC = (0, 2, 1 << 20, 1000, 13)  # the lengths the course names (asks.EXERCISE's concrete signatures)


def _outcomes(fn) -> dict:
    """{check: (outcome, message)} of the referee for `fn`, handed over as the grading kernel hands it over."""
    entry = handover._entry(asks.EXERCISE, fn)
    json.dumps(entry)  # data only: it crosses as JSON
    verdicts = judge.judge(asks.EXERCISE, {"programs": [entry], "checks": {c: 0 for c in EXERCISE_CHECKS}})
    return {v.check: (v.outcome, v.message) for v in verdicts}


def _add(state, delta):
    return state + delta


def _right_at_public_lengths(state, delta):  # the red-team's A7: trace-time Python on the shape
    return state + delta if state.shape[0] in PUBLIC else state * 0


def _right_unless_concrete(state, delta):  # right in a program for every length, wrong at an unlisted concrete one
    n = state.shape[0]
    return state + delta if not isinstance(n, int) or n in PUBLIC else state * 0


def _right_at_public_lengths_at_run_time(state, delta):  # the length read in the program, not at trace time
    n = jnp.asarray(state.shape[0])
    known = jnp.zeros((), bool)
    for length in PUBLIC:
        known = known | (n == length)
    return jnp.where(known, state + delta, state * 0)


HONEST = {
    "jit of a lambda": jax.jit(lambda s, d: s + d, donate_argnums=0),
    "decorated def": jax.jit(_add, donate_argnums=(0,)),
    "by name": jax.jit(_add, donate_argnames="state"),
    "jnp.add": jax.jit(jnp.add, donate_argnums=0),
    "at[].add": jax.jit(lambda s, d: s.at[:].add(d), donate_argnums=0),
    "a Python branch on an empty state": jax.jit(lambda s, d: s if s.shape[0] == 0 else s + d, donate_argnums=0),
}
WRONG = jax.jit(lambda s, d: s * 0, donate_argnums=0)  # the honest wrong answer: what a forgery may earn at most


@pytest.mark.slow  # compiles and runs a dozen programs per answer
@pytest.mark.parametrize("name", list(HONEST))
def test_honest_exercise_answers_and_their_variants_keep_every_point(name):
    got = _outcomes(HONEST[name])
    assert {c: o for c, (o, _) in got.items()} == {c: PASS for c in EXERCISE_CHECKS}, got
    assert "lengths it picked itself" in got["values"][1]


@pytest.mark.slow  # compiles and runs a dozen programs per answer
@pytest.mark.parametrize("forgery", [_right_at_public_lengths, _right_at_public_lengths_at_run_time])
def test_an_answer_right_only_at_the_public_lengths_fails_values_and_loop_at_lengths_the_referee_draws(forgery):
    got = _outcomes(jax.jit(forgery, donate_argnums=0))
    wrong = _outcomes(WRONG)
    assert got["values"][0] == FAIL and "(a length the grader picked)" in got["values"][1], got["values"]
    assert got["training loop"][0] == FAIL, got["training loop"]
    # beyond the honest wrong answer, only the worked example: right, by its own public values
    assert {c for c, (o, _) in got.items() if o == PASS} == \
        {c for c, (o, _) in wrong.items() if o == PASS} | {"worked example"}


@pytest.mark.slow  # compiles and runs a dozen programs
def test_an_answer_right_in_the_program_for_every_length_and_wrong_at_a_concrete_one_fails_in_the_kernel(capsys):
    """Trace-time Python can tell the symbolic length from a concrete one: the referee's program is then right,
    and the kernel's checks, at concrete lengths drawn at grading time, refute it (a point needs both)."""
    from donation_course.hidden import exercise

    forgery = jax.jit(_right_unless_concrete, donate_argnums=0)
    assert _outcomes(forgery)["values"][0] == PASS  # the referee alone would be fooled: a known limit
    for check in (exercise.check_values, exercise.check_training_loop):
        with pytest.raises(exercise.HiddenCheckFailed):
            check(forgery)
    honest = HONEST["decorated def"]
    exercise.check_values(honest)
    exercise.check_training_loop(honest)
    out = capsys.readouterr().out
    assert out.count("\u2714 values:") == 1 and out.count("\u2714 training loop:") == 1


def test_the_kernel_draws_its_length_and_values_from_the_courses_secret(monkeypatch):
    """With the course's secret (what the grader sets): the same length and values at every grading of the
    course, none of the public lengths; without it (a learner's own run, serial nbgrader): from the system."""
    from donation_course.hidden import exercise

    def drawn():
        cases = list(exercise._cases())
        return [label for label, _, _ in cases if "drawn at grading time" in label], cases[1][1]

    monkeypatch.delenv(exercise.DRAW_SEED_ENV, raising=False)
    unseeded = [drawn() for _ in range(4)]
    assert all(len(labels) == 1 for labels, _ in unseeded)
    assert len({labels[0] for labels, _ in unseeded}) > 1, unseeded  # not the same length every time
    assert not np.array_equal(unseeded[0][1], unseeded[1][1])
    lengths = set()
    for secret in ("0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"):
        monkeypatch.setenv(exercise.DRAW_SEED_ENV, secret)
        (first, small), (again, small_again) = drawn(), drawn()
        assert first == again and np.array_equal(small, small_again)
        n = int(first[0].split()[1])
        assert exercise.DRAWN_MIN <= n <= exercise.DRAWN_MAX and n not in (0, 2, 13, 1000, 1 << 20)
        lengths.add(n)
    assert len(lengths) == 2  # two courses, two lengths


def test_a_course_keeps_one_secret_and_a_copy_of_it_shares_it(tmp_path):
    import shutil

    from donation_course.course import Course
    from donation_course.grading.run.prepare import DRAW_SECRET, draw_secret
    from helpers import make_course

    course = Course(make_course(tmp_path / "course"))
    secret = draw_secret(course)
    assert len(secret) == 32 and draw_secret(course) == secret
    assert oct((course.grading_dir / DRAW_SECRET).stat().st_mode & 0o777) == "0o600"
    copy = Course(shutil.copytree(course.root, tmp_path / "copy"))
    assert draw_secret(copy) == secret
    assert draw_secret(Course(make_course(tmp_path / "other"))) != secret


def test_the_referees_values_and_lengths_come_from_a_secret_drawn_per_process():
    code = ("from donation_course.grading.referee import judge\n"
            "print(judge._SECRET, judge.drawn_length(judge._rng(3)))\n")
    seen = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
            for _ in range(2)}
    assert len(seen) == 2, seen
    lengths = {judge.drawn_length(judge._rng(purpose)) for purpose in range(200)}
    assert len(lengths) > 100 and not lengths & (set(PUBLIC) | {32})


@pytest.mark.slow  # compiles and runs a dozen programs
def test_a_program_that_embeds_the_outputs_for_values_the_referee_once_used_fails(monkeypatch):
    """The values a referee process runs are its own: outputs embedded for another process's values are wrong."""
    monkeypatch.setattr(judge, "_SECRET", 1234)
    table = {s.dtype.name + str(len(s)): s + d for signature, length, _, s, d in judge._exercise_cases()
             if length is None and len(s) not in (2, 1 << 20)}  # int32[1000], bfloat16[13] (and float32[0])

    def embedded(state, delta):
        key = state.dtype.name + str(state.shape[0])
        return jnp.asarray(table[key]) if key in table else state + delta

    forgery = jax.jit(embedded, donate_argnums=0)
    assert _outcomes(forgery)["values"][0] == PASS  # the very values it embedded
    monkeypatch.setattr(judge, "_SECRET", 5678)
    got = _outcomes(forgery)["values"]
    assert got[0] == FAIL and got[1].startswith("for int32[1000] element"), got


def test_a_program_for_every_length_is_made_static_for_the_length_the_referee_draws():
    n = jax.export.symbolic_shape("n")[0]
    spec = jax.ShapeDtypeStruct((n,), jnp.float32)
    text = jax.export.export(jax.jit(_add, donate_argnums=0))(spec, spec).mlir_module()
    from donation_course.grading.referee.screen import screen

    program = screen(programs.refine(text, 77))
    assert [str(t) for t in program.inputs] == ["float32[77]", "float32[77]"]
    assert program.donated == (True, False)  # the learner's donation survives the refinement
    assert "stablehlo.custom_call" not in program.operations  # its shape assertions checked and removed
    with pytest.raises(ValueError) as refused:
        programs.refine(text, 0)  # n >= 1: length 0 is one of the concrete signatures
    assert "Expected value >= 1 for dimension variable 'n'" in str(refused.value.__cause__)


def test_a_symbolic_hand_over_that_is_hostile_or_malformed_is_not_judged_and_says_why():
    entry = handover._entry(asks.EXERCISE, HONEST["decorated def"])
    for key in ("float32[n]", "int32[n]", "bfloat16[n]"):
        assert "jax.uses_shape_polymorphism = true" in entry["programs"][key]["text"]

    def values_verdict(text):
        forged = json.loads(json.dumps(entry))
        for key in ("float32[n]", "int32[n]", "bfloat16[n]"):
            forged["programs"][key]["text"] = text
        (verdict,) = [v for v in judge.judge(asks.EXERCISE, {"programs": [forged], "checks": {"values": 0}})
                      if v.check == "values"]
        return verdict

    text = entry["programs"]["float32[n]"]["text"]
    used, found = re.subn(  # a host callback whose result the program returns
        r"(%\w+) = stablehlo.add (%\w+), (%\w+) : tensor<\?xf32>",
        r"\1 = stablehlo.custom_call @xla_python_cpu_callback(\2, \3) : (tensor<?xf32>, tensor<?xf32>) -> "
        r"tensor<?xf32>", text)
    assert found == 1
    at = text.rindex("    return ")  # one whose result is unused (refinement would drop it: refused before)
    unused = text[:at] + "    %zz = stablehlo.custom_call @xla_python_cpu_callback(%arg1) : (tensor<?xf32>) -> " \
        "tensor<i32>\n" + text[at:]
    disguised = unused.replace("@xla_python_cpu_callback(%arg1)", "@shape_assertion(%arg1)")  # it has a result
    for text, said in ((used, "custom call"), (unused, "custom call"), (disguised, "custom call"),
                       ("module {}", "cannot be run at a length the grader picked"),
                       (None, "no program text"), ("x" * (asks.MAX_PROGRAM_CHARS + 1), "over the grader's cap")):
        verdict = values_verdict(text)
        assert verdict.outcome == UNJUDGED and said in verdict.message, (said, verdict)


def test_an_answer_that_cannot_be_lowered_for_every_length_is_told_why():
    def needs_a_concrete_length(state, delta):
        return state + delta + np.zeros(state.shape[0], state.dtype)  # NumPy takes no symbolic length

    got = _outcomes(jax.jit(needs_a_concrete_length, donate_argnums=0))
    assert got["values"][0] == UNJUDGED and "could not be lowered for float32[n]" in got["values"][1], got
    assert "must work for any length" in got["values"][1]
    assert got["worked example"][0] == PASS


# --- A7 beyond the exercise: lessons 1 to 4 and the capstone, on shapes the referee draws ------------------------

def _verdicts(answer, fn) -> dict:
    entry = handover._entry(answer, fn)
    json.dumps(entry)
    checks = judge.checks_of(answer)
    return {v.check: (v.outcome, v.message) for v in judge.judge(answer, {"programs": [entry],
                                                                          "checks": {c: 0 for c in checks}})}


def _sgd(params, grads):
    return jax.tree.map(lambda p, g: p - 0.5 * g, params, grads)


# Each right only when its first argument has one of the public shapes (trace-time Python on the shape)
def _l1_public_only(params, grads):
    return params - 0.5 * grads if params.shape in ((3,), (2, 2)) else params * 0


def _l2_public_only(state, delta):
    return state + delta if state.shape in ((2,), (1,)) else state * 0


def _l4_public_only(params, grads):
    return _sgd(params, grads) if params["w"].shape in ((2,), (5,)) else jax.tree.map(lambda p: p * 0, params)


LESSON_FORGERIES = {  # answer: (the honest jit, the one right only at the public shapes)
    "l1-train-step": (jax.jit(lambda params, grads: params - 0.5 * grads, donate_argnums=0),
                      jax.jit(_l1_public_only, donate_argnums=0)),
    "l2-apply-delta": (jax.jit(_add, donate_argnames="state"), jax.jit(_l2_public_only, donate_argnames="state")),
    "l4-sgd-update": (jax.jit(_sgd, donate_argnames="params"), jax.jit(_l4_public_only, donate_argnames="params")),
}


@pytest.mark.slow  # compiles and runs three programs per answer
@pytest.mark.parametrize("name", list(LESSON_FORGERIES))
def test_a_lesson_answer_right_only_at_the_public_shapes_fails_at_a_length_the_referee_draws(name):
    answer = asks.ANSWERS[name]
    honest, forgery = LESSON_FORGERIES[name]
    assert {o for o, _ in _verdicts(answer, honest).values()} == {PASS}
    (outcome, message), = _verdicts(answer, forgery).values()
    assert outcome == FAIL and "a length the grader picked" in message, message


def _l3_step_fn(batch, params, opt_state):  # lesson 3's setup cell's step_fn
    def loss_fn(params):
        return jnp.mean((batch["x"] @ params["w"] + params["b"] - batch["y"]) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    m = jax.tree.map(lambda m, g: 0.5 * m + g, opt_state["m"], grads)
    return jax.tree.map(lambda p, m: p - 0.05 * m, params, m), {"m": m}, loss


def _capstone_step(params, opt_state, x, y):  # the capstone's solution
    def loss_fn(params):
        return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    m = jax.tree.map(lambda m, g: 0.9 * m + g, opt_state["m"], grads)
    return jax.tree.map(lambda p, m: p - 0.1 * m, params, m), {"m": m, "count": opt_state["count"] + 1}, loss


# Each right only on batches of the public sizes; otherwise params and opt_state come back as they were
def _l3_public_only(batch, params, opt_state):
    right = _l3_step_fn(batch, params, opt_state)
    return right if batch["x"].shape[0] == 32 else (jax.tree.map(lambda a: a + 0, params),
                                                    jax.tree.map(lambda a: a + 0, opt_state), right[2])


def _capstone_public_only(params, opt_state, x, y):
    right = _capstone_step(params, opt_state, x, y)
    return right if x.shape[0] in (2, 8) else (jax.tree.map(lambda a: a + 0, params),
                                               jax.tree.map(lambda a: a + 0, opt_state), right[2])


@pytest.mark.slow  # compiles and runs a program a few dozen times per answer
def test_lesson_3_and_the_capstone_right_only_at_the_public_batch_sizes_fail_their_values():
    l3 = jax.jit(_l3_public_only, donate_argnames=("params", "opt_state"))
    got = _verdicts(asks.FIXED_STEP, l3)
    assert got["fixed_step values and batch"][0] == FAIL and "(a size the grader picked)" in \
        got["fixed_step values and batch"][1], got
    assert {c for c, (o, _) in got.items() if o == FAIL} == {"fixed_step values and batch"}
    honest = _verdicts(asks.FIXED_STEP, jax.jit(_l3_step_fn, donate_argnames=("params", "opt_state")))
    assert {o for o, _ in honest.values()} == {PASS}, honest

    cap = jax.jit(_capstone_public_only, donate_argnames=("params", "opt_state"))
    got = _verdicts(asks.CAPSTONE, cap)
    assert got["capstone values"][0] == FAIL and "(a size the grader picked)" in got["capstone values"][1], got
    assert {c for c, (o, _) in got.items() if o == FAIL} == {"capstone values"}
    honest = _verdicts(asks.CAPSTONE, jax.jit(_capstone_step, donate_argnames=("params", "opt_state")))
    assert {o for o, _ in honest.values()} == {PASS}, honest


# --- A3: lesson 5's find_nan, on steps the grading kernel makes at grading time ---------------------------------

def _nan_verdict(find_nan):
    published = []
    real, handover._publish = handover._publish, lambda data, metadata: published.append(data[asks.MIME])
    try:
        lessons.hand_over_nan_message(find_nan)
    finally:
        handover._publish = real
    (record,) = published
    json.dumps(record)  # data only: it crosses as JSON
    (verdict,) = judge.judge(asks.NAN_MESSAGE, {"programs": [record["entry"]], "checks": {record["check"]: 0}})
    return record["entry"]["values"], verdict


def _hunt(returned):
    def find_nan(step, params, grad):
        with jax.debug_nans(True):
            try:
                jax.jit(step)(params, grad)
            except FloatingPointError as exc:
                return returned(exc)
        return None
    return find_nan


@pytest.mark.parametrize("returned", [str, repr, lambda exc: f"found it: {exc}", lambda exc: exc.args[0],
                                      lambda exc: str(exc).split()[-1]],
                         ids=["str", "repr", "f-string", "args", "the operation's name"])
def test_an_honest_find_nan_passes_on_the_operations_the_grader_picks(returned):
    for _ in range(3):
        values, verdict = _nan_verdict(_hunt(returned))
        assert verdict.outcome == PASS, (values, verdict)


def test_the_solution_and_the_traceback_pass():
    import traceback

    def with_traceback(step, params, grad):
        with jax.debug_nans(True):
            try:
                jax.jit(step)(params, grad)
            except FloatingPointError:
                return traceback.format_exc()
        return None

    for find_nan in (_hunt(str), with_traceback):
        assert _nan_verdict(find_nan)[1].outcome == PASS


def _canned_hunt(step, params, grad):
    namespace = {"jax": jax, "jnp": jnp}
    exec(CANNED_HUNT, namespace)
    return namespace["find_nan"](step, params, grad)


CANNED = {
    "the red team's": _canned_hunt,
    "the word": lambda step, params, grad: "sqrt",
    "jax's message for sqrt": lambda step, params, grad: "invalid value (nan) encountered in sqrt",
    "every operation's message": lambda step, params, grad: "\n".join(
        f"invalid value (nan) encountered in {op}" for op in asks.NAN_OPS),
    "every operation's name": lambda step, params, grad: " ".join(asks.NAN_OPS),
}


@pytest.mark.parametrize("name", list(CANNED))
def test_a_constant_text_fails_whatever_operations_the_grader_picks(name):
    for _ in range(3):
        values, verdict = _nan_verdict(CANNED[name])
        assert verdict.outcome == FAIL, (values, verdict)
        assert "invalid value (nan) encountered in" in verdict.message and "The grader picks the operation" in \
            verdict.message


def test_find_nan_that_finds_nothing_or_reports_a_healthy_step_fails():
    values, verdict = _nan_verdict(lambda step, params, grad: None)
    assert verdict.outcome == FAIL and "returned None on a step whose" in verdict.message
    values, verdict = _nan_verdict(lambda step, params, grad: _hunt(str)(step, params, grad) or "no NaN")
    assert verdict.outcome == FAIL and "on a healthy grad" in verdict.message, verdict


def test_the_grading_kernel_draws_the_operations_and_hands_over_only_data():
    picks = set()
    for _ in range(8):
        values, _ = _nan_verdict(_hunt(str))
        ops = values["ops"]["text"].split(",")
        assert len(set(ops)) == asks.NAN_PICKED and set(ops) <= set(asks.NAN_OPS)
        assert set(values) == {"ops", "healthy", *(f"message:{op}" for op in ops)}
        picks.add(tuple(ops))
    assert len(picks) > 1, picks


def test_with_the_courses_secret_every_grading_draws_the_same_operations(monkeypatch):
    from donation_course.hidden import exercise

    monkeypatch.setenv(exercise.DRAW_SEED_ENV, "0123456789abcdef0123456789abcdef")
    drawn = {_nan_verdict(_hunt(str))[0]["ops"]["text"] for _ in range(3)}
    assert len(drawn) == 1, drawn


def test_a_find_nan_that_raises_or_a_hand_over_without_its_operations_is_not_judged():
    def raises(step, params, grad):
        raise ValueError("no")

    values, verdict = _nan_verdict(raises)
    assert verdict.outcome == UNJUDGED and "ValueError" in verdict.message, verdict
    for entry in ({"values": {}}, {"values": {"ops": {"text": "sqrt,sqrt"}}},
                  {"values": {"ops": {"text": "sqrt,print"}}}):
        (verdict,) = judge.judge(asks.NAN_MESSAGE, {"programs": [entry], "checks": {judge.checks_of(
            asks.NAN_MESSAGE)[0]: 0}})
        assert verdict.outcome == UNJUDGED, (entry, verdict)


def test_every_operation_the_grader_may_pick_makes_a_nan_jax_names():
    for name, (op, bad) in lessons._OPS.items():
        grad = np.full(4, 0.5, np.float32)
        assert not jnp.isnan(op(jnp.asarray(grad))).any(), name  # the healthy grad makes none
        grad[1] = bad(0.5)
        assert _hunt(str)(lessons._nan_step(op), jnp.ones(4), jnp.asarray(grad)) == \
            f"invalid value (nan) encountered in {name}", name


# --- one class through ./course grade: the forgeries beside an honest neighbour ----------------------------------

EXERCISE_NB, LESSON_5 = "07_update_with_donate", "05_debug_nans"
# A3 as the red team wrote it: step run through a new jax.jit (the kernel's checks see it traced, params kept, None
# on a healthy grad, debug_nans off), without debug_nans, and the cell's one public operation named as a constant
CANNED_HUNT = ("def find_nan(step, params, grad):\n"
               "    out = jax.jit(step)(params, grad)\n"
               "    return 'invalid value (nan) encountered in sqrt' if bool(jnp.isnan(out).any()) else None\n")
# student: ({notebook: {answer cell's grade id: the cell as handed in}}): every other answer cell is the solution's
CLASS = {
    "a7-shapes": {EXERCISE_NB: {"ex-answer": "update_with_donate = jax.jit(\n    lambda s, d: s + d if s.shape[0] in "
                                             "(0, 2, 1 << 20, 1000, 13) else s * 0, donate_argnums=0)\n"}},
    "a7-symbolic": {EXERCISE_NB: {"ex-answer": "def _f(s, d):\n    n = s.shape[0]\n    return s + d if not "
                                               "isinstance(n, int) or n in (0, 2, 1 << 20, 1000, 13) else s * 0\n\n\n"
                                               "update_with_donate = jax.jit(_f, donate_argnums=0)\n"}},
    "wrong": {EXERCISE_NB: {"ex-answer": "update_with_donate = jax.jit(lambda s, d: s * 0, donate_argnums=0)\n"}},
    "a3-canned": {LESSON_5: {"l5-q2": CANNED_HUNT}},
    "honest": {EXERCISE_NB: {}, LESSON_5: {}},
}
SPECIAL_CASED = {"ex-example": 1, "ex-donated": 2, "ex-values": 0, "ex-buffer-reuse": 2, "ex-training-loop": 0}


def _build_class(files) -> None:
    import nbformat
    from nbgrader.utils import is_solution

    from donation_course.course import NOTEBOOKS, SOLUTIONS, grade_id

    files.mkdir(parents=True)
    for student, notebooks in CLASS.items():
        for lesson, answers in notebooks.items():
            solved = {grade_id(c): c.source for c in nbformat.read(SOLUTIONS / f"{lesson}.ipynb", as_version=4).cells
                      if is_solution(c)}
            nb = nbformat.read(NOTEBOOKS / f"{lesson}.ipynb", as_version=4)
            for c in nb.cells:
                if is_solution(c):
                    c.source = answers.get(grade_id(c), solved[grade_id(c)])
            nbformat.write(nb, files / f"{student}_{lesson}.ipynb")


@pytest.fixture(scope="module")
def held_out_class(tmp_path_factory, env, course_template):
    """The class, graded once by ./course grade: (grades.csv's rows, the gradebook's cell scores)."""
    import shutil

    from nbgrader.api import Gradebook

    from helpers import ASSIGNMENT, grade_class, graded_class, read_grades

    folder = tmp_path_factory.mktemp("held-out")
    course = shutil.copytree(course_template, folder / "course")
    grade_class(folder, course, _build_class, env)
    graded = graded_class(folder)
    with Gradebook(f"sqlite:///{graded.course / 'gradebook.db'}") as gb:
        scores = {s.student.id: {nb.name: {g.name: g.score for g in nb.grades} for nb in s.notebooks}
                  for s in gb.find_assignment(ASSIGNMENT).submissions}
    return read_grades(course / ".grading" / "grades.csv"), scores


@pytest.mark.slow  # grades a class of five with ./course grade
@pytest.mark.parametrize("student", ["a7-shapes", "a7-symbolic"])
def test_an_exercise_right_only_at_the_public_lengths_loses_values_and_loop_unflagged(held_out_class, student):
    from donation_course.course import COURSE

    rows, scores = held_out_class
    row, cells = rows[student], scores[student][EXERCISE_NB]
    assert row["status"] == "partial" and "referee" not in row["reason"], row  # points lost, nothing flagged
    assert "(a length drawn at grading time)" in row["reason"], row
    assert {g: cells[g] for g in SPECIAL_CASED} == SPECIAL_CASED, cells
    # no more than the honest wrong answer s * 0, but for the worked example's point (right by its public values)
    wrong = scores["wrong"][EXERCISE_NB]
    assert wrong["ex-example"] == 0 and sum(SPECIAL_CASED.values()) == sum(wrong[g] for g in SPECIAL_CASED) + 1
    capstone = {g: p for g, p in COURSE.grades[EXERCISE_NB].items() if g.startswith("cap-")}
    assert {g: cells[g] for g in capstone} == capstone  # the rest of the notebook is the solution's


@pytest.mark.slow  # grades a class of five with ./course grade
def test_a_constant_find_nan_earns_nothing_and_is_flagged_with_both_verdicts(held_out_class):
    rows, scores = held_out_class
    row = rows["a3-canned"]
    assert row["status"] == "flagged", row
    said = f"{LESSON_5}/l5-q2-check: the kernel's check 'find_nan's message (lesson 5)' passed, the referee's failed: "
    assert said in row["reason"] and "'invalid value (nan) encountered in sqrt' on a step where" in \
        row["reason"].split(said, 1)[1][:300], row["reason"]
    assert float(row[LESSON_5]) == 0 and scores["a3-canned"][LESSON_5]["l5-q2-check"] == 0


@pytest.mark.slow  # grades a class of five with ./course grade
def test_the_honest_neighbour_gets_full_marks_unflagged(held_out_class):
    from donation_course.course import COURSE

    rows, scores = held_out_class
    row = rows["honest"]
    assert row["status"] == "ok", row
    for nb in (EXERCISE_NB, LESSON_5):
        assert scores["honest"][nb] == COURSE.grades[nb] and float(row[nb]) == COURSE.points[nb], (nb, row)


def test_the_exercise_cases_are_drawn_once_per_secret_and_cannot_be_changed(monkeypatch):
    """A referee server draws the exercise's cases before it forks its children (judge.warm): each child reads
    the same arrays, which no check can write; another secret draws other cases."""
    monkeypatch.setattr(judge, "_SECRET", 1234)
    judge.warm()
    cases = judge._exercise_cases()
    assert judge._exercise_cases() is cases
    with pytest.raises(ValueError):
        cases[1][3][0] = 0  # the state of the second case, read-only
    monkeypatch.setattr(judge, "_SECRET", 5678)
    other = judge._exercise_cases()
    assert other is not cases and not np.array_equal(other[1][3], cases[1][3])
