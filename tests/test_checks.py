"""Unit tests of the learner-facing self-checks (donation_lab.checks)."""
import warnings

import jax
import jax.numpy as jnp
import pytest

from donation_lab import checks


def test_require_names_what_is_missing_instead_of_a_name_error():
    train_step = object()  # noqa: F841  (defined in the caller's frame)
    checks.require("train_step")
    with pytest.raises(checks.CheckFailed, match=r"^Not answered yet: `sgd_update` is not defined"):
        checks.require("train_step", "sgd_update")
    with pytest.raises(checks.CheckFailed, match=r"`a`, `b` are not defined"):
        checks.require("a", "b")


def test_donation_request_reads_numbers_names_and_pytrees_without_running():
    x = jnp.ones(3)
    by_number = jax.jit(lambda a, b: a + b, donate_argnums=(0, 1))
    by_name = jax.jit(lambda state, delta: state + delta, donate_argnames="state")
    tree = jax.jit(lambda p, g: jax.tree.map(lambda a, b: a - b, p, g), donate_argnums=0)
    assert checks.donation_request(by_number, x, x) == ((True, True), {})
    assert checks.donation_request(by_name, x, x) == ((True, False), {})
    assert checks.donation_request(tree, {"w": x}, {"w": x}) == ((True, False), {})
    assert not x.is_deleted()  # lowering runs nothing
    with pytest.raises(checks.CheckFailed, match="should be a function"):
        checks.donation_request(42, x)


def test_donation_request_of_a_plain_function_is_read_from_what_a_call_does():
    """A plain function around a jax.jit function has no .lower: the check
    calls it on copies and reads deletions and JAX's unusable-donation warning."""
    x = jnp.ones(3)
    step = jax.jit(lambda s, d: s + d, donate_argnums=0)
    both = jax.jit(lambda s, d: s + d, donate_argnums=(0, 1))
    step(jnp.ones(3), x), both(jnp.ones(3), jnp.ones(3))  # compiled already: the warning must still be seen
    assert checks.donation_request(lambda s, d: step(s, d), x, x) == ((True, False), {})
    assert checks.donation_request(lambda s, d: both(s, d), x, x) == ((True, True), {})
    assert checks.donation_request(lambda s, d: s + d, x, x) == ((False, False), {})
    assert not x.is_deleted()  # the caller's arrays are never donated


def test_expect_donation_request_catches_a_donation_jax_could_not_use(capsys):
    over = jax.jit(lambda state, delta: state + delta, donate_argnums=(0, 1))
    state, delta = jnp.ones(2), jnp.ones(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        over(state, delta)
    assert state.is_deleted() and not delta.is_deleted()  # is_deleted() alone cannot see it
    with pytest.raises(checks.CheckFailed, match=r"expected \['state'\], got \['delta', 'state'\]"):
        checks.expect_donation_request("over", over, (jnp.ones(2), jnp.ones(2)), ("state", "delta"), ["state"])
    exact = jax.jit(lambda state, delta: state + delta, donate_argnums=0)
    checks.expect_donation_request("exact", exact, (jnp.ones(2), jnp.ones(2)), ("state", "delta"), ["state"])
    assert "exact asks to donate exactly ['state'] (public check only" in capsys.readouterr().out
