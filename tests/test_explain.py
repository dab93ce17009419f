"""explain_donation: its verdict must match what a real call does."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from donation_lab import explain_donation
from donation_lab.explain import parse_input_output_alias
from helpers import result_on_eight_devices


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


def test_the_summary_counts_each_leaf_asked_to_donate_once_as_the_table_does():
    # An unused donated argument is pruned: the table says "not donated", and
    # the summary lists it apart, so that reused + not usable + pruned = asked.
    f = jax.jit(lambda a, b, c: (a * 2, b.sum()), donate_argnums=(0, 1, 2))
    r = explain_donation(f, f32(3), f32(2, 3), f32(3))
    assert [leaf.status for leaf in r.leaves] == ["reuse its buffer for out[0]",
                                                  "NOT usable: no output takes its buffer",
                                                  "unused argument: pruned, not donated"]
    assert r.summary() == ("the program plans to reuse 1 of 3 buffers asked to donate, 12 B per call; not usable: b; "
                           "unused, pruned, not donated: c")
    assert len(r.reused) + len(r.unusable) + sum(leaf.pruned for leaf in r.requested) == len(r.requested) == 3
    assert r.summary() in str(r) and r.summary() in r._repr_html_()
    # none pruned: nothing is listed apart, and the count is the table's "yes" rows
    g = jax.jit(lambda a, b, c: (a * 2, b.sum() + c), donate_argnums=(0, 1))
    r = explain_donation(g, f32(3), f32(2, 3), f32(3))
    assert [leaf.requested for leaf in r.leaves] == [True, True, False]
    assert r.summary() == "the program plans to reuse 1 of 2 buffers asked to donate, 12 B per call; not usable: b"
    assert "pruned" not in r.summary()
    # one asked and not usable: the count says 0 of 1; nothing asked: the summary says so
    h = jax.jit(lambda a, b: a.sum() + b, donate_argnums=0)
    assert explain_donation(h, f32(3), f32()).summary() == ("the program plans to reuse 0 of 1 buffer asked to "
                                                                "donate, 0 B per call; not usable: a")
    plain = explain_donation(jax.jit(lambda a, b: a + b), f32(3), f32(3))
    assert plain.summary() == "nothing is asked to donate"
    assert str(plain).splitlines()[0] == "Donation in <lambda>: nothing is asked to donate"


def _names(fn, *args, **kwargs):
    return {leaf.path: (leaf.requested, leaf.reused) for leaf in explain_donation(fn, *args, **kwargs).leaves}


STATIC = 3
NAMING = {
    # name: (jitted function, its positional arguments (STATIC for the static one), the donated argument)
    "static first": (jax.jit(lambda n, x: x * n, static_argnums=0, donate_argnums=1), (STATIC, "x"), "x"),
    "static last": (jax.jit(lambda x, n: x * n, static_argnums=1, donate_argnums=0), ("x", STATIC), "x"),
    "static last, counted from the end": (jax.jit(lambda x, n: x * n, static_argnums=-1, donate_argnums=0),
                                          ("x", STATIC), "x"),
    "static by name": (jax.jit(lambda a, n, b: a * n + b, static_argnames="n", donate_argnames="b"),
                       ("a", STATIC, "b"), "b"),
    "none static": (jax.jit(lambda a, b: a + b, donate_argnums=1), ("a", "b"), "b"),
}


@pytest.mark.parametrize("name", NAMING)
def test_each_row_carries_its_own_arguments_name_when_some_are_static(name):
    # jit leaves static arguments out of what it lowers (args_info): each row is
    # named after the non-static parameter JAX pairs it with, and the row whose
    # buffer is planned for reuse is the array a real call deletes.
    fn, order, donated = NAMING[name]
    arrays = {a: f32(4) for a in order if a is not STATIC}
    positional = [STATIC if a is STATIC else arrays[a] for a in order]
    assert _names(fn, *positional) == {a: (a == donated, a == donated) for a in arrays}
    fn(*positional)
    assert {a: x.is_deleted() for a, x in arrays.items()} == {a: a == donated for a in arrays}


def test_names_of_keyword_calls_and_static_arguments_passed_by_keyword():
    f = jax.jit(lambda a, n, b: a * n + b, static_argnums=1, donate_argnames="b")
    assert _names(f, f32(4), 3, f32(4)) == {"a": (False, False), "b": (True, True)}
    assert _names(f, f32(4), n=3, b=f32(4)) == {"a": (False, False), "b": (True, True)}
    assert _names(f, f32(4), b=f32(4), n=3) == {"a": (False, False), "b": (True, True)}
    g = jax.jit(lambda n, p: {"w": p["w"] * n}, static_argnames="n", donate_argnums=1)
    assert _names(g, 3, {"w": f32(4)}) == {"p['w']": (True, True)}
    assert _names(g, n=3, p={"w": f32(4)}) == {"p['w']": (True, True)}


def test_without_jits_static_argnums_the_names_say_only_what_is_known():
    # An object with .lower but no record of its static arguments: when a static
    # argument is left out, the rows do not guess which parameter each one is.
    class Lowers:
        def __init__(self, fn):
            self.lower = fn.lower

    def step(n, x):
        return x * n

    static_first = Lowers(jax.jit(step, static_argnums=0, donate_argnums=1))
    assert _names(static_first, 3, f32(4)) == {"non-static argument 0": (True, True)}
    none_static = Lowers(jax.jit(lambda n, x: x * n, donate_argnums=1))
    assert _names(none_static, f32(4), f32(4)) == {"args[0]": (False, False), "args[1]": (True, True)}


def test_text_and_html():
    f = jax.jit(lambda x, y: x + y, donate_argnums=(0, 1))
    r = explain_donation(f, f32(2, 3), f32(2, 3))
    text = str(r)
    assert "what the compiled program plans" in text
    assert "reuse its buffer for out" in text and "NOT usable" in text and "warning:" in text
    html = r._repr_html_()
    assert html.startswith('<div class="donation-report">') and "<table>" in html
    assert "<th>what the compiled program plans</th>" in html
    assert r.summary() == "the program plans to reuse 1 of 2 buffers asked to donate, 24 B per call; not usable: y"


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
    assert caught == []  # JAX warned once, when explain_donation lowered f for these types
    again = explain_donation(f, f32(3), f32(3))
    assert again.warnings == [] and [leaf.path for leaf in again.unusable] == ["b"]


def test_an_unusable_leaf_says_only_that_no_output_took_it():
    f = jax.jit(lambda a, b: a.astype(jnp.float32) + b, donate_argnums=(0, 1))
    r = explain_donation(f, jnp.ones(4, jnp.int8), jnp.ones(4, jnp.int32))
    assert [leaf.status for leaf in r.leaves] == ["NOT usable: no output takes its buffer"] * 2
    fine = explain_donation(jax.jit(lambda b: b.astype(jnp.float32) + 1, donate_argnums=0), jnp.ones(4, jnp.int32))
    assert fine.leaves[0].status == "reuse its buffer for out"


def _aligned_numpy_ones(n):
    """float32 ones in NumPy memory that starts at a multiple of 64 bytes, which
    jax.device_put on the CPU uses without a copy (lesson 2)."""
    raw = np.empty(4 * n + 64, np.uint8)
    start = -raw.ctypes.data % 64
    host = raw[start:start + 4 * n].view(np.float32)
    host[:] = 1
    return host


@pytest.mark.parametrize("case", ["plain", "numpy view alive", "numpy-owned memory"])
def test_the_report_is_a_plan_that_a_call_can_decline_silently(case):
    # The report reads the compiled program's input/output aliases: it plans the
    # reuse in every case. A plain array gets it; while a NumPy view is alive the
    # call keeps the array; an array in NumPy's memory is deleted, but the output
    # goes elsewhere. No warning in any case.
    import warnings

    update = jax.jit(lambda s, d: s + d, donate_argnums=0)
    host = _aligned_numpy_ones(1000)
    state = jax.device_put(host) if case == "numpy-owned memory" else jnp.ones(1000)
    view = np.asarray(state) if case == "numpy view alive" else None
    assert (state.unsafe_buffer_pointer() == host.ctypes.data) is (case == "numpy-owned memory")
    report = explain_donation(update, state, f32(1000))
    assert report.leaf("s").status == "reuse its buffer for out"
    assert report.summary() == "the program plans to reuse 1 of 1 buffer asked to donate, 3.9 KiB per call"
    before = state.unsafe_buffer_pointer()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = update(state, f32(1000))
    assert caught == []
    assert state.is_deleted() is (case != "numpy view alive")
    assert (out.unsafe_buffer_pointer() == before) is (case == "plain")
    del view


def test_bytes_on_one_device_are_the_compiled_alias_bytes():
    f = jax.jit(lambda a, u, b: (a * 2, b * 2), donate_argnums=(0, 1, 2))
    r = explain_donation(f, f32(3), f32(5), f32(2, 2))   # u is unused: pruned, not on any device
    assert [leaf.bytes_per_device for leaf in r.leaves] == [((0, 12),), (), ((0, 16),)]
    assert r.bytes_saved_per_device == {0: 28} and r.bytes_saved == 28 == r.alias_size_in_bytes
    assert r.summary() == ("the program plans to reuse 2 of 3 buffers asked to donate, 28 B per call; "
                           "unused, pruned, not donated: u")


SHARDED_SUMMARY = """
import json
import jax, jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P
from donation_lab import explain_donation
mesh = jax.make_mesh((8,), ("x",))
result = {}
for name, spec in (("split", P("x")), ("replicated", P())):
    sharding = NamedSharding(mesh, spec)
    f = jax.jit(lambda v: 2.0 * v, in_shardings=sharding, out_shardings=sharding, donate_argnums=0)
    a = jax.device_put(jnp.arange(16.0), sharding)
    r = explain_donation(f, a)
    before = {s.device.id: s.data.unsafe_buffer_pointer() for s in a.addressable_shards}
    out = f(a)
    result[name] = {"summary": r.summary(), "per_device": sorted(r.bytes_saved_per_device.items()),
                    "alias": r.alias_size_in_bytes,
                    "shard_bytes": sorted({s.data.nbytes for s in out.addressable_shards}),
                    "own_buffer": all(s.data.unsafe_buffer_pointer() == before[s.device.id]
                                      for s in out.addressable_shards)}
