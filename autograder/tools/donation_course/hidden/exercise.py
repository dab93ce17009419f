"""Hidden checks for exercise 7 (`update_with_donate`), run only at grading.

Each check prints one line, `✔ <check name>: <learner message>`, on a pass and
raises `HiddenCheckFailed` (an AssertionError, so nbgrader scores the cell as
failed) with a message for the learner on a failure. The grade cells of the
notebook call these functions; their source is stripped from the feedback.

Robustness: the exercise's locked setup cell imports this module BEFORE any
learner code runs, so the helpers below are captured here at that moment.
Before every check the module puts the captured originals back in place of
any learner redefinition (np.allclose, np.testing.assert_allclose,
jnp.allclose, builtins such as len/isinstance/abs/all, ...), and the checks
themselves only ever call the captured references and ndarray methods, never
a name looked up in the learner's namespace.
"""
import builtins
import sys
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpy.testing

# --- captured at import (setup-cell) time -------------------------------------
_GUARDED = {
    (np, "allclose"), (np, "isclose"), (np, "array_equal"), (np, "array_equiv"),
    (np, "asarray"), (np, "array"), (np, "abs"), (np, "all"), (np, "any"),
    (np, "zeros"), (np, "ones"), (np, "arange"), (np, "dtype"), (np, "float32"), (np, "int32"),
    (numpy.testing, "assert_allclose"), (numpy.testing, "assert_array_equal"),
    (numpy.testing, "assert_equal"), (numpy.testing, "assert_array_almost_equal"),
    (jnp, "allclose"), (jnp, "array_equal"), (jnp, "isclose"), (jnp, "asarray"), (jnp, "array"),
    (jnp, "zeros"), (jnp, "ones"), (jnp, "arange"), (jnp, "float32"), (jnp, "bfloat16"), (jnp, "int32"),
    (jax, "live_arrays"), (jax, "device_get"), (jax, "block_until_ready"), (jax.random, "PRNGKey"),
    (jax.random, "key"), (jax.random, "normal"), (jax.random, "randint"),
}
_GUARDED |= {(builtins, name) for name in (
    "len", "isinstance", "issubclass", "abs", "all", "any", "min", "max", "sum", "range", "print",
    "repr", "str", "int", "float", "bool", "type", "getattr", "hasattr", "id", "list", "tuple",
    "zip", "enumerate", "sorted", "round", "AssertionError", "RuntimeError", "Exception")}
_ORIGINAL = {(mod.__name__, name): (mod, name, getattr(mod, name)) for mod, name in _GUARDED
             if hasattr(mod, name)}

_len, _isinstance, _print, _range = len, isinstance, print, range
_asarray, _np_abs, _np_zeros = np.asarray, np.abs, np.zeros
_np_float32, _np_int32 = np.float32, np.int32
_device_put, _np_empty, _np_uint8 = jax.device_put, np.empty, np.uint8
_live_arrays, _block = jax.live_arrays, jax.block_until_ready
_Array = jax.Array
_bfloat16 = jnp.bfloat16
_RNG = np.random.default_rng  # a class method, looked up once here
_catch_warnings, _simplefilter = warnings.catch_warnings, warnings.simplefilter
_tree_leaves = jax.tree.leaves
_clear_caches = jax.clear_caches


class HiddenCheckFailed(AssertionError):
    """A hidden check failed; the message is meant for the learner."""


def restore_helpers() -> list:
    """Put back every guarded helper a learner replaced; return their names."""
    replaced = []
    for (modname, name), (mod, attr, original) in _ORIGINAL.items():
        if getattr(mod, attr, None) is not original:
            setattr(mod, attr, original)
            replaced.append(f"{modname}.{name}")
    return sorted(replaced)


def _ok(check: str, message: str) -> None:
    _print(f"\u2714 {check}: {message}")


def _fail(check: str, message: str, hint: str = "") -> None:
    raise HiddenCheckFailed(f"\u2718 {check}: {message}" + (f"\nHint: {hint}" if hint else ""))


def _guard() -> None:
    restore_helpers()


def _call(check, fn, state, delta):
    try:
        return fn(state, delta)
    except Exception as exc:  # the learner's function raised
        _fail(check, f"update_with_donate raised {type(exc).__name__}: {exc}".splitlines()[0],
              "run the worked example above and make it pass first.")


def _require_function(check, fn):
    if not callable(fn):
        _fail(check, f"update_with_donate should be a function, not {type(fn).__name__}.")


def _host(check, array, what):
    """The values of a JAX array on the host, as a NumPy array."""
    if not _isinstance(array, _Array):
        _fail(check, f"{what} should be a JAX array (jax.Array), got {type(array).__name__}.",
              "return state + delta from a function compiled with jax.jit.")
    try:
        return _asarray(array)
    except RuntimeError:
        _fail(check, f"{what} cannot be read: its buffer was deleted.",
              "return a new value (state + delta), not a donated input.")


