"""The referee judges the donation REQUEST handed over with each program, not only the program (issue 32).

JAX keeps a request to donate in the program it lowers to only where an output can take the buffer
(tf.aliasing_output, or jax.buffer_donor on sharded programs); it drops the rest with a "Some donated buffers
were not usable" warning at lowering, so a wrong request (lesson 3's batch, lessons 1 and 4's grads, the
exercise's delta, the capstone's x) lowers to the right answer's program. The kernel hands over, with each
program, the request itself: one flag per flat argument, from the lowering's args_info
(hidden/handover.py). The referee refutes each check whose rule, in the kernel, forbids that request, and
refuses a hand-over whose flags contradict its own program (an argument the program donates must be
requested) as malformed, with a message, never a silent zero.

Each case on both sides: the request dropped -> refuted; the same function not asking -> passes.
"""
import jax
import jax.numpy as jnp
import pytest

from donation_course.grading.referee import asks, judge
from donation_course.grading.referee.verdict import FAIL, PASS, UNJUDGED
from donation_course.hidden import handover


def _handover(answer, fn) -> dict:
    """What the grading kernel hands over for `fn` when every check of `answer` ran with it."""
    return {"programs": [handover._entry(answer, fn)], "checks": {c: 0 for c in judge.checks_of(answer)}}


def _verdicts(answer, handed) -> dict:
    return {v.check: v for v in judge.judge(answer, handed)}


def _train_step(params, grads):  # lesson 1
    return params - 0.5 * grads


def _sgd(params, grads):  # lesson 4
    return jax.tree.map(lambda p, g: p - 0.5 * g, params, grads)


def _l3_loss(params, batch):
    return jnp.mean((batch["x"] @ params["w"] + params["b"] - batch["y"]) ** 2)


def _step_fn(batch, params, opt_state):  # lesson 3's setup cell
    loss, grads = jax.value_and_grad(_l3_loss)(params, batch)
    m = jax.tree.map(lambda m, g: 0.5 * m + g, opt_state["m"], grads)
    return jax.tree.map(lambda p, m: p - 0.05 * m, params, m), {"m": m}, loss


def _cap_loss(params, x, y):
    return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)


def _cap_step(params, opt_state, x, y):  # lesson 7's capstone
    loss, grads = jax.value_and_grad(_cap_loss)(params, x, y)
    m = jax.tree.map(lambda m, g: 0.9 * m + g, opt_state["m"], grads)
    return jax.tree.map(lambda p, m: p - 0.1 * m, params, m), {"m": m, "count": opt_state["count"] + 1}, loss


# (answer, the request JAX drops, its honest twin, the checks the dropped request fails (as the kernel's checks
# fail it honestly), what the referee's message names)
DROPPED = {
    "lesson 1, grads too": (asks.TRAIN_STEP, jax.jit(_train_step, donate_argnums=(0, 1)),
                            jax.jit(_train_step, donate_argnums=0), {"train_step (lesson 1)"}, "donate grads."),
    "lesson 4, grads too": (asks.SGD_UPDATE, jax.jit(_sgd, donate_argnames=("params", "grads")),
                            jax.jit(_sgd, donate_argnames="params"), {"sgd_update (lesson 4)"},
                            "donate grads['b'] and grads['w']"),
    # every check of lesson 3 but the loop (expect_training_step, check_values and check_donated fail it)
    "lesson 3, the batch": (asks.FIXED_STEP, jax.jit(_step_fn, donate_argnums=(0, 1, 2)),
                            jax.jit(_step_fn, donate_argnums=(1, 2)),
                            {"fixed_step worked example", "fixed_step values and batch", "fixed_step donated leaves"},
                            "donate batch['x'] and batch['y']"),
    # the exercise corpus's overdonate: only "state is donated, delta is kept" (ex-donated), as in the kernel
    "exercise, delta too": (asks.EXERCISE, jax.jit(lambda s, d: s + d, donate_argnums=(0, 1)),
                            jax.jit(lambda s, d: s + d, donate_argnums=0), {"state is donated, delta is kept"},
                            "donate delta."),
    # the capstone corpus's cap-overdonate: only "capstone donated leaves" (cap-donated-leaves)
    "capstone, x too": (asks.CAPSTONE, jax.jit(_cap_step, donate_argnames=("params", "opt_state", "x")),
                        jax.jit(_cap_step, donate_argnames=("params", "opt_state")), {"capstone donated leaves"},
                        "donate x."),
}


