"""Hidden checks for the capstone of notebook 7 (a training-state update on a
pytree), run only at grading.

Like hidden/exercise.py: imported at kernel start (nbgrader_config.py's
exec_lines), so the helpers it uses (hidden/safe.py) are captured before any
learner code runs; every check (by `@check`) first puts back any helper a
learner redefined, prints one `✔ <check>: <message>` line on a pass and
raises HiddenCheckFailed (an AssertionError) with a message for the learner
on a failure. Nothing is written to stderr: warnings are silenced inside each
check (`quiet=True`; nbgrader zeroes a grade cell that writes to stderr).

The learner defines, in the capstone's answer cell:
  init_opt_state(params) -> {"m": tree like params, zeros, "count": int32 0}
  train_step(params, opt_state, x, y) -> (new_params, new_opt_state, loss),
      jitted, donating params and opt_state by name
  hunt_nans(params, opt_state, x, y) -> message str or None, without donating,
      and leaving train_step donating afterwards: the message is JAX's own
      (debug_nans names the operation whose result was the first NaN; the
      check's batches make it in two different operations)
The checks of train_step's program (all but the untied optimizer state and
the NaN hunt, which are Python-level behaviour) first hand train_step over
to the referee as data (hidden/handover.py), which judges them again where no
learner code runs (grading/referee/); a point needs both passes.
Every check takes those it uses, in the order train_step, init_opt_state,
hunt_nans, then its options.
"""
import builtins

import jax

from donation_course.hidden.handover import hand_over
from donation_course.hidden.safe import (  # the builtins among these shadow the live ones on purpose
    AssertionError,
    Exception,
    HiddenCheckFailed,
    IndexError,
    JitFunction,
    KeyError,
    StringIO,
    TypeError,
    all,
    asarray,
    block_until_ready,
    call_step,
    check,
    close,
    config_update,
    debug_nans,
    default_rng,
    device,
    donated_inputs,
    expect_reused,
    fail,
    float,
    float32,
    getattr,
    host_values,
    int,
    int32,
    is_array,
    isinstance,
    keystr,
    len,
    live_count,
    momentum_reference,
    range,
    redirect_stdout,
    restore_helpers,
    set,
    sorted,
    str,
    sum,
    tree_flatten_with_path,
    tree_leaves,
    type,
)

__all__ = ["HiddenCheckFailed", "restore_helpers", "check_example", "check_values", "check_deleted",
           "check_reuse", "check_untied", "check_nan_hunt", "check_loop"]

LR, BETA = 0.1, 0.9   # the capstone's constants (its setup cell defines the same)


def _data(seed, n=8):
    rng = default_rng(seed)
    x = rng.standard_normal((n, 3), dtype=float32)
    y = rng.standard_normal((n,), dtype=float32)
    w = rng.standard_normal((3,), dtype=float32)
    b = rng.standard_normal((), dtype=float32)
    return x, y, w, b


def _params(w, b):
    return {"w": device(asarray(w, float32)), "b": device(asarray(b, float32).reshape(()))}


def _opt(w, b, mw, mb, count):
    return {"m": {"w": device(asarray(mw, float32)), "b": device(asarray(mb, float32).reshape(()))},
            "count": device(asarray(count, int32).reshape(()))}


_jnp_array = jax.numpy.array  # captured at kernel start, as safe.py's helpers are


def _example_params():
    """make_params() of the capstone's setup cell, built here: its b is a weakly typed float32, as jnp.array(0.25)
    makes it, so the public check's program is the one this check runs (JAX compiles it once for both)."""
    return {"w": device(asarray([0.5, -1.0, 2.0], float32)), "b": _jnp_array(0.25)}


def _fresh_state(w, b):
    """params and opt_state (zero momentum, count 0) as new device arrays."""
    return _params(w, b), _opt(w, b, w * 0, b * 0, 0)


def _reference(w, b, mw, mb, count, x, y):
    """One step in float64 NumPy: (w, b, mw, mb, count, loss)."""
    w, b, mw, mb, loss = momentum_reference(w, b, mw, mb, x, y, LR, BETA)
    return w, b, mw, mb, count + 1, loss


