"""Lesson 3's debugging exercise (a training loop with one donation bug), graded
end to end through `./course grade` (scratch course, 2 workers) on its corpus
(donation_course/corpus/debugging.py), graded once per session
(conftest.graded_corpus): every case gets its expected score, loses
points exactly in the grade cells it should, and its feedback never shows the
hidden checks' source. Without a kernel: the hidden module is registered where
the grader lists hidden modules, and the public check's helper
(checks.expect_training_step) tells each likely answer what is wrong with it."""
import jax
import jax.numpy as jnp
import pytest

from donation_course.corpus import debugging as corpus
from donation_course.course import COURSE
from donation_lab import checks
from helpers import read_grades


@pytest.fixture(scope="module")
def graded(graded_corpus):
    """(course, {student: grades.csv row}) of the corpus graded once per session (conftest.graded_corpus)."""
    course = graded_corpus(corpus).course
    return course, read_grades(course / ".grading" / "grades.csv")


def test_the_fix_earns_full_marks_and_a_silenced_or_copying_fix_less():
    scores = {student: score for student, (_, score, _) in corpus.CASES.items()}
    assert scores["bug-argnums"] == scores["bug-argnames"] == corpus.MAX
    assert scores["bug-unfixed"] < scores["bug-silenced"] < corpus.MAX
    assert scores["bug-unfixed"] < scores["bug-copying"] < corpus.MAX
    assert list(corpus.GRADES) == [gid for gid in COURSE.grade_ids[corpus.LESSON] if gid.startswith("l3-bug")]


@pytest.mark.parametrize("student", sorted(corpus.CASES))
def test_each_answer_gets_its_expected_score(graded, student):
    course, rows = graded
    _, score, losing = corpus.CASES[student]
    row = rows[student]
    assert float(row[corpus.LESSON]) == corpus.LESSON_MAX - corpus.MAX + score, row
    lost = {gid for gid in COURSE.grade_ids[corpus.LESSON] if f"{corpus.LESSON}/{gid} (0/" in row["reason"]}
    assert lost == set(losing), row["reason"]
    assert "flagged" not in row["status"], row
    feedback = (course / ".grading" / "feedback" / f"{student}.html").read_text()
    assert "_dl_debugging" not in feedback and "check_reuse_and_loop" not in feedback


def test_every_hidden_module_is_imported_at_kernel_start_and_watched_by_the_audit():
    """A hidden module is captured before learner code runs only when the kernel imports it at start
    (nbgrader_config.py's exec_lines), and a replaced check is seen only when the audit snapshots it."""
    from pathlib import Path

    from donation_course import hidden
    from donation_course.grading.integrity.audit_policy import WATCHED

    modules = {f"donation_course.hidden.{p.stem}" for p in Path(hidden.__file__).parent.glob("*.py")
               if p.stem not in ("__init__", "safe")}
    assert "donation_course.hidden.debugging" in modules
    started = {arg.split("import ", 1)[1] for arg in COURSE.config.Execute.extra_arguments
               if arg.startswith("--IPKernelApp.exec_lines=import ")}
    assert modules <= started, modules - started
    assert modules <= set(WATCHED), modules - set(WATCHED)


# --- the public check's helper, on the lesson's step ---------------------------

def _loss(params, batch):
    return jnp.mean((batch["x"] @ params["w"] + params["b"] - batch["y"]) ** 2)


def step_fn(batch, params, opt_state):
    loss, grads = jax.value_and_grad(_loss)(params, batch)
    m = jax.tree.map(lambda m, g: 0.5 * m + g, opt_state["m"], grads)
    return jax.tree.map(lambda p, m: p - 0.05 * m, params, m), {"m": m}, loss


def _args():
    x = jax.random.normal(jax.random.key(1), (32, 4))
    params = {"w": jnp.zeros(4), "b": jnp.zeros(())}
    return {"x": x, "y": x @ jnp.arange(4.0)}, params, {"m": jax.tree.map(jnp.zeros_like, params)}


def _expect(fn, capsys):
    args = _args()
    checks.expect_training_step("fixed_step", fn, step_fn, args, new_buffers=1, hint="read each row")
    assert not any(leaf.is_deleted() for leaf in jax.tree.leaves(args)), "the caller's arrays were donated"
    return capsys.readouterr()


@pytest.mark.parametrize("donate", [{"donate_argnums": (1, 2)}, {"donate_argnames": ("params", "opt_state")}])
def test_the_public_check_passes_the_fix(donate, capsys):
    out = _expect(jax.jit(step_fn, **donate), capsys)
    assert "writes 4 of its 5 output arrays into donated buffers" in out.out and not out.err, out


@pytest.mark.parametrize("donate, says", [
    ({"donate_argnums": (0, 1)}, "asks to donate batch['x'] and batch['y'], but no output can take their buffers"),
    ({"donate_argnums": (0, 1, 2)}, "asks to donate batch['x'] and batch['y']"),
    ({"donate_argnums": 1}, "writes 3 of its 5 output arrays into new buffers; only 1 should need a new one"),
    ({}, "writes 5 of its 5 output arrays into new buffers"),
], ids=["unfixed", "overdonate", "silenced", "copying"])
def test_the_public_check_says_what_is_wrong_in_one_paragraph(donate, says, capsys):
    with pytest.raises(checks.CheckFailed) as failed:
        _expect(jax.jit(step_fn, **donate), capsys)
    message = str(failed.value)
    assert says in message and message.endswith("Hint: read each row"), message
    assert "Traceback" not in message and not capsys.readouterr().err  # the warning stays inside the check


def test_the_public_check_names_a_plain_function_and_wrong_values(capsys):
    with pytest.raises(checks.CheckFailed, match="should be compiled with jax.jit"):
        _expect(step_fn, capsys)
    wrong = jax.jit(lambda b, p, o: (p, o, _loss(p, b)), donate_argnums=(1, 2))  # no update
    with pytest.raises(checks.CheckFailed, match=r"fixed_step\(\.\.\.\)\[0\]\['b'\]: expected"):
        _expect(wrong, capsys)


# --- what the exercise's text says of the bug, on the pinned JAX ---------------

def test_the_bug_warns_once_and_silently_leaves_opt_state_undonated_and_the_fix_does_neither():
    """l3-bug-md: the loop runs without an error, JAX warns once (the batch: not usable, kept), and
    opt_state is not donated, silently; donating params and opt_state by name warns nothing and donates both."""
    import warnings

    def run(step, steps=3):
        kept = []
        batch, params, opt_state = _args()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(steps):
                old = (batch, params, opt_state)
                params, opt_state, loss = step(batch, params, opt_state)
                kept.append([path for path, leaf in jax.tree_util.tree_flatten_with_path(old)[0]
                             if not leaf.is_deleted()])
        return [str(w.message).splitlines()[0] for w in caught], kept

    def fresh(batch, params, opt_state):  # a function of its own: JAX warns once per function and signature
        return step_fn(batch, params, opt_state)

    messages, kept = run(jax.jit(fresh, donate_argnums=(0, 1)))
    assert messages == ["Some donated buffers were not usable: float32[32,4], float32[32]."], messages
    names = {jax.tree_util.keystr(path) for path in kept[0]}
    assert names == {"[0]['x']", "[0]['y']", "[2]['m']['b']", "[2]['m']['w']"}, names  # batch and opt_state
    assert kept[1] == kept[2] == kept[0]
    messages, kept = run(jax.jit(step_fn, donate_argnames=("params", "opt_state")))
    assert messages == [] and all({jax.tree_util.keystr(p) for p in k} == {"[0]['x']", "[0]['y']"} for k in kept)
