"""Hidden checks for lesson 3's debugging exercise (a training loop with one
donation bug), run only at grading.

Like hidden/exercise.py and hidden/capstone.py: imported at kernel start
(nbgrader_config.py's exec_lines), so the helpers it uses (hidden/safe.py) are
captured before any learner code runs; every check (by `@check`) first puts
back any helper a learner redefined, prints one `✔ <check>: <message>` line on
a pass and raises HiddenCheckFailed (an AssertionError) with a message for the
learner on a failure. Warnings and stderr are silenced inside each check
(`quiet=True`; nbgrader zeroes a grade cell that writes to stderr).

The lesson's setup cell gives `step_fn(batch, params, opt_state)` (a line fit
`x @ w + b`, momentum BETA, learning rate LR) and `train_step`, jitted with
donate_argnums=(0, 1), left over from an older signature: it asks to donate the
batch (no output can take it: JAX warns once and keeps it) and never donates
opt_state (silently). The learner defines, in the answer cell:
  fixed_step(batch, params, opt_state) -> (new_params, new_opt_state, loss),
      jitted, donating every leaf of params and opt_state and nothing of batch
A fix that only silences the warning (donating params alone) or that copies
(no donation) keeps its values right and earns the values check only.

The referee: each check first hands fixed_step over as data
(hidden/handover.py: the program a jax.jit function lowers to, with the
donation it requested), and the grader judges that program again where no
learner code runs (grading/referee/judge.py); a point needs both passes. A
request to donate the batch, which JAX drops with a warning and no mark in
the program, is judged there from the request handed over with it.
"""
from donation_course.hidden.handover import hand_over
from donation_course.hidden.safe import (  # the builtins among these shadow the live ones on purpose
    HiddenCheckFailed,
    IndexError,
    JitFunction,
    KeyError,
    TypeError,
    any,
    asarray,
    block_until_ready,
    bool,
    call_step,
    catch_warnings,
    check,
    clear_caches,
    close,
    default_rng,
    device,
    donated_inputs,
    expect_reused,
    fail,
    float32,
    host_values,
    is_array,
    keystr,
    len,
    live_count,
    momentum_reference,
    range,
    restore_helpers,
    set,
    simplefilter,
    str,
    sum,
    tree_flatten_with_path,
    tree_leaves,
    type,
    zip,
)

__all__ = ["HiddenCheckFailed", "restore_helpers", "check_example", "check_values", "check_donated",
           "check_reuse_and_loop"]

LR, BETA = 0.05, 0.5   # the constants of the setup cell's `step_fn`
N, FEATURES = 32, 4    # the setup's batch shape: the checks compile fixed_step for that one signature
# The leaves of (batch, params, opt_state), flattened as JAX orders them (sorted dict keys)
BATCH = ["batch['x']", "batch['y']"]
STATE = ["params['b']", "params['w']", "opt_state['m']['b']", "opt_state['m']['w']"]
NOT_USABLE = "donated buffers were not usable"


def _batch(rng):
    x = rng.standard_normal((N, FEATURES), dtype=float32)
    y = rng.standard_normal((N,), dtype=float32)
    return {"x": device(x), "y": device(y)}, (x, y)


def _state(w, b, mw, mb):
    params = {"w": device(asarray(w, float32)), "b": device(asarray(b, float32).reshape(()))}
    opt = {"m": {"w": device(asarray(mw, float32)), "b": device(asarray(mb, float32).reshape(()))}}
    return params, opt


def _random_state(rng):
    """Random params and momentum (as host values and as fresh device arrays)."""
    w, mw = rng.standard_normal(FEATURES, dtype=float32), rng.standard_normal(FEATURES, dtype=float32)
    b, mb = rng.standard_normal((), dtype=float32), rng.standard_normal((), dtype=float32)
    return (w, b, mw, mb), _state(w, b, mw, mb)


def _reference(w, b, mw, mb, x, y):
    """One step in float64 NumPy: (w, b, mw, mb, loss)."""
    return momentum_reference(w, b, mw, mb, x, y, LR, BETA)


def _step(fixed_step, batch, params, opt):
    return call_step(fixed_step, "fixed_step", "(params, opt_state, loss), as step_fn does", batch, params, opt)


def _host(array, what):
    return host_values(array, what, "return what step_fn returns, not a donated input.")


def _named(params, opt, loss):
    try:
        return {"params['w']": params["w"], "params['b']": params["b"], "opt_state['m']['w']": opt["m"]["w"],
                "opt_state['m']['b']": opt["m"]["b"], "loss": loss}
    except (KeyError, TypeError, IndexError) as exc:
        fail(f"the result does not have the structure of (params, opt_state, loss) ({exc!r}).",
             "return what step_fn returns.")