def _step(train_step, *args):
    return call_step(train_step, "train_step", "(new_params, new_opt_state, loss)", *args)


def _host(array, what):
    return host_values(array, what, "return new values, not the donated inputs.")


def _leaves(tree):
    return tree_flatten_with_path(tree)[0]


@check("capstone worked example", quiet=True)
def check_example(train_step, init_opt_state) -> str:
    """The public example again, with helpers the learner cannot redefine."""
    hand_over("capstone", 'capstone worked example', train_step)  # to the referee, as data
    params = _example_params()
    try:
        opt = init_opt_state(params)
    except Exception as exc:
        fail(f"init_opt_state raised {type(exc).__name__}: {exc}".splitlines()[0])
    x = device(asarray([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], float32))
    y = device(asarray([1.0, -1.0], float32))
    new_params, _, loss = _step(train_step, params, opt, x, y)
    if not (close(_host(loss, "loss"), 0.0625)
            and close(_host(new_params["w"], "params['w']"), [0.525, -1.025, 2.0])):
        fail("one step from the example's params does not give loss 0.0625 and w [0.525, -1.025, 2.0].")
    return "the worked example gives the expected loss and params."


@check("capstone values", quiet=True)
def check_values(train_step, init_opt_state) -> str:
    """Three chained steps from random params give the reference values.
    (init_opt_state is not called: the steps start from a state built here,
    but an answer without it, as a function, fails this check too.)"""
    hand_over("capstone", 'capstone values', train_step)  # to the referee, as data
    x, y, w, b = _data(11)
    mw, mb, count = w * 0.0, b * 0.0, 0
    params, opt = _params(w, b), _opt(w, b, mw, mb, 0)
    xd, yd = device(x), device(y)
    for step in range(3):
        params, opt, loss = _step(train_step, params, opt, xd, yd)
        w, b, mw, mb, count, ref_loss = _reference(w, b, mw, mb, count, x, y)
        try:
            got = {"params['w']": params["w"], "params['b']": params["b"],
                   "opt_state['m']['w']": opt["m"]["w"], "opt_state['m']['b']": opt["m"]["b"],
                   "opt_state['count']": opt["count"], "loss": loss}
        except (KeyError, TypeError, IndexError) as exc:
            fail(f"the result does not have the structure of params and opt_state ({exc!r}).")
        expected = {"params['w']": w, "params['b']": b, "opt_state['m']['w']": mw,
                    "opt_state['m']['b']": mb, "opt_state['count']": count, "loss": ref_loss}
        for name, value in got.items():
            if not close(_host(value, name), expected[name]):
                fail(f"after step {step + 1}, {name} is {_host(value, name).tolist()}, "
                     f"expected {asarray(expected[name], 'float64').round(5).tolist()}.",
                     "m = BETA * m + g; p = p - LR * m; count + 1; the loss at the old params.")
    if asarray(opt["count"]).dtype != int32:
        fail(f"opt_state['count'] should stay int32, got {asarray(opt['count']).dtype}.")
    return "three chained steps match the reference (params, momentum, count and loss)."


@check("capstone donated leaves", quiet=True)
def check_deleted(train_step) -> str:
    """Every leaf of params and opt_state is deleted after a step; x and y are not;
    and the compiled step asks to donate exactly those leaves."""
    hand_over("capstone", 'capstone donated leaves', train_step)  # to the referee, as data
    x, y, w, b = _data(12)
    params, opt = _fresh_state(w, b)
    xd, yd = device(x), device(y)
    block_until_ready(_step(train_step, params, opt, xd, yd))
    alive = [f"params{keystr(p)}" for p, leaf in _leaves(params) if not leaf.is_deleted()]
    alive += [f"opt_state{keystr(p)}" for p, leaf in _leaves(opt) if not leaf.is_deleted()]
    if alive:
        fail(f"still alive after the step, so not donated: {', '.join(alive)}.",
             'donate both trees by their argument names (lesson 4 shows how).')
    if xd.is_deleted() or yd.is_deleted():
        fail("x or y was deleted: the data is read again on the next step.",
             "donate params and opt_state only.")
    lower = getattr(train_step, "lower", None)
    if lower is None:
        fail("train_step should be compiled with jax.jit (it has no .lower).")
    flags = donated_inputs(train_step, *_fresh_state(w, b), device(x), device(y))  # as jax.jit does it, whatever
    # .lower() says: an attribute, or a jit function's attributes copied from another, can make that lie
    # params (2 leaves) and opt_state (3 leaves) first, then x and y
    if flags != [True] * 5 + [False] * 2:
        fail("train_step asks to donate more (or less) than the leaves of params and opt_state.",
             'donate params and opt_state, and nothing else.')
    return "all 5 leaves of params and opt_state were donated; x and y were kept."


