"""Hand-overs of lessons 1 to 6's graded self-checks to the referee, run only at grading.

The kernel's checks of these cells are the public ones (donation_lab.checks),
which the learner runs too; a grade cell's hidden block then calls one of
these functions, which hands the answer over as data (hidden/handover.py: a
jax.jit function as the programs it lowers to for the referee's calls,
grading/referee/asks.py; lesson 5's answers as values). The referee judges those programs where no learner
code runs (grading/referee/judge.py), and a point needs both passes.

They check nothing themselves and print nothing (nbgrader scores the cell by
its public checks), and never raise: a failure to hand over is the referee's
"received nothing". Imported at kernel start (nbgrader_config.py's
exec_lines), before learner code, like the hidden checks.
"""
from donation_course.hidden.handover import hand_over, hand_over_values

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


def hand_over_nan_message(message, healthy) -> None:
    """Lesson 5, Exercise 5.2 (l5-q2-check): what find_nan returned on the negative grad and on a healthy one
    (how it ran the step, and what it left in jax's config, are the kernel's)."""
    hand_over_values("l5-find-nan", "find_nan's message (lesson 5)", {"message": message, "healthy": healthy})


def hand_over_shift_split(shift_split) -> None:
    """Lesson 6, Exercise 6.1 (l6-q1-check)."""
    hand_over("l6-shift-split", "shift_split (lesson 6)", shift_split)


def hand_over_quiet_fixed(quiet_fixed) -> None:
    """Lesson 6, Exercise 6.2 (l6-q2-check)."""
    hand_over("l6-quiet-fixed", "quiet_fixed (lesson 6)", quiet_fixed)
