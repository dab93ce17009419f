"""The capstone's NaN hunt (hidden/capstone.py check_nan_hunt, grade cell cap-nan-hunt): hunt_nans must return what
JAX's debug_nans says of the step's first NaN, which names the operation that made it, on batches whose NaN comes
out of different operations. Before, any str holding "nan" passed: a constant word earned the 2 points without
debug_nans (red-team A2). Each side: the honest recipes of the source and reasonable variants pass; constants, a
string naming every operation, and the old word fail."""
import jax
import jax.numpy as jnp
import pytest

from donation_course.hidden import capstone
from donation_course.hidden.safe import HiddenCheckFailed

LR, BETA = capstone.LR, capstone.BETA


def loss_fn(params, x, y):  # the capstone's setup cell
    return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)


def _step(params, opt_state, x, y):  # the source's solution
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    m = jax.tree.map(lambda m, g: BETA * m + g, opt_state["m"], grads)
    new_params = jax.tree.map(lambda p, m: p - LR * m, params, m)
    return new_params, {"m": m, "count": opt_state["count"] + 1}, loss


def _step_apart(params, opt_state, x, y):  # loss and gradient apart, per key, momentum written the other way round
    loss = loss_fn(params, x, y)
    grads = jax.grad(loss_fn)(params, x, y)
    m = {k: grads[k] + opt_state["m"][k] * BETA for k in params}
    return {k: params[k] - LR * m[k] for k in params}, {"m": m, "count": opt_state["count"] + 1}, loss


train_step = jax.jit(_step, donate_argnames=("params", "opt_state"))
debug_step = jax.jit(_step)


def source_recipe(params, opt_state, x, y):  # the source notebook's solution (lesson 5's recipe)
    with jax.debug_nans(True):
        try:
            debug_step(params, opt_state, x, y)
        except FloatingPointError as exc:
            return str(exc)
    return None


def eager(params, opt_state, x, y):  # the plain step under debug_nans, no jit
    with jax.debug_nans(True):
        try:
            _step(params, opt_state, x, y)
        except FloatingPointError as exc:
            return str(exc)
    return None


def config_flag(params, opt_state, x, y):  # the config flag set and put back by hand; another step; a sentence
    jax.config.update("jax_debug_nans", True)
    try:
        jax.block_until_ready(jax.jit(_step_apart)(params, opt_state, x, y))
    except FloatingPointError as exc:
        return f"NaN found: {exc}"
    finally:
        jax.config.update("jax_debug_nans", False)
    return None


def without_jit(params, opt_state, x, y):  # op by op, jit disabled
    with jax.debug_nans(True), jax.disable_jit():
        try:
            _step_apart(params, opt_state, x, y)
        except FloatingPointError as exc:
            return str(exc)
    return None


def clear_cache_recipe(params, opt_state, x, y):  # the corpus's: train_step itself, its cache cleared around
    train_step.clear_cache()
    try:
        with jax.debug_nans(True):
            train_step(params, opt_state, x, y)
    except FloatingPointError as exc:
        return str(exc)
    finally:
        train_step.clear_cache()
    return None


@pytest.mark.parametrize("hunt", [source_recipe, eager, config_flag, without_jit, clear_cache_recipe],
                         ids=lambda f: f.__name__)
def test_honest_hunts_pass(hunt, capsys):
    capstone.check_nan_hunt(train_step, hunt)
    assert "\u2714 capstone NaN hunt: JAX's own message named the operation" in capsys.readouterr().out


def _printing_step(params, opt_state, x, y):  # the corpus's cap-debug-print: x[0, 0] is read first, by a slice
    jax.debug.print("loss at {x}", x=x[0, 0])
    return _step(params, opt_state, x, y)


_jit_loss = jax.jit(loss_fn)