@check("capstone buffer reuse", quiet=True)
def check_reuse(train_step) -> str:
    """Each leaf of params and opt_state is donated (deleted) and its buffer reused by an output leaf."""
    hand_over("capstone", 'capstone buffer reuse', train_step)  # to the referee, as data
    x, y, w, b = _data(13)
    params, opt = _fresh_state(w, b)
    _step(train_step, params, opt, device(x), device(y))  # compile
    params, opt = _fresh_state(w, b)
    before = {f"params{keystr(p)}": leaf.unsafe_buffer_pointer() for p, leaf in _leaves(params)}
    before.update({f"opt_state{keystr(p)}": leaf.unsafe_buffer_pointer() for p, leaf in _leaves(opt)})
    out = _step(train_step, params, opt, device(x), device(y))
    kept = [f"{side}{keystr(p)}" for side, tree in (("params", params), ("opt_state", opt))
            for p, leaf in _leaves(tree) if not leaf.is_deleted()]
    # an input returned as an output (inside a bigger tree) has its own pointer, and was not donated
    expect_reused(before, kept, out, 'donate both trees by their argument names (lesson 4 shows how).',
                  "a new buffer was allocated.",
                  "donate both trees, and return each leaf with its input's shape and dtype.")
    return "every leaf of params and opt_state lends its buffer to an output leaf."


# init_opt_state is the function under test here, so it is required first
@check("capstone untied optimizer state", require=("init_opt_state", "train_step"), quiet=True)
def check_untied(train_step, init_opt_state) -> str:
    """init_opt_state gives zeros in buffers of its own: no leaf shares a buffer
    with another leaf or with params, so a donating step accepts it."""
    x, y, w, b = _data(14)
    params = _params(w, b)
    try:
        opt = init_opt_state(params)
        leaves = {f"opt_state{keystr(p)}": leaf for p, leaf in _leaves(opt)}
        names = ["opt_state['count']", "opt_state['m']['b']", "opt_state['m']['w']"]
        if sorted(leaves) != names:
            fail(f"init_opt_state should give the leaves {names}, got {sorted(leaves)}.")
    except Exception as exc:
        if isinstance(exc, AssertionError):
            raise
        fail(f"init_opt_state raised {type(exc).__name__}: {exc}".splitlines()[0])
    for name, leaf in leaves.items():
        if not is_array(leaf):
            fail(f"{name} should be a JAX array, got {type(leaf).__name__}.")
    pointers = [leaf.unsafe_buffer_pointer() for leaf in leaves.values()]
    pointers += [leaf.unsafe_buffer_pointer() for leaf in tree_leaves(params)]
    if len(set(pointers)) != len(pointers):
        fail("two leaves of opt_state (or a leaf of opt_state and one of params) share one buffer: "
             "a step that donates both would fail with 'Attempt to donate the same buffer twice'.",
             "give every leaf a fresh buffer of its own (lesson 4, tied buffers).")
    for name, leaf in leaves.items():
        value = _host(leaf, name)
        if (value != 0).any():
            fail(f"{name} should start at zero, got {value.tolist()}.")
    if asarray(opt["count"]).dtype != int32 or asarray(opt["m"]["w"]).shape != (3,):
        fail("count should be an int32 scalar and m a tree like params.")
    _step(train_step, params, opt, device(x), device(y))
    return "every leaf of init_opt_state(params) owns its buffer, and a donating step accepts it."


