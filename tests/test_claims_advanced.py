"""Claims made by lessons 04-06 (pytrees, debug_nans, shardings), asserted on
the pinned JAX. If an upgrade changes one of these behaviours, a test fails
and the lesson's text must be revisited.

Sharding claims need 8 simulated CPU devices, which XLA reads only when JAX
starts; this process has already imported JAX, so they run in a subprocess.
"""
import functools
import textwrap
import warnings

import jax
import jax.numpy as jnp
import pytest

from helpers import result_on_eight_devices, run_on_eight_devices


@pytest.fixture(autouse=True)
def debug_modes_off():
    """Every claim starts and ends with debug_nans/debug_infs off."""
    jax.config.update("jax_debug_nans", False)
    jax.config.update("jax_debug_infs", False)
    yield
    jax.config.update("jax_debug_nans", False)
    jax.config.update("jax_debug_infs", False)


def deleted_tree(tree):
    return jax.tree.map(lambda a: a.is_deleted(), tree)


# ---------------------------------------------------------------- lesson 04

@functools.partial(jax.jit, donate_argnames="params")
def sgd_update(params, grads):
    return jax.tree.map(lambda p, g: p - 0.5 * g, params, grads)


def test_donating_a_pytree_deletes_every_leaf_and_not_the_other_args():
    params = {"w": jnp.ones(3), "b": jnp.ones(())}
    grads = {"w": jnp.ones(3), "b": jnp.ones(())}
    sgd_update(params, grads)
    assert deleted_tree(params) == {"w": True, "b": True}
    assert deleted_tree(grads) == {"w": False, "b": False}


def test_donate_argnames_with_two_trees_donates_both_also_by_keyword():
    @functools.partial(jax.jit, donate_argnames=("params", "opt_state"))
    def step(params, opt_state, x):
        return jax.tree.map(lambda p: p + x, params), jax.tree.map(lambda s: s * x, opt_state)

    for call in ("positional", "keyword"):
        params, state, x = {"w": jnp.ones(3)}, {"m": jnp.ones(3)}, jnp.ones(3)
        if call == "positional":
            step(params, state, x)
        else:
            step(params=params, opt_state=state, x=x)
        assert params["w"].is_deleted() and state["m"].is_deleted(), call
        assert not x.is_deleted(), call


def test_two_leaves_sharing_one_array_fail_with_double_donation_and_nothing_is_deleted():
    shared = jnp.zeros(3)
    with pytest.raises(Exception, match="Attempt to donate the same buffer twice") as info:
        sgd_update({"w": shared, "b": shared}, {"w": jnp.ones(3), "b": jnp.ones(3)})
    assert isinstance(info.value, jax.errors.JaxRuntimeError)
    assert not shared.is_deleted()


