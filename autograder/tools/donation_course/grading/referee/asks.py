"""What the referee asks the learner's kernel for, as plain data (no JAX here:
the grader's process reads it, the grading kernel's hand-over and the
referee's judge both build on it).

An answer is handed over as the programs its jax.jit function lowers to, one
per signature below, each with its donation request (one flag per flat
argument: what the function asked to donate, which JAX keeps in the program
only where an output can take the buffer; a signature with the length
SYMBOLIC as the one program jax.export lowers for every length, run by the
referee at lengths it draws), or (VALUES answers) as values:
arrays as their dtype, shape and raw bytes, strings as text, never pickles.
The referee judges the grade cells that call a function in CHECKS (a hidden
check of lesson 3 or 7, or a hand-over of hidden/lessons.py in lessons 1, 2,
4, 5 and 6); KERNEL_ONLY lists the rest (Python-level behaviour, or state of
the learner's kernel, that no program, request or value shows), which rests
on the kernel's checks alone.
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
MAX_LEAVES = 64               # flat arguments of one call (its donation request's flags)


PROGRAMS, VALUES = "programs", "values"  # what an answer is handed over as


@dataclass(frozen=True, eq=False)  # equal and hashed by identity: its Calls hold dicts
class Answer:
    name: str          # the hand-over file's stem
    function: str      # the learner's name for the jax.jit function (or the values, VALUES)
    module: str        # the hidden module whose checks judge it in the kernel
    signatures: tuple  # the referee's signature keys (see signature_key), or Calls
    spelled: str       # how the shape it must have is said to the learner
    kind: str = PROGRAMS
    arguments: tuple = ()  # the learner function's parameter names (Call answers)
    devices: int = 1       # the CPU devices its programs run on (lesson 6: 8)


@dataclass(frozen=True, eq=False)
class Call:
    """One call the referee asks a jax.jit answer to be lowered for: each argument an array spec
    ("float32[2,2]", "float32[]") or a dict of them (a tree), given by position (args) or by keyword
    (kwargs: (name, spec) pairs). The program's flat arguments are in JAX's order (flat_specs)."""
    key: str
    args: tuple = ()
    kwargs: tuple = ()


def _leaves(path: str, spec) -> list:
    if isinstance(spec, dict):
        return [leaf for k in sorted(spec) for leaf in _leaves(f"{path}[{k!r}]", spec[k])]
    return [(path, spec)]


def flat_specs(call: Call, names: tuple) -> list:
    """[(name, "dtype[shape]")] of the call's array arguments, flattened as jax.jit flattens (args, kwargs):
    positional arguments in order (named by `names`), then keyword arguments by sorted name, dict keys
    sorted."""
    flat = [leaf for name, spec in zip(names, call.args, strict=False) for leaf in _leaves(name, spec)]
    return flat + [leaf for name, spec in sorted(call.kwargs) for leaf in _leaves(name, spec)]


SPLIT = "@x"  # a spec's suffix: laid out split along the axis "x" of an 8-device mesh of Auto axes (lesson 6)


# A length the grader does not tell: a signature of the exercise ("float32", SYMBOLIC), of the capstone (SYMBOLIC
# rows), or a Call whose specs have the dimension SYMBOLIC ("float32[n]", "float32[n,4]") is handed over as the one
# program jax.export lowers for every length n >= 1 (jax.export.symbolic_shape("n")), and the referee runs it at
# lengths it draws itself at grading time (judge.py), which no trace-time Python in the learner's kernel ever sees.
SYMBOLIC = "n"


def parse_spec(spec: str) -> tuple:
    """'float32[2,2]' -> ('float32', (2, 2)); 'float32[16]@x' -> ('float32', (16,)); 'float32[n,4]' ->
    ('float32', ('n', 4)) (SYMBOLIC stays a str)."""
    dtype, dims = spec.removesuffix(SPLIT)[:-1].split("[")
    return dtype, tuple(d if d == SYMBOLIC else int(d) for d in dims.split(",") if d)


def sized(spec: str, length: int) -> str:
    """A spec with its SYMBOLIC dimensions made `length`: 'float32[n,4]' -> 'float32[7,4]'."""
    dtype, shape = parse_spec(spec)
    return f"{dtype}[{','.join(str(length if d == SYMBOLIC else d) for d in shape)}]"


def is_symbolic(signature) -> bool:
    if isinstance(signature, Call):
        return any(SYMBOLIC in parse_spec(spec)[1] for _, spec in flat_specs(signature, ("",) * len(signature.args)))
    if isinstance(signature, tuple):
        return len(signature) == 2 and signature[1] == SYMBOLIC
    return signature == SYMBOLIC


# update_with_donate(state, delta): two 1-D arrays of one dtype and length; the public lengths (the worked example's
# 2, the buffer-reuse check's 1 << 20, ...) and, for the values, every length n (SYMBOLIC)
EXERCISE = Answer(
    "exercise", "update_with_donate", "exercise",
    (("float32", 0), ("float32", 2), ("float32", 1 << 20), ("int32", 1000), ("bfloat16", 13),
     ("float32", SYMBOLIC), ("int32", SYMBOLIC), ("bfloat16", SYMBOLIC)),
    "update_with_donate must be made by jax.jit, for example "
    "`update_with_donate = jax.jit(f, donate_argnums=(0,))` or the `@functools.partial(jax.jit, "
    "donate_argnums=(0,))` decorator on a def: the grader reads the program a jax.jit function lowers to")

# train_step(params, opt_state, x, y): params {"w": f32[3], "b": f32[]}, opt_state {"m": like params,
# "count": i32[]}, a batch of n rows
CAPSTONE = Answer(
    "capstone", "train_step", "capstone", (2, 8, SYMBOLIC),
    "train_step must be made by jax.jit, for example `train_step = jax.jit(step, donate_argnames=("
    "\"params\", \"opt_state\"))`: the grader reads the program a jax.jit function lowers to")

# Lessons 1, 2 and 4: jax.jit functions, handed over (hidden/lessons.py) at the end of their public check's cell
_SHAPE = ("{f} must be made by jax.jit, for example `{f} = jax.jit(f, {opt})` or the "
          "`@functools.partial(jax.jit, {opt})` decorator on a def: the grader reads the program a jax.jit "
          "function lowers to")
TRAIN_STEP = Answer(  # lesson 1: train_step(params, grads) = params - 0.5 * grads, params donated
    "l1-train-step", "train_step", "lessons",
    (Call("float32[3]", ("float32[3]", "float32[3]")), Call("float32[2,2]", ("float32[2,2]", "float32[2,2]")),
     Call("float32[n]", ("float32[n]", "float32[n]"))),
    _SHAPE.format(f="train_step", opt="donate_argnums=0"), arguments=("params", "grads"))
APPLY_DELTA = Answer(  # lesson 2: apply_delta(state, delta) = state + delta, state donated by name
    "l2-apply-delta", "apply_delta", "lessons",
    (Call("float32[2]", ("float32[2]", "float32[2]")),
     Call("state=float32[1], delta=float32[1]", (), (("state", "float32[1]"), ("delta", "float32[1]"))),
     Call("float32[n]", ("float32[n]", "float32[n]"))),
    _SHAPE.format(f="apply_delta", opt='donate_argnames="state"'), arguments=("state", "delta"))
_TREE = {"w": "float32[2]", "b": "float32[]"}
SGD_UPDATE = Answer(  # lesson 4: sgd_update(params, grads) on {"w", "b"} trees, params donated
    "l4-sgd-update", "sgd_update", "lessons",
    (Call("w=float32[2], b=float32[]", (_TREE, _TREE)),
     Call("w=float32[5], b=float32[]", ({"w": "float32[5]", "b": "float32[]"},) * 2),
     Call("w=float32[n], b=float32[]", ({"w": "float32[n]", "b": "float32[]"},) * 2)),
    _SHAPE.format(f="sgd_update", opt='donate_argnames="params"'), arguments=("params", "grads"))

# lesson 3: fixed_step(batch, params, opt_state) -> (params, opt_state, loss), batch {"x": f32[32,4], "y": f32[32]},
# params {"w": f32[4], "b": f32[]}, opt_state {"m": like params}; handed over by hidden/debugging.py's checks
_PARAMS3 = {"w": "float32[4]", "b": "float32[]"}
FIXED_STEP = Answer(
    "l3-fixed-step", "fixed_step", "debugging",
    (Call("n=32", ({"x": "float32[32,4]", "y": "float32[32]"}, _PARAMS3, {"m": _PARAMS3})),
     Call("n rows", ({"x": "float32[n,4]", "y": "float32[n]"}, _PARAMS3, {"m": _PARAMS3}))),
    "fixed_step must be made by jax.jit, for example `fixed_step = jax.jit(step_fn, donate_argnames=(...))`: the "
    "grader reads the program a jax.jit function lowers to", arguments=("batch", "params", "opt_state"))

# lesson 5: values, handed over as data (an array as its dtype, shape and bytes; a str as its text)
MAX_VALUE_BYTES = 1 << 16  # one value handed over
Y_OUT = Answer("l5-y-out", "y_out", "lessons", ("y_out",),
               "y_out must be the JAX array scale(y_in) returns", kind=VALUES)
NAN_MESSAGE = Answer("l5-find-nan", "find_nan", "lessons", ("message",),
                     "find_nan must return the text of the error (a str), as str(exc) gives it", kind=VALUES)
# find_nan is judged on steps the grading kernel makes at grading time (hidden/lessons.py): NAN_PICKED of these
# operations, drawn from the OS's randomness, each a step params - 0.1 * op(grad) with a grad that makes it NaN.
# jax names the operation in its debug_nans error ("invalid value (nan) encountered in log"), so a constant text
# cannot name them all.
NAN_OPS = ("log", "sqrt", "div", "asin", "acos", "log1p")
NAN_PICKED = 2

# lesson 6: jax.jit functions over an 8-device mesh (split = P("x")), judged on the referee's 8 CPU devices
SHIFT_SPLIT = Answer(  # shift_split(v) = v + 1, laid out as split in and out whatever the caller passes, v donated
    "l6-shift-split", "shift_split", "lessons", (Call("float32[16]", ("float32[16]",)),),
    "shift_split must be made by jax.jit, for example `shift_split = jax.jit(f, in_shardings=split, "
    "out_shardings=split, donate_argnums=0)`: the grader reads the program a jax.jit function lowers to",
    arguments=("v",), devices=8)
QUIET_FIXED = Answer(  # quiet_fixed(v) = 2 v, constrained to the input's split layout, v donated
    "l6-quiet-fixed", "quiet_fixed", "lessons", (Call("float32[16]@x", ("float32[16]@x",)),),
    "quiet_fixed must be made by jax.jit, for example `quiet_fixed = jax.jit(f, donate_argnums=0)`: the grader "
    "reads the program a jax.jit function lowers to", arguments=("v",), devices=8)

ANSWERS = {a.name: a for a in (EXERCISE, CAPSTONE, TRAIN_STEP, APPLY_DELTA, SGD_UPDATE, FIXED_STEP, Y_OUT,
                               NAN_MESSAGE, SHIFT_SPLIT, QUIET_FIXED)}

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
CHECKS.update({  # lesson 3's debugging exercise
    ("debugging", "check_example"): ("l3-fixed-step", "fixed_step worked example"),
    ("debugging", "check_values"): ("l3-fixed-step", "fixed_step values and batch"),
    ("debugging", "check_donated"): ("l3-fixed-step", "fixed_step donated leaves"),
    ("debugging", "check_reuse_and_loop"): ("l3-fixed-step", "fixed_step buffer reuse and loop"),
})
# lessons 1, 2, 4, 5 and 6 (hidden/lessons.py's hand-overs; the kernel's checks are the cell's public ones)
CHECKS.update({
    ("lessons", "hand_over_train_step"): ("l1-train-step", "train_step (lesson 1)"),
    ("lessons", "hand_over_apply_delta"): ("l2-apply-delta", "apply_delta (lesson 2)"),
    ("lessons", "hand_over_sgd_update"): ("l4-sgd-update", "sgd_update (lesson 4)"),
    ("lessons", "hand_over_y_out"): ("l5-y-out", "y_out (lesson 5)"),
    ("lessons", "hand_over_nan_message"): ("l5-find-nan", "find_nan's message (lesson 5)"),
    ("lessons", "hand_over_shift_split"): ("l6-shift-split", "shift_split (lesson 6)"),
    ("lessons", "hand_over_quiet_fixed"): ("l6-quiet-fixed", "quiet_fixed (lesson 6)"),
})
# Judged in the kernel only, with the reason: Python-level behaviour, or state of the learner's kernel, that no
# program, donation request or value handed over shows. Keys: (hidden module, check) for a whole hidden check;
# ("lesson", grade id) for a graded self-check of lessons 1 to 6, or the part of one, that the referee cannot judge.
# (A request JAX drops, such as lesson 3's batch or lessons 1 and 4's grads, is judged: it is handed over with
# each program.)
KERNEL_ONLY = {
    ("capstone", "check_untied"): "which buffers init_opt_state's leaves share, in the kernel",
    ("capstone", "check_nan_hunt"): "what hunt_nans does to jax's config and to train_step's cache",
    ("lesson", "l4-q2-check"): "untied_params: whether its leaves share one buffer in the kernel (its values are "
                               "zeros either way)",
    ("lesson", "l5-q1-check"): "y_in deleted, scale's cached program cleared and debug_nans off: state of the "
                               "kernel; the referee judges y_out's value",
    ("lesson", "l5-q2-check"): "how find_nan runs step (a new jax.jit, not op by op), that it leaves params "
                               "undonated and debug_nans off; the referee judges what it returns on steps the "
                               "grading kernel makes at grading time (NAN_OPS)",
}


def signature_key(answer: Answer, signature) -> str:
    """The name of one signature in the hand-over: 'float32[2]' (exercise), 'n=8' (capstone)."""
    if isinstance(signature, Call):
        return signature.key
    if answer is EXERCISE:
        dtype, length = signature
        return f"{dtype}[{length}]"
    return f"n={signature}"


def flat_names(answer: Answer, signature) -> list:
    """The names of one signature's flat arguments, in JAX's order: one flag each in the donation request."""
    if isinstance(signature, Call):
        return [path for path, _ in flat_specs(signature, answer.arguments)]
    if answer is EXERCISE:
        return ["state", "delta"]
    return ["params['b']", "params['w']", "opt_state['count']", "opt_state['m']['b']", "opt_state['m']['w']",
            "x", "y"]
