"""The referee's checks: each hidden check of lesson 7 that a program can
show, computed here on the referee's own arrays against its own reference.
Runs in a capped child of the referee server (server.py); no learner code.

`judge(answer, handover)` yields one Verdict per check the answer has in
asks.CHECKS, in order. A check's program set is the one the kernel handed
over when that check ran (handover["checks"][name] indexes
handover["programs"]). Outcomes:

- pass: the program does what the check asks;
- fail: the program refutes it (a kernel that passed this check is flagged);
- unjudged: nothing the referee can run (no program, another shape of answer,
  a program refused or capped, a hand-over that contradicts itself): the
  point is lost with the message, and nothing is flagged.

A program comes with the donation its function requested (`requested`, one
flag per flat argument: hidden/handover.py reads it from the lowering's
args_info). JAX marks a requested argument in the program only where an
output can take its buffer, and drops the rest with a warning, so a
request no output can use (lesson 3's batch, lessons 1 and 4's grads,
the exercise's delta, the capstone's x and y) is read from those flags:
each check that forbids it in the kernel refutes it here. The flags must
agree with the program (every argument it donates requested), or the
hand-over is malformed and not judged.
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterator

import numpy as np

from donation_course.hidden.safe import close, device, live_count, momentum_reference

from . import programs
from .asks import (  # noqa: F401  (ANSWERS: judge.ANSWERS, as before)
    ANSWERS,
    APPLY_DELTA,
    CAPSTONE,
    CHECKS,
    EXERCISE,
    FIXED_STEP,
    MAX_VALUE_BYTES,
    NAN_MESSAGE,
    NAN_OPS,
    NAN_PICKED,
    SGD_UPDATE,
    SYMBOLIC,
    TRAIN_STEP,
    VALUES,
    Y_OUT,
    Answer,
    flat_names,
    flat_specs,
    is_symbolic,
    parse_spec,
    signature_key,
    sized,
)
from .compiled import key as memo_key
from .screen import Refused, screen, screen_symbolic
from .verdict import FAIL, PASS, UNJUDGED, Verdict

# The referee's own data, drawn per process from the OS's randomness and never told to the grading kernel: no
# program can embed its outputs for the values it is run on, nor tell the calls apart by them. A check that needs a
# particular value (the worked example's, a NaN) names it; every other value comes from _rng.
_SECRET = int.from_bytes(os.urandom(16), "little")


def _rng(purpose: int) -> np.random.Generator:
    """A generator of the referee's secret values, one stream per purpose (a check's number)."""
    return np.random.default_rng([_SECRET, purpose])


# The length a symbolic signature (asks.SYMBOLIC) is run at: drawn per check, never a length any answer is lowered
# at (the lessons' and the capstone's are under MIN_DRAWN_LENGTH; lesson 3's batch is 32), and small enough that a
# wrong element is reported by its index. One per signature: each costs a compilation (about 30 ms on a quiet
# machine), and one length no list can hold in advance is enough.
PUBLIC_LENGTHS = frozenset(n for _, n in EXERCISE.signatures if isinstance(n, int)) | {32}
MIN_DRAWN_LENGTH, MAX_DRAWN_LENGTH = 17, 5000


def drawn_length(rng: np.random.Generator) -> int:
    while True:
        n = int(rng.integers(MIN_DRAWN_LENGTH, MAX_DRAWN_LENGTH))
        if n not in PUBLIC_LENGTHS:
            return n


class _Fail(Exception):
    pass


class _Unjudged(Exception):
    pass


def fail(message: str):
    raise _Fail(message)


class Programs:
    """One program set the kernel handed over: screened and compiled on first use, per signature."""

    def __init__(self, answer: Answer, entry):
        self.answer, self.entry, self.cache = answer, entry if isinstance(entry, dict) else {}, {}
        self.requests = {}

    def get(self, signature, length: int | None = None):
        """The loaded program of a signature; of a symbolic one (asks.SYMBOLIC), made static for `length`."""
        key = signature_key(self.answer, signature)
        if (key, length) not in self.cache:
            self.cache[key, length] = self._load(key, signature, length)
        return self.cache[key, length]

    def requested(self, signature) -> list:
        """{argument name: asked to donate} for the signature's flat arguments, as handed over with its program
        (checked against it: every argument the program donates is requested)."""
        if signature_key(self.answer, signature) not in self.requests:
            self.get(signature)
        return self.requests[signature_key(self.answer, signature)]

    def _load(self, key: str, signature, length: int | None = None):
        entry = self.entry
        if "shape" in entry:
            kind = str(entry["shape"])[:60]
            what = "a plain Python function" if kind == "function" else f"an object of class {kind}"
            raise _Unjudged(f"{self.answer.function} is {what}, not a jax.jit function, so the grader has no "
                            f"program to read. {self.answer.spelled}.")
        if "error" in entry:
            raise _Unjudged(f"{self.answer.function} could not be lowered: {str(entry['error'])[:300]}")
        listed = entry.get("programs")
        one = listed.get(key) if isinstance(listed, dict) else None
        if not isinstance(one, dict):
            raise _Unjudged(f"the grader received no program of {self.answer.function} for {key}.")
        if "error" in one:
            said = f"{self.answer.function} could not be lowered for {key}: {str(one['error'])[:300]}"
            if is_symbolic(signature):
                said += (". The grader lowers it once for every length n (jax.export.symbolic_shape) and runs it at "
                         "lengths it picks: it must work for any length, with no Python that depends on the length.")
            raise _Unjudged(said)
        text, refined_from = one.get("text"), None
        if is_symbolic(signature):  # one program for every length: made static for the length the referee drew
            if length is None:
                raise _Unjudged(f"the grader has no length to run {self.answer.function}'s program for {key} at.")
            if isinstance(text, str):
                refined_from = (memo_key(text), length)  # the memo's key for it (compiled.refined_key)
            text = self._refined(key, text, length)
        try:
            program = screen(text)
        except Refused as exc:
            raise _Unjudged(f"the program of {self.answer.function} for {key} was refused: {exc}.") from None
        kept = one.get("kept")
        if not (isinstance(kept, list) and all(isinstance(i, int) for i in kept) and len(kept) == len(program.inputs)
                and kept == sorted(set(kept))):
            raise _Unjudged(f"the hand-over of {self.answer.function} for {key} does not say which arguments "
                            "its program takes.")
        self.requests[key] = self._request(key, signature, one.get("requested"), program, kept)
        try:
            if program.partitions > 1:
                executable = programs.compile_sharded(program.text, program.partitions)
            else:
                executable = programs.compile_program(program.text, refined_from)
        except Exception as exc:
            raise _Unjudged(f"the program of {self.answer.function} for {key} does not compile: "
                            f"{str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}") from None
        return program, kept, executable

    def _refined(self, key: str, text, length: int) -> str:
        try:
            screen_symbolic(text)
        except Refused as exc:
            raise _Unjudged(f"the program of {self.answer.function} for {key} was refused: {exc}.") from None
        try:
            return programs.refine(text, length)
        except Exception as exc:
            cause = exc.__cause__ if exc.__cause__ is not None else exc
            said = " ".join(str(cause).split())[:300] or type(cause).__name__
            raise _Unjudged(f"the program of {self.answer.function} for {key}, made by jax.export for every length "
                            f"n, cannot be run at a length the grader picked (n={length}): {said}. It must work for "
                            "any length, with no Python that depends on the length.") from None

    def _request(self, key: str, signature, flags, program, kept) -> dict:
        """The donation request handed over with a program, refused as malformed (unjudged) unless it is one
        flag per flat argument and says requested for every argument the program donates."""
        names = flat_names(self.answer, signature)
        function = self.answer.function
        if not (isinstance(flags, list) and len(flags) == len(names) and all(f is True or f is False for f in flags)):
            raise _Unjudged(f"the hand-over of {function} for {key} is malformed: it does not say, as one true or "
                            f"false per argument ({len(names)}), which arguments {function} asks to donate, so the "
                            "grader does not judge it.")
        unasked = [names[i] for i, donated in zip(kept, program.donated, strict=True)
                   if donated and i < len(names) and not flags[i]]
        if unasked:
            raise _Unjudged(f"the hand-over of {function} for {key} is malformed: its program donates "
                            f"{', '.join(unasked)}, which its donation request says was not asked to donate. A "
                            "hand-over that contradicts itself is not judged.")
        return dict(zip(names, flags, strict=True))


def dropped_request(p: Programs, signature) -> list:
    """The arguments the function asked to donate that its program does not donate: no output could take their
    buffers, so JAX dropped the request with a warning and left no mark in the program."""
    program, kept, _ = p.get(signature)
    marked = {kept[j] for j, donated in enumerate(program.donated) if donated}
    return [name for i, (name, asked) in enumerate(p.requested(signature).items()) if asked and i not in marked]


def _dropped_message(who: str, asked: list, rule: str) -> str:
    return (f"{who} asks to donate {' and '.join(asked)}. No output can take "
            f"{'that buffer' if len(asked) == 1 else 'those buffers'}, so JAX drops the request with a warning "
            f"(it leaves no mark in the program) and the request saves nothing: {rule}")


class Values:
    """One set of values the kernel handed over (hand_over_values), read as untrusted data."""

    DTYPES = ("float32", "float64", "int32", "bfloat16", "bool")

    def __init__(self, answer: Answer, entry):
        self.answer = answer
        values = entry.get("values") if isinstance(entry, dict) else None
        self.values = values if isinstance(values, dict) else {}

    def _one(self, name: str) -> dict:
        one = self.values.get(name)
        if not isinstance(one, dict):
            raise _Unjudged(f"the grader received no value of {name}.")
        if "error" in one:
            raise _Unjudged(f"{name} could not be handed over: {str(one['error'])[:300]}. {self.answer.spelled}.")
        return one

    def _other(self, name: str, one: dict):
        kind = "None" if one.get("none") is True else str(one.get("type", "a value the grader cannot read"))[:60]
        raise _Unjudged(f"{name} is {kind}. {self.answer.spelled}.")

    def array(self, name: str) -> np.ndarray:
        """A JAX array handed over as its dtype, shape and bytes."""
        import base64
        import binascii

        one = self._one(name)
        dtype, shape, data = one.get("dtype"), one.get("shape"), one.get("data")
        if not (dtype in self.DTYPES and isinstance(shape, list) and all(isinstance(d, int) and 0 <= d for d in shape)
                and isinstance(data, str) and len(data) <= 2 * MAX_VALUE_BYTES):
            self._other(name, one)
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            self._other(name, one)
        import ml_dtypes  # bfloat16, as jax names it

        numpy_dtype = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
        if len(raw) != int(np.prod(shape, dtype=np.int64)) * numpy_dtype.itemsize:
            self._other(name, one)
        return np.frombuffer(raw, numpy_dtype).reshape(shape)

    def text(self, name: str):
        """A str handed over as its text; None when the kernel's value was None."""
        one = self._one(name)
        if one.get("none") is True:
            return None
        if not isinstance(one.get("text"), str):
            self._other(name, one)
        return one["text"]


