"""Safe helpers for the hidden checks: references captured before any
learner code runs, the pass and fail lines, and the `@check` decorator.

The grading kernel imports hidden/exercise.py, hidden/capstone.py and
hidden/debugging.py at start-up (nbgrader_config.py's exec_lines), and they import this module, so
everything below is captured then, before a submission runs. A check calls
only these captured references (and methods of the arrays it made), never a
name looked up at call time in a module a learner can patch: the builtins
here keep their own names, so `from donation_course.hidden.safe import len`
binds the original len in the checking module, whatever builtins.len is
later. A learner's redefinitions of the guarded helpers (np.allclose,
builtins.all, ...) are put back by restore_helpers, which every check runs
first, for the sake of the public checks that share the grade cells.

Each check prints one line, `✔ <check name>: <message>`, on a pass and raises
HiddenCheckFailed (an AssertionError, so nbgrader scores the cell as failed)
with `✘ <check name>: <message>` for the learner on a failure.
"""
import builtins
import contextlib
import functools
import gc
import inspect
import io
import sys
import warnings
from typing import NoReturn

import jax
import jax.numpy as jnp
import numpy as np
import numpy.testing

# --- put back by restore_helpers before every check ---------------------------
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

# --- captured references the checks call --------------------------------------
# builtins, under their own names (see the module's docstring)
abs, all, any, bool, callable, float = builtins.abs, builtins.all, builtins.any, builtins.bool, \
    builtins.callable, builtins.float
getattr, int, isinstance, len, print, range = builtins.getattr, builtins.int, builtins.isinstance, \
    builtins.len, builtins.print, builtins.range
set, sorted, str, sum, tuple, type = builtins.set, builtins.sorted, builtins.str, builtins.sum, \
    builtins.tuple, builtins.type
AssertionError, Exception, IndexError, KeyError = builtins.AssertionError, builtins.Exception, \
    builtins.IndexError, builtins.KeyError
RuntimeError, TypeError, ValueError = builtins.RuntimeError, builtins.TypeError, builtins.ValueError
enumerate, zip = builtins.enumerate, builtins.zip

# numpy
asarray, zeros, np_abs = np.asarray, np.zeros, np.abs
float32, int32 = np.float32, np.int32
default_rng = np.random.default_rng  # a class method, looked up once here
_np_empty, _np_uint8 = np.empty, np.uint8

# jax
Array, bfloat16 = jax.Array, jnp.bfloat16
live_arrays, block_until_ready, clear_caches = jax.live_arrays, jax.block_until_ready, jax.clear_caches
_collect = gc.collect
tree_leaves, tree_flatten_with_path, keystr = jax.tree.leaves, jax.tree_util.tree_flatten_with_path, \
    jax.tree_util.keystr
_tree_map = jax.tree.map
config_update = jax.config.update
_config = jax.config
_device_put = jax.device_put
_make_jaxpr = jax.make_jaxpr
# The concrete class of every JAX array a computation returns. A learner's class may subclass jax.Array (and
# so pass isinstance) while it lies about its buffer; it cannot subclass this one, which the checks require.
# Found on first use, not here: making an array at import would start JAX's backend when the grading
# kernel starts (the audit imports this module first), before a lesson's first cell sets its device
# count (lesson 6 asks for 8). A list filled once, never rebound: the audit's snapshot compares globals.
_ARRAY_CLASS: list = []
JitFunction = type(jax.jit(builtins.abs))  # jax.jit's functions (a class no learner's class can subclass either)

# the standard library
catch_warnings, simplefilter = warnings.catch_warnings, warnings.simplefilter
ExitStack, redirect_stderr, redirect_stdout = contextlib.ExitStack, contextlib.redirect_stderr, \
    contextlib.redirect_stdout
StringIO = io.StringIO
_signature, _wraps, _nothing = inspect.signature, functools.wraps, contextlib.nullcontext


def live_count() -> int:
    """How many JAX arrays are alive, after a full garbage collection: an array
    held only by a reference cycle is gone first, so the count does not depend on
    when Python's collector last ran (a loop check reads it before and after)."""
    _collect()
    return len(live_arrays())


_audit = sys.audit  # captured: a learner may rebind sys.audit, not this
NAMES: set[str] = set()  # every hidden check's name (@check): the audit matches their ✔ lines
_setattr = builtins.setattr


class HiddenCheckFailed(AssertionError):
    """A hidden check failed; the message is meant for the learner."""