def _leaves(batch, params, opt):
    """{leaf name: array} for the arguments, in JAX's flattening order (BATCH, then STATE)."""
    found = {f"batch{keystr(p)}": leaf for p, leaf in tree_flatten_with_path(batch)[0]}
    found.update({f"params{keystr(p)}": leaf for p, leaf in tree_flatten_with_path(params)[0]})
    found.update({f"opt_state{keystr(p)}": leaf for p, leaf in tree_flatten_with_path(opt)[0]})
    return found


def _traced(fixed_step) -> list | None:
    """The leaves (BATCH + STATE names) that a trace of fixed_step shows donated (safe.donated_inputs: what
    jax.jit decided, which neither a `lower` attribute nor warning filters change), or None when it cannot be
    traced."""
    rng = default_rng(0)
    batch, _ = _batch(rng)
    _, (params, opt) = _random_state(rng)
    flags = donated_inputs(fixed_step, batch, params, opt)
    if flags is None or len(flags) != len(BATCH + STATE):
        return None
    return [name for name, flag in zip(BATCH + STATE, flags) if flag]


def _requested(fixed_step) -> list | None:
    """The leaves fixed_step asks to donate, as traced, or None when the trace cannot say: it fails, or it is
    no jax.jit function's and convicts nothing (such code may trace otherwise than it runs)."""
    names = _traced(fixed_step)
    if names or (names is not None and type(fixed_step) is JitFunction):
        return names
    return None


def _warns_not_usable(fixed_step) -> bool:
    """Whether a call of fixed_step, lowered afresh with warnings unfiltered, makes JAX warn that a donated
    buffer was not usable (for what the trace cannot judge)."""
    rng = default_rng(1)
    batch, _ = _batch(rng)
    _, (params, opt) = _random_state(rng)
    clear_caches()  # the warning comes at lowering, once per program: lower afresh
    with catch_warnings(record=True) as caught:
        simplefilter("always")
        _step(fixed_step, batch, params, opt)
    return any(NOT_USABLE in str(w.message) for w in caught)


def _batch_requested(fixed_step) -> list:
    """The batch's leaves fixed_step asks to donate ([] when none; both when only the warning shows it)."""
    names = _requested(fixed_step)
    if names is not None:
        return [name for name in names if name in BATCH]
    return BATCH if _warns_not_usable(fixed_step) else []


def _ask_batch_message(asked) -> str:
    return (f"fixed_step asks to donate {' and '.join(asked)}. No output can take "
            f"{'that buffer' if len(asked) == 1 else 'those buffers'}, so JAX warns that they were not usable "
            "and keeps the batch alive: the request saves nothing.")


@check("fixed_step worked example", quiet=True)
def check_example(fixed_step) -> str:
    """The public check again, with helpers the learner cannot redefine: one step from random params gives the
    reference values, the old params and opt_state are deleted, and the batch is left alive."""
    hand_over("l3-fixed-step", "fixed_step worked example", fixed_step)  # to the referee, as data
    rng = default_rng(21)
    batch, (x, y) = _batch(rng)
    (w, b, mw, mb), (params, opt) = _random_state(rng)
    new_params, new_opt, loss = _step(fixed_step, batch, params, opt)
    ref = _reference(w, b, mw, mb, x, y)
    got = _named(new_params, new_opt, loss)
    for name, value in zip(got, (ref[0], ref[1], ref[2], ref[3], ref[4])):
        if not close(_host(got[name], name), value):
            fail(f"one step gives {name} = {_host(got[name], name).tolist()}, expected "
                 f"{asarray(value, 'float64').round(5).tolist()}.", "compile the setup cell's step_fn itself.")
    alive = [name for name, leaf in _leaves(batch, params, opt).items() if name in STATE and not leaf.is_deleted()]
    if alive:
        fail(f"still alive after the step, so not donated: {', '.join(alive)}.",
             "run explain_donation on fixed_step and read the table (Hint 1).")
    if batch["x"].is_deleted() or batch["y"].is_deleted():
        fail("the batch was deleted by the step.", "run explain_donation on fixed_step and read the table (Hint 1).")
    return "one step gives the expected params, momentum and loss; the old params and opt_state are deleted."


@check("fixed_step values and batch", quiet=True)
def check_values(fixed_step) -> str:
    """Three chained steps from random params, on a fresh batch each, give the reference values; each batch is
    left alive and unchanged, and fixed_step asks to donate none of it (no 'not usable' warning)."""
    hand_over("l3-fixed-step", "fixed_step values and batch", fixed_step)  # to the referee, as data
    rng = default_rng(22)
    (w, b, mw, mb), (params, opt) = _random_state(rng)
    for number in range(1, 4):
        batch, (x, y) = _batch(rng)
        params, opt, loss = _step(fixed_step, batch, params, opt)
        w, b, mw, mb, ref_loss = _reference(w, b, mw, mb, x, y)
        got = _named(params, opt, loss)
        for name, value in zip(got, (w, b, mw, mb, ref_loss)):
            if not close(_host(got[name], name), value):
                fail(f"after step {number}, {name} is {_host(got[name], name).tolist()}, expected "
                     f"{asarray(value, 'float64').round(5).tolist()}.", "compile the setup cell's step_fn itself.")
        for name, leaf, host in (("batch['x']", batch["x"], x), ("batch['y']", batch["y"], y)):
            if leaf.is_deleted():
                fail(f"{name} was deleted by step {number}.", "the loop throws each batch away: "
                     "donating it saves nothing, since no output can take its buffer.")
            if not close(asarray(leaf), host):
                fail(f"{name} changed during step {number}.")
    asked = _batch_requested(fixed_step)
    if asked:
        fail(_ask_batch_message(asked), "run explain_donation on fixed_step and read the table (Hint 1).")
    return ("three chained steps on fresh batches give the expected params, momentum and loss; no batch is "
            "asked to donate, so JAX has nothing to warn about.")


