"""Hidden checks for the capstone of notebook 7 (a training-state update on a
pytree), run only at grading.

Like hidden/exercise.py: imported at kernel start (nbgrader_config.py's
exec_lines), so the helpers it uses are captured before any learner code
runs; every check first puts back any helper a learner redefined
(exercise.restore_helpers), prints one `✔ <check>: <message>` line on a pass
and raises HiddenCheckFailed (an AssertionError) with a message for the
learner on a failure. Nothing is written to stderr: warnings are silenced
inside each check (nbgrader zeroes a grade cell that writes to stderr).

The learner defines, in the capstone's answer cell:
  init_opt_state(params) -> {"m": tree like params, zeros, "count": int32 0}
  train_step(params, opt_state, x, y) -> (new_params, new_opt_state, loss),
      jitted, donating params and opt_state by name
  hunt_nans(params, opt_state, x, y) -> message str or None, without donating,
      and leaving train_step donating afterwards
"""
import contextlib
import io

import jax

from donation_course.hidden import exercise as _ex

LR, BETA = 0.1, 0.9   # the capstone's constants (its setup cell defines the same)

_fail, _ok, _guard, _device_1d = _ex._fail, _ex._ok, _ex._guard, _ex._device
restore_helpers = _ex.restore_helpers
_isinstance, _len, _range, _Array = _ex._isinstance, _ex._len, _ex._range, _ex._Array
_asarray, _np_float32, _np_int32 = _ex._asarray, _ex._np_float32, _ex._np_int32
_live_arrays, _block, _RNG = _ex._live_arrays, _ex._block, _ex._RNG
_catch_warnings, _simplefilter, _tree_leaves = _ex._catch_warnings, _ex._simplefilter, _ex._tree_leaves
_tree_flatten_with_path, _keystr = jax.tree_util.tree_flatten_with_path, jax.tree_util.keystr
_config_update = jax.config.update
_redirect_stderr, _StringIO = contextlib.redirect_stderr, io.StringIO


def _device(values):
    """A JAX array with a copy of `values` in a buffer XLA owns (exercise._device, any rank)."""
    values = _asarray(values)
    if values.ndim == 1:
        return _device_1d(values)
    return _device_1d(values.reshape(-1)).reshape(values.shape)


def _quiet():
    """Silence warnings (and stray stderr) for the duration of a check."""
    stack = contextlib.ExitStack()
    stack.enter_context(_catch_warnings())
    _simplefilter("ignore")
    stack.enter_context(_redirect_stderr(_StringIO()))
    return stack


def _data(seed, n=8):
    rng = _RNG(seed)
    x = rng.standard_normal((n, 3), dtype=_np_float32)
    y = rng.standard_normal((n,), dtype=_np_float32)
    w = rng.standard_normal((3,), dtype=_np_float32)
    b = rng.standard_normal((), dtype=_np_float32)
    return x, y, w, b


def _params(w, b):
    return {"w": _device(_asarray(w, _np_float32)), "b": _device(_asarray(b, _np_float32).reshape(()))}


def _opt(w, b, mw, mb, count):
    return {"m": {"w": _device(_asarray(mw, _np_float32)), "b": _device(_asarray(mb, _np_float32).reshape(()))},
            "count": _device(_asarray(count, _np_int32).reshape(()))}


def _reference(w, b, mw, mb, count, x, y):
    """One step in float64 NumPy: (w, b, mw, mb, count, loss)."""
    w, b, mw, mb = (_asarray(a, "float64") for a in (w, b, mw, mb))
    x, y = _asarray(x, "float64"), _asarray(y, "float64")
    r = x @ w + b - y
    loss = (r ** 2).mean()
    gw, gb = 2.0 * x.T @ r / len(y), 2.0 * r.mean()
    mw, mb = BETA * mw + gw, BETA * mb + gb
    return w - LR * mw, b - LR * mb, mw, mb, count + 1, loss


def _require(check, **objects):
    for name, obj in objects.items():
        if not callable(obj):
            _fail(check, f"{name} should be a function, not {type(obj).__name__}.")


def _step(check, train_step, *args):
    try:
        out = train_step(*args)
    except Exception as exc:
        _fail(check, f"train_step raised {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
              "run the public check above and make it pass first.")
    if not (_isinstance(out, tuple) and _len(out) == 3):
        _fail(check, f"train_step should return (new_params, new_opt_state, loss), got {type(out).__name__}.")
    return out