def test_tied_leaves_with_one_output_that_could_take_them_fail_with_use_after_donation():
    # Lesson 4 (l4-shared-one; l4-shared-fail, l4-shared-after): one output of the leaves' type:
    # the first leaf is donated, the second warned about and passed as an ordinary input, which
    # the runtime refuses; with an output per leaf (apply_grads) both are donated and the runtime
    # refuses the double donation. Neither deletes anything.
    shared = jnp.zeros(3)
    sum_leaves = jax.jit(lambda params: params["w"] + params["b"], donate_argnums=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(jax.errors.JaxRuntimeError) as info:
            sum_leaves({"w": shared, "b": shared})
    assert str(info.value).startswith("INVALID_ARGUMENT: Attempt to use a buffer that was previously donated "
                                      "in the same call to Execute() (flattened argument 1,")
    assert [str(w.message).splitlines()[0] for w in caught] == ["Some donated buffers were not usable: float32[3]."]
    assert not shared.is_deleted()
    with pytest.raises(jax.errors.JaxRuntimeError, match="Attempt to donate the same buffer twice"):
        sgd_update({"w": shared, "b": shared}, {"w": jnp.ones(3), "b": jnp.ones(3)})
    assert not shared.is_deleted()
    untied = {"w": shared, "b": shared.copy()}
    sum_leaves(untied)
    assert deleted_tree(untied) == {"w": False, "b": True}   # one output: the first leaf in flattened order


def test_tied_leaves_with_no_output_that_could_take_them_run_with_the_warning():
    # Lesson 4 (l4-shared-none): a scalar output takes neither leaf: both donations
    # are dropped with the usual warning, the call runs, the shared array stays alive.
    shared = jnp.ones(3)
    total_of_leaves = jax.jit(lambda params: (params["w"] + params["b"]).sum(), donate_argnums=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        total = total_of_leaves({"w": shared, "b": shared})
    assert float(total) == 6.0
    assert [str(w.message).splitlines()[0] for w in caught] == [
        "Some donated buffers were not usable: float32[3], float32[3]."]
    assert not shared.is_deleted()


def test_tied_leaves_with_outputs_of_as_many_elements_but_other_bytes_run_silently():
    # Lesson 4 (l4-shared-bytes): two int8[3] outputs pair with both float32[3] leaves (as many
    # elements: no warning) but cannot take their buffers (another byte size): the call
    # runs, silently, and the shared array stays alive.
    shared = jnp.ones(3)
    to_int8 = jax.jit(lambda p: ((p["w"] + p["b"]).astype(jnp.int8), (p["w"] - p["b"]).astype(jnp.int8)),
                      donate_argnums=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        total, difference = to_int8({"w": shared, "b": shared})
    assert total.tolist() == [2, 2, 2] and difference.tolist() == [0, 0, 0]
    assert caught == [] and not shared.is_deleted()


def test_copying_the_leaves_repairs_double_donation():
    shared = jnp.zeros(3)
    untied = jax.tree.map(lambda a: a.copy(), {"w": shared, "b": shared})
    out = sgd_update(untied, {"w": jnp.ones(3), "b": jnp.ones(3)})
    assert deleted_tree(untied) == {"w": True, "b": True}
    assert out["b"].tolist() == [-0.5, -0.5, -0.5]


@pytest.mark.parametrize("view", [True, False], ids=["view alive", "no view"])
def test_explain_donation_plans_a_reuse_that_a_live_numpy_view_makes_the_call_decline(view):
    # Lesson 4 (l4-leaves, l4-plan-text, l4-plan): the report is the compiled program's plan;
    # with a NumPy view of params['w'] alive it plans the reuse all the same, and the
    # call, silently, donates every leaf but that one. Without the view, every leaf.
    import numpy as np

    from donation_lab import explain_donation

    step = jax.jit(lambda params, x: (jax.tree.map(lambda p: p - x.mean(), params), x.sum()), donate_argnums=0)
    params, x = {"w": jnp.ones(3), "b": jnp.ones(())}, jnp.ones(3)
    kept_view = np.asarray(params["w"]) if view else None
    report = explain_donation(step, params, x)
    assert report.leaf("params['w']").status == "reuse its buffer for out[0]['w']"
    assert report.leaf("params['b']").status == "reuse its buffer for out[0]['b']"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step(params, x)
    assert caught == []
    assert deleted_tree(params) == {"w": not view, "b": True}
    del kept_view


def test_lowered_args_info_marks_each_leaf_of_a_donated_tree():
    info = sgd_update.lower({"w": jnp.ones(3)}, {"w": jnp.ones(3)}).args_info
    (params_info, grads_info), _ = info
    assert params_info["w"].donated is True
    assert grads_info["w"].donated is False


# ---------------------------------------------------------------- lesson 05

def test_compiled_under_debug_nans_does_not_donate_and_does_not_warn():
    f = jax.jit(lambda x: 2.0 * x, donate_argnums=0)
    with jax.debug_nans(True), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        x = jnp.ones(4)
        f(x)
    assert not x.is_deleted()
    assert caught == []


@pytest.mark.parametrize("prepare", ["lower", "explain_donation", "nothing"])
def test_debug_nans_is_read_when_jit_first_traces_the_signature_not_when_it_compiles(prepare):
    # Lesson 5 (l5-lowered-text, l5-lowered): traced before the mode by
    # .lower() or explain_donation, the signature keeps donating though its first call
    # compiles inside debug_nans; traced first inside the mode, it does not donate.
    from donation_lab import explain_donation

    f = jax.jit(lambda x: 2.0 * x, donate_argnums=0)
    if prepare == "lower":
        f.lower(jnp.ones(4))
    elif prepare == "explain_donation":
        explain_donation(f, jnp.ones(4))
    assert f._cache_size() == 0  # nothing compiled for the call yet
    x = jnp.ones(4)
    with jax.debug_nans(True):
        f(x)
    assert f._cache_size() == 1  # the call compiled, inside the mode
    assert x.is_deleted() is (prepare != "nothing")


@pytest.mark.parametrize("inside", ["lower", "explain_donation", "nothing"])
def test_lowering_or_explaining_inside_debug_nans_keeps_later_calls_from_donating(inside):
    # Lesson 5 (l5-lowered-inside): .lower() or explain_donation inside the mode traces
    # the signature without donation (the report finds none requested), and a call made
    # after the mode is off does not donate; with nothing traced inside, the call donates.
    from donation_lab import explain_donation

    f = jax.jit(lambda x: 2.0 * x, donate_argnums=0)
    with jax.debug_nans(True):
        if inside == "lower":
            f.lower(jnp.ones(4))
        elif inside == "explain_donation":
            report = explain_donation(f, jnp.ones(4))
            assert report.leaf("x").requested is False and report.requested == []
    assert jax.config.jax_debug_nans is False
    x = jnp.ones(4)
    f(x)
    assert x.is_deleted() is (inside == "nothing")


def test_config_update_debug_nans_also_disables_donation():
    f = jax.jit(lambda x: 2.0 * x, donate_argnums=0)
    jax.config.update("jax_debug_nans", True)
    x = jnp.ones(4)
    f(x)
    jax.config.update("jax_debug_nans", False)
    assert not x.is_deleted()


def test_the_non_donating_program_is_cached_until_clear_cache():
    f = jax.jit(lambda x: 2.0 * x, donate_argnums=0)
    with jax.debug_nans(True):
        f(jnp.ones(4))
    x = jnp.ones(4)
    f(x)
    assert not x.is_deleted(), "debug_nans is now part of the cache key: lesson 05 is wrong"
    f.clear_cache()
    x = jnp.ones(4)
    f(x)
    assert x.is_deleted()


def test_only_the_shapes_compiled_under_debug_nans_stay_non_donating():
    # Lesson 5 (l5-newshape): the non-donating program belongs to its signature; a
    # shape compiled after the mode is off donates, the debug-mode shape does not.
    f = jax.jit(lambda x: 2.0 * x, donate_argnums=0)
    with jax.debug_nans(True):
        f(jnp.ones(4))
    x5, x4 = jnp.ones(5), jnp.ones(4)
    f(x5)
    f(x4)
    assert x5.is_deleted() and not x4.is_deleted()


def test_weak_type_is_part_of_the_signature_debug_nans_is_cached_for():
    # Lesson 5 (l5-signature-text): a signature is one per argument shape, dtype and weak
    # type. Traced with a strong float32[] under debug_nans, a strong float32[] called later
    # still does not donate; a weak float32[] (jnp.asarray(1.0)) is traced anew and donates.
    f = jax.jit(lambda x: 4.0 * x, donate_argnums=0)
    with jax.debug_nans(True):
        f(jnp.ones(()))
    strong, weak = jnp.ones(()), jnp.asarray(1.0)
    assert (strong.weak_type, weak.weak_type) == (False, True)
    assert (strong.shape, strong.dtype) == (weak.shape, weak.dtype)
    f(strong)
    f(weak)
    assert not strong.is_deleted() and weak.is_deleted()


def test_debug_nans_signature_holds_static_values_pytree_and_keywords_but_not_committedness():
    # Lesson 5 (l5-signature-text, l5-signature): traced under debug_nans with a float32[4] and the
    # static factor 2.0, both by position. With the mode off, the same call and the same call
    # on an array committed to device 0 are not traced again and do not donate; another
    # dtype, weak type, pytree structure, static value, or the call made by keyword is
    # traced again and donates.
    scaled = jax.jit(lambda x, factor: jax.tree.map(lambda leaf: factor * leaf, x),
                     static_argnums=1, donate_argnums=0)
    with jax.debug_nans(True):
        scaled(jnp.ones(4), 2.0)
    committed = jax.device_put(jnp.ones(4), jax.devices()[0])
    assert committed.committed and not jnp.ones(4).committed and jnp.full(4, 1.0).weak_type
    cases = {
        "same": (jnp.ones(4), lambda x: scaled(x, 2.0)),
        "committed": (committed, lambda x: scaled(x, 2.0)),
        "dtype": (jnp.ones(4, jnp.float16), lambda x: scaled(x, 2.0)),
        "weak type": (jnp.full(4, 1.0), lambda x: scaled(x, 2.0)),
        "pytree": ([jnp.ones(4)], lambda x: scaled(x, 2.0)),
        "static value": (jnp.ones(4), lambda x: scaled(x, 3.0)),
        "keyword": (jnp.ones(4), lambda x: scaled(x=x, factor=2.0)),
    }
    deleted = {}
    for name, (x, call) in cases.items():
        call(x)
        deleted[name] = jax.tree.leaves(x)[0].is_deleted()
    assert deleted == {"same": False, "committed": False, "dtype": True, "weak type": True, "pytree": True,
                       "static value": True, "keyword": True}


def test_jax_clear_caches_restores_donation_for_every_jitted_function_at_once():
    # Lesson 5 (l5-clear-all): two functions compiled under debug_nans do not donate
    # after the mode is off; one jax.clear_caches() and both donate again.
    f = jax.jit(lambda x: 3.0 * x, donate_argnums=0)
    g = jax.jit(lambda x: x + 1.0, donate_argnums=0)
    with jax.debug_nans(True):
        f(jnp.ones(4))
        g(jnp.ones(4))

    def deleted():
        a, b = jnp.ones(4), jnp.ones(4)
        f(a)
        g(b)
        return a.is_deleted(), b.is_deleted()

    assert deleted() == (False, False)
    jax.clear_caches()
    assert deleted() == (True, True)


def test_compiled_before_debug_nans_keeps_donating_and_nan_rerun_finds_input_deleted():
    f = jax.jit(lambda x: jnp.log(x), donate_argnums=0)
    f(jnp.ones(4))
    with jax.debug_nans(True):
        x = jnp.ones(4)
        f(x)
        assert x.is_deleted()
        bad = -jnp.ones(4)
        with pytest.raises(RuntimeError, match="Array has been deleted"):
            f(bad)
    assert bad.is_deleted()


def test_compiled_under_debug_nans_reports_the_primitive_and_keeps_input():
    f = jax.jit(lambda x: jnp.log(x), donate_argnums=0)
    with jax.debug_nans(True):
        bad = -jnp.ones(4)
        with pytest.raises(FloatingPointError, match="nan.*log"):
            f(bad)
    assert not bad.is_deleted()


def test_two_jits_of_one_function_with_the_same_options_share_the_cache():
    def g(x):
        return jnp.sin(x) * 2.0
    first = jax.jit(g, donate_argnums=0)
    first(jnp.ones(4))                      # compiled donating
    second = jax.jit(g, donate_argnums=0)
    with jax.debug_nans(True):
        x = jnp.ones(4)
        second(x)
    assert x.is_deleted(), "a new jit wrapper no longer shares the cache: lesson 05's note is wrong"


def test_a_second_jit_of_jnp_log_with_the_same_options_reuses_the_donating_program():
    # Lesson 5 (l5-fresh-text, l5-same-key): jax.jit(jnp.log, donate_argnums=0) made again
    # shares the first one's compiled program, so under debug_nans it still donates;
    # a new lambda around jnp.log is another function and compiles without donation.
    jax.clear_caches()                          # no other test's jnp.log program
    jax.jit(jnp.log, donate_argnums=0)(jnp.ones(4))
    with jax.debug_nans(True):
        x = jnp.ones(4)
        jax.jit(jnp.log, donate_argnums=0)(x)
        y = jnp.ones(4)
        jax.jit(lambda v: jnp.log(v), donate_argnums=0)(y)
    assert x.is_deleted() and not y.is_deleted()


def test_debug_infs_does_not_disable_donation_and_inf_rerun_finds_input_deleted(capfd):
    f = jax.jit(lambda x: 1.0 / x, donate_argnums=0)
    with jax.debug_infs(True):
        x = jnp.ones(4)
        f(x)
        assert x.is_deleted()
        zero = jnp.zeros(4)
        with pytest.raises(RuntimeError, match="Array has been deleted"):
            f(zero)
    # lesson 5 says the report on this path calls the infinity a NaN
    assert "Invalid nan value encountered" in capfd.readouterr().out


def test_recipe_non_donating_debug_copy_leaves_the_donating_step_donating(capfd):
    # Lesson 5 (l5-recipe-text, l5-recipe-fn): on a NaN, JAX prints its "Invalid nan value" line
    # twice (debug_step, then once more in the op-by-op re-run), and the error names sqrt;
    # on a healthy grad it prints nothing.
    def update(params, grad):
        return params - 0.1 * jnp.sqrt(grad)
    train_step = jax.jit(update, donate_argnums=0)
    debug_step = jax.jit(update)
    params = train_step(jnp.ones(4), jnp.ones(4))
    line = "Invalid nan value encountered in the output of a jax.jit function. Calling the de-optimized version.\n"
    capfd.readouterr()
    with jax.debug_nans(True):
        debug_step(params, jnp.ones(4))
        assert capfd.readouterr().out == ""
        with pytest.raises(FloatingPointError, match="sqrt"):
            debug_step(params, jnp.array([1.0, -1.0, 1.0, 1.0]))
    assert capfd.readouterr().out == 2 * line
    assert not params.is_deleted()
    old = params
    train_step(params, jnp.ones(4))
    assert old.is_deleted()


# ---------------------------------------------------------------- lesson 06

SHARDING_SCRIPT = textwrap.dedent("""
    import json, warnings
    import jax, jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
    res = {"devices": len(jax.devices())}
    mesh = jax.make_mesh((8,), ("x",))
    res["default_axis_types"] = [t.name for t in mesh.axis_types]
    split, rep = NamedSharding(mesh, P("x")), NamedSharding(mesh, P())
    auto_x = NamedSharding(jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,)), P("x"))
    res["types"] = {"explicit": str(jax.typeof(jax.device_put(jnp.arange(16.0), split))),
                    "auto": str(jax.typeof(jax.device_put(jnp.arange(16.0), auto_x)))}

    def call(f, a):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = f(a)
        return out, [str(w.message) for w in caught]

    f = jax.jit(lambda v: 2.0 * v, in_shardings=split, out_shardings=split, donate_argnums=0)
    a = jax.device_put(jnp.arange(16.0), split)
    res["match_alias_bytes"] = f.lower(a).compile().memory_analysis().alias_size_in_bytes
    out, w = call(f, a)
    res["match"] = {"deleted": a.is_deleted(), "warnings": w, "spec": str(out.sharding.spec)}

    # lowering reads the sharding from the argument's type: an array, or a struct with or without one
    s = jax.jit(lambda v: 2.0 * v, donate_argnums=0)
    b = jax.device_put(jnp.arange(16.0), split)
    res["lower_types"] = {}
    for name, arg in (("array", b), ("struct", jax.ShapeDtypeStruct((16,), jnp.float32)),
                      ("struct_split", jax.ShapeDtypeStruct((16,), jnp.float32, sharding=split))):
        c = s.lower(arg).compile()
        res["lower_types"][name] = [len(c.input_shardings[0][0].device_set),
                                    c.memory_analysis().alias_size_in_bytes]
    res["lower_types"]["array_deleted"] = b.is_deleted()

    g = jax.jit(lambda v: 2.0 * v, in_shardings=split, out_shardings=rep, donate_argnums=0)
    a = jax.device_put(jnp.arange(16.0), split)
    out, w = call(g, a)
    res["mismatch"] = {"deleted": a.is_deleted(), "warnings": w}

    # an array on other devices: copied when laid out like the program's input, refused when committed otherwise
    from jax.sharding import SingleDeviceSharding
    on_device_0 = SingleDeviceSharding(jax.devices()[0])
    pinned = jax.jit(lambda v: 2.0 * v, in_shardings=on_device_0, out_shardings=on_device_0, donate_argnums=0)
    first_four = NamedSharding(jax.make_mesh((4,), ("x",), devices=jax.devices()[:4]), P("x"))
    last_four = NamedSharding(jax.make_mesh((4,), ("x",), devices=jax.devices()[4:]), P("x"))
    scale_first_four = jax.jit(lambda v: 2.0 * v, in_shardings=first_four, out_shardings=first_four,
                               donate_argnums=0)
    res["other_devices"] = {}
    for name, fn, a in (("device 1 to pinned", pinned, jax.device_put(jnp.arange(4.0), jax.devices()[1])),
                        ("split 4-7 to split 0-3", scale_first_four, jax.device_put(jnp.arange(16.0), last_four)),
                        ("device 5 to split 0-7", f, jax.device_put(jnp.arange(16.0), jax.devices()[5])),
                        ("split 0-7 to pinned", pinned, jax.device_put(jnp.arange(16.0), split)),
                        ("uncommitted to split 0-3", scale_first_four, jnp.arange(16.0))):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                outcome = "ran on " + str(sorted(d.id for d in fn(a).devices()))
            except ValueError as err:
                outcome = "ValueError: " + str(err)
        res["other_devices"][name] = {"committed": a.committed, "outcome": outcome, "deleted": a.is_deleted(),
                                      "warnings": [str(w.message) for w in caught]}

    # a program that replicates its input takes an array held whole on any one device, committed or not;
    # that device's copy is the array's own buffer when the device is one of the program's (donated)
    first_four_rep = NamedSharding(first_four.mesh, P())
    last_four_rep = NamedSharding(last_four.mesh, P())
    def replicating(sharding, **donate):
        return jax.jit(lambda v: 2.0 * v, in_shardings=sharding, out_shardings=sharding, **donate)
    res["replicated_program"] = {}
    for name, fn, a in (
            ("device 5 to replicated 0-7", replicating(rep, donate_argnums=0),
             jax.device_put(jnp.arange(16.0), jax.devices()[5])),
            ("device 0 to replicated 0-7", replicating(rep, donate_argnums=0),
             jax.device_put(jnp.arange(16.0), jax.devices()[0])),
            ("uncommitted to replicated 0-7", replicating(rep, donate_argnums=0), jnp.arange(16.0)),
            ("device 1 to replicated 0-3", replicating(first_four_rep, donate_argnums=0),
             jax.device_put(jnp.arange(16.0), jax.devices()[1])),
            ("device 5 to replicated 0-3", replicating(first_four_rep, donate_argnums=0),
             jax.device_put(jnp.arange(16.0), jax.devices()[5])),
            ("uncommitted to replicated 4-7", replicating(last_four_rep, donate_argnums=0), jnp.arange(16.0)),
            ("device 5 to replicated 0-7, not donating", replicating(rep),
             jax.device_put(jnp.arange(16.0), jax.devices()[5])),
            ("split 0-7 to replicated 0-7", replicating(rep, donate_argnums=0),
             jax.device_put(jnp.arange(16.0), split)),
            ("split 4-7 to replicated 0-7", replicating(rep, donate_argnums=0),
             jax.device_put(jnp.arange(16.0), last_four))):
        before = {s.device.id: s.data.unsafe_buffer_pointer() for s in a.addressable_shards}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                out = fn(a)
                outcome = "ran on " + str(sorted(d.id for d in out.devices()))
                own = [s.device.id for s in out.addressable_shards
                       if s.data.unsafe_buffer_pointer() == before.get(s.device.id)]
                right = bool((out == 2.0 * jnp.arange(16.0)).all())
            except ValueError as err:
                outcome, own, right = "ValueError: " + str(err), None, None
        res["replicated_program"][name] = {"committed": a.committed, "outcome": outcome, "deleted": a.is_deleted(),
                                           "warnings": [str(w.message) for w in caught], "own_buffer": own,
                                           "values_right": right}

    # a plain, uncommitted array given to a jit whose in_shardings split it: resharded, not donated
    from donation_lab import explain_donation
    res["plain_to_split"] = {}
    for name, a in (("plain", jnp.arange(16.0)), ("device_put_split", jax.device_put(jnp.arange(16.0), split))):
        plan = explain_donation(f, a).leaf("v").status
        out, w = call(f, a)
        res["plain_to_split"][name] = {"committed": a.committed, "plan": plan, "deleted": a.is_deleted(),
                                       "warnings": w, "spec": str(out.sharding.spec)}

    # different shardings, pieces of one size per device: (1, 8) in, (8, 1) out, on both kinds of mesh
    res["same_size_pieces"] = {}
    for kind, types in (("explicit", None), ("auto", (AxisType.Auto,))):
        m8 = jax.make_mesh((8,), ("x",)) if types is None else jax.make_mesh((8,), ("x",), axis_types=types)
        rows, cols = NamedSharding(m8, P("x", None)), NamedSharding(m8, P(None, "x"))
        t = jax.jit(lambda v: 2.0 * v, in_shardings=rows, out_shardings=cols, donate_argnums=0)
        a = jax.device_put(jnp.arange(64.0).reshape(8, 8), rows)
        before = {s.device.id: s.data.unsafe_buffer_pointer() for s in a.addressable_shards}
        out, w = call(t, a)
        res["same_size_pieces"][kind] = {
            "pieces": [list(rows.shard_shape((8, 8))), list(cols.shard_shape((8, 8)))],
            "deleted": a.is_deleted(), "warnings": w, "spec": str(out.sharding.spec),
            "own_buffer": [s.data.unsafe_buffer_pointer() == before[s.device.id] for s in out.addressable_shards],
            "values_right": bool((out == 2.0 * jnp.arange(64.0).reshape(8, 8)).all())}

    amesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))
    asplit, arep = NamedSharding(amesh, P("x")), NamedSharding(amesh, P())
    for name, target in (("silent", arep), ("fixed", asplit)):
        h = jax.jit(lambda v, t=target: jax.lax.with_sharding_constraint(2.0 * v, t), donate_argnums=0)
        a = jax.device_put(jnp.arange(16.0), asplit)
        alias = h.lower(a).compile().memory_analysis().alias_size_in_bytes
        requested = h.lower(a).args_info[0][0].donated
        out, w = call(h, a)
        res[name] = {"deleted": a.is_deleted(), "warnings": w, "alias": alias,
                     "requested": requested, "spec": str(out.sharding.spec)}

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from jax.experimental.pjit import pjit
    res["pjit_warnings"] = [[w.category.__name__, str(w.message)] for w in caught]
    import jax.experimental.pjit as pjit_module
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pjit_module.pjit
    res["pjit_second_access"] = [str(w.message) for w in caught]
    pf = pjit(lambda v: v + 1.0, in_shardings=split, out_shardings=split, donate_argnums=0)
    a = jax.device_put(jnp.arange(16.0), split)
    out = pf(a)
    res["pjit"] = {"deleted": a.is_deleted(), "same_type_as_jit": type(pf) is type(f),
                   "is_jax_jit": pjit is jax.jit}

    # an Auto mesh and no out_shardings: the compiler picks the output layout, JAX never warns
    res["auto"] = {}
    for name, fn, options in (
            ("sort", lambda v: jnp.sort(v), {}),
            ("sort_out_replicated", lambda v: jnp.sort(v), dict(out_shardings=arep)),
            ("sort_out_split", lambda v: jnp.sort(v), dict(out_shardings=asplit)),
            ("matmul", lambda v: jnp.ones((16, 16)) @ v, {}),
            ("sum", lambda v: v.sum(), {}),
            ("elementwise", lambda v: 2.0 * v, {})):
        k = jax.jit(fn, donate_argnums=0, **options)
        a = jax.device_put(jnp.arange(16.0)[::-1], asplit)
        out, w = call(k, a)
        alias = k.lower(jax.device_put(jnp.arange(16.0), asplit)).compile().memory_analysis().alias_size_in_bytes
        res["auto"][name] = {"deleted": a.is_deleted(), "warnings": [m.splitlines()[0] for m in w],
                             "spec": str(out.sharding.spec), "alias": alias}
    # with_sharding_constraint takes a sharding on the Auto mesh, not one on the Explicit mesh
    try:
        jax.jit(lambda v: jax.lax.with_sharding_constraint(2.0 * v, split), donate_argnums=0)(
            jax.device_put(jnp.arange(16.0), asplit))
        res["constraint_explicit"] = "ran"
    except ValueError as err:
        res["constraint_explicit"] = str(err)
    m = jax.jit(lambda v: jnp.ones((16, 16)) @ v, donate_argnums=0)
    a = jax.device_put(jnp.arange(16.0), split)
    out, w = call(m, a)
    res["explicit_matmul"] = {"deleted": a.is_deleted(), "warnings": [x.splitlines()[0] for x in w]}

    # pmap: a plain array is copied to the devices, not donated; a split one is donated
    p_add = jax.pmap(lambda s, d: s + d, donate_argnums=0)
    res["pmap"] = {}
    for name, state in (("plain", jnp.ones((8, 4))), ("auto_split", jax.device_put(jnp.ones((8, 4)), asplit))):
        out, w = call(lambda s: p_add(s, jnp.ones((8, 4))), state)
        res["pmap"][name] = {"deleted": state.is_deleted(), "warnings": w}
    p_add(out, jnp.ones((8, 4)))
    res["pmap"]["own_output"] = {"deleted": out.is_deleted()}
    try:
        p_add(jax.device_put(jnp.ones((8, 4)), split), jnp.ones((8, 4)))
        res["pmap_explicit_split"] = "ran"
    except KeyError as err:
        res["pmap_explicit_split"] = repr(err)
    # an array committed to device 0 is refused, with or without donation; an uncommitted one runs
    res["pmap_committed"] = {}
    for name, fn in (("donating", p_add), ("not_donating", jax.pmap(lambda s, d: s + d))):
        for kind, state in (("uncommitted", jnp.ones((8, 4))),
                            ("committed", jax.device_put(jnp.ones((8, 4)), jax.devices()[0])),
                            ("committed_3", jax.device_put(jnp.ones((8, 4)), jax.devices()[3]))):
            try:
                fn(state, jnp.ones((8, 4)))
                outcome = "ran"
            except ValueError as err:
                outcome = "ValueError: " + str(err)
            res["pmap_committed"][f"{name} {kind}"] = {"committed": state.committed, "outcome": outcome,
                                                       "deleted": state.is_deleted()}
    print("RESULT" + json.dumps(res))
""")


@pytest.fixture(scope="module")
def sharding_facts():
    return result_on_eight_devices(SHARDING_SCRIPT)


def test_xla_flag_gives_eight_cpu_devices_and_make_mesh_defaults_to_explicit(sharding_facts):
    assert sharding_facts["devices"] == 8
    assert sharding_facts["default_axis_types"] == ["Explicit"]


def test_an_explicit_axis_puts_the_sharding_in_the_type_and_an_auto_axis_leaves_it_out(sharding_facts):
    # Lesson 6 (l6-silent-text, l6-silent's first line): one split array, on each kind of mesh.
    assert sharding_facts["types"] == {"explicit": "float32[16@x]", "auto": "float32[16]"}


def test_matching_shardings_donate_per_shard(sharding_facts):
    # Lesson 6 (l6-match-text, l6-match, l6-summary's takeaways); the other side is the test below.
    match = sharding_facts["match"]
    assert match == {"deleted": True, "warnings": [], "spec": "P('x',)"}
    assert sharding_facts["match_alias_bytes"] == 8  # 2 float32 per device


def test_lowering_reads_the_sharding_of_the_argument_type_not_its_data(sharding_facts):
    # Lessons 1 (l1-lower) and 6 (l6-lower): no in_shardings; a split array and a struct that
    # carries the split sharding compile for 8 devices, 8 bytes aliased on each; a struct
    # without a sharding compiles for one device, 64 bytes. Lowering donates nothing.
    assert sharding_facts["lower_types"] == {"array": [8, 8], "struct": [1, 64], "struct_split": [8, 8],
                                             "array_deleted": False}


def test_split_in_replicated_out_warns_with_the_per_shard_shape_and_keeps_input(sharding_facts):
    # Lesson 6 (l6-match-text, l6-match, its replicated output): the warning names float32[2], not float32[16].
    mismatch = sharding_facts["mismatch"]
    assert mismatch["deleted"] is False
    assert len(mismatch["warnings"]) == 1
    assert mismatch["warnings"][0].startswith("Some donated buffers were not usable: float32[2].")


@pytest.mark.parametrize("kind", ["explicit", "auto"])
def test_different_shardings_with_pieces_of_one_size_donate_without_a_warning(sharding_facts, kind):
    # Lesson 6 (l6-same-size): P('x', None) in, P(None, 'x') out gives (1, 8) and (8, 1)
    # pieces, 32 bytes each: no warning, each device's output in its own input buffer, input
    # deleted. The other side (pieces of another size, P('x') in, P() out) warns: test above.
    same = sharding_facts["same_size_pieces"][kind]
    assert same == {"pieces": [[1, 8], [8, 1]], "deleted": True, "warnings": [], "spec": "P(None, 'x')",
                    "own_buffer": [True] * 8, "values_right": True}


def test_with_sharding_constraint_needs_a_sharding_on_the_auto_mesh(sharding_facts):
    # Lesson 6, exercise 6.2's Hint 2: on an Auto-mesh input, a constraint to the Explicit
    # mesh's `split` is refused; to the Auto mesh's own sharding it runs (and donates: "fixed").
    assert sharding_facts["constraint_explicit"].startswith(
        "The spec of NamedSharding passed to with_sharding_constraint can only refer to Auto axes of the mesh.")
    assert sharding_facts["fixed"]["deleted"] is True


def test_sharding_constraint_on_auto_mesh_misses_donation_silently(sharding_facts):
    # Lesson 6 (l6-silent-text, l6-silent, with its explain_donation); the repaired side is the test below.
    silent = sharding_facts["silent"]
    assert silent["requested"] is True
    assert silent["deleted"] is False
    assert silent["warnings"] == []
    assert silent["alias"] == 0
    assert silent["spec"] == "P()"


def test_constraining_to_the_input_sharding_repairs_the_silent_miss(sharding_facts):
    fixed = sharding_facts["fixed"]
    assert fixed["deleted"] is True and fixed["warnings"] == [] and fixed["alias"] == 8


def test_pjit_is_deprecated_and_builds_the_same_kind_of_function_as_jit(sharding_facts):
    # Lesson 6 (l6-pjit): the first access in a process warns, a second one does not.
    assert sharding_facts["pjit_warnings"] == [
        ["DeprecationWarning", "jax.experimental.pjit.pjit has been deprecated. Please use `jax.jit` instead."]]
    assert sharding_facts["pjit_second_access"] == []
    assert sharding_facts["pjit"] == {"deleted": True, "same_type_as_jit": True, "is_jax_jit": False}


def test_auto_mesh_without_out_shardings_misses_donation_silently_when_the_output_is_replicated(sharding_facts):
    # Lesson 6 (l6-auto): no out_shardings on an Auto mesh: a replicated output
    # (sort, a matmul, a sum) is never warned about; an output the compiler keeps
    # split is donated. With out_shardings JAX checks again: replicated warns, split donates.
    auto = sharding_facts["auto"]
    for name in ("sort", "matmul", "sum"):
        assert auto[name]["deleted"] is False and auto[name]["warnings"] == [], name
        assert auto[name]["alias"] == 0, name
    assert auto["sort"]["spec"] == "P()"
    assert auto["elementwise"] == {"deleted": True, "warnings": [], "spec": "P('x',)", "alias": 8}
    assert auto["sort_out_replicated"]["deleted"] is False
    assert auto["sort_out_replicated"]["warnings"] == ["Some donated buffers were not usable: float32[2]."]
    assert auto["sort_out_split"] == {"deleted": True, "warnings": [], "spec": "P('x',)", "alias": 8}
    # The same matmul on an Explicit mesh, whose output layout JAX knows at lowering, warns.
    assert sharding_facts["explicit_matmul"] == {
        "deleted": False, "warnings": ["Some donated buffers were not usable: float32[2]."]}


def test_pmap_copies_a_plain_array_silently_and_donates_a_split_one(sharding_facts):
    # Lesson 6 (l6-pmap): 8 devices, donate_argnums=0, the array passed by position.
    pmap = sharding_facts["pmap"]
    assert pmap["plain"] == {"deleted": False, "warnings": []}
    assert pmap["auto_split"] == {"deleted": True, "warnings": []}
    assert pmap["own_output"] == {"deleted": True}
    assert sharding_facts["pmap_explicit_split"] == "KeyError('x')"


def test_pmap_refuses_an_array_committed_to_one_device_and_copies_an_uncommitted_one(sharding_facts):
    # Lesson 6 (l6-pmap-text, l6-pmap-committed): both on device 0 only; the
    # uncommitted jnp.ones((8, 4)) runs (copied, not deleted), the one committed with
    # device_put(x, jax.devices()[0]) raises ValueError, whether pmap donates or not
    # (and so does one committed to device 3: "committed to one device").
    runs = sharding_facts["pmap_committed"]
    for name in ("donating", "not_donating"):
        assert runs[f"{name} uncommitted"] == {"committed": False, "outcome": "ran", "deleted": False}, name
        for kind in ("committed", "committed_3"):
            committed = runs[f"{name} {kind}"]
            assert committed["committed"] is True and committed["deleted"] is False, (name, kind)
            assert committed["outcome"].startswith("ValueError: Sharding passed to jit does not match "
                                                   "the sharding on the respective arg. Got"), (name, kind)


def test_a_plain_array_given_to_a_splitting_jit_is_copied_silently_and_a_split_one_is_donated(sharding_facts):
    # Lesson 6 (l6-plain-split-text, l6-plain-split): in_shardings=out_shardings=split.
    # The compiled program plans the reuse for both (explain_donation); the plain,
    # uncommitted array is resharded into a copy, which is donated: not deleted, no
    # warning. The same array device_put to `split` first is donated.
    plain, placed = sharding_facts["plain_to_split"]["plain"], sharding_facts["plain_to_split"]["device_put_split"]
    assert plain == {"committed": False, "plan": "reuse its buffer for out", "deleted": False, "warnings": [],
                     "spec": "P('x',)"}
    assert placed == {"committed": True, "plan": "reuse its buffer for out", "deleted": True, "warnings": [],
                      "spec": "P('x',)"}


def test_an_array_on_other_devices_is_copied_when_laid_out_alike_and_refused_when_committed_otherwise(
        sharding_facts):
    # Lesson 6 (l6-other, l6-other-layout, l6-plain-split-text): laid out like the
    # program's input but on other devices (device 1 for a program pinned to device 0; split
    # over 4-7 for one split over 0-3): copied, not deleted, no warning. Committed with another
    # layout (whole on device 5 for a split program; split over 0-7 for a pinned one): a
    # ValueError, nothing deleted. Uncommitted, whole on device 0, to the split program: copied.
    # (A program that replicates its input takes an array whole on one device: the test below.)
    runs = sharding_facts["other_devices"]
    copied = {"device 1 to pinned": "ran on [0]", "split 4-7 to split 0-3": "ran on [0, 1, 2, 3]",
              "uncommitted to split 0-3": "ran on [0, 1, 2, 3]"}
    for name, outcome in copied.items():
        assert runs[name] == {"committed": name != "uncommitted to split 0-3", "outcome": outcome,
                              "deleted": False, "warnings": []}, name
    for name in ("device 5 to split 0-7", "split 0-7 to pinned"):
        refused = runs[name]
        assert refused["committed"] is True and refused["deleted"] is False and refused["warnings"] == [], name
        assert refused["outcome"].startswith("ValueError: Sharding passed to jit does not match the sharding "
                                             "on the respective arg. Got"), name


def test_a_replicating_program_takes_an_array_whole_on_one_device_and_donates_it_there_if_it_is_one_of_its(
        sharding_facts):
    # Lesson 6 (l6-other-layout-text, l6-replicated-text, l6-replicated): in_shardings=
    # out_shardings=P(). An array held whole on one device, committed or not, is not refused.
    # When that device is one of the program's, the output's piece there is in the array's own
    # buffer and the array is deleted, with no warning; the other devices get copies. When it is
    # not (device 5, or the plain array on device 0, for a program on 0-3 or 4-7), every piece is a
    # copy and nothing is deleted. Without donation the same call runs and deletes nothing. A split
    # array is still refused with a ValueError, and nothing is deleted.
    runs = sharding_facts["replicated_program"]
    donated = {"device 5 to replicated 0-7": (True, "ran on [0, 1, 2, 3, 4, 5, 6, 7]", [5]),
               "device 0 to replicated 0-7": (True, "ran on [0, 1, 2, 3, 4, 5, 6, 7]", [0]),
               "uncommitted to replicated 0-7": (False, "ran on [0, 1, 2, 3, 4, 5, 6, 7]", [0]),
               "device 1 to replicated 0-3": (True, "ran on [0, 1, 2, 3]", [1])}
    for name, (committed, outcome, own) in donated.items():
        assert runs[name] == {"committed": committed, "outcome": outcome, "deleted": True, "warnings": [],
                              "own_buffer": own, "values_right": True}, name
    copied = {"device 5 to replicated 0-3": (True, "ran on [0, 1, 2, 3]"),
              "uncommitted to replicated 4-7": (False, "ran on [4, 5, 6, 7]"),
              "device 5 to replicated 0-7, not donating": (True, "ran on [0, 1, 2, 3, 4, 5, 6, 7]")}
    for name, (committed, outcome) in copied.items():
        assert runs[name] == {"committed": committed, "outcome": outcome, "deleted": False, "warnings": [],
                              "own_buffer": [], "values_right": True}, name
    for name in ("split 0-7 to replicated 0-7", "split 4-7 to replicated 0-7"):
        refused = runs[name]
        assert refused["committed"] is True and refused["deleted"] is False and refused["warnings"] == [], name
        assert refused["outcome"].startswith("ValueError: Sharding passed to jit does not match the sharding "
                                             "on the respective arg. Got"), name


def test_shard_layout_helpers_describe_and_grid(sharding_facts):
    # The helpers lesson 06 uses to draw layouts (rich is not installed, so
    # jax.debug.visualize_array_sharding is not available).
    script = textwrap.dedent("""
        import jax, jax.numpy as jnp
        from jax.sharding import NamedSharding, PartitionSpec as P
        from donation_lab.shard_layout import describe_shards, shard_owners
        m = jax.make_mesh((8,), ("x",))
        a = jax.device_put(jnp.arange(16.0), NamedSharding(m, P("x")))
        print(shard_owners(a).tolist())
        print(describe_shards(a).splitlines()[1])
        m2 = jax.make_mesh((4, 2), ("x", "y"))
        print(shard_owners(jax.device_put(jnp.zeros((4, 4)), NamedSharding(m2, P("x", "y")))).tolist())
        try:
            jax.debug.visualize_array_sharding(a)
            print("rich-available")
        except ValueError as exc:
            print("rich-missing" if str(exc) == "`visualize_sharding` requires `rich` to be installed." else repr(exc))
    """)
    proc = run_on_eight_devices(script)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == str([[0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7]])
    assert lines[1] == "  device 0: [0:2]  (2 elements)"
    assert lines[2] == str([[0, 0, 1, 1], [2, 2, 3, 3], [4, 4, 5, 5], [6, 6, 7, 7]])
    assert lines[3] == "rich-missing", "rich is installed now: lesson 06 could use visualize_array_sharding"


# ---------------------------------------------------------------- lesson 07

def test_validate_runs_nothing_and_lists_only_the_cells_whose_type_changed(tmp_path):
    # Lesson 7 (ex-checks-text): on the learner's copy, solved, nbgrader's Validate runs
    # the notebook and lists nothing; with the capstone's answer cell turned into
    # Markdown it runs nothing (the exercise's answer, which writes a file, does not
    # run) and lists only that cell. Only the learner's copy records each cell's type
    # (nbgrader's cell_type), so the solved notebook is the learner's copy answered.
    import nbformat
    from nbgrader.validator import Validator

    from helpers import answered_copy

    name = "07_update_with_donate.ipynb"
    for changed in (False, True):
        folder = tmp_path / ("type changed" if changed else "as saved")
        marker = folder / "ran.txt"
        nb = nbformat.read(answered_copy(name, folder / name), as_version=4)
        answers = {c.metadata["nbgrader"]["grade_id"]: c for c in nb.cells
                   if c.metadata.get("nbgrader", {}).get("solution")}
        assert set(answers) == {"ex-answer", "cap-answer"}
        answers["ex-answer"].source += f"\nopen({str(marker)!r}, 'w').close()\n"
        if changed:
            index = nb.cells.index(answers["cap-answer"])
            markdown = nbformat.v4.new_markdown_cell(answers["cap-answer"].source)
            markdown.id, markdown.metadata = answers["cap-answer"].id, answers["cap-answer"].metadata
            nb.cells[index] = markdown
        nbformat.write(nb, folder / name)
        result = Validator().validate(str(folder / name))
        if changed:
            assert list(result) == ["type_changed"] and len(result["type_changed"]) == 1, result
            assert result["type_changed"][0]["source"] == answers["cap-answer"].source.strip()
            assert not marker.exists(), "Validate ran the notebook although a cell's type changed"
        else:
            assert result == {}, result
            assert marker.exists(), "Validate did not run the notebook"