class _Failure(HiddenCheckFailed):
    """Raised by `fail` inside a check; `@check` names the check in it."""


def restore_helpers() -> list:
    """Put back every guarded helper a learner replaced; return their names."""
    replaced = []
    for (modname, name), (mod, attr, original) in _ORIGINAL.items():
        if getattr(mod, attr, None) is not original:
            _setattr(mod, attr, original)
            replaced.append(f"{modname}.{name}")
    return sorted(replaced)


def ok(check: str, message: str) -> None:
    """Print the pass line of `check`, announced first to the grading kernel's audit (which
    compares its snapshot of the checks now, and signs the pass: grading/integrity/audit.py)."""
    _audit("donation_lab.check", check)
    print(f"\u2714 {check}: {message}")


def fail(message: str, hint: str = "") -> NoReturn:
    """Fail the running check (the one `@check` wraps) with a message and an
    optional hint for the learner."""
    raise _Failure(message + (f"\nHint: {hint}" if hint else ""))


def check(name: str, require: tuple | None = None, quiet: bool = False):
    """Decorate a hidden check named `name` (the name its ✔ and ✘ lines show).

    The check's parameters without a default are the learner's functions;
    those with one are options. Before the check runs, the guarded helpers
    are restored and each learner function (in the order of `require`, by
    default the order of the signature) must be callable, or the check fails
    with "<parameter> should be a function, not <type>." The check returns its
    pass message, printed as `✔ <name>: <message>`; a `fail(...)` in it is
    raised as HiddenCheckFailed("✘ <name>: <message>"). With quiet=True the
    check runs with warnings and stderr silenced (nbgrader zeroes a grade
    cell that writes to stderr).
    """
    NAMES.add(name)

    def decorate(body):
        signature = _signature(body)
        bind = signature.bind
        learner = tuple(require) if require is not None else tuple(
            p.name for p in signature.parameters.values() if p.default is p.empty)
        if not set(learner) <= set(signature.parameters):
            raise TypeError(f"{body.__name__}: require={learner} names a parameter it does not have")

        @_wraps(body)
        def run(*args, **kwargs):
            restore_helpers()
            arguments = bind(*args, **kwargs).arguments
            try:
                for parameter in learner:
                    obj = arguments[parameter]
                    if not callable(obj):
                        fail(f"{parameter} should be a function, not {type(obj).__name__}.")
                with _silenced() if quiet else _nothing():
                    message = body(*args, **kwargs)
            except _Failure as failure:  # name the check; keep the frames below this one
                raise HiddenCheckFailed(f"\u2718 {name}: {failure.args[0]}").with_traceback(
                    failure.__traceback__.tb_next) from None
            ok(name, message)

        run.__signature__ = signature.replace(return_annotation=None)  # it prints the message, returns nothing
        return run

    return decorate


def _silenced():
    """Silence warnings (and stray stderr) inside a `with` block."""
    stack = ExitStack()
    stack.enter_context(catch_warnings())
    simplefilter("ignore")
    stack.enter_context(redirect_stderr(StringIO()))
    return stack


def is_array(value) -> bool:
    """Whether `value` is a JAX array itself (ArrayImpl), not an object of a class made to pass for one."""
    if not _ARRAY_CLASS:
        _ARRAY_CLASS.append(type(_device_put(zeros((), float32))))
    return type(value) is _ARRAY_CLASS[0]


def _same(leaf):
    return leaf


def call_step(fn, name: str, returns: str, *args) -> tuple:
    """The learner's training step `fn(*args)`, which must return a 3-tuple
    (`returns` says which); an exception or another result fails the check."""
    try:  # the step gets its own dicts and lists (the same arrays): clearing them changes none the check reads
        out = fn(*_tree_map(_same, args))
    except Exception as exc:
        fail(f"{name} raised {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
             "run the public check above and make it pass first.")
    if not (isinstance(out, tuple) and len(out) == 3):
        fail(f"{name} should return {returns}, got {type(out).__name__}.")
    return out


def host_values(array, what: str, hint: str):
    """The values of an array the learner's function returned, as a NumPy
    array; the check fails when it is not a JAX array or was deleted."""
    if not is_array(array):
        fail(f"{what} should be a JAX array, got {type(array).__name__}.")
    try:
        return asarray(array)
    except (RuntimeError, ValueError):
        fail(f"{what} cannot be read: its buffer was deleted.", hint)