@check("fixed_step donated leaves", quiet=True)
def check_donated(fixed_step) -> str:
    """Every leaf of params and opt_state is deleted after a step and asked to donate (traced); no leaf of the
    batch is."""
    hand_over("l3-fixed-step", "fixed_step donated leaves", fixed_step)  # to the referee, as data
    rng = default_rng(23)
    batch, _ = _batch(rng)
    _, (params, opt) = _random_state(rng)
    leaves = _leaves(batch, params, opt)
    pointers = {name: leaves[name].unsafe_buffer_pointer() for name in STATE}
    out = block_until_ready(_step(fixed_step, batch, params, opt))
    alive = [name for name in STATE if not leaves[name].is_deleted()]
    if alive:
        fail(f"still alive after the step, so not donated: {', '.join(alive)}. The loop replaces them with the "
             "step's results, so each step allocates new buffers while the old ones are still held.",
             "run explain_donation on fixed_step and read the table (Hint 1).")
    deleted = [name for name in BATCH if leaves[name].is_deleted()]
    if deleted:
        fail(f"{' and '.join(deleted)} were deleted by the step.", "donate only what the loop replaces.")
    asked = _batch_requested(fixed_step)
    if asked:
        fail(_ask_batch_message(asked), "run explain_donation on fixed_step and read the table (Hint 1).")
    names = _traced(fixed_step)  # an honest answer's trace shows the donation, a wrapper's too
    if names is None:  # no trace to read: a donated leaf's buffer is taken by an output, a deleted one's is not
        taken = {leaf.unsafe_buffer_pointer() for leaf in tree_leaves(out) if is_array(leaf) and not leaf.is_deleted()}
        names = [name for name in STATE if pointers[name] in taken]
    if not set(STATE) <= set(names):
        fail("fixed_step deletes the old params and opt_state, but does not let jax.jit donate them all: it "
             f"donates {', '.join(names) or 'nothing'}.",
             "let jax.jit donate them (donate_argnums or donate_argnames); do not delete arrays by hand.")
    return "all 4 leaves of params and opt_state were donated; the batch was kept and not asked to donate."


@check("fixed_step buffer reuse and loop", quiet=True)
def check_reuse_and_loop(fixed_step, steps: int = 20) -> str:
    """Each leaf of params and opt_state lends its buffer to an output leaf; then a loop over fresh batches
    that rebinds params and opt_state keeps no old leaf alive after its step and the live buffers flat."""
    hand_over("l3-fixed-step", "fixed_step buffer reuse and loop", fixed_step)  # to the referee, as data
    rng = default_rng(24)
    batch, _ = _batch(rng)
    _, (params, opt) = _random_state(rng)
    before = {name: leaf.unsafe_buffer_pointer() for name, leaf in _leaves(batch, params, opt).items()
              if name in STATE}
    out = _step(fixed_step, batch, params, opt)
    block_until_ready(out)
    kept = [name for name, leaf in _leaves(batch, params, opt).items() if name in STATE and not leaf.is_deleted()]
    expect_reused(before, kept, out, "run explain_donation on fixed_step and read the table (Hint 1).",
                  "each step allocates a new one.",
                  "return what step_fn returns, each leaf with its input's shape and dtype.")
    params, opt, loss = out
    del out, loss, batch
    start = live_count()
    old_alive = 0
    for _ in range(steps):
        batch, _ = _batch(rng)
        old = tree_leaves((params, opt))
        params, opt, loss = _step(fixed_step, batch, params, opt)
        old_alive += sum(1 for leaf in old if not leaf.is_deleted())
        del old, loss, batch
    block_until_ready((params, opt))
    end = live_count()
    if old_alive:
        fail(f"over {steps} steps, {old_alive} old leaves stayed alive after their step: each step allocated "
             "new buffers while the old ones were still held.", "donate what the loop replaces.")
    if end > start:
        fail(f"over {steps} steps the number of live arrays grew from {start} to {end}.",
             "return new values only; keep no reference to old ones.")
    return (f"every leaf of params and opt_state lends its buffer to an output, and over {steps} steps on fresh "
            "batches each step reused the old buffers: the number of live arrays stayed the same.")
