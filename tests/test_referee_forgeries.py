"""A kernel that forges every in-kernel check of lessons 1 to 6's graded self-checks gets only what the referee
computes for its answers (issue 32), graded through `./course grade` in one class:

- forger-wrong: wrong answers to every graded self-check of the four lessons, in a kernel whose checks all pass
  (below). Each lesson's points are what the referee computes for those answers, which is what the same wrong
  answers earn honestly, and every refuted pass is a flag with both verdicts in the reason;
- honest-wrong: the same wrong answers in an honest kernel: exactly those points, unflagged;
- forger-right: the solution's answers in the forging kernel: full marks, unflagged (the referee judges the
  answer, not the kernel's claims);
- honest-right: the solution's answers in an honest kernel: full marks, unflagged;
- forger-request and honest-request: a request to donate that JAX drops with a warning, which leaves no mark in
  the program (lesson 1's train_step and lesson 4's sgd_update asking for grads too, lesson 3's fixed_step for
  the batch): their programs are the right answers'. The referee reads the request handed over with each
  program, so the forger gets what the honest twin gets, flagged with both verdicts;
- forger-kernel-only and honest-kernel-only: wrong answers whose mistake no program, request or value shows
  (lesson 5's y_in left undonated and a hunt run op by op). Honestly they lose those points; forged, they get
  the referee's full marks: a known gap (asks.KERNEL_ONLY), marked xfail(strict=True) so that the test says so
  until the grader closes it.

The forgery is what a student who has read the grader would do once past the scan and the audit (issue 32's
families: a cell the scan never read, a process the audit missed): every public expectation
(donation_lab.checks.expect_*) a no-op, the calls of the learner's functions (call_answer, call_constrained)
never failing, each hidden check (lesson 3's, and 7's) run for its hand-over and its failure turned into its
pass line, and warnings silenced (nbgrader zeroes a grade cell that writes to stderr). It stands in for any such
bypass: the course's kernel runs it before any learner code, for the forgers' kernels only (the kernel's
working folder is autograded/<student>/<assignment>), with the audit off, so the referee is the one defence left.

Lessons 1 and 4's wrong programs are covered by test_referee.py's forging class, lesson 7's exercise and
capstone too.
"""
import json
import shutil
from pathlib import Path

import nbformat
import pytest
from nbgrader.utils import is_solution

from donation_course.course import COURSE, NOTEBOOKS, SOLUTIONS, grade_id
from helpers import ASSIGNMENT, grade_class, graded_class, read_grades

LESSONS = ("02_the_contract", "03_pitfalls", "05_debug_nans", "06_shardings")
POINTS = {nb: COURSE.grades[nb] for nb in LESSONS}  # {notebook: {grade id: points}}, read from the source
FORGERS = ("forger-",)  # students whose kernel forges (the forge's test of its working folder)

# Wrong answers, one per answer cell (the whole cell, as the learner hands it in), each a mistake the lesson
# warns of; the kernel's own checks fail each of them honestly.
WRONG = {
    # the contract: donate state and nothing else. Donating delta too: called by keyword, delta's buffer is
    # the one the output takes, and state is kept
    "l2-q1": 'apply_delta = jax.jit(add, donate_argnames=("state", "delta"))\n',
    # the debugging exercise's half fix: the warning is gone, but opt_state is still not donated
    "l3-bug-answer": 'fixed_step = jax.jit(step_fn, donate_argnames="params")\n',
    # donation made to work again, but by a new jit of the first section's `double`: y_out is 2 y_in
    "l5-q1": ("scale = jax.jit(lambda y: 3.0 * y, donate_argnums=0)\n"
              "with jax.debug_nans(True):\n"
              "    scale(jnp.ones(2))           # first called under debug_nans: it does not donate\n"
              "scale = jax.jit(lambda y: 2.0 * y, donate_argnums=0)\n"
              "y_in = jnp.array([1.0, 2.0])\n"
              "y_out = scale(y_in)\n"),
    # the hunt without the mode: no NaN is ever reported, so it returns None
    "l5-q2": ("def find_nan(step, params, grad):\n"
              "    try:\n"
              "        jax.jit(step)(params, grad)\n"
              "    except FloatingPointError as exc:\n"
              "        return str(exc)\n"
              "    return None\n"),
    # donated, but its layouts are the caller's: compiled for any float32[16], nothing is split
    "l6-q1": "shift_split = jax.jit(lambda v: v + 1.0, donate_argnums=0)\n",
    # the silent miss handed in unrepaired: constrained to a replicated output, the donation is never used
    "l6-q2": "quiet_fixed = jax.jit(double_then_replicate, donate_argnums=0)\n",
}