# Shapes: every distinct (length, dtype) costs one compilation of the learner's
# function (~30 ms), so the checks share them: SMALL float32 is the worked
# example's shape and is reused by the invalidation and loop checks, LARGE
# float32 by the buffer check; then the empty array and one length each for
# int32 and bfloat16. Five compilations in all. The inputs are built as
# NumPy arrays (in their final dtype) and copied to the device by _device, so
# the checks compile nothing of their own.
SMALL, LARGE = 2, 1 << 20


def _device(values):
    """A JAX array with a copy of `values` (NumPy) in a buffer XLA owns.

    Not plain jax.device_put: on CPU it may alias a NumPy array whose data is
    64-byte aligned instead of copying it (even with may_alias=False), and XLA
    cannot reuse an aliased buffer, so a correct answer would fail the buffer
    check whenever the allocator happened to align the array (measured on the
    pinned jax). Not jnp.asarray either: it always copies, but compiles a copy
    program for every new shape (~7 ms each). So: copy `values` to a host
    buffer that starts one element past a 64-byte boundary, which XLA can
    never alias, and device_put that.
    """
    raw = _np_empty(values.nbytes + 128, _np_uint8)
    start = (-raw.ctypes.data) % 64 + values.itemsize
    host = raw[start:start + values.nbytes].view(values.dtype)
    host[...] = values
    return _device_put(host)


def _large(rng):
    """LARGE float32 values in [-1, 1): uniform, which is much cheaper to draw than normal."""
    values = rng.random(LARGE, dtype=_np_float32)
    values *= 2
    values -= 1
    return values


def _cases():
    rng = _RNG(7)
    normal = lambda n: rng.standard_normal(n, dtype=_np_float32)  # noqa: E731
    yield "float32, 0 elements", _np_zeros((0,), _np_float32), _np_zeros((0,), _np_float32)
    yield f"float32, {SMALL} elements", normal(SMALL), normal(SMALL)
    yield f"float32, {LARGE:,} elements", _large(rng), _large(rng)
    yield "int32, 1000 elements", rng.integers(-1000, 1000, 1000, dtype=_np_int32), \
        rng.integers(-1000, 1000, 1000, dtype=_np_int32)
    yield "bfloat16, 13 elements", normal(13).astype(_bfloat16), normal(13).astype(_bfloat16)


def check_values(fn) -> None:
    """state + delta for many shapes, sizes and dtypes (random data, fixed seed)."""
    _guard()
    check = "values"
    _require_function(check, fn)
    for label, s_np, d_np in _cases():
        state, delta = _device(s_np), _device(d_np)
        expected = s_np + d_np  # ndarray arithmetic, computed before the call
        out = _call(check, fn, state, delta)
        got = _host(check, out, f"the result for {label}")
        if got.shape != expected.shape:
            _fail(check, f"for {label} the result has shape {got.shape}, expected {expected.shape}.",
                  "add the two arrays element by element; do not reduce or reshape.")
        if got.dtype != expected.dtype:
            _fail(check, f"for {label} the result has dtype {got.dtype}, expected {expected.dtype}.",
                  "state + delta keeps the dtype of its inputs; do not convert it.")
        g, e = got.astype("float64"), expected.astype("float64")
        tol = 1e-2 if label.startswith("bfloat16") else 1e-6
        bad = (_np_abs(g - e) > tol * (1.0 + _np_abs(e)))
        if bad.any():
            i = int(bad.argmax())
            _fail(check, f"for {label} element {i} is {g[i]!r}, expected {e[i]!r} (= state[{i}] + delta[{i}]).",
                  "return state + delta.")
    _ok(check, "update_with_donate returns state + delta with the right shape and dtype for "
        "float32, bfloat16 and int32 arrays of 0 to 1,048,576 elements.")


def check_invalidation(fn) -> None:
    """After the call, state is deleted (reading it raises); delta is untouched."""
    _guard()
    check = "state is donated, delta is kept"
    _require_function(check, fn)
    kept = [0.5, -0.25]  # SMALL elements, a shape the worked example already compiled
    state = _device(_asarray([1.0, 2.0], _np_float32))
    delta = _device(_asarray(kept, _np_float32))
    out = _call(check, fn, state, delta)
    _block(out)
    if not state.is_deleted():
        _fail(check, "after update_with_donate(state, delta), state is still alive, so its buffer was "
              "not donated.", "compile with jax.jit(..., donate_argnums=(0,)): argument 0 is state.")
    try:
        _asarray(state)
    except RuntimeError:
        pass
    else:
        _fail(check, "reading the donated state did not raise RuntimeError.")
    if delta.is_deleted():
        _fail(check, "delta was deleted too: only state may be donated.",
              "donate argument 0 only: donate_argnums=(0,).")
    if _asarray(delta).tolist() != kept:
        _fail(check, "delta changed during the call.", "do not modify delta.")
    if _asks_to_donate_delta(check, fn):
        _fail(check, "delta is marked for donation too. With one output JAX can reuse only one buffer, so "
              "it left delta alive this time (with a warning), but the specification says delta must not "
              "be donated.", "donate argument 0 only: donate_argnums=(0,).")
    _ok(check, "after the call, state is deleted (reading it raises RuntimeError) and delta is "
        "still valid and unchanged.")