def call(loaded, arrays: list) -> list:
    """Run a loaded program on the signature's arrays (those it dropped are not passed)."""
    program, kept, executable = loaded
    if max(kept, default=-1) >= len(arrays):
        fail("the program takes more arguments than the function has.")
    given = [arrays[i] for i in kept]
    for i, (tensor, array) in enumerate(zip(program.inputs, given, strict=False)):
        if tensor.shape != tuple(array.shape) or tensor.dtype != str(array.dtype):
            fail(f"its program's argument {kept[i]} is {tensor}, but that argument is "
                 f"{array.dtype}[{','.join(map(str, array.shape))}].")
    try:
        return programs.run(executable, given)
    except Exception as exc:
        line = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        if "RESOURCE_EXHAUSTED" in line:  # XLA's allocation past the child's RLIMIT_AS
            raise _Unjudged(f"the grader could not run its program within its caps: {line}") from None
        raise _Unjudged(f"the program failed when run: {line}") from None


def host(array) -> np.ndarray:
    return np.asarray(array)


# --- update_with_donate ------------------------------------------------------------------------------------

def _exercise_cases() -> list:
    """[(signature, length, label, state, delta)]: every public length, then each symbolic signature at lengths the
    referee draws (its own secret values throughout: a learner cannot tell these calls apart). The same for every
    answer a process judges (its secret is drawn once): drawn once, read-only (the checks copy them to the device),
    by the server before it forks its children (warm)."""
    global _EXERCISE_CASES
    if _EXERCISE_CASES[0] != _SECRET:
        cases = list(_draw_exercise_cases())
        for *_, state, delta in cases:
            state.flags.writeable = delta.flags.writeable = False
        _EXERCISE_CASES = (_SECRET, cases)
    return _EXERCISE_CASES[1]