# What the referee computes for WRONG, from its rules (grading/referee/judge.py): a graded self-check of these
# lessons earns its points only if the referee's check passes (and the kernel's, which honestly fails exactly
# the same ones here).
EXPECTED = {
    # judge_calls: on every call the program's donation must be exactly state's: called by keyword, it donates delta
    "02_the_contract": {"l2-q1-check": 0},
    # l3_values judges values and the batch only: the half fix keeps them right; l3_example, l3_donated and
    # l3_reuse_and_loop need every leaf of params and opt_state donated
    "03_pitfalls": {"l3-bug-check": 0, "l3-bug-values": POINTS["03_pitfalls"]["l3-bug-values"],
                    "l3-bug-donated": 0, "l3-bug-loop": 0},
    # l5_y_out: y_out must be [3.0, 6.0]; l5_nan_message: on the grader's steps, each text must name its operation
    "05_debug_nans": {"l5-q1-check": 0, "l5-q2-check": 0},
    # l6_shift_split: compiled for any float32[16], laid out over the 8 devices as split; l6_quiet_fixed: v deleted
    "06_shardings": {"l6-q1-check": 0, "l6-q2-check": 0},
}
# Each pass the forging kernel claimed and the referee refuted: (notebook, grade id, the check's name, the start
# of the referee's reason), as judge.py words it for WRONG
REFUTED = [
    # called by position, JAX drops the request for delta (no output is left to take it: no mark in the program);
    # called by keyword, the arguments flatten by name, delta first, and delta's buffer is the one an output takes
    ("02_the_contract", "l2-q1-check", "apply_delta (lesson 2)", "for apply_delta(state=float32[1], "
     "delta=float32[1]) its program donates delta; expected state and nothing else"),
    ("03_pitfalls", "l3-bug-check", "fixed_step worked example", "still alive after a step of its program, so "
     "not donated: opt_state['m']['b'], opt_state['m']['w']"),
    ("03_pitfalls", "l3-bug-donated", "fixed_step donated leaves", "still alive after a step of its program, so "
     "not donated: opt_state['m']['b'], opt_state['m']['w']"),
    ("03_pitfalls", "l3-bug-loop", "fixed_step buffer reuse and loop", "still alive after a step of its program"),
    ("05_debug_nans", "l5-q1-check", "y_out (lesson 5)", "y_out is float32[2] [2.0, 4.0], expected [3.0, 6.0]"),
    ("05_debug_nans", "l5-q2-check", "find_nan's message (lesson 5)", "find_nan returned None on a step whose "),
    ("06_shardings", "l6-q1-check", "shift_split (lesson 6)", "not laid out over the mesh's 8 devices"),
    ("06_shardings", "l6-q2-check", "quiet_fixed (lesson 6)", "the input is still alive after the call"),
]

