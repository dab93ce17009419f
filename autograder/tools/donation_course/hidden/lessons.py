"""Hand-overs of lessons 1 to 6's graded self-checks to the referee, run only at grading.

The kernel's checks of these cells are the public ones (donation_lab.checks),
which the learner runs too; a grade cell's hidden block then calls one of
these functions, which hands the answer over as data (hidden/handover.py: a
jax.jit function as the programs it lowers to for the referee's calls,
grading/referee/asks.py; lesson 5's answers as values, find_nan's as what it returns on steps made here at
grading time). The referee judges those programs and values where no learner code runs
(grading/referee/judge.py), and a point needs both passes.

They check nothing themselves and print nothing (nbgrader scores the cell by
its public checks), and never raise: a failure to hand over is the referee's
"received nothing". Imported at kernel start (nbgrader_config.py's
exec_lines), before learner code, like the hidden checks.
"""
import jax

from donation_course.grading.referee.asks import NAN_OPS, NAN_PICKED
from donation_course.hidden.exercise import grading_seed
from donation_course.hidden.handover import hand_over, hand_over_values
from donation_course.hidden.safe import (
    Exception,
    StringIO,
    catch_warnings,
    default_rng,
    device,
    float,
    float32,
    int,
    len,
    redirect_stderr,
    redirect_stdout,
    simplefilter,
)

__all__ = ["hand_over_train_step", "hand_over_apply_delta", "hand_over_sgd_update", "hand_over_y_out",
           "hand_over_nan_message", "hand_over_shift_split", "hand_over_quiet_fixed"]


def hand_over_train_step(train_step) -> None:
    """Lesson 1, Exercise 1.1 (l1-q1-check)."""
    hand_over("l1-train-step", "train_step (lesson 1)", train_step)


def hand_over_apply_delta(apply_delta) -> None:
    """Lesson 2, Exercise 2.1 (l2-q1-check)."""
    hand_over("l2-apply-delta", "apply_delta (lesson 2)", apply_delta)


def hand_over_sgd_update(sgd_update) -> None:
    """Lesson 4, Exercise 4.1 (l4-q1-check)."""
    hand_over("l4-sgd-update", "sgd_update (lesson 4)", sgd_update)


def hand_over_y_out(y_out) -> None:
    """Lesson 5, Exercise 5.1 (l5-q1-check): the value of y_out (y_in's deletion, scale's cache and jax's config
    are the kernel's, which no value shows)."""
    hand_over_values("l5-y-out", "y_out (lesson 5)", {"y_out": y_out})


# Each operation of asks.NAN_OPS, and the grad entry that makes it NaN (the other entries, in (0.1, 0.9), make none)
_OPS = {"log": (jax.numpy.log, lambda u: -u), "sqrt": (jax.numpy.sqrt, lambda u: -u),
        "div": (lambda g: jax.lax.div(g, g), lambda u: 0.0), "asin": (jax.numpy.arcsin, lambda u: 1.0 + u),
        "acos": (jax.numpy.arccos, lambda u: 1.0 + u), "log1p": (jax.numpy.log1p, lambda u: -1.0 - u)}
assert tuple(_OPS) == NAN_OPS


def _nan_step(op):
    def step(params, grad):
        return params - 0.1 * op(grad)
    return step


def _find(find_nan, step, params, grad):
    """What the learner's find_nan returns (an exception it raises, as the object: the referee names its type),
    with its output and warnings kept out of the grade cell."""
    try:
        with catch_warnings(), redirect_stdout(StringIO()), redirect_stderr(StringIO()):
            simplefilter("ignore")
            return find_nan(step, params, grad)
    except Exception as exc:
        return exc


def hand_over_nan_message(find_nan) -> None:
    """Lesson 5, Exercise 5.2 (l5-q2-check): what find_nan returns on steps made here, at grading time: NAN_PICKED
    operations of asks.NAN_OPS drawn from exercise.grading_seed (the course's secret), each in a step
    params - 0.1 * op(grad) with a grad that makes it NaN at a random place, and once on a healthy grad. The
    referee reads whether each text names its operation as jax's debug_nans error does. (How find_nan runs the
    step, and what it leaves in jax's config, are the kernel's: the cell's public checks.)"""
    try:
        rng = default_rng([grading_seed(), 5])  # the course's secret (exercise.grading_seed), for lesson 5
        picked = [NAN_OPS[int(i)] for i in rng.choice(len(NAN_OPS), NAN_PICKED, replace=False)]
        params = rng.standard_normal(4).astype(float32)  # a fresh copy each call: find_nan may donate it
        values = {"ops": ",".join(picked)}
        for name in picked:
            op, bad = _OPS[name]
            grad = rng.uniform(0.1, 0.9, 4).astype(float32)
            grad[int(rng.integers(4))] = bad(float(rng.uniform(0.1, 0.9)))
            values[f"message:{name}"] = _find(find_nan, _nan_step(op), device(params), device(grad))
        healthy = device(rng.uniform(0.1, 0.9, 4).astype(float32))
        values["healthy"] = _find(find_nan, _nan_step(_OPS[picked[0]][0]), device(params), healthy)
    except Exception:
        values = {}
    hand_over_values("l5-find-nan", "find_nan's message (lesson 5)", values)


def hand_over_shift_split(shift_split) -> None:
    """Lesson 6, Exercise 6.1 (l6-q1-check)."""
    hand_over("l6-shift-split", "shift_split (lesson 6)", shift_split)


def hand_over_quiet_fixed(quiet_fixed) -> None:
    """Lesson 6, Exercise 6.2 (l6-q2-check)."""
    hand_over("l6-quiet-fixed", "quiet_fixed (lesson 6)", quiet_fixed)