_EXERCISE_CASES: tuple = (None, [])  # (the secret they were drawn with, the cases)


def warm() -> None:
    """What each child would compute alike for every student, computed once in the server (server.main), before
    it forks them: the exercise's cases (about 0.01 s of every student's child, with a 2 x 4 MiB draw)."""
    _exercise_cases()


def _draw_exercise_cases():
    rng = _rng(20261127)
    for signature in EXERCISE.signatures:
        dtype, n = signature
        for length in [drawn_length(rng) if is_symbolic(signature) else None]:
            size = n if length is None else length
            label = signature_key(EXERCISE, signature) if length is None else \
                f"{dtype}[{length}] (a length the grader picked)"
            if dtype == "int32":
                s, d = rng.integers(-1000, 1000, size, dtype=np.int32), rng.integers(-1000, 1000, size, dtype=np.int32)
            else:
                s, d = rng.standard_normal(size, dtype=np.float32), rng.standard_normal(size, dtype=np.float32)
            yield signature, length, label, s.astype(dtype), d.astype(dtype)


def _one_output(outs: list, what: str):
    if len(outs) != 1:
        fail(f"{what} returns {len(outs)} arrays, expected one (state + delta).")
    return outs[0]


def ex_example(p: Programs) -> str:
    loaded = p.get(("float32", 2))
    out = _one_output(call(loaded, [device(np.array([1.0, 2.0], np.float32)),
                                    device(np.array([0.5, 0.5], np.float32))]), "update_with_donate")
    got = host(out)
    if got.tolist() != [1.5, 2.5]:
        fail(f"update_with_donate([1.0, 2.0], [0.5, 0.5]) gave {got.tolist()}, expected [1.5, 2.5].")
    return "update_with_donate([1.0, 2.0], [0.5, 0.5]) gives [1.5, 2.5]."


def ex_values(p: Programs) -> str:
    for signature, length, label, s, d in _exercise_cases():
        expected = s + d
        out = host(_one_output(call(p.get(signature, length), [device(s), device(d)]),
                               f"for {label} update_with_donate"))
        if out.shape != expected.shape or out.dtype != expected.dtype:
            fail(f"for {label} the result is {out.dtype}{list(out.shape)}, "
                 f"expected {expected.dtype}{list(expected.shape)}.")
        g, e = out.astype("float64"), expected.astype("float64")
        tol = 1e-2 if signature[0] == "bfloat16" else 1e-6
        bad = ~(np.abs(g - e) <= tol * (1.0 + np.abs(e)))
        if bad.any():
            i = int(bad.argmax())
            fail(f"for {label} element {i} is {g[i]!r}, expected {e[i]!r} (= state[{i}] + delta[{i}]).")
    return ("update_with_donate's program returns state + delta for every size and dtype the grader tried, "
            "lengths it picked itself included.")


def ex_invalidation(p: Programs) -> str:
    loaded = p.get(("float32", 2))
    program, kept, _ = loaded
    state, delta = device(np.array([1.0, 2.0], np.float32)), device(np.array([0.5, -0.25], np.float32))
    call(loaded, [state, delta])
    if 1 in kept and program.donated[kept.index(1)]:
        fail("its program donates delta: only state may be donated.")
    if not state.is_deleted():
        fail("after update_with_donate(state, delta), state is still alive: its program does not donate it.")
    if delta.is_deleted() or host(delta).tolist() != [0.5, -0.25]:
        fail("delta was deleted or changed by the call.")
    if p.requested(("float32", 2))["delta"]:
        fail(_dropped_message("update_with_donate", ["delta"], "the specification says delta must not be "
                              "donated."))
    return "its program donates state and keeps delta, and only state is asked to donate."