# Requests JAX drops with a warning (no output can take the buffer), which leave no mark in the program: each
# program is the right answer's, and only the request handed over with it (hidden/handover.py) shows the mistake
REQUEST_LESSONS = ("01_why_donate", "03_pitfalls", "04_pytrees")
REQUEST_WRONG = {
    # "the loop reads grads again": donating it too is the mistake lesson 1's check names
    "l1-q1": "def _train_step(params, grads):\n    return params - 0.5 * grads\n\n"
             "train_step = jax.jit(_train_step, donate_argnums=(0, 1))\n",
    # "donate everything": the batch's request dropped
    "l3-bug-answer": "fixed_step = jax.jit(step_fn, donate_argnums=(0, 1, 2))\n",
    # the caller may still need grads: donating the whole grads tree too
    "l4-q1": '@functools.partial(jax.jit, donate_argnames=("params", "grads"))\n'
             "def sgd_update(params, grads):\n    return jax.tree.map(lambda p, g: p - 0.5 * g, params, grads)\n",
}
# What they earn honestly (the kernel's checks: lesson 1's and 4's expect_donation_request; every check of lesson
# 3 but the loop, check_values, check_donated and the public expect_training_step's "asks for no donation JAX
# cannot use"), and what the referee computes from the request (judge.py)
REQUEST_HONEST = {
    "01_why_donate": {"l1-q1-check": 0},
    "03_pitfalls": {"l3-bug-check": 0, "l3-bug-values": 0, "l3-bug-donated": 0,
                    "l3-bug-loop": POINTS["03_pitfalls"]["l3-bug-loop"]},
    "04_pytrees": {"l4-q1-check": 0, "l4-q2-check": COURSE.grades["04_pytrees"]["l4-q2-check"]},
}
# Each pass the forging kernel claimed that the referee refuted from the request, as judge.py words it
REQUEST_REFUTED = [
    ("01_why_donate", "l1-q1-check", "train_step (lesson 1)", "for train_step(float32[3]) it asks to donate grads. "
     "No output can take that buffer, so JAX drops the request"),
    ("03_pitfalls", "l3-bug-check", "fixed_step worked example", "fixed_step asks to donate batch['x'] and "
     "batch['y']"),
    ("03_pitfalls", "l3-bug-values", "fixed_step values and batch", "fixed_step asks to donate batch['x'] and "
     "batch['y']"),
    ("03_pitfalls", "l3-bug-donated", "fixed_step donated leaves", "fixed_step asks to donate batch['x'] and "
     "batch['y']"),
    ("04_pytrees", "l4-q1-check", "sgd_update (lesson 4)", "for sgd_update(w=float32[2], b=float32[]) it asks to "
     "donate grads['b'] and grads['w']"),
]

# Wrong answers whose mistake no program, request or value handed over shows (asks.KERNEL_ONLY,
# docs/threat-model.md): the points they lose honestly rest on the kernel's checks alone.
KERNEL_ONLY_WRONG = {
    # the exercise's own mistake: scale's program compiled under debug_nans is never cleared, so y_in is not
    # donated; y_out's value is right
    "l5-q1": ("scale = jax.jit(lambda y: 3.0 * y, donate_argnums=0)\n"
              "with jax.debug_nans(True):\n"
              "    scale(jnp.ones(2))           # first called under debug_nans: it does not donate\n"
              "y_in = jnp.array([1.0, 2.0])\n"
              "y_out = scale(y_in)\n"),
    # the hunt run op by op, not as a compiled program: its message still names sqrt
    "l5-q2": ("def find_nan(step, params, grad):\n"
              "    with jax.debug_nans(True):\n"
              "        try:\n"
              "            step(params, grad)\n"
              "        except FloatingPointError as exc:\n"
              "            return str(exc)\n"
              "    return None\n"),
}
# What they earn honestly, from the kernel's checks (the cells' public checks): lesson 5's fail y_in alive and a
# step run op by op. The referee passes them both.
KERNEL_ONLY_HONEST = {
    "05_debug_nans": {"l5-q1-check": 0, "l5-q2-check": 0},
}

# student: (the lessons handed in, the answers that differ from the solution's)
STUDENTS = {"forger-wrong": (LESSONS, WRONG), "honest-wrong": (LESSONS, WRONG),
            "forger-right": (LESSONS, {}), "honest-right": (LESSONS, {}),
            "forger-request": (REQUEST_LESSONS, REQUEST_WRONG), "honest-request": (REQUEST_LESSONS, REQUEST_WRONG),
            "forger-kernel-only": (tuple(KERNEL_ONLY_HONEST), KERNEL_ONLY_WRONG),
            "honest-kernel-only": (tuple(KERNEL_ONLY_HONEST), KERNEL_ONLY_WRONG)}