# The batches of the NaN hunt: in each, the source's step first makes a NaN in another operation (loss_fn, the
# setup cell: x @ params["w"] reads the NaN in x, `... - y` the one in y). hunt_nans must return what JAX's
# debug_nans says of the learner's own step on each, which names the operation whose result was the first NaN
# (JAX 0.12: "invalid value (nan) encountered in <primitive>"): the check asks JAX itself, running a jit of the
# function train_step wraps, which donates nothing, under debug_nans (as the learner's hunt does). That function
# is trusted only if it traces to the program train_step traces to (make_jaxpr: what jax.jit runs, whatever its
# attributes say); else the source's step's messages are expected. A constant names one operation at most.
NAN_OPS = ("dot_general", "sub")
NAN_MESSAGE = "invalid value (nan) encountered in {}"
_jit, _make_jaxpr, _debug_nans_on = jax.jit, jax.make_jaxpr, jax.debug_nans
_FloatingPointError, _zip = builtins.FloatingPointError, builtins.zip  # captured at kernel start, as safe.py's are


def _nan_batch(op, x, y):
    """x and y (NumPy copies) with a NaN where `op` is the first operation of the source's step to read it."""
    x, y = x.copy(), y.copy()
    if op == "dot_general":
        x[0, 0] = float("nan")
    else:
        y[3] = float("nan")
    return x, y


def _outline(closed) -> list:
    """A program's operations in order, each with its results' types."""
    return [(eqn.primitive.name, [str(var.aval) for var in eqn.outvars]) for eqn in closed.jaxpr.eqns]


def _reference_step(train_step, stdout, args):
    """A jit of the function train_step wraps, donating nothing, if that function traces to the program train_step
    traces to on args (params, opt_state, x, y); else None (train_step not a jax.jit function, or its __wrapped__
    not what it runs)."""
    fun = getattr(train_step, "__wrapped__", None)
    if type(train_step) is not JitFunction or not callable(fun):
        return None
    try:
        with redirect_stdout(stdout):
            top = _make_jaxpr(train_step)(*args).jaxpr.eqns
            if len(top) != 1 or "jaxpr" not in top[0].params \
                    or _outline(top[0].params["jaxpr"]) != _outline(_make_jaxpr(fun)(*args)):
                return None
    except Exception:
        return None
    return _jit(fun)


def _jax_says(reference, stdout, args) -> str | None:
    """What JAX's debug_nans says of the reference step's first NaN on args; None if it says nothing of JAX's form
    (no NaN, another error)."""
    try:
        with redirect_stdout(stdout), _debug_nans_on(True):
            block_until_ready(reference(*args))
    except _FloatingPointError as exc:
        message = str(exc)
        return message if message.startswith(NAN_MESSAGE.format("")) else None
    except Exception:
        return None
    finally:
        config_update("jax_debug_nans", False)
    return None


def _names(message, messages: list, i: int) -> bool:
    """Whether `message` holds JAX's message for batch i and no other batch's (where the two differ)."""
    return isinstance(message, str) and messages[i] in message and \
        not any(other in message for other in messages if other != messages[i])


def _hunt(hunt_nans, stdout, *args):
    """hunt_nans(*args), its prints kept out of the cell; a raise fails the check (debug_nans put back off)."""
    try:
        with redirect_stdout(stdout):
            return hunt_nans(*args)
    except Exception as exc:
        config_update("jax_debug_nans", False)
        fail(f"hunt_nans raised {type(exc).__name__}: {exc}".splitlines()[0],
             "catch FloatingPointError, and hunt with a second jit of the step that donates nothing (lesson 5).")