def ex_real_donation(p: Programs) -> str:
    loaded = p.get(("float32", 1 << 20))
    rng = _rng(1)
    state = device(rng.random(1 << 20, dtype=np.float32))
    delta = device(rng.random(1 << 20, dtype=np.float32))
    pointer, delta_pointer = state.unsafe_buffer_pointer(), delta.unsafe_buffer_pointer()
    out = _one_output(call(loaded, [state, delta]), "update_with_donate")
    out.block_until_ready()
    if not state.is_deleted():
        fail("state is still alive after the call: its program donates nothing, so the result cannot take "
             "its buffer.")
    got = out.unsafe_buffer_pointer()
    if got == delta_pointer:
        fail("the result was written into delta's buffer, not state's.")
    if got != pointer or programs.alias_bytes(loaded[2]) < (1 << 22):
        fail("the result was written into a new buffer: its program does not reuse state's memory.")
    return "the result of its program occupies the buffer state had."


def ex_training_loop(p: Programs, steps: int = 50) -> str:
    rng = _rng(3)
    n = drawn_length(rng)  # its program for every length, run at one the grader picked
    loaded = p.get(("float32", SYMBOLIC), n)
    delta_np = rng.standard_normal(n, dtype=np.float32)
    delta = device(delta_np)
    state = _one_output(call(loaded, [device(np.zeros(n, np.float32)), delta]), "update_with_donate")
    state.block_until_ready()
    if delta.is_deleted():
        fail("its program donates delta, so the next step of the loop cannot read it.")
    before = live_count()
    kept = 0
    for _ in range(steps):
        previous = state
        state = _one_output(call(loaded, [state, delta]), "update_with_donate")
        if delta.is_deleted():
            fail("its program donates delta, so the next step of the loop cannot read it.")
        kept += not previous.is_deleted()
        del previous
    state.block_until_ready()
    after = live_count()
    if kept or after > before:
        fail(f"over {steps} steps of state = update_with_donate(state, delta), {kept} old states stayed alive "
             f"after their step (arrays alive: {before} before, {after} after).")
    expected = delta_np.astype("float64") * (steps + 1)
    if not (np.abs(host(state).astype("float64") - expected) <= 1e-3 * (1.0 + np.abs(expected))).all():
        fail(f"after {steps + 1} steps the state is not {steps + 1} * delta.")
    return f"over {steps} steps of its program the number of arrays alive stayed at {before}."


# --- train_step --------------------------------------------------------------------------------------------

LR, BETA = 0.1, 0.9
OUTPUTS = ("result[0]['b']", "result[0]['w']", "result[1]['count']", "result[1]['m']['b']", "result[1]['m']['w']",
           "result[2]")
STATE = ("params['b']", "params['w']", "opt_state['count']", "opt_state['m']['b']", "opt_state['m']['w']")


def _state(w, b, mw, mb, count) -> list:
    """The flat arguments params, opt_state in jax's order (dict keys sorted)."""
    f = np.float32
    return [device(np.asarray(b, f).reshape(())), device(np.asarray(w, f)),
            device(np.asarray(count, np.int32).reshape(())), device(np.asarray(mb, f).reshape(())),
            device(np.asarray(mw, f))]


def _pointers(names, state: list) -> dict:
    """{leaf name: its buffer's address}, read before a step donates the leaves."""
    return {n: leaf.unsafe_buffer_pointer() for n, leaf in zip(names, state, strict=True)}


def _expect_donated_and_reused(before: dict, state: list, out: dict, when: str) -> None:
    """Every leaf of `state` was donated (deleted `when`), and each one's buffer is an output leaf's."""
    if any(not leaf.is_deleted() for leaf in state):
        fail(f"a leaf of params or opt_state is still alive {when}: it was not donated.")
    after = {leaf.unsafe_buffer_pointer() for leaf in out.values()}
    lost = [n for n, pointer in before.items() if pointer not in after]
    if lost:
        fail(f"no output of its program reuses the buffer of {', '.join(lost)}.")


def _step(loaded, state: list, x, y) -> dict:
    program = loaded[0]
    outs = call(loaded, [*state, x, y])
    names = tuple(program.result_names)
    if sorted(names) != sorted(OUTPUTS) or len(outs) != len(OUTPUTS):
        fail("its program's outputs are not (new_params, new_opt_state, loss) with params' and opt_state's "
             f"structure: {', '.join(n or '?' for n in names)[:200]}.")
    return dict(zip(names, outs, strict=False))


def _flat(out: dict) -> list:
    return [out[n] for n in OUTPUTS[:5]]


def _data(seed, n=8):
    rng = _rng(seed)
    x = rng.standard_normal((n, 3), dtype=np.float32)
    y = rng.standard_normal((n,), dtype=np.float32)
    return x, y, rng.standard_normal((3,), dtype=np.float32), rng.standard_normal((), dtype=np.float32)


def cap_example(p: Programs) -> str:
    loaded = p.get(2)
    x = device(np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], np.float32))
    y = device(np.array([1.0, -1.0], np.float32))
    out = _step(loaded, _state([0.5, -1.0, 2.0], 0.25, [0, 0, 0], 0.0, 0), x, y)
    if not (close(host(out["result[2]"]), 0.0625) and close(host(out["result[0]['w']"]), [0.525, -1.025, 2.0])):
        fail("one step from the example's params does not give loss 0.0625 and w [0.525, -1.025, 2.0].")
    return "its program gives the worked example's loss and params."