def _host(check, array, what):
    if not _isinstance(array, _Array):
        _fail(check, f"{what} should be a JAX array, got {type(array).__name__}.")
    try:
        return _asarray(array)
    except (RuntimeError, ValueError):
        _fail(check, f"{what} cannot be read: its buffer was deleted.",
              "return new values, not the donated inputs.")


def _close(got, expected):
    got, expected = _asarray(got, "float64"), _asarray(expected, "float64")
    return got.shape == expected.shape and bool((abs(got - expected) <= 1e-4 * (1.0 + abs(expected))).all())


def _leaves(tree):
    return _tree_flatten_with_path(tree)[0]


def check_values(train_step, init_opt_state) -> None:
    """Three chained steps from random params give the reference values."""
    _guard()
    check = "capstone values"
    _require(check, train_step=train_step, init_opt_state=init_opt_state)
    with _quiet():
        x, y, w, b = _data(11)
        mw, mb, count = w * 0.0, b * 0.0, 0
        params, opt = _params(w, b), _opt(w, b, mw, mb, 0)
        xd, yd = _device(x), _device(y)
        for step in _range(3):
            params, opt, loss = _step(check, train_step, params, opt, xd, yd)
            w, b, mw, mb, count, ref_loss = _reference(w, b, mw, mb, count, x, y)
            try:
                got = {"params['w']": params["w"], "params['b']": params["b"],
                       "opt_state['m']['w']": opt["m"]["w"], "opt_state['m']['b']": opt["m"]["b"],
                       "opt_state['count']": opt["count"], "loss": loss}
            except (KeyError, TypeError, IndexError) as exc:
                _fail(check, f"the result does not have the structure of params and opt_state ({exc!r}).")
            expected = {"params['w']": w, "params['b']": b, "opt_state['m']['w']": mw,
                        "opt_state['m']['b']": mb, "opt_state['count']": count, "loss": ref_loss}
            for name, value in got.items():
                if not _close(_host(check, value, name), expected[name]):
                    _fail(check, f"after step {step + 1}, {name} is {_host(check, value, name).tolist()}, "
                          f"expected {_asarray(expected[name], 'float64').round(5).tolist()}.",
                          "m = BETA * m + g; p = p - LR * m; count + 1; the loss at the old params.")
        if _asarray(opt["count"]).dtype != _np_int32:
            _fail(check, f"opt_state['count'] should stay int32, got {_asarray(opt['count']).dtype}.")
    _ok(check, "three chained steps match the reference (params, momentum, count and loss).")


def _fresh_state(w, b):
    """params and opt_state (zero momentum, count 0) as new device arrays."""
    return _params(w, b), _opt(w, b, w * 0, b * 0, 0)


def check_deleted(train_step, init_opt_state) -> None:
    """Every leaf of params and opt_state is deleted after a step; x and y are not;
    and the compiled step asks to donate exactly those leaves."""
    _guard()
    check = "capstone donated leaves"
    _require(check, train_step=train_step)
    with _quiet():
        x, y, w, b = _data(12)
        params, opt = _fresh_state(w, b)
        xd, yd = _device(x), _device(y)
        _block(_step(check, train_step, params, opt, xd, yd))
        alive = [f"params{_keystr(p)}" for p, leaf in _leaves(params) if not leaf.is_deleted()]
        alive += [f"opt_state{_keystr(p)}" for p, leaf in _leaves(opt) if not leaf.is_deleted()]
        if alive:
            _fail(check, f"still alive after the step, so not donated: {', '.join(alive)}.",
                  'donate both trees: donate_argnames=("params", "opt_state").')
        if xd.is_deleted() or yd.is_deleted():
            _fail(check, "x or y was deleted: the data is read again on the next step.",
                  "donate params and opt_state only.")
        lower = getattr(train_step, "lower", None)
        if lower is None:
            _fail(check, "train_step should be compiled with jax.jit (it has no .lower).")
        spec = *_fresh_state(w, b), _device(x), _device(y)
        positional, keyword = lower(*spec).args_info
        flags = [leaf.donated for leaf in _tree_leaves((positional, keyword))]
        # params (2 leaves) and opt_state (3 leaves) first, then x and y
        if flags != [True] * 5 + [False] * 2:
            _fail(check, "train_step asks to donate more (or less) than the leaves of params and opt_state.",
                  'donate_argnames=("params", "opt_state") and nothing else.')
    _ok(check, "all 5 leaves of params and opt_state were donated; x and y were kept.")