@pytest.mark.slow  # compiles and runs each answer's programs
@pytest.mark.parametrize("case", list(DROPPED))
def test_a_request_jax_drops_is_refuted_where_the_kernel_forbids_it_and_its_honest_twin_passes(case):
    answer, dropped, honest, failed, said = DROPPED[case]
    handed = _handover(answer, dropped)
    # the program is the honest twin's: only the request handed over with it tells them apart
    assert [p.get("text") for p in handed["programs"][0]["programs"].values()] == \
        [p.get("text") for p in _handover(answer, honest)["programs"][0]["programs"].values()]
    verdicts = _verdicts(answer, handed)
    assert {c for c, v in verdicts.items() if v.outcome == FAIL} == failed, verdicts
    assert {c for c, v in verdicts.items() if v.outcome == PASS} == set(judge.checks_of(answer)) - failed
    for check in failed:
        assert said in verdicts[check].message and "drops the request" in verdicts[check].message
    assert {v.outcome for v in _verdicts(answer, _handover(answer, honest)).values()} == {PASS}


def test_the_request_is_handed_over_as_one_flag_per_flat_argument_next_to_the_program():
    entry = handover._entry(asks.APPLY_DELTA, jax.jit(lambda state, delta: state + delta, donate_argnames="state"))
    by_position, by_keyword = list(entry["programs"].values())[:2]
    assert by_position["requested"] == [True, False]  # state, delta
    assert by_keyword["requested"] == [False, True]   # delta, state: keywords by sorted name
    assert "tf.aliasing_output" in by_position["text"]
    dropped = handover._entry(asks.TRAIN_STEP, jax.jit(_train_step, donate_argnums=(0, 1)))
    for key, one in dropped["programs"].items():
        # grads is requested, and its argument carries no mark in the program: only the flag says so (a program for
        # every length, jax.export's, marks params twice: in its main and in the function that main calls)
        marks = 2 if asks.is_symbolic(next(s for s in asks.TRAIN_STEP.signatures if s.key == key)) else 1
        assert one["requested"] == [True, True] and one["text"].count("tf.aliasing_output") == marks
        assert "jax.buffer_donor" not in one["text"]


def _forged(answer, fn, requested) -> dict:
    handed = _handover(answer, fn)
    for one in handed["programs"][0]["programs"].values():
        one["requested"] = requested(one["requested"])
    return handed


@pytest.mark.parametrize("requested, said", [
    (lambda flags: [False] * len(flags), "its program donates params, which its donation request says"),
    (lambda flags: flags[:1], "does not say, as one true or false per argument (2)"),
    (lambda flags: [1, 0], "does not say"),
    (lambda flags: None, "does not say"),
])
def test_a_hand_over_whose_request_contradicts_its_program_or_is_no_request_is_refused_as_malformed(requested, said):
    handed = _forged(asks.TRAIN_STEP, jax.jit(_train_step, donate_argnums=0), requested)
    (verdict,) = judge.judge(asks.TRAIN_STEP, handed)
    assert verdict.outcome == UNJUDGED and "is malformed" in verdict.message and said in verdict.message, verdict


@pytest.mark.slow  # compiles and runs two programs
def test_a_kernel_that_rewrites_a_dropped_request_to_not_requested_has_handed_over_the_right_answer():
    # what the referee trusts (docs/threat-model.md): the flags, as far as the program does not contradict them.
    # A kernel that says "grads not requested" for a program that does not donate grads has written the right
    # request, as a kernel that hands over a right program has written a right program.
    handed = _forged(asks.TRAIN_STEP, jax.jit(_train_step, donate_argnums=(0, 1)), lambda flags: [True, False])
    assert [v.outcome for v in judge.judge(asks.TRAIN_STEP, handed)] == [PASS]


def test_an_oversized_or_mistyped_request_is_bounded_when_read_from_the_notebook():
    from donation_course.grading.referee.received import _bounded

    entry = {"programs": {"a": {"text": "", "kept": [0], "requested": [True] * (asks.MAX_LEAVES + 1)},
                          "b": {"text": "", "kept": [0], "requested": ["yes"]},
                          "c": {"text": "", "kept": [0], "requested": [True, False]}}}
    bounded = _bounded(entry)["programs"]
    assert bounded["a"]["requested"] is None and bounded["b"]["requested"] is None
    assert bounded["c"]["requested"] == [True, False]


def test_each_answer_handed_over_as_programs_names_one_flag_per_flat_argument():
    for answer in asks.ANSWERS.values():
        if answer.kind != asks.PROGRAMS:
            continue
        for signature in answer.signatures:
            names = asks.flat_names(answer, signature)
            assert len(names) == len(set(names)) <= asks.MAX_LEAVES, (answer.name, names)
    assert asks.flat_names(asks.CAPSTONE, 8)[5:] == ["x", "y"]
    assert asks.flat_names(asks.FIXED_STEP, asks.FIXED_STEP.signatures[0])[:2] == ["batch['x']", "batch['y']"]