def cap_values(p: Programs) -> str:
    rows = drawn_length(_rng(25))  # a batch of rows the grader picked, on its program for every batch size
    for seed, signature, n in ((21, 8, 8), (25, SYMBOLIC, rows)):
        loaded = p.get(signature, None if signature == 8 else n)
        x, y, w, b = _data(seed, n)
        mw, mb, count = w * 0.0, b * 0.0, 0
        state, xd, yd = _state(w, b, mw, mb, 0), device(x), device(y)
        said = "" if signature == 8 else f" on a batch of {n} rows (a size the grader picked)"
        for step in range(3):
            out = _step(loaded, state, xd, yd)
            w, b, mw, mb, loss = momentum_reference(w, b, mw, mb, x, y, LR, BETA)
            count += 1
            expected = dict(zip(OUTPUTS, (b, w, count, mb, mw, loss), strict=False))
            for name, value in expected.items():
                got = host(out[name])
                if not close(got, value):
                    fail(f"after step {step + 1}{said}, "
                         f"{name.replace('result[0]', 'params').replace('result[1]', 'opt_state')} is "
                         f"{got.tolist()}, expected {np.asarray(value, 'float64').round(5).tolist()}.")
            state = _flat(out)
        if host(out["result[1]['count']"]).dtype != np.int32:
            fail("opt_state['count'] does not stay int32.")
    return "three chained steps of its program match the reference, on batches of 8 rows and of a size it picked."


def cap_deleted(p: Programs) -> str:
    loaded = p.get(8)
    program, kept, _ = loaded
    x, y, w, b = _data(22)
    state, xd, yd = _state(w, b, w * 0, b * 0, 0), device(x), device(y)
    flags = [i in kept and program.donated[kept.index(i)] for i in range(7)]
    _step(loaded, state, xd, yd)
    alive = [n for n, leaf in zip(STATE, state, strict=False) if not leaf.is_deleted()]
    if alive:
        fail(f"still alive after a step of its program, so not donated: {', '.join(alive)}.")
    if xd.is_deleted() or yd.is_deleted() or flags[5] or flags[6]:
        fail("its program donates x or y.")
    dropped = [n for n in dropped_request(p, 8) if n in ("x", "y")]
    if dropped:
        fail(_dropped_message("train_step", dropped, "donate params and opt_state, and nothing else."))
    if flags != [True] * 5 + [False] * 2 or list(p.requested(8).values()) != [True] * 5 + [False] * 2:
        fail("its program does not donate exactly the leaves of params and opt_state.")
    return "its program donates the 5 leaves of params and opt_state and keeps x and y, and asks for nothing else."


def cap_reuse(p: Programs) -> str:
    loaded = p.get(8)
    x, y, w, b = _data(23)
    state = _state(w, b, w * 0, b * 0, 0)
    before = _pointers(STATE, state)
    out = _step(loaded, state, device(x), device(y))
    _expect_donated_and_reused(before, state, out, "after the step")
    return "every leaf of params and opt_state lends its buffer to an output of its program."


def cap_loop(p: Programs, steps: int = 30) -> str:
    loaded = p.get(8)
    x, y, w, b = _data(24)
    xd, yd = device(x), device(y)
    state = _flat(_step(loaded, _state(w, b, w * 0, b * 0, 0), xd, yd))
    before, kept = live_count(), 0
    for _ in range(steps):
        old = state
        state = _flat(_step(loaded, state, xd, yd))
        kept += sum(not leaf.is_deleted() for leaf in old)
        del old
    after = live_count()
    if kept or after > before:
        fail(f"over {steps} steps, {kept} old leaves stayed alive after their step (arrays alive: {before} before, "
             f"{after} after).")
    if int(host(state[2])) != steps + 1:
        fail(f"after {steps + 1} steps opt_state['count'] is {int(host(state[2]))}.")
    return f"over {steps} steps of its program the number of arrays alive stayed at {before}."


# --- lessons 1, 2 and 4: a jax.jit function judged on the calls asks.py names ------------------------------

def _root(path: str) -> str:
    return path.split("[", 1)[0]


def judge_calls(p: Programs, reference, donated: set, seed: int) -> str:
    """Every call of p's answer, on the referee's own random arrays: the outputs (by jax.result_info name) are
    reference({argument path: values}); exactly the leaves of the arguments named in `donated` are donated by the
    program, deleted by the run and lend their buffers to outputs; the others are kept."""
    answer = p.answer
    rng = _rng(seed)
    calls = [(signature, length) for signature in answer.signatures
             for length in [drawn_length(rng) if is_symbolic(signature) else None]]
    for signature, length in calls:  # a symbolic call (a length n) at a length the referee drew
        loaded = p.get(signature, length)
        program, kept, executable = loaded
        flat = [(path, spec if length is None else sized(spec, length))
                for path, spec in flat_specs(signature, answer.arguments)]
        values = []
        for _path, spec in flat:
            dtype, shape = parse_spec(spec)
            values.append(rng.standard_normal(shape).astype(dtype))
        arrays = [device(v) for v in values]
        pointers = [a.unsafe_buffer_pointer() for a in arrays]
        where = f"for {answer.function}({signature.key})" if length is None else \
            f"for {answer.function}({signature.key}) at n={length}, a length the grader picked,"
        flags = [i in kept and program.donated[kept.index(i)] for i in range(len(flat))]
        wanted = [_root(path) in donated for path, _ in flat]
        if flags != wanted:
            asked = [path for (path, _), f in zip(flat, flags, strict=True) if f]
            meant = [path for (path, _), w in zip(flat, wanted, strict=True) if w]
            fail(f"{where} its program donates {', '.join(asked) or 'nothing'}; expected {', '.join(meant)} "
                 "and nothing else.")
        outs = call(loaded, arrays)
        expected = reference({path: v for (path, _), v in zip(flat, values, strict=True)})
        names = tuple(program.result_names)
        if sorted(names) != sorted(expected) or len(outs) != len(expected):
            fail(f"{where} its program returns {', '.join(n or '?' for n in names)[:200]}; expected "
                 f"{', '.join(sorted(expected))}.")
        for name, out in zip(names, outs, strict=True):
            got = host(out)
            if not close(got, expected[name]):
                fail(f"{where} {name} is {got.round(5).tolist()}, expected "
                     f"{np.asarray(expected[name], 'float64').round(5).tolist()}.")
        after = {o.unsafe_buffer_pointer() for o in outs}
        for (path, _), array, pointer, give in zip(flat, arrays, pointers, wanted, strict=True):
            if give and not array.is_deleted():
                fail(f"{where} {path} is still alive after the call: its program does not donate it.")
            if not give and array.is_deleted():
                fail(f"{where} {path} was deleted by the call: only {' and '.join(sorted(donated))} may be donated.")
            if give and pointer not in after:
                fail(f"{where} no output takes the buffer of {path}: its program does not reuse it.")
    for signature in answer.signatures:  # what the program cannot show: a request JAX dropped
        extra = [path for path, asked in p.requested(signature).items() if asked and _root(path) not in donated]
        if extra:
            fail(_dropped_message(f"for {answer.function}({signature.key}) it", extra,
                                  f"donate {' and '.join(sorted(donated))} and nothing else."))
    return (f"{answer.function}'s program gives the right values and donates {' and '.join(sorted(donated))} "
            f"(reused by its outputs) on every call the grader tried.")