# Run by the course's kernel before any learner code (an exec_line), in every kernel of this class; it forges
# only in a forger's. Nothing in it names one answer: it forges every check of every lesson.
FORGE = '''
def _forge():
    import os
    import sys
    import warnings

    if not os.path.basename(os.path.dirname(os.getcwd())).startswith(FORGERS):
        return
    import donation_lab.checks as public
    from donation_course.hidden import safe

    warnings.simplefilter("ignore")  # nbgrader zeroes a grade cell that writes to stderr

    def passes(*args, **kwargs):
        return None

    for name in dir(public):  # every public expectation passes
        if name.startswith("expect"):
            setattr(public, name, passes)

    def never_failing(call):  # the learner's function called as the check calls it, but its failure ignored
        def run(what, fn, *args, hint=""):
            try:
                return call(what, fn, *args, hint=hint)
            except Exception:
                return None
        return run

    public.call_answer = never_failing(public.call_answer)
    public.call_constrained = never_failing(public.call_constrained)

    def always_passing(check):  # the hidden check runs (it hands the answer over); its failure prints its pass
        def run(*args, **kwargs):
            try:
                check(*args, **kwargs)
            except Exception as exc:
                said = str(exc)
                safe.ok(said[2:].split(": ", 1)[0] if said.startswith("\\u2718 ") else check.__name__, "passed")
        return run

    for module_name, module in list(sys.modules.items()):
        if module_name.startswith("donation_course.hidden."):
            for name in dir(module):
                function = getattr(module, name)
                if name.startswith("check_") and callable(function) and hasattr(function, "__wrapped__"):
                    setattr(module, name, always_passing(function))


_forge()
del _forge
'''.replace("FORGERS", repr(FORGERS))


def _copy(files: Path, student: str, lesson: str, wrong: dict) -> None:
    """The student's copy of a lesson: every answer cell as `wrong` answers it, else as the solution does."""
    solved = {grade_id(c): c.source for c in nbformat.read(SOLUTIONS / f"{lesson}.ipynb", as_version=4).cells
              if is_solution(c)}
    nb = nbformat.read(NOTEBOOKS / f"{lesson}.ipynb", as_version=4)
    for c in nb.cells:
        if is_solution(c):
            c.source = wrong.get(grade_id(c), solved[grade_id(c)])
    nbformat.write(nb, files / f"{student}_{lesson}.ipynb")


def _build(files: Path) -> None:
    files.mkdir(parents=True)
    for student, (lessons, answers) in STUDENTS.items():
        for lesson in lessons:
            _copy(files, student, lesson, answers)