def check_reuse(train_step, init_opt_state) -> None:
    """Each donated leaf's buffer is reused by an output leaf."""
    _guard()
    check = "capstone buffer reuse"
    _require(check, train_step=train_step)
    with _quiet():
        x, y, w, b = _data(13)
        params, opt = _fresh_state(w, b)
        _step(check, train_step, params, opt, _device(x), _device(y))  # compile
        params, opt = _fresh_state(w, b)
        before = {f"params{_keystr(p)}": leaf.unsafe_buffer_pointer() for p, leaf in _leaves(params)}
        before.update({f"opt_state{_keystr(p)}": leaf.unsafe_buffer_pointer() for p, leaf in _leaves(opt)})
        out = _step(check, train_step, params, opt, _device(x), _device(y))
        after = set()
        for leaf in _tree_leaves(out):
            if _isinstance(leaf, _Array) and not leaf.is_deleted():
                after.add(leaf.unsafe_buffer_pointer())
        missed = [name for name, pointer in before.items() if pointer not in after]
        if missed:
            _fail(check, f"no output reuses the buffer of {', '.join(missed)}: a new buffer was allocated.",
                  "donate both trees, and return each leaf with its input's shape and dtype.")
    _ok(check, "every leaf of params and opt_state lends its buffer to an output leaf.")


def check_untied(init_opt_state, train_step) -> None:
    """init_opt_state gives zeros in buffers of its own: no leaf shares a buffer
    with another leaf or with params, so a donating step accepts it."""
    _guard()
    check = "capstone untied optimizer state"
    _require(check, init_opt_state=init_opt_state, train_step=train_step)
    with _quiet():
        x, y, w, b = _data(14)
        params = _params(w, b)
        try:
            opt = init_opt_state(params)
            leaves = {f"opt_state{_keystr(p)}": leaf for p, leaf in _leaves(opt)}
            names = ["opt_state['count']", "opt_state['m']['b']", "opt_state['m']['w']"]
            if sorted(leaves) != names:
                _fail(check, f"init_opt_state should give the leaves {names}, got {sorted(leaves)}.")
        except Exception as exc:
            if _isinstance(exc, AssertionError):
                raise
            _fail(check, f"init_opt_state raised {type(exc).__name__}: {exc}".splitlines()[0])
        for name, leaf in leaves.items():
            if not _isinstance(leaf, _Array):
                _fail(check, f"{name} should be a JAX array, got {type(leaf).__name__}.")
        pointers = [leaf.unsafe_buffer_pointer() for leaf in leaves.values()]
        pointers += [leaf.unsafe_buffer_pointer() for leaf in _tree_leaves(params)]
        if _len(set(pointers)) != _len(pointers):
            _fail(check, "two leaves of opt_state (or a leaf of opt_state and one of params) share one buffer: "
                  "a step that donates both would fail with 'Attempt to donate the same buffer twice'.",
                  "give every leaf its own buffer: jnp.zeros_like per leaf, or .copy().")
        for name, leaf in leaves.items():
            value = _host(check, leaf, name)
            if (value != 0).any():
                _fail(check, f"{name} should start at zero, got {value.tolist()}.")
        if _asarray(opt["count"]).dtype != _np_int32 or _asarray(opt["m"]["w"]).shape != (3,):
            _fail(check, "count should be an int32 scalar and m a tree like params.")
        _step(check, train_step, params, opt, _device(x), _device(y))
    _ok(check, "every leaf of init_opt_state(params) owns its buffer, and a donating step accepts it.")


