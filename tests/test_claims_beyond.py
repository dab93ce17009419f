"""The rules issue #11 corrected or added to lessons 2, 3, 5 and 6, each with a
case on both sides, asserted on the pinned JAX (0.12.0.1). If an upgrade changes
one, this file fails and names the lesson cell to rewrite."""
import logging
import subprocess
import sys
import textwrap
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import result_on_eight_devices, run_on_eight_devices

NOT_USABLE = "Some donated buffers were not usable"


def record(fn, *args, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn(*args, **kwargs)
    return out, [str(w.message) for w in caught]


def cast_add():
    return jax.jit(lambda c, d: c.astype(d.dtype) + d, donate_argnums=0)


# ---- lesson 3: the second pass needs the same element count AND byte size (l3-pass2, l3-bytes) ----

@pytest.mark.parametrize("source,target,n", [(jnp.int32, jnp.float32, 4), (jnp.float32, jnp.int32, 4),
                                             (jnp.float32, jnp.float32, 6)])
def test_same_byte_size_is_reused_silently(source, target, n):
    x = jnp.ones(n, dtype=source)
    address = x.unsafe_buffer_pointer()
    out, messages = record(cast_add(), x, jnp.ones(n, dtype=target))
    assert x.is_deleted() and messages == [] and out.unsafe_buffer_pointer() == address


@pytest.mark.parametrize("source,target,n", [(jnp.int8, jnp.float32, 4), (jnp.bfloat16, jnp.float32, 4),
                                             (jnp.float32, jnp.bfloat16, 1024)])
def test_other_byte_size_is_not_reused_not_deleted_and_silent(source, target, n):
    x = jnp.ones(n, dtype=source)
    out, messages = record(cast_add(), x, jnp.ones(n, dtype=target))
    assert not x.is_deleted() and messages == []
    np.testing.assert_array_equal(np.asarray(out, dtype=np.float32), 2.0)


def test_same_bytes_but_other_element_count_is_not_reused_and_warns():
    x = jnp.ones(4, dtype=jnp.float32)
    _, messages = record(jax.jit(lambda c: jnp.ones(16, jnp.int8) * c.sum().astype(jnp.int8),
                                 donate_argnums=0), x)
    assert not x.is_deleted() and messages and messages[0].startswith(f"{NOT_USABLE}: float32[4].")


# ---- lesson 2: argnums and argnames, alone or both (l2-argnames-md, l2-forms, l2-both-md, l2-both) ----

def add(state, delta):
    return state + delta


@pytest.mark.parametrize("options", [dict(donate_argnums=0), dict(donate_argnames="state")])
def test_one_of_the_two_is_mapped_through_the_signature(options):
    fn = jax.jit(add, **options)
    for call in (lambda s, d: fn(s, d), lambda s, d: fn(state=s, delta=d)):
        s, d = jnp.ones(3), jnp.ones(3)
        call(s, d)
        assert s.is_deleted() and not d.is_deleted()


def test_both_given_no_mapping_each_call_style_donates_its_own_list():
    both = jax.jit(add, donate_argnums=0, donate_argnames="delta")
    s, d = jnp.ones(3), jnp.ones(3)
    both(s, d)
    assert (s.is_deleted(), d.is_deleted()) == (True, False)
    s, d = jnp.ones(3), jnp.ones(3)
    both(state=s, delta=d)
    assert (s.is_deleted(), d.is_deleted()) == (False, True)


# ---- lesson 2: pmap still ignores keyword donation (l2-pmap) ----

def test_pmap_donates_positional_but_not_keyword_arguments():
    pmapped = jax.pmap(add, donate_argnums=0)
    s = jnp.ones((1, 4))
    pmapped(s, jnp.ones((1, 4)))
    assert s.is_deleted()
    s = jnp.ones((1, 4))
    pmapped(state=s, delta=jnp.ones((1, 4)))
    assert not s.is_deleted()
    s = jnp.ones(4)
    jax.jit(add, donate_argnums=0)(state=s, delta=jnp.ones(4))   # jit: keyword donated
    assert s.is_deleted()


# ---- lesson 3: the warning comes at lowering, once per process per text (l3-once, l3-once2) ----

def test_the_warning_fires_at_lower_without_running():
    a = jnp.ones((1, 3))
    _, messages = record(lambda: jax.jit(lambda a, b: a + b, donate_argnums=0).lower(a, jnp.ones((2, 3))))
    assert len(messages) == 1 and messages[0].startswith(NOT_USABLE) and not a.is_deleted()
    _, messages = record(lambda: jax.jit(lambda a, b: a + b, donate_argnums=0).lower(jnp.ones((2, 3)),
                                                                                      jnp.ones((2, 3))))
    assert messages == []


def test_default_filters_show_a_text_once_even_for_another_function():
    spec = lambda n: (jax.ShapeDtypeStruct((1, n), jnp.float32), jax.ShapeDtypeStruct((2, n), jnp.float32))  # noqa: E731
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        jax.jit(lambda a, b: a + b, donate_argnums=0).lower(*spec(13))
        jax.jit(lambda a, b: a * b, donate_argnums=0).lower(*spec(13))   # same text: not shown
        jax.jit(lambda a, b: a - b, donate_argnums=0).lower(*spec(14))   # other text: shown
    texts = [str(w.message).splitlines()[0] for w in caught]
    assert texts == [f"{NOT_USABLE}: float32[1,13].", f"{NOT_USABLE}: float32[1,14]."]


def test_any_change_to_the_filters_shows_the_same_text_again():
    """Once per text holds only until the filters change (l3-once2): then the
    same text, from another function, is shown again."""
    spec = (jax.ShapeDtypeStruct((1, 15), jnp.float32), jax.ShapeDtypeStruct((2, 15), jnp.float32))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        jax.jit(lambda a, b: a + b, donate_argnums=0).lower(*spec)
        jax.jit(lambda a, b: a * b, donate_argnums=0).lower(*spec)    # same text: not shown
        warnings.filterwarnings("ignore", message="matches nothing")
        jax.jit(lambda a, b: a - b, donate_argnums=0).lower(*spec)    # same text, filters changed: shown
    assert [str(w.message).splitlines()[0] for w in caught] == [f"{NOT_USABLE}: float32[1,15]."] * 2


def test_xla_logs_tied_leaves_on_stderr_with_the_date_but_not_a_deleted_buffer_read():
    """The red lines of l3-twice3-md: a call with two tied leaves logs glog's severity
    letter E, then the month and day (MMDD), then the time, before the JaxRuntimeError.
    The other side: reading a donated array raises RuntimeError and logs nothing."""
    import datetime as dt
    import re

    code = textwrap.dedent("""
        import sys
        import jax, jax.numpy as jnp
        donate = jax.jit(lambda a: a * 2, donate_argnums=0)
        x = jnp.ones(5); x * 3                      # the operation has run on a live float32[5]
        donate(x)
        try:
            x * 3
        except RuntimeError as err:
            print("READ", type(err).__name__, flush=True)
        sys.stderr.write("READ-DONE\\n"); sys.stderr.flush()
        z = jnp.ones(4)
        try:
            jax.jit(lambda s: {"w": s["w"] * 2, "w_ema": s["w_ema"] * 3}, donate_argnums=0)({"w": z, "w_ema": z})
        except jax.errors.JaxRuntimeError as err:
            print("TIED", type(err).__name__, flush=True)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["READ", "RuntimeError", "TIED", "JaxRuntimeError"], r.stdout
    before, _, after = r.stderr.partition("READ-DONE")
    assert "ExecutePrepareWithOomRetries" not in before and "deleted" not in before.lower(), before
    line = next(ln for ln in after.splitlines() if "ExecutePrepareWithOomRetries failed" in ln)
    assert "Attempt to donate the same buffer twice" in line, line
    m = re.match(r"E(\d{2})(\d{2}) \d{2}:\d{2}:\d{2}\.\d+ ", line)
    assert m, line
    today = dt.datetime.now()
    days = {(d.month, d.day) for d in (today, today - dt.timedelta(days=1))}  # a run across midnight
    assert (int(m.group(1)), int(m.group(2))) in days, line


# ---- lesson 3: closures, keep_unused, delete(), static (l3-nested, l3-keep, l3-delete, l3-static) ----

def test_closed_over_constants_are_never_donated_arguments_are():
    # Lesson 3 (l3-nested, its second half): bump_table is meant to replace table, which it reads
    # from outside; the request reaches only the argument d. Silently, no warning
    table, d = jnp.ones(4), jnp.ones(4)
    _, messages = record(jax.jit(lambda d: table + d, donate_argnums=0), d)
    assert d.is_deleted() and not table.is_deleted() and messages == []


def test_unused_argument_is_donated_only_with_keep_unused():
    u = jnp.ones(4)
    jax.jit(lambda a, u: a * 2, donate_argnums=1)(jnp.ones(4), u)
    assert not u.is_deleted()
    u = jnp.ones(4)
    _, messages = record(jax.jit(lambda a, u: a * 2, donate_argnums=1, keep_unused=True), jnp.ones(4), u)
    assert u.is_deleted() and messages == []


def test_array_delete_behaves_like_donation():
    x = jnp.ones(3)
    assert not x.is_deleted()
    x.delete()
    assert x.is_deleted()
    with pytest.raises(RuntimeError, match=r"Array has been deleted with shape=float32\[3\]"):
        x + 1


def test_static_and_donated_names_may_not_overlap():
    with pytest.raises(ValueError, match="static_argnames and donate_argnames cannot intersect"):
        jax.jit(lambda a, n: a * n, static_argnames="n", donate_argnames="n")
    with pytest.raises(ValueError, match="cannot intersect"):
        jax.jit(lambda a, n: a * n, static_argnums=1, donate_argnums=1)
    jax.jit(lambda a, n: a * n, static_argnames="n", donate_argnames="a")   # disjoint: fine


# ---- lesson 3: loops and async dispatch (l3-loops, l3-async) ----

def run_scan(carry, xs):
    return jax.lax.scan(lambda c, x: (c + x, None), carry, xs)[0]


@pytest.mark.parametrize("name", ["scan", "fori_loop"])
def test_loop_carry_donation_carries_through_the_outer_jit(name):
    body = {"scan": lambda c: run_scan(c, jnp.ones((3, 4))),
            "fori_loop": lambda c: jax.lax.fori_loop(0, 3, lambda i, c: c * 2, c)}[name]
    expected = {"scan": 4.0, "fori_loop": 8.0}[name]
    carry = jnp.ones(4)
    address = carry.unsafe_buffer_pointer()
    out = jax.jit(body, donate_argnums=0)(carry)
    assert carry.is_deleted() and out.unsafe_buffer_pointer() == address
    np.testing.assert_array_equal(out, expected)
    carry = jnp.ones(4)
    jax.jit(body)(carry)
    assert not carry.is_deleted()


def test_a_loop_carry_is_matched_like_any_other_output():
    # Lesson 3 (l3-beyond-md): the final carry takes the donated buffer when it is
    # matched to the donated input (the only output, above). Returned after an earlier output
    # of the same shape and dtype (ys[0]), it is not: ys[0] takes the buffer.
    def first_and_final(carry, xs):
        final, ys = jax.lax.scan(lambda c, x: (c + x, c), carry, xs)
        return ys[0], final
    carry = jnp.ones(4)
    address = carry.unsafe_buffer_pointer()
    first, final = jax.jit(first_and_final, donate_argnums=0)(carry, jnp.ones((3, 4)))
    assert carry.is_deleted()
    assert first.unsafe_buffer_pointer() == address and final.unsafe_buffer_pointer() != address
    np.testing.assert_array_equal(first, 1.0)
    np.testing.assert_array_equal(final, 4.0)


def test_donated_input_is_deleted_when_the_call_returns_whether_or_not_the_result_is_ready():
    """Lesson 3 (l3-async): a result not ready yet as the call returns, and one that
    is (a tiny program runs before the call returns): the input is deleted in both;
    without donation it is not."""
    chain = jax.jit(lambda m: m @ m @ m, donate_argnums=0)
    chain(jnp.ones((1000, 1000))).block_until_ready()
    seen = []
    for _ in range(5):
        m = jnp.ones((1000, 1000)).block_until_ready()
        result = chain(m)
        seen.append((result.is_ready(), m.is_deleted()))   # asked before waiting for the result
        result.block_until_ready()
        assert result.is_ready() and m.is_deleted()
        if not seen[-1][0]:
            break
    assert (False, True) in seen, f"every call returned with its result ready: {seen}"
    assert all(deleted for _, deleted in seen)
    tiny = jax.jit(lambda v: v * 2, donate_argnums=0)
    tiny(jnp.ones(4)).block_until_ready()
    v = jnp.ones(4).block_until_ready()
    out = tiny(v)
    assert v.is_deleted()
    out.block_until_ready()
    plain = jax.jit(lambda m: m @ m @ m)
    plain(jnp.ones((1000, 1000))).block_until_ready()
    m = jnp.ones((1000, 1000))
    result = plain(m)
    assert not m.is_deleted()
    result.block_until_ready()


# ---- lesson 5: what the debug_nans re-run reads first (l5-before-nan, l5-order) ----

def test_compiled_before_debug_nans_breaks_on_log_but_names_sqrt_of_an_undonated_input():
    try:
        donating_log = jax.jit(lambda x: jnp.log(x), donate_argnums=0)
        donating_log(jnp.ones(4))
        step = jax.jit(lambda p, g: p - 0.1 * jnp.sqrt(g), donate_argnums=0)
        step(jnp.ones(4), jnp.ones(4))
        with jax.debug_nans(True), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(RuntimeError, match="Array has been deleted"):
                donating_log(-jnp.ones(4))
            with pytest.raises(FloatingPointError, match="invalid value \\(nan\\) encountered in sqrt"):
                step(jnp.ones(4), jnp.array([1.0, 4.0, -9.0, 16.0]))
    finally:
        jax.config.update("jax_debug_nans", False)


# ---- lesson 6: device count switches (l6-flags-text, l6-late-text), an array on another device (l6-other) ----

def run_fresh(code):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120, env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"})


def test_xla_flags_count_if_set_before_first_use_not_before_import():
    result = run_fresh("""
        import os, jax, jax.numpy as jnp
        os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
        print(len(jax.devices()))
    """)
    assert result.stdout.split() == ["8"], result.stderr
    result = run_fresh("""
        import os, jax, jax.numpy as jnp
        jnp.ones(2)
        os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
        print(len(jax.devices()))
    """)
    assert result.stdout.split() == ["1"], result.stderr


def test_jax_num_cpu_devices_right_after_import_and_refused_after_first_use():
    result = run_fresh("""
        import jax
        jax.config.update("jax_num_cpu_devices", 8)
        print(len(jax.devices()))
        try:
            jax.config.update("jax_num_cpu_devices", 4)
        except RuntimeError as err:
            print("refused" if "before backends are initialized" in str(err) else err)
    """)
    assert result.stdout.split() == ["8", "refused"], result.stderr


def test_once_the_backend_started_from_xla_flags_neither_switch_changes_the_count():
    """Lesson 6 (l6-late): the backend started with XLA_FLAGS' 8 devices; setting the
    flag to 2 afterwards changes nothing, and jax_num_cpu_devices is refused with a
    RuntimeError that says to set it right after `import jax`. (The other side, the
    flag or the option in time, is test_xla_flags_count_... and the test above.)"""
    result = run_fresh("""
        import os
        os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
        import jax
        print(len(jax.devices()))
        os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
        print(len(jax.devices()))
        try:
            jax.config.update("jax_num_cpu_devices", 2)
            print("accepted")
        except RuntimeError as err:
            print(repr(str(err)))
        print(len(jax.devices()))
    """)
    assert result.stdout.splitlines() == [
        "8", "8",
        repr("jax_num_cpu_devices config should be updated before backends are initialized i.e. before any JAX "
             "operation is executed. You should initialize this config immediately after `import jax`."),
        "8"], result.stderr


def test_an_array_on_another_device_is_copied_not_donated_silently():
    result = run_fresh("""
        import warnings, jax, jax.numpy as jnp
        from jax.sharding import SingleDeviceSharding
        jax.config.update("jax_num_cpu_devices", 2)
        d0, d1 = jax.devices()
        pinned = jax.jit(lambda v: 2.0 * v, donate_argnums=0,
                         in_shardings=SingleDeviceSharding(d0), out_shardings=SingleDeviceSharding(d0))
        for device in (d1, d0):
            x = jax.device_put(jnp.arange(4.0), device)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                out = pinned(x)
            print(device.id, x.is_deleted(), len(caught), out.devices() == {d0})
    """)
    assert result.stdout.splitlines() == ["1 False 0 True", "0 True 0 True"], result.stderr


# ---- explain_donation reads which leaves were kept from public API only ----

def test_compiled_input_shardings_mark_dropped_arguments_with_none():
    from donation_lab.explain import explain_donation, kept_leaves

    x = jnp.ones(4)
    dropped = jax.jit(lambda a, u, b: a * 2 + b, donate_argnums=(0, 1)).lower(x, jnp.ones(3), x).compile()
    kept = jax.jit(lambda a, u, b: a * 2 + b, donate_argnums=(0, 1),
                   keep_unused=True).lower(x, jnp.ones(3), x).compile()
    assert kept_leaves(dropped, 3) == [0, 2]
    assert kept_leaves(kept, 3) == [0, 1, 2]
    report = explain_donation(jax.jit(lambda a, u, b: a * 2 + b, donate_argnums=(0, 1)), x, jnp.ones(3), x)
    assert [(leaf.requested, leaf.reused, leaf.pruned) for leaf in report.leaves] == [
        (True, True, False), (True, False, True), (False, False, False)]


# ---- the audit's imprecise claims, refined (l1-lower, l2-meta/l2-read2, l2-numpy, l2-aligned,
# ---- l3-pass2/l3-taken, l3-view); lowering reads the sharding: test_claims_advanced's l6-lower ----

def test_a_donated_array_keeps_its_type_facts_but_not_its_devices_or_buffer():
    """Lesson 2 (l2-meta-md, l2-meta, l2-read2-md, l2-read2): shape, dtype, size, ndim and
    sharding stay readable; devices() and addressable_shards raise RuntimeError: Array has
    been deleted, unsafe_buffer_pointer() a JaxRuntimeError (a RuntimeError) with its own
    message; on a live array they do not."""
    live, gone = jnp.ones((2, 3)), jnp.ones((2, 3))
    jax.jit(lambda a: a * 2, donate_argnums=0)(gone)
    for array in (live, gone):
        assert (array.shape, array.dtype, array.size, array.ndim) == ((2, 3), jnp.float32, 6, 2)
        assert array.sharding == live.sharding
    assert live.devices() == set(jax.devices()) and len(live.addressable_shards) == 1
    live.unsafe_buffer_pointer()
    for read in (lambda: gone.devices(), lambda: gone.addressable_shards):
        with pytest.raises(RuntimeError, match=r"^Array has been deleted with shape=float32\[2,3\]\.") as info:
            read()
        assert type(info.value) is RuntimeError
    with pytest.raises(jax.errors.JaxRuntimeError,
                       match="^INVALID_ARGUMENT: UnsafeBufferPointer called on deleted or donated buffer") as info:
        gone.unsafe_buffer_pointer()
    assert isinstance(info.value, RuntimeError)
    assert gone.is_deleted() and not live.is_deleted()


def aligned_host(n, dtype=np.float32, offset_bytes=0, alignment=64):
    itemsize = np.dtype(dtype).itemsize
    raw = np.empty(n * itemsize + 2 * alignment, dtype=np.uint8)
    start = -raw.ctypes.data % alignment + offset_bytes
    host = raw[start:start + n * itemsize].view(dtype)
    host[:] = 1
    return host


HOSTS = {"aligned float32": (lambda: aligned_host(1000), True),
         "aligned int32": (lambda: aligned_host(1000, np.int32), True),
         "16 bytes off float32": (lambda: aligned_host(1000, offset_bytes=16), False),
         "aligned float64": (lambda: aligned_host(1000, np.float64), False),
         "aligned int64": (lambda: aligned_host(1000, np.int64), False),
         "aligned float32[::2]": (lambda: aligned_host(2000)[::2], False),
         "aligned float32 (40, 25) C order": (lambda: aligned_host(1000).reshape(40, 25), True),
         "aligned float32 (40, 25) F order": (lambda: aligned_host(1000).reshape(40, 25, order="F"), False)}


@pytest.mark.parametrize("name", HOSTS)
def test_device_put_uses_numpy_memory_only_when_c_contiguous_aligned_and_of_the_kept_dtype(name):
    # Lesson 2 (l2-aligned): float64/int64 become 32-bit, so they are copied; a strided view and a
    # Fortran-ordered (column-major) array are copied; row-major 2-D data is not.
    make, shares = HOSTS[name]
    host = make()
    assert host.flags.c_contiguous is ("::2" not in name and "F order" not in name)
    assert host.ctypes.data % 64 == (16 if "off" in name else 0)
    assert (jax.device_put(host).unsafe_buffer_pointer() == host.ctypes.data) is shares


@pytest.mark.parametrize("name", HOSTS)
def test_a_jit_argument_from_numpy_is_an_alias_when_device_put_would_be_one(name):
    """Lesson 2 (l2-numpy): a NumPy argument is put on the device first, a copy or,
    on the CPU, NumPy's own memory, under the same conditions as device_put. Seen
    with public API only: a callback writes 5 into the NumPy array during the call;
    the program reads its argument after that, and sees 5 only if it reads NumPy's
    memory. Donating either kind: no warning, and the NumPy array keeps its values."""
    from jax.experimental import io_callback

    make, shares = HOSTS[name]
    host = make()

    def overwrite():
        host[:] = 5
        return np.float32(0)

    probe = jax.jit(lambda x: x.astype(jnp.float32)
                    + io_callback(overwrite, jax.ShapeDtypeStruct((), jnp.float32), ordered=True))
    seen = np.asarray(probe(host))
    assert (seen == (5.0 if shares else 1.0)).all(), seen[:4]
    host = make()
    out, messages = record(jax.jit(lambda s: s * 2, donate_argnums=0), host)
    assert messages == [] and (host == 1).all() and host.flags.writeable
    np.testing.assert_array_equal(np.asarray(out), 2)


@pytest.mark.parametrize("small_first", [True, False])
def test_a_byte_size_miss_in_the_second_pass_still_takes_the_output(small_first):
    """Lesson 3 (l3-pass2, l3-taken): one float32[4] output, an int8[4] and an int32[4]
    donated. Leftmost first: with the int8 first, it takes the output, fails the byte
    check silently, and the int32 (which would fit) gets the warning; neither is
    deleted. With the int32 first it is reused and the int8 gets the warning."""
    small, counts = jnp.ones(4, dtype=jnp.int8), jnp.ones(4, dtype=jnp.int32)
    address = counts.unsafe_buffer_pointer()
    if small_first:
        fn, args = jax.jit(lambda a, b: a.astype(jnp.float32) + b, donate_argnums=(0, 1)), (small, counts)
    else:
        fn, args = jax.jit(lambda b, a: a.astype(jnp.float32) + b, donate_argnums=(0, 1)), (counts, small)
    out, messages = record(fn, *args)
    assert [m.splitlines()[0] for m in messages] == [f"{NOT_USABLE}: {'int32' if small_first else 'int8'}[4]."]
    assert not small.is_deleted()
    assert counts.is_deleted() is (not small_first)
    assert (out.unsafe_buffer_pointer() == address) is (not small_first)


def test_the_int32_alone_is_reused_by_the_float32_output():
    # Lesson 3 (l3-taken), the other side: only the int32[4] donated, no warning, reused.
    small, counts = jnp.ones(4, dtype=jnp.int8), jnp.ones(4, dtype=jnp.int32)
    address = counts.unsafe_buffer_pointer()
    out, messages = record(jax.jit(lambda a, b: a.astype(jnp.float32) + b, donate_argnums=1), small, counts)
    assert messages == [] and counts.is_deleted() and not small.is_deleted()
    assert out.unsafe_buffer_pointer() == address


def test_a_live_device_get_result_blocks_donation_like_a_numpy_view():
    # Lesson 3 (l3-view): on CPU jax.device_get(z) reads z's buffer; while it lives, z
    # is not donated, silently; once it is gone the same call donates.
    step = jax.jit(lambda s, d: s + d, donate_argnums=0)
    z = jnp.ones(4)
    fetched = jax.device_get(z)
    assert fetched.ctypes.data == z.unsafe_buffer_pointer()
    _, messages = record(step, z, jnp.ones(4))
    assert messages == [] and not z.is_deleted()
    del fetched
    _, messages = record(step, z, jnp.ones(4))
    assert messages == [] and z.is_deleted()


# ---- lesson 3: every read of a donated array, the element-count rule, control flow outside jit,
# ---- and where the one-device rules stop (l3-ref3-md, l3-count, l3-control, l3-view, l3-unusable-md;
# ---- the figure's "(donation requested)" is in test_pictures.py) ----

def deleted_by_donation(x):
    jax.jit(lambda s: s * 1, donate_argnums=0)(x)
    assert x.is_deleted()
    return x


def committed(x):
    return jax.device_put(x, jax.devices()[0])


def positional(f, x):
    return f(x)


def keyword(f, x):
    return f(v=x)


def shout(v):
    jax.debug.print("shout: {}", v[0])   # a side effect
    return v + 1


READS = {
    # name: (the jitted function, its first call (on a live array), the array, the read of the deleted one)
    "the same signature": (lambda v: v + 1, {}, positional, lambda: jnp.ones(37), positional),
    "weak-typed": (lambda v: v + 1, {}, positional, lambda: jnp.full(37, 0.5), positional),
    "committed": (lambda v: v + 1, {}, positional, lambda: committed(jnp.ones(37)), positional),
    "keyword after positional": (lambda v: v + 1, {}, positional, lambda: jnp.ones(37), keyword),
    "keyword after keyword": (lambda v: v + 1, {}, keyword, lambda: jnp.ones(37), keyword),
    "the same static value": (lambda v, n: v * n, dict(static_argnums=1), lambda f, x: f(x, 2),
                              lambda: jnp.ones(37), lambda f, x: f(x, 2)),
    "a new static value": (lambda v, n: v * n, dict(static_argnums=1), lambda f, x: f(x, 2),
                           lambda: jnp.ones(37), lambda f, x: f(x, 3)),
    "a tuple after a tuple": (lambda t: t[0] + 1, {}, lambda f, x: f((x,)), lambda: jnp.ones(37),
                              lambda f, x: f((x,))),
    "a list after a tuple": (lambda t: t[0] + 1, {}, lambda f, x: f((x,)), lambda: jnp.ones(37),
                             lambda f, x: f([x])),
    "a side effect": (shout, {}, positional, lambda: jnp.ones(37), positional),
}


@pytest.mark.parametrize("name", READS)
def test_every_read_of_a_donated_array_raises_runtime_error_whatever_ran_before(name, capfd):
    """Lesson 3 (l3-ref3-md, l3-delete-md): a function that ran on a live array (three
    times) raises RuntimeError: Array has been deleted on a donated one, however it is
    passed and whatever its weak type, commitment, static values, container or side
    effects. The other side: the same call on a live array runs. A fresh function per case."""
    body, options, first_call, make, call = READS[name]
    fn = jax.jit(body, **options)
    for _ in range(3):
        first_call(fn, jnp.ones(37))
    call(fn, make())                                  # the read itself, on a live array: runs
    gone = deleted_by_donation(make())
    with pytest.raises(RuntimeError, match=r"^Array has been deleted with shape=float32\[37\]\.") as info:
        call(fn, gone)
    assert type(info.value) is RuntimeError
    assert "ExecutePrepareWithOomRetries" not in capfd.readouterr().err


@pytest.mark.parametrize("source,target,n_in,n_out", [
    (jnp.float32, jnp.int8, 64, 64), (jnp.int8, jnp.float32, 8, 8), (jnp.float32, jnp.bfloat16, 1024, 1024),
    (jnp.float32, jnp.int8, 64, 128), (jnp.int8, jnp.float32, 8, 2), (jnp.float32, jnp.int8, 64, 256),
    (jnp.float32, jnp.bfloat16, 1024, 2048)])
def test_a_dtype_change_warns_exactly_when_the_element_count_changes(source, target, n_in, n_out):
    """Lesson 3 (l3-bytes, l3-count): another byte size with as many elements:
    not reused, not deleted, no warning. Another number of elements: the warning, even
    when the output would fit (float32[64] -> int8[128]) or has the same bytes
    (int8[8] -> float32[2], float32[64] -> int8[256]). Never deleted."""
    x = jnp.ones(n_in, dtype=source)
    out, messages = record(jax.jit(lambda c: jnp.resize(c, n_out).astype(target), donate_argnums=0), x)
    assert out.shape == (n_out,) and out.dtype == target and not x.is_deleted()
    expected = [] if n_in == n_out else [f"{NOT_USABLE}: {x.dtype}[{n_in}]."]
    assert [m.splitlines()[0] for m in messages] == expected


def twice_donating():
    return jax.jit(lambda p: 2.0 * p, donate_argnums=0)


@pytest.mark.parametrize("name", ["scan", "fori_loop", "while_loop", "cond", "direct", "vmap"])
def test_control_flow_outside_jit_ignores_a_donating_jit_in_its_body(name):
    """Lesson 3 (l3-control): scan, fori_loop and cond (and while_loop) trace their body
    even outside any jit, so the donating jit there is nested and its request ignored,
    silently. The other side: called directly, or under vmap, it deletes the input."""
    twice = twice_donating()
    run = {"scan": lambda p: jax.lax.scan(lambda c, _: (twice(c), None), p, length=2)[0],
           "fori_loop": lambda p: jax.lax.fori_loop(0, 2, lambda i, c: twice(c), p),
           "while_loop": lambda p: jax.lax.while_loop(lambda c: c[0] < 4.0, twice, p),
           "cond": lambda p: jax.lax.cond(True, twice, lambda c: c, p),
           "direct": twice,
           "vmap": jax.vmap(twice)}[name]
    p = jnp.array([1.0, 2.0, 3.0])
    out, messages = record(run, p)
    assert messages == []
    assert p.is_deleted() is (name in ("direct", "vmap"))
    expected = {"scan": 4.0, "fori_loop": 4.0, "while_loop": 4.0}.get(name, 2.0)
    np.testing.assert_array_equal(out, expected * np.array([1.0, 2.0, 3.0]))


EIGHT_DEVICE_LIMITS = """
    import json, warnings
    import numpy as np, jax, jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

    def record(fn, *args):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = fn(*args)
        return out, [str(w.message).splitlines()[0] for w in caught]

    res = {"devices": len(jax.devices())}
    for axis_type in (AxisType.Explicit, AxisType.Auto):
        mesh = jax.make_mesh((8,), ("x",), axis_types=(axis_type,))
        for layout, spec in (("split", P("x")), ("replicated", P())):
            sharding = NamedSharding(mesh, spec)
            step = jax.jit(lambda s, d: s + d, donate_argnums=0, out_shardings=sharding)
            for reader in ("asarray", "device_get"):
                x = jax.device_put(jnp.arange(16.0), sharding)
                buffers = [s.data.unsafe_buffer_pointer() for s in x.addressable_shards]  # one per device
                host = np.asarray(x) if reader == "asarray" else jax.device_get(x)
                read = [host.ctypes.data == b for b in buffers]       # which device's buffer host reads
                out, messages = record(step, x, jax.device_put(jnp.ones(16), sharding))
                kept = [False] * 8 if x.is_deleted() else [not s.data.is_deleted() for s in x.addressable_shards]
                reused = [s.data.unsafe_buffer_pointer() == b for s, b in zip(out.addressable_shards, buffers)]
                res[f"{axis_type.name} {layout} {reader}"] = [x.is_deleted(), read, kept, reused, messages,
                                                               host[:3].tolist()]

    mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))
    split = NamedSharding(mesh, P("x"))
    for name, fn, options, one_device in (
            ("half, no out_shardings", lambda v: v[:8] * 2, {}, False),
            ("double, no out_shardings", lambda v: v * 2, {}, False),
            ("half, out_shardings", lambda v: v[:8] * 2, dict(out_shardings=split), False),
            ("half, one device", lambda v: v[:8] * 2, {}, True)):
        x = jnp.arange(16.0) if one_device else jax.device_put(jnp.arange(16.0), split)
        _, messages = record(jax.jit(fn, donate_argnums=0, **options), x)
        res[name] = [x.is_deleted(), messages]
    print("RESULT" + json.dumps(res))