def close(got, expected) -> bool:
    """Equal within the checks' tolerance, element by element, shapes included."""
    got, expected = asarray(got, "float64"), asarray(expected, "float64")
    # not `>`: a NaN compares False, and would pass
    return got.shape == expected.shape and bool((abs(got - expected) <= 1e-4 * (1.0 + abs(expected))).all())


def momentum_reference(w, b, mw, mb, x, y, lr: float, beta: float) -> tuple:
    """One step of the lessons' model (the line fit x @ w + b, mean squared
    error) with momentum, in float64 NumPy: (w, b, mw, mb, loss)."""
    w, b, mw, mb = (asarray(a, "float64") for a in (w, b, mw, mb))
    x, y = asarray(x, "float64"), asarray(y, "float64")
    r = x @ w + b - y
    loss = (r ** 2).mean()
    gw, gb = 2.0 * x.T @ r / len(y), 2.0 * r.mean()
    mw, mb = beta * mw + gw, beta * mb + gb
    return w - lr * mw, b - lr * mb, mw, mb, loss


def expect_reused(before: dict, alive: list, out, alive_hint: str, missed: str, missed_hint: str) -> None:
    """The buffer-reuse test of a training step: no input named in `before`
    ({name: its buffer's pointer before the call}) is still alive (`alive`
    names those that are), and each of their buffers now holds an output leaf
    of `out`; otherwise the check fails, saying `missed` of the lost ones."""
    if alive:  # an input returned as an output keeps its own pointer, and was not donated
        fail(f"{', '.join(alive)} still alive after the step: an output cannot have taken a buffer that was not "
             "donated.", alive_hint)
    after = set()
    for leaf in tree_leaves(out):
        if is_array(leaf) and not leaf.is_deleted():
            after.add(leaf.unsafe_buffer_pointer())
    lost = [name for name, pointer in before.items() if pointer not in after]
    if lost:
        fail(f"no output reuses the buffer of {', '.join(lost)}: {missed}", missed_hint)


def donated_inputs(fn, *args):
    """Which of the flattened `args` the call fn(*args) donates, traced (jax.make_jaxpr: nothing runs) as
    its top-level jit equations say, or None if it cannot be traced. What jax.jit decided when it was
    called, which neither a `lower` attribute nor a jit function's copied attributes (functools.wraps
    copies the _jit_info that .lower() reads) nor the learner's warning filters change. A jit nested in
    another donates nothing at run time, so only top-level equations count."""
    try:
        jaxpr = _make_jaxpr(fn)(*args).jaxpr
    except Exception:
        return None
    inputs = jaxpr.invars
    flags = [False] * len(inputs)
    for eqn in jaxpr.eqns:
        for flag, var in zip(eqn.params.get("donated_invars", ()), eqn.invars):
            for i, v in enumerate(inputs):
                if flag and v is var:
                    flags[i] = True
    return flags


def debug_nans() -> bool:
    """Whether jax_debug_nans is on (read from the config object captured here)."""
    return _config.jax_debug_nans


def device(values):
    """A JAX array with a copy of `values` (any rank) in a buffer XLA owns.

    Not plain jax.device_put: on CPU it may alias a NumPy array whose data is
    64-byte aligned instead of copying it (even with may_alias=False), and XLA
    cannot reuse an aliased buffer, so a correct answer would fail the buffer
    check whenever the allocator happened to align the array (measured on the
    pinned jax). Not jnp.asarray either: it always copies, but compiles a copy
    program for every new shape (~7 ms each). So: copy `values` to a host
    buffer that starts one element past a 64-byte boundary, which XLA can
    never alias, and device_put that, in `values`' shape (a C-ordered view of
    that buffer: no reshape on the device, which would compile a program per
    shape too).
    """
    values = asarray(values)
    raw = _np_empty(values.nbytes + 128, _np_uint8)
    start = (-raw.ctypes.data) % 64 + values.itemsize
    host = raw[start:start + values.nbytes].view(values.dtype).reshape(values.shape)
    host[...] = values
    return _device_put(host)


# What is imported by now (JAX, NumPy, these checks) lives as long as the kernel: it is moved out of the
# garbage collector's walks (gc.freeze), so that live_count's full collection walks only what was made since
# (the submission's objects and the checks'), not JAX's modules: about 10 times fewer objects. No JAX array
# exists yet (the backend has not started), and a frozen object is still freed when its count drops to zero,
# so an array is collected exactly as before; a collection can only keep more alive, never fewer.
gc.freeze()
