"""Every behaviour lessons 01-03 state, asserted on the pinned JAX.

If a JAX upgrade changes one of these, this file fails and points at the
lesson sentence to rewrite. Each test builds fresh jitted functions: JAX warns
about unusable donations once per lowering of a function and signature, so reuse would hide warnings.
"""
import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

NOT_USABLE = "Some donated buffers were not usable"
EXPLANATION = "See an explanation at https://docs.jax.dev/en/latest/201/jit.html#jax-201-buffer-donation."


def fresh_add():
    """A new function object each time: jit caches compilations per function,
    and a cached compilation neither warns again nor takes the same error path."""
    def add(s, d):
        return s + d
    return add


def call_recording_warnings(fn, *args, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn(*args, **kwargs)
    return out, [str(w.message) for w in caught]


# ---- lesson 01 -----------------------------------------------------------

def test_without_donation_the_output_is_a_fresh_buffer():
    # Lesson 1 (l1-fresh, l1-donate-md); the donated side: test_donated_input_is_deleted_and_output_reuses_its_buffer.
    s, d = jnp.ones(4), jnp.ones(4)
    out = jax.jit(fresh_add())(s, d)
    assert not s.is_deleted() and out.unsafe_buffer_pointer() != s.unsafe_buffer_pointer()


def test_memory_analysis_alias_bytes():
    # Lesson 1 (l1-ma-md, l1-ma): zero without donation, the donated input's bytes with it.
    spec = jax.ShapeDtypeStruct((1024,), jnp.float32)
    plain = jax.jit(fresh_add()).lower(spec, spec).compile().memory_analysis()
    donated = jax.jit(fresh_add(), donate_argnums=0).lower(spec, spec).compile().memory_analysis()
    assert plain.alias_size_in_bytes == 0
    assert donated.alias_size_in_bytes == 4096
    assert plain.argument_size_in_bytes == donated.argument_size_in_bytes == 8192
    assert plain.output_size_in_bytes == donated.output_size_in_bytes == 4096


def test_the_alias_is_the_donated_arguments_bytes_at_its_dtype():
    # Lesson 1's practice (l1-q2-md, Hint 2): two bfloat16 (256, 256) arrays, params donated: the
    # plan reuses params's 256 * 256 * 2 bytes, not both arguments' and not float32's 4 bytes each.
    sgd = jax.jit(lambda params, grads: params - 0.1 * grads, donate_argnums=0)
    spec = jax.ShapeDtypeStruct((256, 256), jnp.bfloat16)
    stats = sgd.lower(spec, spec).compile().memory_analysis()
    assert stats.alias_size_in_bytes == 256 * 256 * 2 == stats.argument_size_in_bytes // 2
    assert jax.jit(lambda params, grads: params - 0.1 * grads).lower(spec, spec).compile().memory_analysis() \
        .alias_size_in_bytes == 0


def test_compiled_text_shows_the_alias():
    spec = jax.ShapeDtypeStruct((8,), jnp.float32)
    text = jax.jit(fresh_add(), donate_argnums=0).lower(spec, spec).compile().as_text()
    assert "input_output_alias={ {}: (0, {}, may-alias) }" in text
    assert "input_output_alias" not in jax.jit(fresh_add()).lower(spec, spec).compile().as_text()


def test_cpu_memory_stats_is_none():
    assert jax.devices()[0].platform == "cpu" and jax.devices()[0].memory_stats() is None


def test_lowering_and_compiling_real_arrays_donates_nothing_the_call_does():
    # Lesson 1 (l1-lower): lower(x, g).compile() with arrays, not shapes, leaves x alive;
    # calling the compiled function deletes it and puts the result in its buffer.
    x, g = jnp.ones(1000), jnp.full(1000, 0.5)
    pointer = x.unsafe_buffer_pointer()
    compiled = jax.jit(fresh_add(), donate_argnums=0).lower(x, g).compile()
    assert compiled.memory_analysis().alias_size_in_bytes == 4000
    assert not x.is_deleted()
    out = compiled(x, g)
    assert x.is_deleted() and out.unsafe_buffer_pointer() == pointer


def test_lowering_reads_the_weak_type_of_a_real_array_and_deletes_nothing():
    # Lesson 1 (l1-lower): the types lowering reads include the weak type. jnp.full(1000, 0.5)
    # is weakly typed: lowering it gives the program of a weak struct, not of a plain one.
    donating = jax.jit(lambda p, g: p - 0.1 * g, donate_argnums=0)
    x, g = jnp.ones(1000), jnp.full(1000, 0.5)
    assert (x.weak_type, g.weak_type) == (False, True)
    plain = jax.ShapeDtypeStruct((1000,), jnp.float32)
    weak = jax.ShapeDtypeStruct((1000,), jnp.float32, weak_type=True)
    text = donating.lower(x, g).as_text()
    assert text == donating.lower(plain, weak).as_text()
    assert text != donating.lower(plain, plain).as_text()
    assert not x.is_deleted() and not g.is_deleted()


def test_lowering_reads_whether_an_array_is_committed_never_its_data():
    # Lesson 1 (l1-lower-md, l1-committed): a committed and an uncommitted array of equal
    # shape, dtype, weak type and sharding lower differently; arrays that differ only in
    # their data, even a deleted one, lower the same.
    donating = jax.jit(lambda p, g: p - 0.1 * g, donate_argnums=0)
    g = jnp.full(1000, 0.5)
    program = lambda a: donating.lower(a, g).as_text()
    loose = jnp.ones(1000)
    pinned = jax.device_put(jnp.ones(1000), jax.devices()[0])
    assert (loose.committed, pinned.committed) == (False, True)
    assert loose.sharding == pinned.sharding
    assert (loose.shape, loose.dtype, loose.weak_type) == (pinned.shape, pinned.dtype, pinned.weak_type)
    assert program(loose) != program(pinned)
    assert program(loose) == program(jnp.arange(1000.0))
    assert program(pinned) == program(jax.device_put(jnp.zeros(1000), jax.devices()[0]))
    gone = jnp.ones(1000)
    donating(gone, g)
    assert gone.is_deleted() and program(gone) == program(loose)


def test_memory_analysis_shows_a_plan_that_the_call_can_decline():
    # Lesson 1 (l1-ma-md, l1-decline-md, l1-decline): memory_analysis() plans to reuse the donated buffer;
    # a plain array is reused, one with a live NumPy view is neither deleted nor reused,
    # and once the view is gone the same call donates it.
    g = jnp.ones(1019)
    compiled = jax.jit(fresh_add(), donate_argnums=0).lower(jnp.ones(1019), g).compile()
    assert compiled.memory_analysis().alias_size_in_bytes == 4 * 1019
    plain = jnp.ones(1019)
    before = plain.unsafe_buffer_pointer()
    out = compiled(plain, g)
    assert plain.is_deleted() and out.unsafe_buffer_pointer() == before
    viewed = jnp.ones(1019)
    view = np.asarray(viewed)
    before = viewed.unsafe_buffer_pointer()
    out, caught = call_recording_warnings(compiled, viewed, g)
    assert not viewed.is_deleted() and out.unsafe_buffer_pointer() != before and caught == []
    assert view.ctypes.data == before
    del view
    out = compiled(viewed, g)
    assert viewed.is_deleted() and out.unsafe_buffer_pointer() == before


def test_a_donated_array_in_numpy_memory_is_deleted_but_its_buffer_not_reused():
    # Lesson 1 (l1-decline-md, l1-decline): normally the output lives in the donated
    # buffer; an array that uses NumPy's memory (device_put of 64-byte aligned data, the
    # lesson's recipe) is deleted and the output goes to a new buffer.
    g = jnp.ones(1021)
    compiled = jax.jit(fresh_add(), donate_argnums=0).lower(jnp.ones(1021), g).compile()
    raw = np.ones(1021 + 16, dtype=np.float32)
    host = raw[(-raw.ctypes.data % 64) // 4:][:1021]
    for numpy_owned in (True, False):
        arr = jax.device_put(host) if numpy_owned else jnp.array(host)
        before = arr.unsafe_buffer_pointer()
        assert (before == host.ctypes.data) is numpy_owned
        out = compiled(arr, g)
        assert arr.is_deleted()
        assert (out.unsafe_buffer_pointer() == before) is (not numpy_owned)
        np.testing.assert_array_equal(out, 2.0)
    assert (host == 1.0).all()

# ---- lesson 02 -----------------------------------------------------------

def test_donated_input_is_deleted_and_output_reuses_its_buffer():
    # Lesson 1 (l1-donate) and lesson 2 (l2-forms: delta, not donated, is untouched); l1-fresh on the other
    # side: no donation, a new buffer.
    s, d = jnp.ones(4), jnp.ones(4)
    pointer = s.unsafe_buffer_pointer()
    out = jax.jit(fresh_add(), donate_argnums=0)(s, d)
    assert s.is_deleted() and not d.is_deleted()
    assert out.unsafe_buffer_pointer() == pointer
    np.testing.assert_array_equal(out, 2.0)


READS = {
    "print": lambda s: str(s),
    "arithmetic": lambda s: s + 1,
    "np.asarray": np.asarray,
    "device_get": jax.device_get,
    "another jit": jax.jit(lambda a: a * 2),
}


@pytest.mark.parametrize("read", READS)
def test_reading_a_donated_array_raises(read):
    s = jnp.ones(4, jnp.float32)
    jax.jit(fresh_add(), donate_argnums=0)(s, jnp.ones(4))
    with pytest.raises(RuntimeError) as info:
        READS[read](s)
    assert str(info.value) == "Array has been deleted with shape=float32[4]."
    assert type(info.value) is RuntimeError


def test_every_kind_of_read_of_a_donated_array_raises_runtime_error():
    """Lesson 2 (l2-meta-md, l2-meta, l2-read2): every read of a donated array's data
    raises RuntimeError('Array has been deleted with shape=float32[29].'), never
    ValueError: an operation's first call on the deleted array, one that ran on live
    arrays of that signature before (or after), one whose cache was cleared, indexing,
    .at[].get(), jnp.take, a jitted function with a side effect (jax.debug.print) or a
    host callback, and reads that are not jitted calls. The same reads of a live array
    succeed. float32[29] is used nowhere else, so these are its first calls."""
    gone = jnp.ones(29)
    jax.jit(lambda a: a * 2, donate_argnums=0)(gone)
    idx = jnp.array([0, 2])
    total = jax.jit(lambda a: a.sum())
    loud = jax.jit(lambda a: (jax.debug.print("a[0] = {}", a[0]), a * 2)[1])
    pure = jax.jit(lambda a: jax.pure_callback(np.sin, jax.ShapeDtypeStruct(a.shape, a.dtype), a) * 2)
    reads = [lambda a: a * 3, lambda a: a * 7.0, lambda a: a - 3, jnp.sin, total, loud, pure,
             lambda a: a[0], lambda a: a[1:], lambda a: a[idx], lambda a: a.at[0].get(),
             lambda a: jnp.take(a, idx), np.asarray, str, jax.device_get]

    def read_deleted(read):
        with pytest.raises(RuntimeError) as info:
            read(gone)
        assert str(info.value).splitlines()[0] == "Array has been deleted with shape=float32[29]."
        assert type(info.value) is RuntimeError and not isinstance(info.value, ValueError)

    read_deleted(lambda a: a - 3)                      # a first call on the deleted array ...
    for _ in range(3):
        for read in reads:
            read(jnp.ones(29))                         # ... then every read runs on live arrays
    jax.effects_barrier()
    for read in reads:
        read_deleted(read)
    total.clear_cache()                                # a cleared cache starts over
    total(jnp.ones(29))
    read_deleted(total)


def aligned_ones(n, alignment=64, offset_bytes=0):
    raw = np.empty(n + 2 * alignment // 4, dtype=np.float32)
    start = (-raw.ctypes.data % alignment + offset_bytes) // 4
    host = raw[start:start + n]
    host[:] = 1.0
    return host


@pytest.mark.parametrize("offset_bytes,make,shares", [(0, jax.device_put, True), (16, jax.device_put, False),
                                                       (4, jax.device_put, False), (0, jnp.array, False)],
                         ids=["aligned-device_put", "16-off-device_put", "4-off-device_put", "aligned-jnp.array"])
def test_deleted_is_not_reused_when_device_put_shares_aligned_numpy_memory(offset_bytes, make, shares):
    # Lesson 2 (l2-aligned): device_put of 64-byte aligned NumPy data uses that memory;
    # donating it deletes the array, but the output goes to a new buffer.
    host = aligned_ones(1000, offset_bytes=offset_bytes)
    arr = make(host)
    before = arr.unsafe_buffer_pointer()
    assert (before == host.ctypes.data) is shares
    out, caught = call_recording_warnings(jax.jit(fresh_add(), donate_argnums=0), arr, jnp.ones(1000))
    assert arr.is_deleted() and caught == []
    assert (out.unsafe_buffer_pointer() == before) is (not shares)
    np.testing.assert_array_equal(out, 2.0)
    assert (host == 1.0).all()


def test_shape_and_dtype_still_readable():
    # Lesson 2 (l2-meta-md, l2-meta); test_claims_beyond adds size, ndim, sharding and the live side.
    s = jnp.ones((2, 3), jnp.float32)
    jax.jit(fresh_add(), donate_argnums=0)(s, jnp.ones((2, 3)))
    assert s.shape == (2, 3) and s.dtype == jnp.float32


def test_argnums_and_argnames_map_to_each_other():
    f = jax.jit(fresh_add(), donate_argnames="s")
    s = jnp.ones(4)
    f(s, jnp.ones(4))
    assert s.is_deleted()


def test_keyword_arguments_are_donated():
    # Lesson 2 (l2-argnames-md, l2-forms): jit donates an argument passed by keyword.
    f = jax.jit(fresh_add(), donate_argnums=0)
    s = jnp.ones(4)
    f(s=s, d=jnp.ones(4))
    assert s.is_deleted()


def test_decorator_forms():
    @functools.partial(jax.jit, donate_argnums=0)
    def a(state, d):
        return state + d

    @jax.jit(donate_argnums=0)
    def b(state, d):
        return state + d

    def c_raw(state, d):
        return state + d

    c = jax.jit(c_raw, donate_argnames="state")

    @functools.partial(jax.jit, donate_argnames="state")
    def e(state, d):
        return state + d

    for f in (a, b, c, e):   # Lesson 2 (l2-forms): each form donates by position and by keyword
        s, kept = jnp.ones(4), jnp.ones(4)
        f(s, kept)
        assert s.is_deleted() and not kept.is_deleted()
        s, kept = jnp.ones(4), jnp.ones(4)
        f(state=s, d=kept)
        assert s.is_deleted() and not kept.is_deleted()


def test_numpy_input_no_error_no_warning_untouched():
    a = np.ones(4, np.float32)
    out, caught = call_recording_warnings(jax.jit(fresh_add(), donate_argnums=0), a, jnp.ones(4))
    assert caught == [] and np.all(a == 1.0) and a.flags.writeable
    np.testing.assert_array_equal(out, 2.0)


def test_kwargs_only_function_needs_argnames():
    with pytest.raises(ValueError, match="only accepts 0 positional arguments"):
        jax.jit(lambda **kw: kw["s"] + 1, donate_argnums=0)(s=jnp.ones(2))
    s = jnp.ones(2)
    jax.jit(lambda **kw: kw["s"] + 1, donate_argnames="s")(s=s)
    assert s.is_deleted()


def test_explain_donation_reports_the_plan_which_the_call_can_decline():
    """Lesson 2 (l2-explain-md, l2-explain, l2-plan-md, l2-plan): explain_donation reports the planned reuse
    (the compiled input/output aliases) for a plain array, one with a live NumPy view
    and one in NumPy's memory, and no reuse for an argument not donated; the call
    reuses only the plain one's buffer."""
    from donation_lab import explain_donation

    update = jax.jit(fresh_add(), donate_argnums=0)
    plain = jnp.ones(1031)
    viewed = jnp.ones(1031)
    view = np.asarray(viewed)
    numpy_owned = jax.device_put(aligned_ones(1031))
    expected = {"plain": (True, True), "viewed": (False, False), "numpy_owned": (True, False)}
    for name, arr in [("plain", plain), ("viewed", viewed), ("numpy_owned", numpy_owned)]:
        report = explain_donation(update, arr, jnp.ones(1031))
        assert report.leaf("s").requested and report.leaf("s").reused, name
        assert not report.leaf("d").requested and not report.leaf("d").reused, name
        before = arr.unsafe_buffer_pointer()
        out = update(arr, jnp.ones(1031))
        assert (arr.is_deleted(), out.unsafe_buffer_pointer() == before) == expected[name], name
    assert view.ctypes.data == viewed.unsafe_buffer_pointer()

# ---- lesson 03 -----------------------------------------------------------

def test_second_reference_is_deleted_too():
    # Lesson 3 (l3-ref): another name, a list entry and a closure all hold the deleted array;
    # reading through the closure raises RuntimeError. The new state is fine.
    s = jnp.ones(4)
    alias, in_list = s, [s]
    closure = lambda: s.sum()  # noqa: E731
    new = jax.jit(fresh_add(), donate_argnums=0)(s, jnp.ones(4))
    assert alias.is_deleted() and in_list[0].is_deleted()
    with pytest.raises(RuntimeError, match=r"^Array has been deleted with shape=float32\[4\]\.") as info:
        closure()
    assert type(info.value) is RuntimeError
    np.testing.assert_array_equal(new, 2.0)


def test_copy_keeps_the_old_value():
    # Lesson 3 (l3-old): a copy made before the call survives the donation.
    s = jnp.arange(4.0)
    old = s.copy()
    jax.jit(fresh_add(), donate_argnums=0)(s, jnp.ones(4))
    assert s.is_deleted() and not old.is_deleted()
    np.testing.assert_array_equal(old, [0, 1, 2, 3])


def test_warning_text_shape_mismatch_not_deleted():
    a = jnp.ones((1, 3))
    _, caught = call_recording_warnings(jax.jit(fresh_add(), donate_argnums=0), a, jnp.ones((2, 3)))
    assert caught == [f"{NOT_USABLE}: float32[1,3].\n{EXPLANATION}"]
    assert not a.is_deleted()


def test_more_donations_than_outputs_leftmost_wins():
    x, y = jnp.ones((2, 3)), jnp.ones((2, 3))
    _, caught = call_recording_warnings(jax.jit(fresh_add(), donate_argnums=(0, 1)), x, y)
    assert caught == [f"{NOT_USABLE}: float32[2,3].\n{EXPLANATION}"]
    assert x.is_deleted() and not y.is_deleted()


def test_warning_once_per_compilation():
    f = jax.jit(fresh_add(), donate_argnums=(0, 1))
    _, first = call_recording_warnings(f, jnp.ones(3), jnp.ones(3))
    _, second = call_recording_warnings(f, jnp.ones(3), jnp.ones(3))
    assert len(first) == 1 and second == []


def test_several_outputs_take_matching_inputs_in_order():
    # Only b is donated; the first output of the same shape (a * 2) gets it.
    a, b = jnp.ones(4), jnp.ones(4)
    pointer = b.unsafe_buffer_pointer()
    first, second = jax.jit(lambda a, b: (a * 2, b * 3), donate_argnums=1)(a, b)
    assert b.is_deleted() and not a.is_deleted()
    assert first.unsafe_buffer_pointer() == pointer != second.unsafe_buffer_pointer()


def test_pass_two_same_element_count_no_warning():
    flat = jnp.ones(6)
    out, caught = call_recording_warnings(
        jax.jit(lambda a, b: a.reshape(2, 3) + b, donate_argnums=0), flat, jnp.ones((2, 3)))
    assert caught == [] and flat.is_deleted() and out.shape == (2, 3)
    state = jnp.ones(4, jnp.int32)
    out, caught = call_recording_warnings(
        jax.jit(lambda s, d: s.astype(jnp.float32) + d, donate_argnums=0), state, jnp.ones(4))
    assert caught == [] and state.is_deleted() and out.dtype == jnp.float32


@pytest.mark.parametrize("target,reused", [(jnp.int8, False), (jnp.float16, False), (jnp.int32, True),
                                           (jnp.float32, True)])
def test_an_output_reuses_a_donated_buffer_only_at_the_same_byte_size(target, reused):
    # Lesson 3 (l3-bytes): a float32[64] is not reused for an int8[64] or
    # float16[64] result although it would fit, and nothing warns; same bytes, reused.
    x = jnp.ones(64, jnp.float32)
    f = jax.jit(lambda c: c.astype(target) * 2, donate_argnums=0)
    alias = f.lower(jax.ShapeDtypeStruct((64,), jnp.float32)).compile().memory_analysis().alias_size_in_bytes
    pointer = x.unsafe_buffer_pointer()
    out, caught = call_recording_warnings(f, x)
    assert caught == [] and x.is_deleted() is reused
    assert alias == (256 if reused else 0)
    if reused:
        assert out.unsafe_buffer_pointer() == pointer


def test_pass_two_pairing_only_hands_the_buffer_over_xla_reuses_it_for_an_output_of_equal_bytes():
    # Lesson 3 (l3-pass2-md, l3-elsewhere): the float32[8] is paired with int8[8] (as
    # many elements: no warning, marked a buffer donor), but XLA puts the float16[16] output
    # (32 bytes, like the input) in its buffer, and the input is deleted. Without a 32-byte
    # output the same pairing reuses nothing: no warning, not deleted.
    def int8_and_wide(c):
        return c.astype(jnp.int8), jnp.concatenate([c, c]).astype(jnp.float16)

    both = jax.jit(int8_and_wide, donate_argnums=0)
    assert "tensor<8xf32> {jax.buffer_donor = true}" in both.lower(jnp.ones(8)).as_text()
    x = jnp.ones(8)
    pointer = x.unsafe_buffer_pointer()
    (small, wide), caught = call_recording_warnings(both, x)
    assert caught == [] and x.is_deleted()
    assert wide.unsafe_buffer_pointer() == pointer != small.unsafe_buffer_pointer()
    alone = jax.jit(lambda c: int8_and_wide(c)[0], donate_argnums=0)
    assert "tensor<8xf32> {jax.buffer_donor = true}" in alone.lower(jnp.ones(8)).as_text()
    x = jnp.ones(8)
    _, caught = call_recording_warnings(alone, x)
    assert caught == [] and not x.is_deleted()


def test_an_input_left_without_a_free_output_is_not_handed_to_xla():
    # Lesson 3 (l3-pass2-md, l3-taken): int8[4] takes the only float32[4] output by element
    # count (a donor, but too small); int32[4] gets the warning, is no donor, and survives.
    f = jax.jit(lambda s, c: s.astype(jnp.float32) + c, donate_argnums=(0, 1))
    small, counts = jnp.ones(4, jnp.int8), jnp.ones(4, jnp.int32)
    _, caught = call_recording_warnings(f, small, counts)
    assert caught == [f"{NOT_USABLE}: int32[4].\n{EXPLANATION}"]
    assert not small.is_deleted() and not counts.is_deleted()
    text, _ = call_recording_warnings(lambda: f.lower(jnp.ones(4, jnp.int8), jnp.ones(4, jnp.int32)).as_text())
    assert "tensor<4xi8> {jax.buffer_donor = true}" in text and "tensor<4xi32> {" not in text


def test_an_output_with_fewer_elements_warns_one_with_as_many_does_not():
    # Lesson 3 (l3-fewer against l3-bytes): the warning needs no output with the
    # input's shape and dtype nor its element count.
    x = jnp.ones(64)
    _, caught = call_recording_warnings(jax.jit(lambda c: c[:32] * 2, donate_argnums=0), x)
    assert caught == [f"{NOT_USABLE}: float32[64].\n{EXPLANATION}"] and not x.is_deleted()
    x = jnp.ones(64)
    _, caught = call_recording_warnings(jax.jit(lambda c: c.astype(jnp.int8), donate_argnums=0), x)
    assert caught == [] and not x.is_deleted()


def test_the_warning_needs_a_free_output_of_as_many_elements_more_is_not_enough():
    # Lesson 3 (l3-fewer-md, l3-more): an output with MORE elements does not
    # silence the warning; an output already taken by another donated input does not either.
    x = jnp.ones(3)
    _, caught = call_recording_warnings(jax.jit(lambda c: jnp.concatenate([c, c]), donate_argnums=0), x)
    assert caught == [f"{NOT_USABLE}: float32[3].\n{EXPLANATION}"] and not x.is_deleted()
    a, b = jnp.ones(4), jnp.ones(4)
    _, caught = call_recording_warnings(jax.jit(lambda p, q: p + q, donate_argnums=(0, 1)), a, b)
    assert caught == [f"{NOT_USABLE}: float32[4].\n{EXPLANATION}"] and a.is_deleted() and not b.is_deleted()
    c = jnp.ones(6)  # the other side: a free output of as many elements (any shape) takes it, no warning
    _, caught = call_recording_warnings(jax.jit(lambda v: v.reshape(2, 3) * 2, donate_argnums=0), c)
    assert caught == [] and c.is_deleted()


def test_a_deleted_and_a_donated_array_raise_the_same_runtime_error():
    # Lesson 3 (l3-delete-md): after Array.delete(), as after donation, a function that already
    # ran on a live array of that shape raises RuntimeError: Array has been deleted.
    f = jax.jit(lambda v: v * 2)
    np.testing.assert_array_equal(f(jnp.ones(3)), 2.0)
    deleted, donated = jnp.ones(3), jnp.ones(3)
    deleted.delete()
    jax.jit(lambda v: v + 1, donate_argnums=0)(donated)
    assert deleted.is_deleted() and donated.is_deleted()
    for gone in (deleted, donated):
        with pytest.raises(RuntimeError, match=r"^Array has been deleted with shape=float32\[3\]\.") as info:
            f(gone)
        assert type(info.value) is RuntimeError


def test_a_live_numpy_view_blocks_donation_silently():
    # Lesson 3 (l3-view): on CPU np.asarray(x) reads x's buffer; while it
    # lives, x is not deleted and nothing warns. Without it (or with a copy), x is donated.
    step = jax.jit(fresh_add(), donate_argnums=0)
    x = jnp.ones(4)
    view = np.asarray(x)
    assert view.ctypes.data == x.unsafe_buffer_pointer()
    out, caught = call_recording_warnings(step, x, jnp.ones(4))
    assert caught == [] and not x.is_deleted() and out.unsafe_buffer_pointer() != x.unsafe_buffer_pointer()
    del view
    _, caught = call_recording_warnings(step, x, jnp.ones(4))
    assert caught == [] and x.is_deleted()
    y = jnp.ones(4)
    copy = np.array(y)                   # l3-view's last lines: a copy has memory of its own
    assert copy.ctypes.data != y.unsafe_buffer_pointer()
    _, caught = call_recording_warnings(step, y, jnp.ones(4))
    assert caught == [] and y.is_deleted() and (copy == 1.0).all()


def test_a_donating_jit_under_vmap_checkpoint_and_grad_still_deletes_the_input():
    # Lesson 3 (l3-transforms): outside any jit these transformations call the
    # donating function for real; grad then fails when its backward pass reads the
    # deleted input (p * p), not when it does not (2 * p). Under an outer jit: ignored.
    twice = jax.jit(lambda p: 2.0 * p, donate_argnums=0)
    square = jax.jit(lambda p: p * p, donate_argnums=0)
    p = jnp.array([[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_array_equal(jax.vmap(square)(p), [[1.0, 4.0], [9.0, 16.0]])
    assert p.is_deleted()
    p = jnp.array([1.0, 2.0])
    np.testing.assert_array_equal(jax.checkpoint(square)(p), [1.0, 4.0])
    assert p.is_deleted()
    p = jnp.array([1.0, 2.0])
    np.testing.assert_array_equal(jax.grad(lambda q: twice(q).sum())(p), [2.0, 2.0])
    assert p.is_deleted()
    p = jnp.array([1.0, 2.0])
    with pytest.raises(RuntimeError, match=r"^Array has been deleted with shape=float32\[2\]\."):
        jax.grad(lambda q: square(q).sum())(p)
    assert p.is_deleted()
    p = jnp.array([1.0, 2.0])
    np.testing.assert_array_equal(jax.jit(jax.grad(lambda q: square(q).sum()))(p), [2.0, 4.0])
    assert not p.is_deleted()


def test_same_array_twice_one_donated():
    # Lesson 3 (l3-twice): an output can take the donated buffer: the runtime refuses the call.
    x = jnp.ones(4)
    with pytest.raises(jax.errors.JaxRuntimeError,
                       match="Attempt to use a buffer that was previously donated in the same call"):
        jax.jit(fresh_add(), donate_argnums=0)(x, x)
    assert not x.is_deleted()


def test_same_array_twice_one_donated_runs_when_no_output_can_take_it():
    # Lesson 3 (l3-twice-sum): the only output is a scalar: the donation is dropped with the
    # usual warning and the call runs; a donated parameter that is never used is dropped silently.
    x = jnp.ones(4)
    total, messages = call_recording_warnings(jax.jit(lambda a, b: (a + b).sum(), donate_argnums=0), x, x)
    assert float(total) == 8.0
    assert [m.splitlines()[0] for m in messages] == [f"{NOT_USABLE}: float32[4]."]
    assert not x.is_deleted()
    doubled, messages = call_recording_warnings(jax.jit(lambda a, b: b * 2, donate_argnums=0), x, x)
    np.testing.assert_array_equal(doubled, [2.0, 2.0, 2.0, 2.0])
    assert messages == [] and not x.is_deleted()


def test_same_array_twice_one_donated_runs_silently_with_an_output_of_as_many_elements_but_other_bytes():
    # Lesson 3 (l3-twice-sum): an int8[4] output has as many elements as the donated float32[4]
    # (paired, so no warning) but another byte size (not reused): the call runs, silently,
    # and nothing is deleted. The float32[4] output on the other side fails (l3-twice).
    x = jnp.ones(4)
    out, messages = call_recording_warnings(
        jax.jit(lambda a, b: (a + b).astype(jnp.int8), donate_argnums=0), x, x)
    np.testing.assert_array_equal(out, [2, 2, 2, 2])
    assert out.dtype == jnp.int8 and messages == [] and not x.is_deleted()


def test_same_array_twice_both_donated():
    x = jnp.ones(4)
    with pytest.raises(jax.errors.JaxRuntimeError, match="Attempt to donate the same buffer twice"):
        jax.jit(lambda a, b: (a + b, a - b), donate_argnums=(0, 1))(x, x)
    assert not x.is_deleted()


def test_unused_argument_pruned_no_warning_not_deleted():
    unused = jnp.ones(4)
    _, caught = call_recording_warnings(
        jax.jit(lambda a, u: a * 2, donate_argnums=1), jnp.ones(4), unused)
    assert caught == [] and not unused.is_deleted()


def test_nested_jit_donation_ignored_silently():
    # Lesson 3 (l3-nested); the other side, called directly, donates (every test above).
    inner = jax.jit(fresh_add(), donate_argnums=0)
    outer = jax.jit(lambda s, d: inner(s, d) * 2)
    s = jnp.ones(4)
    _, caught = call_recording_warnings(outer, s, jnp.ones(4))
    assert caught == [] and not s.is_deleted()


def test_warning_can_be_made_an_error():
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=NOT_USABLE)
        a = jnp.ones((1, 3))
        with pytest.raises(UserWarning, match=NOT_USABLE):
            jax.jit(fresh_add(), donate_argnums=0)(a, jnp.ones((2, 3)))
    assert not a.is_deleted()


def test_jax_runtime_error_is_a_runtime_error():
    assert issubclass(jax.errors.JaxRuntimeError, RuntimeError)


def test_compiled_functions_and_the_donating_one_raise_runtime_error_on_a_donated_array(capfd):
    # Lesson 3 (l3-ref3-md): the donating function itself, and an operation that already ran on a
    # live array of that shape, raise RuntimeError: Array has been deleted; nothing is logged on
    # stderr. The other side: on live arrays both run.
    update = jax.jit(fresh_add(), donate_argnums=0)
    total = jax.jit(lambda a: a.sum())
    assert float(total(jnp.ones(4))) == 4.0
    s = jnp.ones(4)
    update(s, jnp.ones(4))
    np.testing.assert_array_equal(update(jnp.ones(4), jnp.ones(4)), 2.0)
    capfd.readouterr()
    for read in (lambda: update(s, jnp.ones(4)), lambda: total(s), lambda: s + 1):
        with pytest.raises(RuntimeError, match=r"^Array has been deleted with shape=float32\[4\]\.") as info:
            read()
        assert type(info.value) is RuntimeError
    assert capfd.readouterr().err == ""


def test_passthrough_output_reuses_its_donated_input():
    # Lesson 3, the practice question (l3-q2-md): (a * b, c) with a, b, c donated deletes a and c, not b.
    a, b, c = jnp.ones(3), jnp.ones(3), jnp.ones(5, dtype=jnp.int32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jax.jit(lambda a, b, c: (a * b, c), donate_argnums=(0, 1, 2))(a, b, c)
    assert (a.is_deleted(), b.is_deleted(), c.is_deleted()) == (True, False, True)
    assert [str(w.message).splitlines()[0] for w in caught] == [f"{NOT_USABLE}: float32[3]."]


def test_copy_survives_and_ema_donates_only_the_average():
    # Lesson 3 (l3-old-md, l3-old): donate the average, not the parameters.
    ema = jax.jit(lambda avg, params: 0.9 * avg + 0.1 * params, donate_argnums=0)
    avg, params = jnp.zeros(4), jnp.ones(4)
    ema(avg, params)
    assert avg.is_deleted() and not params.is_deleted()


def test_pytest_filterwarnings_ini_turns_the_warning_into_a_failure(tmp_path):
    # Lesson 3 (l3-strict-md, l3-pytest, in Going deeper): exactly this warning fails its test; another UserWarning
    # in the same run leaves its test passing.
    import subprocess
    import sys

    (tmp_path / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\n'
        'filterwarnings = ["error:Some donated buffers were not usable:UserWarning"]\n')
    (tmp_path / "test_step.py").write_text(
        "import warnings\n"
        "import jax, jax.numpy as jnp\n"
        "def test_step():\n"
        "    jax.jit(lambda a, b: a + b, donate_argnums=0)(jnp.ones((1, 3)), jnp.ones((2, 3)))\n"
        "def test_other_warning():\n"
        "    warnings.warn('another UserWarning', UserWarning)\n")
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--color=no",
                             "-rA"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "UserWarning: Some donated buffers were not usable: float32[1,3]." in result.stdout
    assert "FAILED test_step.py::test_step" in result.stdout
    assert "PASSED test_step.py::test_other_warning" in result.stdout
    assert result.stdout.strip().splitlines()[-1].startswith("1 failed, 1 passed, 1 warning")


def test_shared_leaf_in_a_donated_pytree():
    # Lesson 3 (l3-twice3, l3-twice4): tied leaves fail and delete nothing; separate buffers donate.
    step = jax.jit(lambda s: {"w": s["w"] * 2, "w_ema": s["w_ema"] * 3}, donate_argnums=0)
    z = jnp.ones(4)
    with pytest.raises(jax.errors.JaxRuntimeError, match="Attempt to donate the same buffer twice"):
        step({"w": z, "w_ema": z})
    assert not z.is_deleted()
    copy = z.copy()
    step({"w": z, "w_ema": copy})
    assert z.is_deleted() and copy.is_deleted()


def test_gradient_accumulation_donates_the_total_only():
    accumulate = jax.jit(lambda total, g: total + g, donate_argnums=0)
    total, g = jnp.zeros(4), jnp.ones(4)
    new_total = accumulate(total, g)
    assert total.is_deleted() and not g.is_deleted()
    np.testing.assert_array_equal(new_total, 1.0)
