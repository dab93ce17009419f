"""The referee's memo of compiled programs (grading/referee/compiled.py): a program is compiled once for the
course (each server's memo, shared through the worker's folder) and loaded for the next students, keyed by its
text without the module's name; the server keeps only programs of texts it sent that child, within its size; a
loaded program is judged exactly as a compiled one."""
import base64

import jax
import jax.numpy as jnp
import pytest

from donation_course.grading.referee import asks, compiled, judge, programs
from donation_course.grading.referee.verdict import FAIL, PASS
from donation_course.grading.referee.wire import Compiled, Reply, Request, from_child, line, read_reply, read_request
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


K1, K2, K3, OTHER = (compiled.key(f"module @m{{{i}}}") for i in range(4))  # keys of four program texts


def test_the_server_keeps_only_programs_of_texts_it_sent_within_its_size():
    memo, sent = compiled.Memo(max_bytes=10), {K1, K2, K3}
    blob = base64.b64encode(b"12345").decode()
    assert not memo.offer(Compiled(OTHER, blob), sent)  # a key of a text it never sent
    assert not memo.offer(Compiled(K1, "not base64!"), sent)
    assert from_child(b'{"compiled": "k1", "blob": 5}\n') is None  # a line that is no Compiled never reaches it
    assert from_child(line(Compiled(K1, blob))) == Compiled(K1, blob)
    assert memo.offer(Compiled(K1, blob), sent)
    assert not memo.offer(Compiled(K1, base64.b64encode(b"other").decode()), sent)  # kept as first
    assert memo.offer(Compiled(K2, blob), sent)
    assert not memo.offer(Compiled(K3, blob), sent)  # past its size
    assert memo.blobs == {K1: b"12345", K2: b"12345"}
    ho = {"programs": [{"programs": {"float32[2]": {"text": "module @a {}"}, "x": {"text": 3}}}], "checks": {}}
    assert compiled.keys_of(ho) == {compiled.key("module @a {}")}


def test_a_program_made_static_is_kept_only_under_the_key_the_server_derives_from_one_it_sent():
    """A symbolic program refined at the referee's length (programs.refine): the child names the program it was
    sent and the length; the server keeps it under compiled.refined_key of the two, never under a key the child
    picked, and never for a program it did not send."""
    memo, blob = compiled.Memo(), base64.b64encode(b"12345").decode()
    derived = compiled.refined_key(K1, 1234)
    assert derived not in (K1, compiled.refined_key(K1, 1235), compiled.refined_key(K2, 1234))
    assert not memo.offer(Compiled(K2, blob, K1, 1234), {K1, K2})          # a key that is not the derived one
    assert not memo.offer(Compiled(compiled.refined_key(OTHER, 1234), blob, OTHER, 1234), {K1})  # never sent
    assert memo.offer(Compiled(derived, blob, K1, 1234), {K1})
    assert memo.blobs == {derived: b"12345"}
    assert from_child(line(Compiled(derived, blob, K1, 1234))) == Compiled(derived, blob, K1, 1234)
    assert from_child(line(Compiled(K1, blob))) == Compiled(K1, blob)
    for odd in (b'{"compiled": "k", "blob": "b", "base": "k", "length": true}\n',
                b'{"compiled": "k", "blob": "b", "base": 3, "length": 5}\n',
                b'{"compiled": "k", "blob": "b", "base": "k"}\n'):
        assert from_child(odd) is None


def test_the_worker_keeps_the_programs_for_the_course_and_sends_each_server_those_it_lacks(tmp_path):
    """compiled.Folder: a reply's kept programs are written once each, under their keys, in the course's folder
    for the JAX installed; a request takes along those its server was not sent; what is no key, or past the
    size, is left out; a server preloads them (Memo.preload) only under keys, within its size."""
    grading = tmp_path / ".grading"
    grading.mkdir()
    path = compiled.folder_for(grading)
    assert path.startswith(str(grading / "referee-programs-jax-")) and jax.__version__ in path
    assert compiled.Folder(str(tmp_path / "absent" / "programs")).path is None  # a cluster's worker elsewhere
    disk = compiled.Folder(path)
    assert disk.unsent(set()) == {}
    blob = base64.b64encode(b"12345").decode()
    disk.save([Compiled(K1, blob), Compiled(K2, blob), Compiled("../../escape", blob)])
    disk.save([Compiled(K1, base64.b64encode(b"other").decode())])  # the first stays
    assert sorted(p.name for p in (grading / path).iterdir()) == sorted([K1, K2])
    (grading / path / "notes.txt").write_text("a file of the instructor's")
    assert disk.unsent(set()) == {K1: blob, K2: blob}
    assert disk.unsent({K1}) == {K2: blob}
    # the request carries them as data, and back
    request = read_request(line(Request({}, 5, 100, disk.unsent(set()))))
    assert request.memo == {K1: blob, K2: blob}
    with pytest.raises(ValueError):
        read_request(b'{"answers": {}, "memo": {"k": 5}}')
    reply = read_reply(line(Reply((), 0.5, (Compiled(K3, blob),))))
    assert reply.compiled == (Compiled(K3, blob),)
    with pytest.raises(ValueError):
        read_reply(b'{"verdicts": [], "seconds": 1, "compiled": [{"compiled": "k"}]}')
    server = compiled.Memo(max_bytes=10)
    server.preload({**request.memo, "not a key": blob, K3: blob})  # K3 is past its size
    assert server.blobs == {K1: b"12345", K2: b"12345"}


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