def check_nan_hunt(hunt_nans, train_step, init_opt_state) -> None:
    """hunt_nans reports a NaN without donating, leaves debug_nans off, and
    train_step donates again afterwards."""
    _guard()
    check = "capstone NaN hunt"
    _require(check, hunt_nans=hunt_nans, train_step=train_step)
    with _quiet():
        x, y, w, b = _data(15)
        _block(_step(check, train_step, *_fresh_state(w, b), _device(x), _device(y)))
        bad = x.copy()
        bad[0, 0] = float("nan")
        params, opt = _fresh_state(w, b)
        stdout = _StringIO()
        try:
            with contextlib.redirect_stdout(stdout):
                message = hunt_nans(params, opt, _device(bad), _device(y))
        except Exception as exc:
            _config_update("jax_debug_nans", False)
            _fail(check, f"hunt_nans raised {type(exc).__name__}: {exc}".splitlines()[0],
                  "catch FloatingPointError, and clear train_step's cache first so the re-run finds its inputs.")
        if jax.config.jax_debug_nans:
            _config_update("jax_debug_nans", False)
            _fail(check, "jax_debug_nans is still on after hunt_nans.", "use `with jax.debug_nans(True):`.")
        if not (_isinstance(message, str) and "nan" in message.lower()):
            _fail(check, f"on a batch with a NaN, hunt_nans should return the error message, got {message!r}.")
        donated = [leaf for leaf in _tree_leaves((params, opt)) if leaf.is_deleted()]
        if donated:
            _fail(check, "hunt_nans donated params or opt_state: they cannot be used for the next step.",
                  "call train_step.clear_cache() before the debug run, so it compiles without donation.")
        with contextlib.redirect_stdout(stdout):
            healthy = hunt_nans(params, opt, _device(x), _device(y))
        if healthy is not None:
            _fail(check, f"on a healthy batch, hunt_nans should return None, got {healthy!r}.")
        params, opt = _fresh_state(w, b)
        _block(_step(check, train_step, params, opt, _device(x), _device(y)))
        if not all(leaf.is_deleted() for leaf in _tree_leaves((params, opt))):
            _fail(check, "after hunt_nans, train_step no longer donates: it still runs the program "
                  "compiled under debug_nans.", "call train_step.clear_cache() again when the hunt ends.")
    _ok(check, "the NaN was reported, nothing was donated during the hunt, and train_step donates again after.")


def check_loop(train_step, init_opt_state, steps: int = 30) -> None:
    """A loop that rebinds params and opt_state keeps the live buffers flat."""
    _guard()
    check = "capstone training loop"
    _require(check, train_step=train_step)
    with _quiet():
        x, y, w, b = _data(16)
        xd, yd = _device(x), _device(y)
        params, opt = _fresh_state(w, b)
        params, opt, loss = _step(check, train_step, params, opt, xd, yd)  # compile
        _block((params, opt))
        del loss
        before = _len(_live_arrays())
        kept = 0
        for _ in _range(steps):
            old = _tree_leaves((params, opt))
            params, opt, loss = _step(check, train_step, params, opt, xd, yd)
            kept += sum(1 for leaf in old if not leaf.is_deleted())
            del old, loss
        _block((params, opt))
        after = _len(_live_arrays())
        if kept:
            _fail(check, f"over {steps} steps, {kept} old leaves stayed alive after their step: each step "
                  "allocated new buffers while the old ones were still held.",
                  "donate params and opt_state, so each step reuses their buffers.")
        if after > before:
            _fail(check, f"over {steps} steps the live buffers grew from {before} to {after}.",
                  "rebind params and opt_state to the step's outputs and keep no other references.")
        if int(_asarray(opt["count"])) != steps + 1:
            _fail(check, f"after {steps + 1} steps opt_state['count'] is {int(_asarray(opt['count']))}.")
    _ok(check, f"{steps} loop steps kept the live buffers at {before}, each step donating the old leaves.")


def check_example(train_step, init_opt_state) -> None:
    """The public example again, with helpers the learner cannot redefine."""
    _guard()
    check = "capstone worked example"
    _require(check, train_step=train_step, init_opt_state=init_opt_state)
    with _quiet():
        params = _params([0.5, -1.0, 2.0], 0.25)
        try:
            opt = init_opt_state(params)
        except Exception as exc:
            _fail(check, f"init_opt_state raised {type(exc).__name__}: {exc}".splitlines()[0])
        x = _device(_asarray([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], _np_float32))
        y = _device(_asarray([1.0, -1.0], _np_float32))
        new_params, _, loss = _step(check, train_step, params, opt, x, y)
        if not (_close(_host(check, loss, "loss"), 0.0625)
                and _close(_host(check, new_params["w"], "params['w']"), [0.525, -1.025, 2.0])):
            _fail(check, "one step from the example's params does not give loss 0.0625 and w [0.525, -1.025, 2.0].")
    _ok(check, "the worked example gives the expected loss and params.")
