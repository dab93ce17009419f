"""Hidden checks for exercise 7 (`update_with_donate`), run only at grading.

Each check prints one line, `✔ <check name>: <learner message>`, on a pass and
raises `HiddenCheckFailed` (an AssertionError, so nbgrader scores the cell as
failed) with a message for the learner on a failure. The grade cells of the
notebook call these functions, each with the learner's update_with_donate
(then options); their source is stripped from the feedback.

The referee: each check first hands update_with_donate over as data
(hidden/handover.py: the programs a jax.jit function lowers to), and the
grader judges those programs again where no learner code runs
(grading/referee/); a point needs both passes.

Robustness: the grading kernel imports this module at start-up, BEFORE any
learner code runs, and with it hidden/safe.py, which captures the helpers the
checks call at that moment. Every check (by `@check`) first puts the captured
originals back in place of any learner redefinition (np.allclose,
np.testing.assert_allclose, jnp.allclose, builtins such as len/isinstance/
abs/all, ...), and the checks only ever call the captured references and
ndarray methods, never a name looked up in the learner's namespace.
"""
from os import environ as _environ
from os import urandom as _urandom

from donation_course.hidden.handover import hand_over
from donation_course.hidden.safe import (  # the builtins among these shadow the live ones on purpose
    Exception,
    HiddenCheckFailed,
    JitFunction,
    RuntimeError,
    any,
    asarray,
    bfloat16,
    block_until_ready,
    catch_warnings,
    check,
    clear_caches,
    default_rng,
    device,
    donated_inputs,
    fail,
    float32,
    int,
    int32,
    is_array,
    len,
    live_count,
    np_abs,
    range,
    restore_helpers,
    simplefilter,
    str,
    type,
    zeros,
)

__all__ = ["HiddenCheckFailed", "restore_helpers", "check_example", "check_values", "check_invalidation",
           "check_real_donation", "check_training_loop"]


def _call(update_with_donate, state, delta):
    try:
        return update_with_donate(state, delta)
    except Exception as exc:  # the learner's function raised
        fail(f"update_with_donate raised {type(exc).__name__}: {exc}".splitlines()[0],
             "run the worked example above and make it pass first.")


def _host(array, what):
    """The values of a JAX array on the host, as a NumPy array."""
    if not is_array(array):
        fail(f"{what} should be a JAX array (jax.Array), got {type(array).__name__}.",
             "return state + delta from a function compiled with jax.jit.")
    try:
        return asarray(array)
    except RuntimeError:
        fail(f"{what} cannot be read: its buffer was deleted.",
             "return a new value (state + delta), not a donated input.")


# Shapes: every distinct (length, dtype) costs one compilation of the learner's
# function (~30 ms), so the checks share them: SMALL float32 is the worked
# example's shape and is reused by the invalidation and loop checks, LARGE
# float32 by the buffer check; then the empty array and one length each for
# int32 and bfloat16. Five compilations in all. The inputs are built as
# NumPy arrays (in their final dtype) and copied to the device by
# safe.device, so the checks compile nothing of their own.
SMALL, LARGE = 2, 1 << 20


def _large(rng):
    """LARGE float32 values in [-1, 1): uniform, which is much cheaper to draw than normal."""
    values = rng.random(LARGE, dtype=float32)
    values *= 2
    values -= 1
    return values


# A length drawn at grading time, as the referee draws its own (grading/referee/judge.py): an answer right only at
# the lengths the course names (0, 2, 1 << 20, 1000, 13) fails here as it fails there, so the two verdicts agree
# for it and it is not flagged, only wrong. One length, float32, for the values and the loop (the loop's calls then
# reuse the values check's compiled program): one compilation more than the public lengths alone.
DRAWN_MIN, DRAWN_MAX = 17, 5000
DRAW_SEED_ENV = "DONATION_LAB_DRAW_SEED"  # the course's secret (grading/run/prepare.py draw_secret), set by the grader


def grading_seed() -> int:
    """The seed of what the hidden checks draw at grading time: the course's secret where the grader sets it (the
    same at every grading of the course, so a regrade gives the same scores and messages; no student sees it
    before their grades), else the system's randomness (a learner's own run, serial nbgrader)."""
    seed = _environ.get(DRAW_SEED_ENV, "")
    return int(seed, 16) if seed else int.from_bytes(_urandom(16), "little")


def _drawn():
    """(n, rng): the drawn length, and a generator for the values (grading_seed)."""
    rng = default_rng(grading_seed())
    n = int(rng.integers(DRAWN_MIN, DRAWN_MAX))
    return (n + 1 if n == 1000 else n), rng  # never a length the checks name