# hunt_nans is the function under test here, so it is required first
@check("capstone NaN hunt", require=("hunt_nans", "train_step"), quiet=True)
def check_nan_hunt(train_step, hunt_nans) -> str:
    """On batches whose NaN comes out of different operations, hunt_nans returns JAX's debug_nans message naming
    that operation, without donating and leaving debug_nans off; on a healthy batch it returns None; and
    train_step donates again afterwards."""
    x, y, w, b = _data(15)
    block_until_ready(_step(train_step, *_fresh_state(w, b), device(x), device(y)))
    stdout = StringIO()
    batches = [_nan_batch(op, x, y) for op in NAN_OPS]
    expected = [NAN_MESSAGE.format(op) for op in NAN_OPS]  # the source's step's
    said = None  # what JAX says of the learner's own step: worked out only where a message is not the source's
    for i, ((bad_x, bad_y), where) in enumerate(_zip(batches, ("x", "y"), strict=True)):
        params, opt = _fresh_state(w, b)
        message = _hunt(hunt_nans, stdout, params, opt, device(bad_x), device(bad_y))
        if debug_nans():
            config_update("jax_debug_nans", False)
            fail("jax_debug_nans is still on after hunt_nans.", "use `with jax.debug_nans(True):`.")
        if not _names(message, expected, i):
            if said is None:
                reference = _reference_step(train_step, stdout, (*_fresh_state(w, b), device(x), device(y)))
                said = [None] if reference is None else \
                    [_jax_says(reference, stdout, (*_fresh_state(w, b), device(bx), device(by))) for bx, by in batches]
                said = expected if None in said else said  # not worked out: the source's step's messages
            if not _names(message, said, i):
                fail(f"on a batch with a NaN in {where}, JAX's debug_nans reports {said[i]!r} for your train_step "
                     f"(the first operation whose result is NaN), but hunt_nans returned {message!r}.",
                     "return str(exc) of the FloatingPointError that the step raises under `jax.debug_nans(True)`.")
        if [leaf for leaf in tree_leaves((params, opt)) if leaf.is_deleted()]:
            fail("hunt_nans donated params or opt_state: they cannot be used for the next step.",
                 "hunt with a second jit of the step that donates nothing (lesson 5's recipe), not with train_step.")
    healthy = _hunt(hunt_nans, stdout, params, opt, device(x), device(y))
    if healthy is not None:
        fail(f"on a healthy batch, hunt_nans should return None, got {healthy!r}.")
    params, opt = _fresh_state(w, b)
    block_until_ready(_step(train_step, params, opt, device(x), device(y)))
    if not all(leaf.is_deleted() for leaf in tree_leaves((params, opt))):
        fail("after hunt_nans, train_step no longer donates: it still runs the program "
             "compiled under debug_nans.",
             "leave train_step alone during the hunt: hunt with a second jit of the step (lesson 5's recipe).")
    return ("JAX's own message named the operation that made each NaN, nothing was donated during the hunt, and "
            "train_step donates again after.")


@check("capstone training loop", quiet=True)
def check_loop(train_step, steps: int = 30) -> str:
    """A loop that rebinds params and opt_state keeps the live buffers flat."""
    hand_over("capstone", 'capstone training loop', train_step)  # to the referee, as data
    x, y, w, b = _data(16)
    xd, yd = device(x), device(y)
    params, opt = _fresh_state(w, b)
    params, opt, loss = _step(train_step, params, opt, xd, yd)  # compile
    block_until_ready((params, opt))
    del loss
    before = live_count()
    kept = 0
    for _ in range(steps):
        old = tree_leaves((params, opt))
        params, opt, loss = _step(train_step, params, opt, xd, yd)
        kept += sum(1 for leaf in old if not leaf.is_deleted())
        del old, loss
    block_until_ready((params, opt))
    after = live_count()
    if kept:
        fail(f"over {steps} steps, {kept} old leaves stayed alive after their step: each step "
             "allocated new buffers while the old ones were still held.",
             "donate params and opt_state, so each step reuses their buffers.")
    if after > before:
        fail(f"over {steps} steps the number of JAX arrays alive in the notebook grew from {before} to {after}: "
             "something kept a reference to old arrays.",
             "rebind params and opt_state to the step's outputs and keep no other references.")
    if int(asarray(opt["count"])) != steps + 1:
        fail(f"after {steps + 1} steps opt_state['count'] is {int(asarray(opt['count']))}.")
    return (f"over {steps} steps the number of JAX arrays alive in the notebook stayed at {before}: each step "
            "reused the donated buffers of params and opt_state instead of adding new ones.")