print("RESULT" + json.dumps(result))
"""


@pytest.fixture(scope="module")
def sharded_summary():
    return result_on_eight_devices(SHARDED_SUMMARY)


def test_on_eight_devices_a_split_array_saves_its_piece_on_each_device(sharded_summary):
    split = sharded_summary["split"]
    assert split["summary"] == ("the program plans to reuse 1 of 1 buffer asked to donate, "
                                "8 B per call on each of 8 devices (64 B in all)")
    assert split["per_device"] == [[d, 8] for d in range(8)] and split["alias"] == 8 and split["shard_bytes"] == [8]
    assert split["own_buffer"] is True


def test_on_eight_devices_a_replicated_array_saves_the_whole_array_on_each_device(sharded_summary):
    replicated = sharded_summary["replicated"]
    assert replicated["summary"] == ("the program plans to reuse 1 of 1 buffer asked to donate, "
                                     "64 B per call on each of 8 devices (512 B in all)")
    assert replicated["per_device"] == [[d, 64] for d in range(8)] and replicated["alias"] == 64
    assert replicated["shard_bytes"] == [64] and replicated["own_buffer"] is True


def test_the_summary_gives_the_range_when_devices_reuse_different_amounts():
    # JAX 0.12 splits only evenly, so this is built by hand: a leaf with pieces
    # of 8 and 4 bytes on two devices.
    from donation_lab.explain import DonationReport, LeafDonation

    leaf = LeafDonation(path="v", shape=(3,), dtype="float32", nbytes=12, requested=True, reused=True,
                        pruned=False, output="out", bytes_per_device=((0, 8), (1, 4)))
    report = DonationReport(function="f", leaves=[leaf])
    assert report.bytes_saved_per_device == {0: 8, 1: 4}
    assert report.summary() == ("the program plans to reuse 1 of 1 buffer asked to donate, "
                                "12 B per call over 2 devices (4 B to 8 B per device)")