"""


def test_a_numpy_view_on_eight_devices_holds_back_only_the_copy_it_reads():
    """Lesson 6 (l6-view-text, l6-view). On 8 devices, on an Explicit or an Auto mesh:
    np.asarray and jax.device_get of a split array assemble a copy, which blocks nothing (the
    array is donated while it lives, each piece reused). Of a replicated array they return a
    view of device 0's copy: only that copy is kept; the other seven are donated and reused,
    silently, and x.is_deleted() still says False (what that half-donated array does next:
    test_an_operation_on_a_half_donated_replicated_array_raises_and_later_programs_on_devices_hang).
    Lesson 6 (l6-auto-text): an Auto-mesh jit given no out_shardings never warns, whether the
    donation is used or not; given out_shardings, or on one device, the same function warns."""
    res = result_on_eight_devices(textwrap.dedent(EIGHT_DEVICE_LIMITS))
    assert res["devices"] == 8
    first, others = [True] + [False] * 7, [False] + [True] * 7
    for axis_type in ("Explicit", "Auto"):
        for reader in ("asarray", "device_get"):
            # split: a copy, which reads no device's buffer; x is donated, every piece reused
            assert res[f"{axis_type} split {reader}"] == [True, [False] * 8, [False] * 8, [True] * 8, [],
                                                           [0.0, 1.0, 2.0]]
            # replicated: a view of device 0's copy, which alone is kept; the 7 others are donated,
            # silently, and x.is_deleted() says False
            assert res[f"{axis_type} replicated {reader}"] == [False, first, first, others, [],
                                                                [0.0, 1.0, 2.0]]
    assert res["half, no out_shardings"] == [False, []]
    assert res["double, no out_shardings"] == [True, []]
    assert res["half, out_shardings"] == [False, [f"{NOT_USABLE}: float32[2]."]]   # per-device piece
    assert res["half, one device"] == [False, [f"{NOT_USABLE}: float32[16]."]]


# ---- lesson 3: what a signature is for the warning, and what the warning's text names
# ---- (l3-once-md, l3-once, l3-once-lower, l3-once2, l3-strict-md); lesson 6, a view of a replicated
# ---- array: test_a_numpy_view_on_eight_devices_holds_back_only_the_copy_it_reads above and the last test ----

def donating_add(**options):
    return jax.jit(lambda a, b: a + b, donate_argnums=0, **options)


LOWERING_SIGNATURES = {
    # name: (the donating function, the second call; the first call passes plain arrays by position)
    "the same signature": (donating_add, lambda f, a, b: f(a, b), None),
    "committed": (donating_add, lambda f, a, b: f(committed(a), b), "float32[1,19]"),
    "weak-typed": (donating_add, lambda f, a, b: f(jnp.full((1, 19), 0.5), b), "~float32[1,19]"),
    "by keyword": (donating_add, lambda f, a, b: f(a=a, b=b), "float32[1,19]"),
}


@pytest.mark.parametrize("name", LOWERING_SIGNATURES)
def test_the_same_shapes_in_another_signature_are_lowered_again_and_warn_again(name):
    """Lesson 3 (l3-once): the warning comes once per lowering of a function and signature.
    The second call with the same signature is silent; with the same shapes but committed,
    weak-typed (the text marks it with `~`) or by keyword it warns again, and the input
    stays alive."""
    make, second_call, text = LOWERING_SIGNATURES[name]
    fn = make()
    a = jnp.ones((1, 19))
    _, first = record(fn, a, jnp.ones((2, 19)))
    assert [m.splitlines()[0] for m in first] == [f"{NOT_USABLE}: float32[1,19]."] and not a.is_deleted()
    a = jnp.ones((1, 19))
    _, second = record(second_call, fn, a, jnp.ones((2, 19)))
    assert [m.splitlines()[0] for m in second] == ([] if text is None else [f"{NOT_USABLE}: {text}."])
    assert not a.is_deleted()


@pytest.mark.parametrize("second", [2, 3])
def test_a_new_static_value_is_lowered_again_and_warns_again(second):
    """Lesson 3 (l3-once): static values are part of the signature that is lowered."""
    fn = jax.jit(lambda a, b, n: a * n + b, donate_argnums=0, static_argnums=2)
    _, first = record(fn, jnp.ones((1, 19)), jnp.ones((2, 19)), 2)
    _, again = record(fn, jnp.ones((1, 19)), jnp.ones((2, 19)), second)
    assert [m.splitlines()[0] for m in first] == [f"{NOT_USABLE}: float32[1,19]."]
    assert [m.splitlines()[0] for m in again] == ([] if second == 2 else [f"{NOT_USABLE}: float32[1,19]."])


@pytest.mark.parametrize("container", [tuple, list])
def test_a_new_container_is_lowered_again_and_warns_again(container):
    """Lesson 3 (l3-once): a list where the first call had a tuple is another signature."""
    fn = jax.jit(lambda pair: pair[0] + pair[1], donate_argnums=0)
    _, first = record(fn, (jnp.ones((1, 19)), jnp.ones((2, 19))))
    _, again = record(fn, container((jnp.ones((1, 19)), jnp.ones((2, 19)))))
    assert [m.splitlines()[0] for m in first] == [f"{NOT_USABLE}: float32[1,19]."]
    assert [m.splitlines()[0] for m in again] == ([] if container is tuple else [f"{NOT_USABLE}: float32[1,19]."])


class LogRecords(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, log_record):
        self.messages.append(log_record.getMessage())


def test_the_warning_comes_once_per_lowering_not_once_per_compilation():
    """Lesson 3 (l3-once-lower, l3-strict-md): `.lower()` warns and compiles
    nothing (no "Finished XLA compilation" in JAX's compile log); compiling that
    lowering, and then a call with the same signature, add no warning. The other side: a
    function first compiled by `.lower().compile()` warns there, once."""
    a, b = jnp.ones((1, 21)), jnp.ones((2, 21))
    log = LogRecords()
    logging.getLogger("jax").addHandler(log)
    try:
        with jax.log_compiles(True):
            fn = jax.jit(lambda a, b: a + b, donate_argnums=0)
            _, lowered = record(fn.lower, a, b)
            compiled_at_lower = any("Finished XLA compilation" in m for m in log.messages)
            _, compiled = record(lambda: fn.lower(a, b).compile())
            compiled_after = any("Finished XLA compilation" in m for m in log.messages)
            _, called = record(fn, a, b)
            other = jax.jit(lambda a, b: a + b, donate_argnums=0)
            _, other_first = record(lambda: other.lower(a, b).compile())
            _, other_again = record(lambda: other.lower(a, b).compile())
    finally:
        logging.getLogger("jax").removeHandler(log)
    expected = [f"{NOT_USABLE}: float32[1,21]."]
    assert [m.splitlines()[0] for m in lowered] == expected and not compiled_at_lower
    assert compiled == [] and compiled_after
    assert called == [] and not a.is_deleted()
    assert [m.splitlines()[0] for m in other_first] == expected and other_again == []


def test_the_text_names_the_donated_types_not_the_function():
    """Lesson 3 (l3-once2): under Python's default filters a second function with
    the same donated types prints nothing, but the same shapes with another dtype, or
    weak-typed (`~float32`), make another text, which is shown."""
    spec = lambda dtype: (jax.ShapeDtypeStruct((1, 23), dtype), jax.ShapeDtypeStruct((2, 23), dtype))  # noqa: E731
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        jax.jit(lambda a, b: a + b, donate_argnums=0).lower(*spec(jnp.float32))
        jax.jit(lambda a, b: a * b, donate_argnums=0).lower(*spec(jnp.float32))   # same types: not shown
        jax.jit(lambda a, b: a / b, donate_argnums=0).lower(*spec(jnp.int32))     # another dtype: shown
        jax.jit(lambda a, b: a - b, donate_argnums=0).lower(jnp.full((1, 23), 0.5), jnp.ones((2, 23)))
    texts = [str(w.message).splitlines()[0] for w in caught]
    assert texts == [f"{NOT_USABLE}: {t}[1,23]." for t in ("float32", "int32", "~float32")]


HALF_DONATED = """
    import os, sys, threading, time
    import numpy as np, jax, jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

    mesh = jax.make_mesh((8,), ("x",), axis_types=(getattr(AxisType, sys.argv[2]),))
    replicated = NamedSharding(mesh, P())
    step = jax.jit(lambda s, d: s + d, donate_argnums=0, out_shardings=replicated)
    x = jax.device_put(jnp.arange(16.0), replicated)
    host = np.asarray(x) if sys.argv[1] == "view" else None
    step(x, jax.device_put(jnp.ones(16), replicated))
    del host
    print("DELETED", x.is_deleted(), flush=True)
    try:
        x + 1
        print("RESULT ran", flush=True)
    except RuntimeError as err:
        print("RESULT", type(err).__name__, str(err).split(": while")[0], flush=True)
    # one-device work, then every later program on several devices, after the error: the two multi-device
    # programs start together and share one 10 s wait (a program still running then hangs)
    two = NamedSharding(jax.make_mesh((2,), ("x",), devices=jax.devices()[5:7]), P("x"))

    def later(sharding):
        thread = threading.Thread(target=lambda: (jax.device_put(jnp.arange(4.0), sharding) * 2).block_until_ready(),
                                  daemon=True)
        thread.start()
        return thread

    for group in ((("one device", jax.devices()[3]),), (("two devices", two), ("eight devices", replicated))):
        started = [(name, later(sharding)) for name, sharding in group]
        deadline = time.monotonic() + 10
        for name, thread in started:
            thread.join(max(0.0, deadline - time.monotonic()))
            print("LATER", name, "hangs" if thread.is_alive() else "finishes", flush=True)
    os._exit(0)
"""


@pytest.mark.parametrize("axis_type", ["Explicit", "Auto"])
@pytest.mark.parametrize("view", [True, False])
def test_an_operation_on_a_half_donated_replicated_array_raises_and_later_programs_on_devices_hang(view, axis_type):
    """Lesson 6 (l6-view-after-text, l6-view-after): donated while a NumPy view of one device's
    copy was alive, a replicated array keeps that copy and loses the seven others; is_deleted()
    says False, and `x + 1` then raises JaxRuntimeError ("Buffer has been deleted or donated").
    After that error, every later program on two or more devices hangs (still running after 10 s),
    while work on one device still runs. The other side: donated with no view, the array is
    deleted, `x + 1` raises RuntimeError ("Array has been deleted") and later programs run."""
    proc = run_on_eight_devices(textwrap.dedent(HALF_DONATED), "view" if view else "none", axis_type)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(("DELETED", "RESULT", "LATER"))]
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    if view:
        assert lines == [
            "DELETED False",
            "RESULT JaxRuntimeError INVALID_ARGUMENT: Invalid buffer passed to Execute() as argument 0 to replica 0: "
            "INVALID_ARGUMENT: Buffer has been deleted or donated.",
            "LATER one device finishes", "LATER two devices hangs", "LATER eight devices hangs"], proc.stdout
    else:
        assert lines == ["DELETED True", "RESULT RuntimeError Array has been deleted with shape=float32[16].",
                         "LATER one device finishes", "LATER two devices finishes",
                         "LATER eight devices finishes"], proc.stdout
