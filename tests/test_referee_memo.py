"""The referee server's memo of compiled programs (grading/referee/compiled.py): a program is compiled once per
server and loaded for the next students, keyed by its text without the module's name; the server keeps only
programs of texts it sent that child, within its size; a loaded program is judged exactly as a compiled one."""
import base64

import jax
import jax.numpy as jnp
import pytest

from donation_course.grading.referee import asks, compiled, judge, programs
from donation_course.grading.referee.verdict import FAIL, PASS
from donation_course.grading.referee.wire import Compiled, from_child, line
from donation_course.hidden import handover

SPEC = jax.ShapeDtypeStruct((2,), jnp.float32)


def _text(fn) -> str:
    return jax.jit(fn, donate_argnums=0).lower(SPEC, SPEC).as_text()


def update_with_donate(s, d):
    return s + d


def test_the_key_leaves_out_the_module_name_and_nothing_else():
    named, anonymous = _text(update_with_donate), _text(lambda s, d: s + d)
    assert named.split("\n", 1)[0] != anonymous.split("\n", 1)[0]
    assert compiled.key(named) == compiled.key(anonymous)
    assert compiled.key(named) != compiled.key(_text(lambda s, d: s - d))
    assert compiled.key(named) != compiled.key(jax.jit(update_with_donate).lower(SPEC, SPEC).as_text())  # no donation
    assert compiled.key(named) != compiled.key(named.replace("module @", "module @x", 1) + " ")
    assert compiled.key('module @"a b" {}') == compiled.key("module @c {}") != compiled.key("module @c {}\n")


def test_the_server_keeps_only_programs_of_texts_it_sent_within_its_size():
    memo, sent = compiled.Memo(max_bytes=10), {"k1", "k2", "k3"}
    blob = base64.b64encode(b"12345").decode()
    assert not memo.offer(Compiled("other", blob), sent)  # a key of a text it never sent
    assert not memo.offer(Compiled("k1", "not base64!"), sent)
    assert from_child(b'{"compiled": "k1", "blob": 5}\n') is None  # a line that is no Compiled never reaches it
    assert from_child(line(Compiled("k1", blob))) == Compiled("k1", blob)
    assert memo.offer(Compiled("k1", blob), sent)
    assert not memo.offer(Compiled("k1", base64.b64encode(b"other").decode()), sent)  # kept as first
    assert memo.offer(Compiled("k2", blob), sent)
    assert not memo.offer(Compiled("k3", blob), sent)  # past its size
    assert memo.blobs == {"k1": b"12345", "k2": b"12345"}
    ho = {"programs": [{"programs": {"float32[2]": {"text": "module @a {}"}, "x": {"text": 3}}}], "checks": {}}
    assert compiled.keys_of(ho) == {compiled.key("module @a {}")}


@pytest.fixture
def memo(monkeypatch):
    """compile_program as a referee child has it, with a fresh memo; counts the real compiles."""
    compiles, blobs = [], {}
    real = programs.compile_program

    def counted(text):
        compiles.append(text)
        return real(text)

    monkeypatch.setattr(programs, "compile_program", counted)
    compiled.install(blobs, lambda item: blobs.__setitem__(item.key, base64.b64decode(item.blob)))
    return compiles, blobs


def _verdicts(answer, fn) -> dict:
    ho = {"programs": [handover._entry(answer, fn)], "checks": {c: 0 for c in judge.checks_of(answer)}}
    return {v.check: (v.outcome, v.message) for v in judge.judge(answer, ho)}


@pytest.mark.slow  # compiles and runs a dozen programs, twice
def test_a_loaded_program_is_judged_as_the_compiled_one_right_or_wrong(memo):
    compiles, blobs = memo
    right = _verdicts(asks.EXERCISE, jax.jit(update_with_donate, donate_argnums=0))
    first = len(compiles)
    assert first and len(blobs) == first
    assert {o for o, _ in right.values()} == {PASS}
    # another student's honest answer, another function name: the same programs, loaded
    again = _verdicts(asks.EXERCISE, jax.jit(lambda state, delta: state + delta, donate_argnums=0))
    assert len(compiles) == first and again == right
    # a wrong answer is not a program the memo has: compiled, and fails as it does without the memo
    wrong = _verdicts(asks.EXERCISE, jax.jit(update_with_donate))
    assert len(compiles) > first
    assert {c for c, (o, _) in wrong.items() if o == FAIL} == {"state is donated, delta is kept",
                                                               "result reuses state's buffer", "training loop"}