def _cases():
    n, rng = _drawn()  # values and a length no answer can know in advance
    normal = lambda n: rng.standard_normal(n, dtype=float32)  # noqa: E731
    yield "float32, 0 elements", zeros((0,), float32), zeros((0,), float32)
    yield f"float32, {SMALL} elements", normal(SMALL), normal(SMALL)
    yield f"float32, {LARGE:,} elements", _large(rng), _large(rng)
    yield "int32, 1000 elements", rng.integers(-1000, 1000, 1000, dtype=int32), \
        rng.integers(-1000, 1000, 1000, dtype=int32)
    yield "bfloat16, 13 elements", normal(13).astype(bfloat16), normal(13).astype(bfloat16)
    yield f"float32, {n} elements (a length drawn at grading time)", normal(n), normal(n)


@check("worked example")
def check_example(update_with_donate) -> str:
    """The worked example, checked with helpers the learner cannot redefine."""
    hand_over("exercise", 'worked example', update_with_donate)  # to the referee, as data
    out = _call(update_with_donate, device(asarray([1.0, 2.0], float32)), device(asarray([0.5, 0.5], float32)))
    got = _host(out, "the result")
    if got.tolist() != [1.5, 2.5]:
        fail(f"update_with_donate([1.0, 2.0], [0.5, 0.5]) gave {got.tolist()}, expected [1.5, 2.5].")
    return "update_with_donate([1.0, 2.0], [0.5, 0.5]) gives [1.5, 2.5]."


@check("values")
def check_values(update_with_donate) -> str:
    """state + delta for many shapes, sizes and dtypes (random data and lengths, drawn at grading time)."""
    hand_over("exercise", 'values', update_with_donate)  # to the referee, as data
    for label, s_np, d_np in _cases():
        state, delta = device(s_np), device(d_np)
        expected = s_np + d_np  # ndarray arithmetic, computed before the call
        out = _call(update_with_donate, state, delta)
        got = _host(out, f"the result for {label}")
        if got.shape != expected.shape:
            fail(f"for {label} the result has shape {got.shape}, expected {expected.shape}.",
                 "add the two arrays element by element; do not reduce or reshape.")
        if got.dtype != expected.dtype:
            fail(f"for {label} the result has dtype {got.dtype}, expected {expected.dtype}.",
                 "state + delta keeps the dtype of its inputs; do not convert it.")
        g, e = got.astype("float64"), expected.astype("float64")
        tol = 1e-2 if label.startswith("bfloat16") else 1e-6
        bad = ~(np_abs(g - e) <= tol * (1.0 + np_abs(e)))  # not `>`: a NaN compares False, and would pass
        if bad.any():
            i = int(bad.argmax())
            fail(f"for {label} element {i} is {g[i]!r}, expected {e[i]!r} (= state[{i}] + delta[{i}]).",
                 "return state + delta.")
    return ("update_with_donate returns state + delta with the right shape and dtype for "
            "float32, bfloat16 and int32 arrays of 0 to 1,048,576 elements.")


@check("state is donated, delta is kept")
def check_invalidation(update_with_donate) -> str:
    """After the call, state is deleted (reading it raises); delta is untouched."""
    hand_over("exercise", 'state is donated, delta is kept', update_with_donate)  # to the referee, as data
    kept = [0.5, -0.25]  # SMALL elements, a shape the worked example already compiled
    state = device(asarray([1.0, 2.0], float32))
    delta = device(asarray(kept, float32))
    out = _call(update_with_donate, state, delta)
    block_until_ready(out)
    if not state.is_deleted():
        fail("after update_with_donate(state, delta), state is still alive, so its buffer was "
             "not donated.", "ask jax.jit to donate state, the first argument (lesson 1 shows how).")
    try:
        asarray(state)
    except RuntimeError:
        pass
    else:
        fail("reading the donated state did not raise RuntimeError.")
    if delta.is_deleted():
        fail("delta was deleted too: only state may be donated.",
             "donate state only: the caller reads delta again (lesson 2).")
    if asarray(delta).tolist() != kept:
        fail("delta changed during the call.", "do not modify delta.")
    if _asks_to_donate_delta(update_with_donate):
        fail("delta is marked for donation too. With one output JAX can reuse only one buffer, so "
             "it left delta alive this time (with a warning), but the specification says delta must not "
             "be donated.", "donate state only: the caller reads delta again (lesson 2).")
    return ("after the call, state is deleted (reading it raises RuntimeError) and delta is "
            "still valid and unchanged.")