def l1_train_step(p: Programs) -> str:
    return judge_calls(p, lambda a: {"result": a["params"] - 0.5 * a["grads"]}, {"params"}, 101)


def l2_apply_delta(p: Programs) -> str:
    return judge_calls(p, lambda a: {"result": a["state"] + a["delta"]}, {"state"}, 102)


def l4_sgd_update(p: Programs) -> str:
    return judge_calls(p, lambda a: {f"result[{k!r}]": a[f"params[{k!r}]"] - 0.5 * a[f"grads[{k!r}]"]
                                     for k in ("b", "w")}, {"params"}, 104)


# --- lesson 3: fixed_step(batch, params, opt_state), the debugging exercise ------------------------------------

L3_LR, L3_BETA = 0.05, 0.5  # the setup cell's step_fn
L3_BATCH = ("batch['x']", "batch['y']")
L3_STATE = ("params['b']", "params['w']", "opt_state['m']['b']", "opt_state['m']['w']")  # jax's flat order
L3_OUTPUTS = ("result[0]['b']", "result[0]['w']", "result[1]['m']['b']", "result[1]['m']['w']", "result[2]")


def _l3_batch(rng, rows: int = 32):
    x = rng.standard_normal((rows, 4), dtype=np.float32)
    y = rng.standard_normal((rows,), dtype=np.float32)
    return [device(x), device(y)], (x, y)


def _l3_state(rng):
    w, mw = rng.standard_normal(4, dtype=np.float32), rng.standard_normal(4, dtype=np.float32)
    b, mb = rng.standard_normal((), dtype=np.float32), rng.standard_normal((), dtype=np.float32)
    return [device(np.asarray(b).reshape(())), device(w), device(np.asarray(mb).reshape(())), device(mw)], \
        (w, b, mw, mb)


def _l3_step(loaded, batch: list, state: list) -> dict:
    program = loaded[0]
    outs = call(loaded, [*batch, *state])
    names = tuple(program.result_names)
    if sorted(names) != sorted(L3_OUTPUTS) or len(outs) != len(L3_OUTPUTS):
        fail("its program's outputs are not (params, opt_state, loss) with step_fn's structure: "
             f"{', '.join(n or '?' for n in names)[:200]}.")
    return dict(zip(names, outs, strict=True))


def _l3_values(out: dict, reference: tuple, when: str) -> None:
    w, b, mw, mb, loss = reference
    for name, value in zip(L3_OUTPUTS, (b, w, mb, mw, loss), strict=True):
        got = host(out[name])
        if not close(got, value):
            said = name.replace("result[0]", "params").replace("result[1]", "opt_state").replace("result[2]", "loss")
            fail(f"{when}, {said} is {got.round(5).tolist()}, expected "
                 f"{np.asarray(value, 'float64').round(5).tolist()}.")


def _l3_flags(loaded) -> list:
    program, kept, _ = loaded
    return [i in kept and program.donated[kept.index(i)] for i in range(len(L3_BATCH) + len(L3_STATE))]


def _l3_batch_request(p: Programs) -> None:
    """Refute a request to donate the batch, which no output can take (JAX drops it: no mark in the program);
    the kernel's checks fail it (check_values, check_donated, and expect_training_step of l3-bug-check)."""
    asked = [n for n in dropped_request(p, FIXED_STEP.signatures[0]) if n in L3_BATCH]
    if asked:
        fail(_dropped_message("fixed_step", asked, "donate params and opt_state only."))


def l3_example(p: Programs) -> str:
    loaded = p.get(FIXED_STEP.signatures[0])
    rng = _rng(31)
    batch, (x, y) = _l3_batch(rng)
    state, (w, b, mw, mb) = _l3_state(rng)
    out = _l3_step(loaded, batch, state)
    _l3_values(out, momentum_reference(w, b, mw, mb, x, y, L3_LR, L3_BETA), "after one step")
    alive = [n for n, leaf in zip(L3_STATE, state, strict=True) if not leaf.is_deleted()]
    if alive:
        fail(f"still alive after a step of its program, so not donated: {', '.join(alive)}.")
    if any(leaf.is_deleted() for leaf in batch):
        fail("the batch was deleted by a step of its program.")
    unused = dropped_request(p, FIXED_STEP.signatures[0])  # expect_training_step: no donation JAX cannot use
    if unused:
        fail(_dropped_message("fixed_step", unused, "donate params and opt_state only."))
    return "one step of its program gives the expected params, momentum and loss, and donates params and opt_state."


