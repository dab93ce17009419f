"""The pictures of lessons 1, 3 and 6 draw what the arrays and the compiled
program say: one box per buffer, one arrow per reuse with its pass, a legend."""
import jax
import jax.numpy as jnp
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from donation_lab.pictures import buffer_rows, draw_buffers, draw_matching, matching_pairs  # noqa: E402


def test_buffers_without_donation_three_boxes_with_donation_two():
    sgd = lambda p, g: p - 0.1 * g  # noqa: E731
    params, grads = jnp.ones(4), jnp.ones(4)
    out = jax.jit(sgd)(params, grads)
    fig, (left, right) = plt.subplots(1, 2)
    assert draw_buffers(left, "without", buffer_rows(params=params, grads=grads, new_params=out)) == 3
    params = jnp.ones(4)
    address = params.unsafe_buffer_pointer()
    out = jax.jit(sgd, donate_argnums=0)(params, grads)
    rows = buffer_rows(params=params, grads=grads, new_params=out)
    assert rows[0] == ("params", None, True)
    assert draw_buffers(right, "with", rows, addresses={"params": address}) == 2
    assert "2 buffers" in right.get_title()
    plt.close(fig)


def test_matching_marks_pass_one_and_pass_two_and_no_arrow_for_a_miss():
    f = jax.jit(lambda a, b, c, d: (a + 1, c.astype(jnp.float32), b.reshape(3, 2) * 2, d.astype(jnp.float32)),
                donate_argnums=(0, 1, 2, 3))
    args = (jnp.ones((2, 3)), jnp.ones(6), jnp.ones(4, jnp.int32), jnp.ones(5, jnp.int8))
    m = matching_pairs(f, *args)
    assert m["pairs"] == [(0, 0, 1), (1, 2, 2), (2, 1, 2)]   # int8[5] -> float32[5]: other byte size, no arrow
    fig, ax = plt.subplots()
    assert draw_matching(f, *args, ax=ax) == m["pairs"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "reused: same shape and dtype", "reused: other shape or dtype, same bytes"]
    assert not any(a.is_deleted() for a in args)  # nothing ran
    plt.close(fig)


def test_matching_marks_a_requested_donation_not_a_done_one():
    # Lesson 3 (l3-picture-md): every input named in donate_argnums is marked "(donation
    # requested)", the int8[5] too, which no output takes: a real call leaves it alive.
    # An input not named is not marked, and no label says "(donated)".
    f = jax.jit(lambda a, b, c, d: (a + 1, c.astype(jnp.float32), b.reshape(3, 2) * 2, d.astype(jnp.float32)),
                donate_argnums=(0, 1, 2, 3))
    args = (jnp.ones((2, 3)), jnp.ones(6), jnp.ones(4, jnp.int32), jnp.ones(5, jnp.int8))
    fig, ax = plt.subplots()
    draw_matching(f, *args, ax=ax)
    labels = [t.get_text() for t in ax.texts]
    assert labels[:4] == ["a: float32[2,3]  (donation requested)", "b: float32[6]  (donation requested)",
                          "c: int32[4]  (donation requested)", "d: int8[5]  (donation requested)"]
    assert not any("(donated)" in label for label in labels)
    plt.close(fig)
    f(*args)
    assert [a.is_deleted() for a in args] == [True, True, True, False]
    fig, ax = plt.subplots()
    draw_matching(jax.jit(lambda s, d: s + d, donate_argnums=0), jnp.ones(4), jnp.ones(4), ax=ax)
    assert [t.get_text() for t in ax.texts][:2] == ["s: float32[4]  (donation requested)", "d: float32[4]"]
    plt.close(fig)


def test_matching_draws_where_xla_puts_the_buffer_not_the_pass_two_pairing():
    # Lesson 3 (l3-elsewhere): JAX pairs the float32[8] with int8[8] (same element count,
    # no warning), but XLA puts the float16[16] output (32 bytes, as many as the input) in
    # its buffer: the arrow goes there. Without a 32-byte output there is no arrow.
    both = jax.jit(lambda c: (c.astype(jnp.int8), jnp.concatenate([c, c]).astype(jnp.float16)), donate_argnums=0)
    assert matching_pairs(both, jnp.ones(8))["pairs"] == [(0, 1, 2)]
    x = jnp.ones(8)
    address = x.unsafe_buffer_pointer()
    small, wide = both(x)
    assert x.is_deleted() and wide.unsafe_buffer_pointer() == address != small.unsafe_buffer_pointer()
    only_int8 = jax.jit(lambda c: c.astype(jnp.int8), donate_argnums=0)
    assert matching_pairs(only_int8, jnp.ones(8))["pairs"] == []


def test_shard_plot_has_a_legend_per_device():
    from donation_lab.shard_layout import plot_shards

    fig, ax = plt.subplots()
    plot_shards(jnp.arange(4.0), ax=ax)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["device 0"]
    plt.close(fig)
