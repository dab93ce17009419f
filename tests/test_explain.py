"""explain_donation: its verdict must match what a real call does."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from donation_lab import explain_donation
from donation_lab.explain import parse_input_output_alias


def f32(*shape):
    return jnp.ones(shape, jnp.float32)


CASES = {
    "one reused": (jax.jit(lambda s, d: s + d, donate_argnums=0), lambda: (f32(4), f32(4)), {}),
    "both donated, one output": (jax.jit(lambda x, y: x + y, donate_argnums=(0, 1)),
                                 lambda: (f32(2, 3), f32(2, 3)), {}),
    "pass 2 by element count": (jax.jit(lambda a, b: a.reshape(2, 3) + b, donate_argnums=0),
                                lambda: (f32(6), f32(2, 3)), {}),
    "no matching output": (jax.jit(lambda a, b: a + b, donate_argnums=0),
                           lambda: (f32(1, 3), f32(2, 3)), {}),
    # the int8 takes the one output by element count, misses it by byte size, and the int32 is left over
    "byte-size miss uses up the output": (jax.jit(lambda a, b: (a.astype(jnp.float32) + b).astype(jnp.float32),
                                                  donate_argnums=(0, 1)),
                                          lambda: (jnp.ones(4, jnp.int8), jnp.ones(4, jnp.int32)), {}),
    "unused argument": (jax.jit(lambda a, u: a * 2, donate_argnums=1), lambda: (f32(3), f32(3)), {}),
    "pytree": (jax.jit(lambda st, d: {"w": st["w"] + d, "b": st["b"] * 2}, donate_argnums=0),
               lambda: ({"w": f32(2, 3), "b": f32(5)}, f32(2, 3)), {}),
    "keyword": (jax.jit(lambda state, d: state + d, donate_argnames="state"),
                lambda: (), {"state": f32(4), "d": f32(4)}),
}


@pytest.mark.parametrize("name", CASES)
def test_verdict_matches_a_real_call(name):
    fn, make_args, kwargs = CASES[name]
    args = make_args()
    kwargs = {k: v for k, v in kwargs.items()}
    report = explain_donation(fn, *args, **kwargs)
    # explain_donation must not donate anything itself.
    leaves = jax.tree_util.tree_leaves((args, kwargs))
    assert not any(x.is_deleted() for x in leaves)
    fn(*args, **kwargs)
    assert [leaf.reused for leaf in report.leaves] == [x.is_deleted() for x in leaves]


def test_fields_paths_and_bytes():
    step = jax.jit(lambda state, d: {"w": state["w"] + d, "b": state["b"]}, donate_argnums=0)
    r = explain_donation(step, {"w": f32(2, 3), "b": f32(5)}, f32(2, 3))
    assert [leaf.path for leaf in r.leaves] == ["state['b']", "state['w']", "d"]
    assert r.leaf("state['w']").reused and r.leaf("state['w']").output == "out['w']"
    assert not r.leaf("d").requested and r.leaf("d").status == "not donated"
    assert r.bytes_saved == 20 + 24 == r.alias_size_in_bytes
    assert r.unusable == [] and r.warnings == []


def test_unusable_and_pruned_are_told_apart():
    f = jax.jit(lambda a, u, b: a.reshape(2, 3) + b.astype(jnp.float32), donate_argnums=(0, 1, 2))
    r = explain_donation(f, f32(6), f32(3), jnp.ones((2, 3), jnp.int32))
    assert r.leaf("a").reused and r.leaf("u").pruned and not r.leaf("u").reused
    assert [leaf.path for leaf in r.unusable] == ["b"]
    assert any("Some donated buffers were not usable: int32[2,3]." in m for m in r.warnings)


def test_text_and_html():
    f = jax.jit(lambda x, y: x + y, donate_argnums=(0, 1))
    r = explain_donation(f, f32(2, 3), f32(2, 3))
    text = str(r)
    assert "reused by out" in text and "NOT usable" in text and "warning:" in text
    html = r._repr_html_()
    assert html.startswith('<div class="donation-report">') and "<table>" in html
    assert "1 of 2 donated leaves reused" in r.summary()


def test_numpy_arguments_are_fine():
    f = jax.jit(lambda s, d: s + d, donate_argnums=0)
    a = np.ones(4, np.float32)
    r = explain_donation(f, a, a)
    assert r.leaf("s").reused and np.all(a == 1)


def test_needs_a_jitted_function():
    with pytest.raises(TypeError, match="jitted"):
        explain_donation(lambda x: x, f32(2))


def test_parse_alias_text():
    text = "HloModule m, input_output_alias={ {0}: (0, {}, may-alias), {1}: (2, {}, may-alias) }, x=1\nENTRY"
    assert parse_input_output_alias(text) == {(0,): 0, (1,): 2}
    assert parse_input_output_alias("HloModule m, entry_computation_layout={()}\n") == {}


def test_the_warning_is_reported_once_then_jax_stays_quiet():
    import warnings

    f = jax.jit(lambda a, b: a + b, donate_argnums=(0, 1))
    first = explain_donation(f, f32(3), f32(3))
    assert len(first.warnings) == 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        f(f32(3), f32(3))
    assert caught == []  # JAX warned once per compilation, during explain_donation
    again = explain_donation(f, f32(3), f32(3))
    assert again.warnings == [] and [leaf.path for leaf in again.unusable] == ["b"]


def test_an_unusable_leaf_says_only_that_no_output_took_it():
    f = jax.jit(lambda a, b: a.astype(jnp.float32) + b, donate_argnums=(0, 1))
    r = explain_donation(f, jnp.ones(4, jnp.int8), jnp.ones(4, jnp.int32))
    assert [leaf.status for leaf in r.leaves] == ["NOT usable: no output took its buffer"] * 2
    fine = explain_donation(jax.jit(lambda b: b.astype(jnp.float32) + 1, donate_argnums=0), jnp.ones(4, jnp.int32))
    assert fine.leaves[0].status.startswith("reused")