def l3_values(p: Programs) -> str:
    rng = _rng(32)
    rows = drawn_length(rng)  # a batch size the grader picked, on its program for every batch size
    for signature, n in ((FIXED_STEP.signatures[0], 32), (FIXED_STEP.signatures[1], rows)):
        loaded = p.get(signature, None if n == 32 else n)
        said = "" if n == 32 else f" on batches of {n} rows (a size the grader picked)"
        state, (w, b, mw, mb) = _l3_state(rng)
        for number in range(1, 4):
            batch, (x, y) = _l3_batch(rng, n)
            out = _l3_step(loaded, batch, state)
            w, b, mw, mb, loss = momentum_reference(w, b, mw, mb, x, y, L3_LR, L3_BETA)
            _l3_values(out, (w, b, mw, mb, loss), f"after step {number}{said}")
            for name, leaf, values in zip(L3_BATCH, batch, (x, y), strict=True):
                if leaf.is_deleted() or not close(host(leaf), values):
                    fail(f"{name} was deleted or changed by step {number}{said} of its program.")
            state = [out[k] for k in L3_OUTPUTS[:4]]
    _l3_batch_request(p)
    return ("three chained steps of its program on fresh batches give the expected values and keep each batch, "
            "and no batch is asked to donate.")


def l3_donated(p: Programs) -> str:
    loaded = p.get(FIXED_STEP.signatures[0])
    rng = _rng(33)
    batch, _ = _l3_batch(rng)
    state, _ = _l3_state(rng)
    flags = _l3_flags(loaded)
    _l3_step(loaded, batch, state)
    alive = [n for n, leaf in zip(L3_STATE, state, strict=True) if not leaf.is_deleted()]
    if alive:
        fail(f"still alive after a step of its program, so not donated: {', '.join(alive)}.")
    if any(leaf.is_deleted() for leaf in batch) or any(flags[:2]):
        fail("its program donates the batch.")
    _l3_batch_request(p)
    if not all(flags[2:]):
        fail("its program does not donate every leaf of params and opt_state.")
    return "its program donates the 4 leaves of params and opt_state and keeps the batch."


def l3_reuse_and_loop(p: Programs, steps: int = 20) -> str:
    loaded = p.get(FIXED_STEP.signatures[0])
    rng = _rng(34)
    batch, _ = _l3_batch(rng)
    state, _ = _l3_state(rng)
    before = _pointers(L3_STATE, state)
    out = _l3_step(loaded, batch, state)
    _expect_donated_and_reused(before, state, out, "after a step of its program")
    state = [out[n] for n in L3_OUTPUTS[:4]]
    del out, batch
    start, kept = live_count(), 0
    for _ in range(steps):
        batch, _ = _l3_batch(rng)
        old = state
        out = _l3_step(loaded, batch, state)
        state = [out[n] for n in L3_OUTPUTS[:4]]
        kept += sum(not leaf.is_deleted() for leaf in old)
        del old, out, batch
    end = live_count()
    if kept or end > start:
        fail(f"over {steps} steps on fresh batches, {kept} old leaves stayed alive after their step (arrays alive: "
             f"{start} before, {end} after).")
    return f"its program reuses every donated buffer, and over {steps} steps the number of arrays alive stayed {start}."


# --- lesson 5: values ------------------------------------------------------------------------------------------

def l5_y_out(v: Values) -> str:
    y_out = v.array("y_out")
    if y_out.shape != (2,) or not close(y_out, [3.0, 6.0]):
        fail(f"y_out is {y_out.dtype}{list(y_out.shape)} {y_out.astype('float64').round(5).tolist()}, expected "
             "[3.0, 6.0] (scale of [1.0, 2.0]).")
    return "y_out is [3.0, 6.0]."


_NAMED = re.compile(r"invalid value \(nan\) encountered in ([A-Za-z_][A-Za-z0-9_]*)")


def _names(message: str, op: str) -> bool:
    """Whether the text names `op` as where the NaN came from: jax's debug_nans error names its operation
    ("invalid value (nan) encountered in log"), and every such phrase in the text must name `op`; a text with
    none of them (the operation's name alone) must name `op` as a word and no other operation the grader uses."""
    found = _NAMED.findall(message)
    if found:
        return set(found) == {op}
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", message))
    return op in words and not (words & set(NAN_OPS)) - {op}


def l5_nan_message(v: Values) -> str:
    ops = v.text("ops")
    picked = ops.split(",") if isinstance(ops, str) else []
    if len(picked) != NAN_PICKED or len(set(picked)) != NAN_PICKED or not set(picked) <= set(NAN_OPS):
        raise _Unjudged("the hand-over of find_nan does not say which operations the grader's steps used.")
    for op in picked:
        message = v.text(f"message:{op}")
        if message is None:
            fail(f"find_nan returned None on a step whose {op} makes a NaN: it found no NaN.")
        if not _names(message, op):
            fail(f"find_nan returned {message[:200]!r} on a step where {op} makes the NaN: expected the text of the "
                 f"error debug_nans raises, which names the operation ('invalid value (nan) encountered in {op}'). "
                 "The grader picks the operation when it grades.")
    healthy = v.text("healthy")
    if healthy is not None:
        fail(f"find_nan returned {healthy[:200]!r} on a healthy grad, where there is no NaN: expected None.")
    return (f"on steps whose NaN the grader made with {' and '.join(picked)}, find_nan returned the error's message, "
            "which names that operation, and None on a healthy grad.")