def _nested_step(params, opt_state, x, y):  # a jit inside the step, and a custom_jvp function (jax.nn.relu)
    loss, grads = jax.value_and_grad(lambda p: _jit_loss(p, x, y) + 0 * jax.nn.relu(p["b"]))(params)
    m = jax.tree.map(lambda m, g: BETA * m + g, opt_state["m"], grads)
    return jax.tree.map(lambda p, m: p - LR * m, params, m), {"m": m, "count": opt_state["count"] + 1}, loss


@pytest.mark.parametrize("step", [_printing_step, _nested_step], ids=lambda f: f.__name__)
def test_a_step_whose_first_nan_is_elsewhere_is_judged_on_what_jax_says_of_it(step, capsys):
    """The message expected is what JAX says of the learner's own step (the printing step: 'dynamic_slice' for the
    NaN in x), worked out from the program train_step traces to."""
    donating = jax.jit(step, donate_argnames=("params", "opt_state"))
    debug = jax.jit(step)

    def hunt_nans(params, opt_state, x, y):
        with jax.debug_nans(True):
            try:
                debug(params, opt_state, x, y)
            except FloatingPointError as exc:
                return str(exc)
        return None

    capstone.check_nan_hunt(donating, hunt_nans)
    assert "\u2714 capstone NaN hunt" in capsys.readouterr().out
    if step is _printing_step:
        with pytest.raises(HiddenCheckFailed, match="reports 'invalid value \\(nan\\) encountered in dynamic_slice'"):
            capstone.check_nan_hunt(donating, _forged("invalid value (nan) encountered in sub"))


def test_what_jax_says_is_read_from_the_program_jit_runs_not_from_attributes():
    """A train_step whose __wrapped__ names another function: the expected messages still come from the program
    train_step traces to, so a constant made to match the other function fails."""
    lying = jax.jit(_step, donate_argnames=("params", "opt_state"))
    lying.__wrapped__ = lambda params, opt_state, x, y: jnp.concatenate([x.ravel(), y])
    with pytest.raises(HiddenCheckFailed):
        capstone.check_nan_hunt(lying, _forged("invalid value (nan) encountered in concatenate"))
    capstone.check_nan_hunt(lying, source_recipe)


def _forged(answer):
    def hunt_nans(params, opt_state, x, y):
        if not (jnp.isfinite(x).all() and jnp.isfinite(y).all()):
            return answer
        return None

    return hunt_nans


FORGERIES = {
    "the word nan": "nan",
    "an operation's name": "dot_general",
    "the first op's message, constant": "invalid value (nan) encountered in dot_general",
    "the second op's message, constant": "invalid value (nan) encountered in sub",
    "every operation's message": "invalid value (nan) encountered in dot_general; "
                                 "invalid value (nan) encountered in sub",
}


@pytest.mark.parametrize("family", sorted(FORGERIES))
def test_a_message_that_does_not_come_from_debug_nans_fails(family):
    with pytest.raises(HiddenCheckFailed, match="JAX's debug_nans reports 'invalid value \\(nan\\) encountered in"):
        capstone.check_nan_hunt(train_step, _forged(FORGERIES[family]))


def test_a_hunt_that_donates_or_leaves_debug_nans_on_still_fails():
    def donating(params, opt_state, x, y):
        with jax.debug_nans(True):
            try:
                jax.block_until_ready(train_step(params, opt_state, x, y))
            except FloatingPointError as exc:
                return str(exc)
        return None

    def left_on(params, opt_state, x, y):
        jax.config.update("jax_debug_nans", True)
        try:
            debug_step(params, opt_state, x, y)
        except FloatingPointError as exc:
            return str(exc)
        return None

    with pytest.raises(HiddenCheckFailed, match="donat|Array has been deleted"):
        capstone.check_nan_hunt(train_step, donating)
    with pytest.raises(HiddenCheckFailed, match="still on"):
        capstone.check_nan_hunt(train_step, left_on)
    assert not jax.config.jax_debug_nans