def _asks_to_donate_delta(update_with_donate) -> bool:
    """Whether update_with_donate requests donation of delta, which
    is_deleted() cannot see when JAX has no output left for it. The call is
    traced first (safe.donated_inputs: what jax.jit decided, which a `lower`
    attribute, a jit function's copied attributes or warning filters set by
    the learner's own code cannot change); anything but a jax.jit function
    that the trace does not convict (it may trace otherwise than it runs) is
    then called on a fresh shape while JAX's 'Some donated buffers were not
    usable' warning is listened for. (checks.donation_request reads the lowering for
    the public checks; this one uses only references captured before learner
    code ran.)"""
    flags = donated_inputs(update_with_donate, device(zeros((SMALL,), float32)), device(zeros((SMALL,), float32)))
    if flags is not None and len(flags) == 2 and (flags[1] or type(update_with_donate) is JitFunction):
        return flags[1]  # a jit function's own equation is what it does; other code may trace otherwise
    clear_caches()  # the warning comes at lowering, once per program: lower afresh
    with catch_warnings(record=True) as caught:
        simplefilter("always")
        _call(update_with_donate, device(zeros((3,), float32)), device(zeros((3,), float32)))
    return any("donated buffers were not usable" in str(w.message) for w in caught)


@check("result reuses state's buffer")
def check_real_donation(update_with_donate) -> str:
    """The result occupies the buffer state had (unsafe_buffer_pointer), which state gave up (it is deleted):
    an answer that returns state itself, donating nothing, has that pointer too."""
    hand_over("exercise", "result reuses state's buffer", update_with_donate)  # to the referee, as data
    state = device(_large(default_rng(1)))
    delta = device(_large(default_rng(2)))
    block_until_ready(state)
    pointer, delta_pointer = state.unsafe_buffer_pointer(), delta.unsafe_buffer_pointer()
    out = _call(update_with_donate, state, delta)
    if not is_array(out):
        fail(f"the result should be a JAX array, got {type(out).__name__}.")
    block_until_ready(out)
    if not state.is_deleted():  # state itself returned, or copied in place: its buffer was never given up
        fail("state is still alive after the call: nothing was donated, so the result cannot have taken "
             "its buffer.",
             "ask jax.jit to donate state, and return a new array of state's shape and dtype (lesson 1).")
    got = out.unsafe_buffer_pointer()
    if got == delta_pointer:
        fail("the result was written into delta's buffer, not state's.",
             "donate state, the first argument, not delta (lesson 2).")
    if got != pointer:
        fail("the result was written into a new buffer, so XLA did not reuse state's memory.",
             "ask jax.jit to donate state, and return a new array of state's shape and dtype (lesson 1).")
    return "the result occupies the very buffer that state had: no new allocation."


@check("training loop")
def check_training_loop(update_with_donate, steps: int = 50) -> str:
    """`state = update_with_donate(state, delta)` in a loop does not grow live buffers."""
    hand_over("exercise", 'training loop', update_with_donate)  # to the referee, as data
    n, rng = _drawn()  # the values check's drawn length: its compiled program is reused
    delta = device(rng.standard_normal(n, dtype=float32))
    state = device(zeros((n,), float32))
    first = _call(update_with_donate, state, delta)  # warm-up call (compile)
    if not is_array(first):
        fail(f"update_with_donate should return a JAX array, got {type(first).__name__}.")
    state, history = block_until_ready(first), []
    before = live_count()
    for _ in range(steps):
        previous = state
        state = _call(update_with_donate, state, delta)
        if not is_array(state):
            fail(f"update_with_donate should return a JAX array, got {type(state).__name__}.")
        if not previous.is_deleted():
            history.append(previous)  # kept alive on purpose: the caller would hold it
    block_until_ready(state)
    after = live_count()
    if history or after > before:
        fail(f"over {steps} steps of state = update_with_donate(state, delta) the number of JAX arrays alive "
             f"in the notebook went from {before} to {after}: each step kept the old state alive and added "
             "a new array.",
             "donate state so each step reuses its buffer.")
    expected = asarray(delta).astype("float64") * (steps + 1)
    got = asarray(state).astype("float64")
    if not (np_abs(got - expected) <= 1e-3 * (1.0 + np_abs(expected))).all():  # a NaN fails
        fail(f"after {steps + 1} steps the state is not {steps + 1} * delta.")
    return (f"over {steps} steps of state = update_with_donate(state, delta) the number of JAX arrays alive "
            f"in the notebook stayed at {before}: each step reused the donated buffer instead of adding a new one.")