def _asks_to_donate_delta(check, fn) -> bool:
    """Whether fn requests donation of delta, which is_deleted() cannot see
    when JAX has no output left for it. A jax.jit function says so in its
    lowering (nothing runs); anything else is called on a fresh shape while
    JAX's 'Some donated buffers were not usable' warning is listened for.
    (checks.donation_request reads the lowering the same way for the public
    checks; this one uses only references captured before learner code ran.)"""
    lower = getattr(fn, "lower", None)
    if lower is not None:
        try:
            positional = lower(_device(_np_zeros((SMALL,), _np_float32)),
                               _device(_np_zeros((SMALL,), _np_float32))).args_info[0]
        except Exception:
            positional = None
        if positional is not None and _len(positional) == 2:
            return any(leaf.donated for leaf in _tree_leaves(positional[1]))
    _clear_caches()  # the warning comes at lowering, once per program: lower afresh
    with _catch_warnings(record=True) as caught:
        _simplefilter("always")
        _call(check, fn, _device(_np_zeros((3,), _np_float32)), _device(_np_zeros((3,), _np_float32)))
    return any("donated buffers were not usable" in str(w.message) for w in caught)


def check_real_donation(fn) -> None:
    """The result occupies the buffer state had (unsafe_buffer_pointer)."""
    _guard()
    check = "result reuses state's buffer"
    _require_function(check, fn)
    state = _device(_large(_RNG(1)))
    delta = _device(_large(_RNG(2)))
    _block(state)
    pointer, delta_pointer = state.unsafe_buffer_pointer(), delta.unsafe_buffer_pointer()
    out = _call(check, fn, state, delta)
    if not _isinstance(out, _Array):
        _fail(check, f"the result should be a JAX array, got {type(out).__name__}.")
    _block(out)
    got = out.unsafe_buffer_pointer()
    if got == delta_pointer:
        _fail(check, "the result was written into delta's buffer, not state's.",
              "donate state (argument 0), not delta: donate_argnums=(0,).")
    if got != pointer:
        _fail(check, "the result was written into a new buffer, so XLA did not reuse state's memory.",
              "compile with jax.jit(..., donate_argnums=(0,)) and return state + delta.")
    _ok(check, "the result occupies the very buffer that state had: no new allocation.")


def check_training_loop(fn, steps: int = 50) -> None:
    """`state = update_with_donate(state, delta)` in a loop does not grow live buffers."""
    _guard()
    check = "training loop"
    _require_function(check, fn)
    delta = _device(_RNG(3).standard_normal(SMALL, dtype=_np_float32))
    state = _device(_np_zeros((SMALL,), _np_float32))
    first = _call(check, fn, state, delta)  # warm-up call (compile)
    if not _isinstance(first, _Array):
        _fail(check, f"update_with_donate should return a JAX array, got {type(first).__name__}.")
    state, history = _block(first), []
    before = _len(_live_arrays())
    for step in _range(steps):
        previous = state
        state = _call(check, fn, state, delta)
        if not _isinstance(state, _Array):
            _fail(check, f"update_with_donate should return a JAX array, got {type(state).__name__}.")
        if not previous.is_deleted():
            history.append(previous)  # kept alive on purpose: the caller would hold it
    _block(state)
    after = _len(_live_arrays())
    if history or after > before:
        _fail(check, f"after {steps} steps of state = update_with_donate(state, delta) the number of live "
              f"buffers went from {before} to {after}: each step kept the old state alive.",
              "donate state so each step reuses its buffer.")
    expected = _asarray(delta).astype("float64") * (steps + 1)
    got = _asarray(state).astype("float64")
    if (_np_abs(got - expected) > 1e-3 * (1.0 + _np_abs(expected))).any():
        _fail(check, f"after {steps + 1} steps the state is not {steps + 1} * delta.")
    _ok(check, f"{steps} loop steps rebinding state kept the number of live buffers at {before}.")


def check_example(fn) -> None:
    """The worked example, checked with helpers the learner cannot redefine."""
    _guard()
    check = "worked example"
    _require_function(check, fn)
    out = _call(check, fn, _device(_asarray([1.0, 2.0], _np_float32)), _device(_asarray([0.5, 0.5], _np_float32)))
    got = _host(check, out, "the result")
    if got.tolist() != [1.5, 2.5]:
        _fail(check, f"update_with_donate([1.0, 2.0], [0.5, 0.5]) gave {got.tolist()}, expected [1.5, 2.5].")
    _ok(check, "update_with_donate([1.0, 2.0], [0.5, 0.5]) gives [1.5, 2.5].")


def report_tampering() -> None:
    """Print (for the grader's record) which helpers the learner replaced."""
    replaced = restore_helpers()
    if replaced:
        _print("note: the notebook replaced " + ", ".join(replaced) + "; the originals were restored "
               "before checking.", file=sys.stderr)