# --- lesson 6: sharded programs on the referee's 8 CPU devices ----------------------------------------------

SPLIT = "{devices=[8]<=[8]}"  # split = NamedSharding(mesh of 8, P("x")), as XLA writes it


def _l6_run(p: Programs, values: np.ndarray) -> tuple:
    """(its input, its output, input and output shardings as compiled) for one call on the referee's values."""
    loaded = p.get(p.answer.signatures[0])
    program, kept, executable = loaded
    if program.partitions != 8 or kept != [0]:
        fail(f"its program runs on {program.partitions} device(s), not laid out over the mesh's 8 devices."
             if program.partitions != 8 else "its program does not read v.")
    if program.inputs[0].shape != (16,) or program.inputs[0].dtype != "float32":
        fail(f"its program's argument is {program.inputs[0]}, but v is float32[16].")
    ins, outs = programs.shardings(executable)
    v = programs.put_sharded(values, executable, 0, 8)
    try:
        (out,) = programs.run_sharded(executable, [v], [t.shape for t in program.outputs], 8)
    except ValueError:
        fail(f"its program returns {len(program.outputs)} arrays, expected one.")
    except Exception as exc:
        raise _Unjudged(f"the program failed when run: {str(exc).splitlines()[0][:200] if str(exc) else exc}") \
            from None
    return program, v, out, ins[0], outs[0]


def l6_shift_split(p: Programs) -> str:
    values = _rng(61).standard_normal(16).astype(np.float32)
    _program, v, out, given, made = _l6_run(p, values)
    if not close(host(out), values + 1.0):
        fail(f"shift_split(v) is {host(out).round(5).tolist()}, expected v + 1.")
    if given != SPLIT or made != SPLIT:
        fail(f"compiled for any float32[16], its input is laid out as {given} and its output as {made}; both must be "
             f"split along 'x' ({SPLIT}), whatever the caller passes.")
    if not v.is_deleted():
        fail("the input is still alive after the call: its program does not donate v.")
    return "its program adds 1, lays its input and output out as split, and donates v."


def l6_quiet_fixed(p: Programs) -> str:
    values = _rng(62).standard_normal(16).astype(np.float32)
    program, v, out, given, made = _l6_run(p, values)
    if not close(host(out), 2.0 * values):
        fail(f"quiet_fixed(v) is {host(out).round(5).tolist()}, expected 2 * v.")
    if "sdy.sharding_constraint" not in program.operations:
        fail("its program has no with_sharding_constraint, which the exercise keeps.")
    if not v.is_deleted():
        fail(f"the input is still alive after the call: its output is laid out as {made}, its input as {given}, so "
             "the donation was not used.")
    return "its program doubles v under a sharding constraint that keeps the input's layout, and donates v."


JUDGES = {
    "worked example": ex_example, "values": ex_values, "state is donated, delta is kept": ex_invalidation,
    "result reuses state's buffer": ex_real_donation, "training loop": ex_training_loop,
    "capstone worked example": cap_example, "capstone values": cap_values, "capstone donated leaves": cap_deleted,
    "capstone buffer reuse": cap_reuse, "capstone training loop": cap_loop,
    "train_step (lesson 1)": l1_train_step, "apply_delta (lesson 2)": l2_apply_delta,
    "sgd_update (lesson 4)": l4_sgd_update,
    "fixed_step worked example": l3_example, "fixed_step values and batch": l3_values,
    "fixed_step donated leaves": l3_donated, "fixed_step buffer reuse and loop": l3_reuse_and_loop,
    "y_out (lesson 5)": l5_y_out, "find_nan's message (lesson 5)": l5_nan_message,
    "shift_split (lesson 6)": l6_shift_split, "quiet_fixed (lesson 6)": l6_quiet_fixed,
}


def checks_of(answer: Answer) -> list:
    return [check for (_, _), (name, check) in CHECKS.items() if name == answer.name]


def judge(answer: Answer, handover) -> Iterator[Verdict]:
    """One Verdict per check of `answer`, from the kernel's hand-over (a dict, or None when none came)."""
    if answer.devices > 1:  # before the backend starts (the server's child); no effect once it has
        try:
            programs.set_cpu_devices(answer.devices)
        except Exception:
            pass  # the backend is up with fewer devices: a sharded program then does not compile (unjudged)
    handover = handover if isinstance(handover, dict) else {}
    sets = handover.get("programs") if isinstance(handover.get("programs"), list) else []
    assigned = handover.get("checks") if isinstance(handover.get("checks"), dict) else {}
    loaded = {}
    for check in checks_of(answer):
        index = assigned.get(check)
        if not (isinstance(index, int) and 0 <= index < len(sets)):
            yield Verdict(check, UNJUDGED, f"the grader received no program of {answer.function} for this check.")
            continue
        if index not in loaded:
            loaded[index] = (Values if answer.kind == VALUES else Programs)(answer, sets[index])
        try:
            message = JUDGES[check](loaded[index])
        except _Fail as exc:
            yield Verdict(check, FAIL, str(exc))
        except _Unjudged as exc:
            yield Verdict(check, UNJUDGED, str(exc))
        except Exception as exc:  # a hand-over of a shape no honest kernel writes
            yield Verdict(check, UNJUDGED, f"the grader could not read the hand-over of {answer.function} "
                          f"({type(exc).__name__}).")
        else:
            yield Verdict(check, PASS, message)

