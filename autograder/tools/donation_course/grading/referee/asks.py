"""What the referee asks the learner's kernel for, as plain data (no JAX here:
the grader's process reads it, the grading kernel's hand-over and the
referee's judge both build on it).

An answer is handed over as the programs its jax.jit function lowers to, one
per signature below. The referee judges the grade cells whose hidden check
appears in CHECKS; the others (Python-level behaviour a program cannot
show) rest on the kernel's checks alone.
"""
from __future__ import annotations

from dataclasses import dataclass

# The kernel hands over through the notebook itself: one display output of this type in the grade cell of each
# check ({"answer", "check", "index", and "entry" the first time a function is handed over}), which the worker
# reads from the autograded notebook and removes before the feedback is written.
MIME = "application/vnd.donation-lab.handover+json"
MAX_PROGRAM_CHARS = 1 << 20   # one program's StableHLO text
MAX_HANDOVER_BYTES = 8 << 20  # one answer's hand-over, all its outputs together
MAX_FUNCTIONS = 64            # function objects handed over for one answer


@dataclass(frozen=True)
class Answer:
    name: str          # the hand-over file's stem
    function: str      # the learner's name for the jax.jit function
    module: str        # the hidden module whose checks judge it in the kernel
    signatures: tuple  # the referee's signature keys (see signature_key)
    spelled: str       # how the shape it must have is said to the learner


# update_with_donate(state, delta): two 1-D arrays of one dtype and length
EXERCISE = Answer(
    "exercise", "update_with_donate", "exercise",
    (("float32", 0), ("float32", 2), ("float32", 1 << 20), ("int32", 1000), ("bfloat16", 13)),
    "update_with_donate must be made by jax.jit, for example "
    "`update_with_donate = jax.jit(f, donate_argnums=(0,))` or the `@functools.partial(jax.jit, "
    "donate_argnums=(0,))` decorator on a def: the grader reads the program a jax.jit function lowers to")

# train_step(params, opt_state, x, y): params {"w": f32[3], "b": f32[]}, opt_state {"m": like params,
# "count": i32[]}, a batch of n rows
CAPSTONE = Answer(
    "capstone", "train_step", "capstone", (2, 8),
    "train_step must be made by jax.jit, for example `train_step = jax.jit(step, donate_argnames=("
    "\"params\", \"opt_state\"))`: the grader reads the program a jax.jit function lowers to")

ANSWERS = {a.name: a for a in (EXERCISE, CAPSTONE)}

# (hidden module, check function) -> (answer, the check's name as its ✔/✘ lines say it)
CHECKS = {
    ("exercise", "check_example"): ("exercise", "worked example"),
    ("exercise", "check_values"): ("exercise", "values"),
    ("exercise", "check_invalidation"): ("exercise", "state is donated, delta is kept"),
    ("exercise", "check_real_donation"): ("exercise", "result reuses state's buffer"),
    ("exercise", "check_training_loop"): ("exercise", "training loop"),
    ("capstone", "check_example"): ("capstone", "capstone worked example"),
    ("capstone", "check_values"): ("capstone", "capstone values"),
    ("capstone", "check_deleted"): ("capstone", "capstone donated leaves"),
    ("capstone", "check_reuse"): ("capstone", "capstone buffer reuse"),
    ("capstone", "check_loop"): ("capstone", "capstone training loop"),
}
# judged in the kernel only: Python-level behaviour (which buffers init_opt_state's leaves share; what
# hunt_nans does to jax's config and train_step's cache) that no program shows
KERNEL_ONLY = {("capstone", "check_untied"), ("capstone", "check_nan_hunt")}


def signature_key(answer: Answer, signature) -> str:
    """The name of one signature in the hand-over: 'float32[2]' (exercise), 'n=8' (capstone)."""
    if answer is EXERCISE:
        dtype, length = signature
        return f"{dtype}[{length}]"
    return f"n={signature}"