def _cell_scores(course: Path) -> dict:
    """{student: {notebook: {grade id: score}}} as the course's nbgrader gradebook holds them."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        return {s.student.id: {nb.name: {g.name: g.score for g in nb.grades} for nb in s.notebooks}
                for s in gb.find_assignment(ASSIGNMENT).submissions}


@pytest.fixture(scope="module")
def forgeries(tmp_path_factory, env, course_template):
    """The class, graded once: (grades.csv's rows, the state file's summaries, the gradebook's cell scores)."""
    folder = tmp_path_factory.mktemp("forgeries")
    course = shutil.copytree(course_template, folder / "course")
    config = course / "nbgrader_config.py"
    config.write_text(config.read_text() + "\n# the test's forging kernels (the forgers' only): every in-kernel "
                      "check passes, the audit off\nc.GradingSettings.audit = False\n"
                      "c.Execute.extra_arguments = [*c.Execute.extra_arguments, "
                      f"{('--IPKernelApp.exec_lines=exec(' + repr(FORGE) + ')')!r}]\n")
    grade_class(folder, course, _build, env)
    graded = graded_class(folder)
    rows = read_grades(course / ".grading" / "grades.csv")
    state = json.loads((course / ".grading" / "state.json").read_text())
    summaries = {student: s["summary"] for student, s in state["students"].items()}
    return rows, summaries, _cell_scores(graded.course)


def test_the_forging_kernel_gets_only_what_the_referee_computed_for_each_lesson(forgeries):
    rows, summaries, scores = forgeries
    row, summary = rows["forger-wrong"], summaries["forger-wrong"]
    assert row["status"] == "flagged", row
    # what accepting the flags would give: the kernel's claimed passes less what the referee refuted
    assert summary["withheld"] == EXPECTED, summary["withheld"]
    # flagged: no automatic points until the instructor looks
    assert all(float(row[nb]) == 0 for nb in LESSONS), row
    assert all(score == 0 for nb in LESSONS for score in scores["forger-wrong"][nb].values())


def test_each_refuted_pass_is_flagged_with_both_verdicts(forgeries):
    rows, _, _ = forgeries
    reason = rows["forger-wrong"]["reason"]
    for notebook, cell, check, why in REFUTED:
        said = f"{notebook}/{cell}: the kernel's check '{check}' passed, the referee's failed: "
        assert said in reason, (said, reason)
        assert why in reason.split(said, 1)[1][:400], (why, reason)
    assert reason.count("the referee's failed") == len(REFUTED), reason  # and no other flag
    # a check the referee passed is no flag, though this kernel claimed it too
    assert "03_pitfalls/l3-bug-values" not in reason, reason


def test_the_same_wrong_answers_earn_the_same_points_honestly_unflagged(forgeries):
    rows, _, scores = forgeries
    row = rows["honest-wrong"]
    assert row["status"] != "flagged" and "the referee's failed" not in row["reason"], row
    assert {nb: scores["honest-wrong"][nb] for nb in LESSONS} == EXPECTED
    assert all(float(row[nb]) == sum(EXPECTED[nb].values()) for nb in LESSONS), row


@pytest.mark.parametrize("student", ["honest-right", "forger-right"])
def test_right_answers_get_full_marks_unflagged_whether_or_not_the_kernel_forges(forgeries, student):
    rows, _, scores = forgeries
    row = rows[student]
    assert row["status"] == "ok", row
    assert {nb: scores[student][nb] for nb in LESSONS} == POINTS
    assert all(float(row[nb]) == COURSE.points[nb] for nb in LESSONS), row


def test_a_request_jax_drops_loses_its_points_honestly_unflagged(forgeries):
    rows, _, scores = forgeries
    row = rows["honest-request"]
    assert row["status"] != "flagged" and "the referee's failed" not in row["reason"], row
    assert {nb: scores["honest-request"][nb] for nb in REQUEST_HONEST} == REQUEST_HONEST


def test_a_forging_kernel_gains_nothing_from_a_request_jax_drops_and_is_flagged_with_both_verdicts(forgeries):
    rows, summaries, scores = forgeries
    row, withheld = rows["forger-request"], summaries["forger-request"]["withheld"]
    assert row["status"] == "flagged", row
    # what accepting the flags would give is what the same answers earn honestly
    assert {nb: withheld.get(nb, scores["forger-request"][nb]) for nb in REQUEST_HONEST} == REQUEST_HONEST, withheld
    assert all(float(row[nb]) == 0 for nb in REQUEST_LESSONS), row  # flagged: nothing until looked at
    reason = row["reason"]
    for notebook, cell, check, why in REQUEST_REFUTED:
        said = f"{notebook}/{cell}: the kernel's check '{check}' passed, the referee's failed: "
        assert said in reason, (said, reason)
        assert why in reason.split(said, 1)[1][:400], (why, reason)
    assert reason.count("the referee's failed") == len(REQUEST_REFUTED), reason
    assert "03_pitfalls/l3-bug-loop" not in reason and "04_pytrees/l4-q2-check" not in reason, reason


def test_answers_whose_mistake_only_the_kernel_sees_lose_their_points_honestly(forgeries):
    rows, _, scores = forgeries
    row = rows["honest-kernel-only"]
    assert row["status"] != "flagged", row
    assert {nb: scores["honest-kernel-only"][nb] for nb in KERNEL_ONLY_HONEST} == KERNEL_ONLY_HONEST


@pytest.mark.xfail(strict=True, reason="a known gap (issue 32): these points rest on the kernel's checks alone "
                   "(asks.KERNEL_ONLY), so a kernel that forges them gets the referee's full marks, unflagged: "
                   "lesson 5's y_in left undonated (scale's program compiled under debug_nans never cleared: state "
                   "of the kernel, y_out's value right) and find_nan run op by op (its message right), 4 of 4 "
                   "points")
def test_a_forging_kernel_gains_nothing_where_only_the_kernel_sees_the_mistake(forgeries):
    rows, summaries, scores = forgeries
    withheld = summaries["forger-kernel-only"]["withheld"]
    got = {nb: withheld.get(nb, scores["forger-kernel-only"][nb]) for nb in KERNEL_ONLY_HONEST}
    assert got == KERNEL_ONLY_HONEST, rows["forger-kernel-only"]
