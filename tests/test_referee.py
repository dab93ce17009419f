"""The referee (grading/referee/): lesson 7's points decided on programs handed over as data, in a process
where no learner code runs.

- screening: a hostile program (a custom call, a host callback, an oversized tensor, another dialect) is
  refused before anything compiles it; an honest one is read, donation included;
- judging, in process: what the referee computes for honest and wrong answers equals what the kernel's
  checks give them honestly, and an answer of another shape gets the shape it must have;
- the server (slow: a sandboxed process): a hostile program is refused or capped (an endless loop by the
  time limit, a huge allocation by the size cap or the memory cap) and the next answer is judged as usual;
- ./course grade (slow): a kernel that forges every in-kernel check (its hidden checks replaced by ones that
  always pass, and the public checks' expectations with no-ops, before any learner code, with the audit off)
  still gets only what the referee computed, for a
  wrong exercise answer and a wrong capstone, and is flagged with both verdicts.
"""
import ast
import inspect
import json

import jax
import jax.numpy as jnp
import pytest

from donation_course.grading.referee import asks, judge
from donation_course.grading.referee.combine import judged_cells
from donation_course.grading.referee.screen import MAX_ELEMENTS, Refused, screen
from donation_course.grading.referee.verdict import FAIL, PASS, UNJUDGED, Verdict
from donation_course.hidden import handover
from helpers import LIMIT_SCALE

EXERCISE_CHECKS = judge.checks_of(asks.EXERCISE)
CAPSTONE_CHECKS = judge.checks_of(asks.CAPSTONE)
SPEC = jax.ShapeDtypeStruct((2,), jnp.float32)
LR, BETA = 0.1, 0.9


def _handover(answer, fn) -> dict:
    """What the grading kernel hands over for `fn` when every check of `answer` ran with it."""
    return {"programs": [handover._entry(answer, fn)], "checks": {c: 0 for c in judge.checks_of(answer)}}


def _outcomes(answer, fn) -> dict:
    return {v.check: v.outcome for v in judge.judge(answer, _handover(answer, fn))}


def _loss(params, x, y):
    return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)


def _step(params, opt_state, x, y, momentum=True):
    loss, grads = jax.value_and_grad(_loss)(params, x, y)
    m = jax.tree.map(lambda m, g: BETA * m + g, opt_state["m"], grads)
    step = m if momentum else grads
    return jax.tree.map(lambda p, s: p - LR * s, params, step), {"m": m, "count": opt_state["count"] + 1}, loss


# --- what the referee asks for matches the checks it stands for ------------------------------------------------

def _check_names(module) -> dict:
    """{function: name} of a hidden module's @check("name") functions, read from its source."""
    names = {}
    for node in ast.parse(inspect.getsource(module)).body:
        if isinstance(node, ast.FunctionDef):
            for deco in node.decorator_list:
                if isinstance(deco, ast.Call) and getattr(deco.func, "id", "") == "check":
                    names[node.name] = deco.args[0].value
    return names


def test_every_referee_check_is_a_hidden_check_of_the_same_name_and_the_rest_are_kernel_only():
    from donation_course.hidden import capstone, debugging, exercise, lessons

    modules = {"exercise": _check_names(exercise), "capstone": _check_names(capstone),
               "debugging": _check_names(debugging)}
    for (module, function), (_answer, name) in asks.CHECKS.items():
        if module == "lessons":  # lessons 1 to 6: a hand-over of the answer the cell's public checks judged
            assert function in lessons.__all__
            assert f'("{_answer}", "{name}", ' in inspect.getsource(getattr(lessons, function))
        else:
            assert modules[module][function] == name
    every = {(m, f) for m, names in modules.items() for f in names}
    assert every == {k for k in asks.CHECKS if k[0] in modules} | {k for k in asks.KERNEL_ONLY if k[0] in modules}
    assert set(lessons.__all__) == {f for m, f in asks.CHECKS if m == "lessons"}
    assert set(judge.JUDGES) == {name for _a, name in asks.CHECKS.values()}


def test_the_graded_notebooks_cells_map_to_the_referees_checks():
    from donation_course.course import COURSE

    source = COURSE.source / f"{COURSE.exercise}.ipynb"
    cells = {grade_id: check for grade_id, _answer, check in judged_cells(source)}
    assert cells == {"ex-example": "worked example", "ex-donated": "state is donated, delta is kept",
                     "ex-values": "values", "ex-buffer-reuse": "result reuses state's buffer",
                     "ex-training-loop": "training loop", "cap-public": "capstone worked example",
                     "cap-values": "capstone values", "cap-donated-leaves": "capstone donated leaves",
                     "cap-buffer-reuse": "capstone buffer reuse", "cap-loop": "capstone training loop"}
    lessons = {grade_id: check for path in sorted(COURSE.source.glob("0[1-6]_*.ipynb"))
               for grade_id, _answer, check in judged_cells(path)}
    assert lessons == {"l1-q1-check": "train_step (lesson 1)", "l2-q1-check": "apply_delta (lesson 2)",
                       "l3-bug-check": "fixed_step worked example", "l3-bug-values": "fixed_step values and batch",
                       "l3-bug-donated": "fixed_step donated leaves", "l3-bug-loop": "fixed_step buffer reuse and loop",
                       "l4-q1-check": "sgd_update (lesson 4)", "l5-q1-check": "y_out (lesson 5)",
                       "l5-q2-check": "find_nan's message (lesson 5)", "l6-q1-check": "shift_split (lesson 6)",
                       "l6-q2-check": "quiet_fixed (lesson 6)"}


# --- screening -------------------------------------------------------------------------------------------------

def test_an_honest_program_is_read_with_its_donation():
    program = screen(jax.jit(lambda s, d: s + d, donate_argnums=0).lower(SPEC, SPEC).as_text())
    assert [str(t) for t in program.inputs] == ["float32[2]", "float32[2]"]
    assert program.aliases == (0, None) and program.donated == (True, False)
    assert program.result_names == ("result",)
    plain = screen(jax.jit(lambda s, d: s + d).lower(SPEC, SPEC).as_text())
    assert plain.donated == (False, False)


@pytest.mark.parametrize("fn, said", [
    (lambda s, d: jax.pure_callback(lambda a: a, SPEC, s) + d, "custom call"),
    (lambda s, d: jax.debug.callback(print, s) or s + d, "custom call"),
    (lambda s, d: jnp.broadcast_to(s[0], (MAX_ELEMENTS + 1,)).sum() + d, "over the grader's cap"),
])
def test_a_hostile_program_is_refused_before_it_compiles(fn, said):
    text = jax.jit(fn).lower(SPEC, SPEC).as_text()
    with pytest.raises(Refused, match=said):
        screen(text)


@pytest.mark.parametrize("text, said", [
    ("not a program", "does not parse"),
    ('module {\n  func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {\n'
     '    %0 = "stablehlo.outfeed"(%a) : (tensor<2xf32>) -> tensor<2xf32>\n    return %0 : tensor<2xf32>\n  }\n}',
     "does not parse|outfeed"),
    ('module {\n  func.func @main(%a: tensor<?xf32>) -> tensor<?xf32> {\n    return %a : tensor<?xf32>\n  }\n}',
     "dynamic shape"),
    ('module {\n  func.func @other(%a: tensor<2xf32>) -> tensor<2xf32> {\n    return %a : tensor<2xf32>\n  }\n}',
     "no function main"),
    ("x" * (asks.MAX_PROGRAM_CHARS + 1), "characters long"),
    (None, "no program text"),
])
def test_a_program_the_referee_cannot_read_is_refused_with_why(text, said):
    with pytest.raises(Refused, match=said):
        screen(text)


# --- judging, in process ---------------------------------------------------------------------------------------

PARTIAL = jax.jit(lambda state, delta: state + delta, donate_argnums=(0,))


@pytest.mark.slow  # compiles and runs a dozen programs
def test_honest_exercise_answers_pass_every_check():
    for fn in (PARTIAL, jax.jit(lambda s, d: s + d, donate_argnames="s"),
               jax.jit(lambda s, d: jax.tree_util.tree_map(jax.lax.add, s, d), donate_argnums=0),
               jax.jit(lambda s, d: jnp.array(s + d, copy=True), donate_argnums=0)):
        assert set(_outcomes(asks.EXERCISE, fn).values()) == {PASS}


@pytest.mark.slow  # compiles and runs five programs each
@pytest.mark.parametrize("fn, failed", [
    # the same verdicts as the kernel's checks give these answers honestly (corpus/exercise.py)
    (jax.jit(lambda s, d: s * 0, donate_argnums=0), {"worked example", "values", "training loop"}),
    (jax.jit(lambda s, d: s + d), {"state is donated, delta is kept", "result reuses state's buffer",
                                   "training loop"}),
    (jax.jit(lambda s, d: s - d, donate_argnums=0), {"worked example", "values", "training loop"}),
    (jax.jit(lambda s, d: s + d, donate_argnums=1), {"state is donated, delta is kept",
                                                     "result reuses state's buffer", "training loop"}),
    (jax.jit(lambda s, d: s + d + (d * 0 + jnp.nan).astype(s.dtype), donate_argnums=0),
     {"worked example", "values", "training loop"}),
])
def test_a_wrong_exercise_answer_fails_exactly_the_checks_it_fails_in_the_kernel(fn, failed):
    outcomes = _outcomes(asks.EXERCISE, fn)
    assert {c for c, o in outcomes.items() if o == FAIL} == failed
    assert {c for c, o in outcomes.items() if o == PASS} == set(EXERCISE_CHECKS) - failed


def test_an_answer_of_another_shape_is_told_the_shape_it_must_have():
    step = jax.jit(lambda s, d: s + d, donate_argnums=0)
    for fn, said in ((lambda state, delta: step(state, delta), "a plain Python function"),
                     (type("Updater", (), {"__call__": lambda self, s, d: step(s, d)})(), "class Updater")):
        verdicts = list(judge.judge(asks.EXERCISE, _handover(asks.EXERCISE, fn)))
        assert {v.outcome for v in verdicts} == {UNJUDGED}
        for v in verdicts:
            assert said in v.message and "update_with_donate must be made by jax.jit" in v.message
    nothing = list(judge.judge(asks.EXERCISE, None))
    assert [v.outcome for v in nothing] == [UNJUDGED] * 5 and "received no program" in nothing[0].message


@pytest.mark.slow  # compiles and runs a dozen programs
def test_each_check_judges_the_program_handed_over_when_it_ran():
    wrong = jax.jit(lambda s, d: s * 0, donate_argnums=0)
    mixed = {"programs": [handover._entry(asks.EXERCISE, PARTIAL), handover._entry(asks.EXERCISE, wrong)],
             "checks": {c: (1 if c == "values" else 0) for c in EXERCISE_CHECKS}}
    outcomes = {v.check: v.outcome for v in judge.judge(asks.EXERCISE, mixed)}
    assert outcomes.pop("values") == FAIL and set(outcomes.values()) == {PASS}


def test_a_program_whose_arguments_do_not_match_the_signature_is_not_run_as_if_they_did():
    entry = handover._entry(asks.EXERCISE, PARTIAL)
    entry["programs"]["float32[2]"]["kept"] = [1]  # a forged list of kept arguments
    outcomes = {v.check: v for v in judge.judge(asks.EXERCISE, {"programs": [entry], "checks": {"worked example": 0}})}
    assert outcomes["worked example"].outcome == UNJUDGED and "which arguments" in outcomes["worked example"].message


@pytest.mark.slow  # compiles and runs a dozen programs
def test_honest_capstone_steps_pass_and_wrong_ones_fail_what_the_kernel_fails():
    right = jax.jit(_step, donate_argnames=("params", "opt_state"))
    assert set(_outcomes(asks.CAPSTONE, right).values()) == {PASS}
    assert set(_outcomes(asks.CAPSTONE, jax.jit(_step, donate_argnums=(0, 1))).values()) == {PASS}
    donating = {"capstone donated leaves", "capstone buffer reuse", "capstone training loop"}
    for wrong, failed in ((jax.jit(_step), donating),
                          (jax.jit(_step, donate_argnames="params"), donating),
                          (jax.jit(lambda p, o, x, y: _step(p, o, x, y, momentum=False),
                                   donate_argnums=(0, 1)), {"capstone values"})):
        outcomes = _outcomes(asks.CAPSTONE, wrong)
        assert {c for c, o in outcomes.items() if o == FAIL} == failed
        assert {c for c, o in outcomes.items() if o == PASS} == set(CAPSTONE_CHECKS) - failed


# --- the server: hostile programs refused or capped, and the class goes on ------------------------------------

REFEREE_SECONDS = round(8 * LIMIT_SCALE)  # an answer's wall-clock limit: 8 s on a quiet machine, scaled with its load


@pytest.fixture(scope="module")
def referee():
    from donation_course.grading.integrity.sandbox import probe
    from donation_course.grading.referee.client import Referee

    ref = Referee(sandbox=probe() == "", memory_mb=2048, seconds=REFEREE_SECONDS)
    yield ref
    ref.close()


def _judge(referee, fn) -> dict:
    judged = referee.judge({"exercise": _handover(asks.EXERCISE, fn)})
    return {v.check: v for v in judged.verdicts}


def _honest_goes_on(referee):
    assert {v.outcome for v in _judge(referee, PARTIAL).values()} == {PASS}


@pytest.mark.slow
def test_a_custom_call_is_refused_and_the_next_answer_is_judged(referee):
    verdicts = _judge(referee, jax.jit(lambda s, d: jax.pure_callback(lambda a: a, s, s) + d, donate_argnums=0))
    assert {v.outcome for v in verdicts.values()} == {UNJUDGED}
    assert "custom call" in verdicts["values"].message
    _honest_goes_on(referee)


@pytest.mark.slow
def test_an_endless_loop_is_stopped_at_the_time_limit_and_the_next_answer_is_judged(referee):
    def endless(s, d):  # float32 stops growing at 2**24: the condition never turns false
        return jax.lax.while_loop(lambda c: c[0] > -1.0, lambda c: (c[0] + 1.0, c[1] + 1.0),
                                  (jnp.float32(0), s))[1] + d

    verdicts = _judge(referee, jax.jit(endless, donate_argnums=0))
    assert {v.outcome for v in verdicts.values()} == {UNJUDGED}
    assert all(f"after {REFEREE_SECONDS} s" in v.message for v in verdicts.values())
    _honest_goes_on(referee)


@pytest.mark.slow
def test_answers_share_a_child_and_one_stopped_at_its_limit_leaves_the_next_its_own_time(referee):
    def endless(s, d):
        return jax.lax.while_loop(lambda c: c[0] > -1.0, lambda c: (c[0] + 1.0, c[1] + 1.0),
                                  (jnp.float32(0), s))[1] + d

    judged = referee.judge({"exercise": _handover(asks.EXERCISE, jax.jit(endless, donate_argnums=0)),
                            "capstone": _handover(asks.CAPSTONE, jax.jit(_step, donate_argnums=(0, 1)))})
    verdicts = {v.check: v for v in judged.verdicts}
    assert set(verdicts) == set(EXERCISE_CHECKS) | set(CAPSTONE_CHECKS)
    stopped = f"after {REFEREE_SECONDS} s"
    assert all(verdicts[c].outcome == UNJUDGED and stopped in verdicts[c].message for c in EXERCISE_CHECKS)
    assert {verdicts[c].outcome for c in CAPSTONE_CHECKS} == {PASS}
    # and the other way round: an honest answer first, judged, then the endless one stopped
    judged = referee.judge({"capstone": _handover(asks.CAPSTONE, jax.jit(_step, donate_argnums=(0, 1))),
                            "exercise": _handover(asks.EXERCISE, jax.jit(endless, donate_argnums=0))})
    verdicts = {v.check: v for v in judged.verdicts}
    assert {verdicts[c].outcome for c in CAPSTONE_CHECKS} == {PASS}
    assert {verdicts[c].outcome for c in EXERCISE_CHECKS} == {UNJUDGED}


@pytest.mark.slow
def test_a_huge_allocation_is_refused_or_capped_and_the_next_answer_is_judged(referee):
    huge = _judge(referee, jax.jit(lambda s, d: jnp.broadcast_to(s[:1], (1 << 31,)).sum() + d, donate_argnums=0))
    assert "over the grader's cap" in huge["worked example"].message

    def many(s, d):  # 96 outputs of 32 MiB (3 GiB), each under the size cap: the memory cap stops it
        return tuple(jnp.full((MAX_ELEMENTS,), s[0] + i) for i in range(96))

    verdicts = _judge(referee, jax.jit(many, donate_argnums=0))
    assert verdicts["worked example"].outcome == UNJUDGED, verdicts
    assert "its caps" in verdicts["worked example"].message or "time limit" in verdicts["worked example"].message
    _honest_goes_on(referee)


@pytest.mark.slow
def test_a_referee_that_dies_is_the_graders_failure_not_a_zero(referee):
    from donation_course.grading.referee.client import RefereeFailed

    _honest_goes_on(referee)
    # the server dies after the client last saw it alive (its liveness check, start(), passes): deterministic,
    # where a kill just before judge() raced the check, which starts a new server for a dead one
    dead = referee.proc
    dead.kill()
    dead.wait()
    dead.poll = lambda: None
    with pytest.raises(RefereeFailed):
        referee.judge({"exercise": None})
    del dead.poll
    _honest_goes_on(referee)  # a new server for the next student


# --- ./course grade: a kernel that forges every in-kernel check ---------------------------------------------------

# Every hidden check replaced by one that prints a pass; those that hand their answer over (asks.CHECKS) still do,
# as the real ones do (a hand-over from a check that makes none is a record the checks did not write, which flags
# the student by itself: test_referee_received.py).
FORGE = ("import donation_course.hidden.exercise as e, donation_course.hidden.capstone as c, "
         "donation_course.hidden.safe as s, donation_course.hidden.handover as h; "
         "[setattr(m, f, (lambda m, f, name, hands: lambda fn, *a, **k: ((h.hand_over(m.__name__.rsplit('.', 1)[1], "
         "name, fn) if hands else None), s.ok(name, 'forged')) and None)(m, f, n, hd)) "
         "for m, names in ((e, {names_e}), (c, {names_c})) for f, (n, hd) in names.items()]; "
         "import donation_lab.checks as p; "
         "[setattr(p, n, lambda *a, **k: None) for n in dir(p) if n.startswith('expect')]")


# lessons 1 and 4's self-checks answered wrong: no donation and wrong values; the forging kernel's public checks pass
WRONG_TRAIN_STEP = "train_step = jax.jit(lambda params, grads: params * 0)\n"
WRONG_SGD_UPDATE = "sgd_update = jax.jit(lambda params, grads: params)\n"


def _lesson_copy(files, student: str, lesson: str, answer) -> None:
    """The student's copy of a lesson: every answer cell as the solution answers it, but the graded one
    (l1-q1, l4-q1) answered `answer` (None: as the solution does)."""
    import nbformat
    from nbgrader.utils import is_solution

    from donation_course.course import NOTEBOOKS, SOLUTIONS, grade_id

    solved = {grade_id(c): c.source for c in nbformat.read(SOLUTIONS / f"{lesson}.ipynb", as_version=4).cells
              if is_solution(c)}
    nb = nbformat.read(NOTEBOOKS / f"{lesson}.ipynb", as_version=4)
    for c in nb.cells:
        if is_solution(c):
            c.source = answer if answer is not None and grade_id(c).endswith("-q1") else solved[grade_id(c)]
    nbformat.write(nb, files / f"{student}_{lesson}.ipynb")


@pytest.fixture(scope="module")
def forged(tmp_path_factory, env, generated_course):
    from donation_course.corpus import capstone as capstone_corpus
    from donation_course.corpus import exercise as exercise_corpus
    from donation_course.hidden import capstone, exercise
    from helpers import grade, read_grades

    tmp = tmp_path_factory.mktemp("forged")
    course = generated_course(tmp / "course")
    names_e = {f: (n, ("exercise", f) in asks.CHECKS) for f, n in _check_names(exercise).items()}
    names_c = {f: (n, ("capstone", f) in asks.CHECKS) for f, n in _check_names(capstone).items()}
    forge = FORGE.replace("{names_e}", repr(names_e)).replace("{names_c}", repr(names_c))
    config = course / "nbgrader_config.py"
    config.write_text(config.read_text() + "\n# the test's forging kernel: every hidden check replaced before learner "
                      "code runs, the audit off\nc.GradingSettings.audit = False\n"
                      "c.Execute.extra_arguments = [*c.Execute.extra_arguments, "
                      f"{('--IPKernelApp.exec_lines=' + forge)!r}]\n")
    files = tmp / "files"
    capstone_corpus.build(files)  # the exercise answered right; the capstone answered as each case says
    keep = {"cap-nodonate": "forged", "cap-right": "honest"}
    for path in files.glob("*.ipynb"):
        student = path.name.split("_")[0]
        if student not in keep:
            path.unlink()
            continue
        nb = json.loads(path.read_text())
        if keep[student] == "forged":  # and the exercise answered wrong
            for cell in nb["cells"]:
                if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "ex-answer":
                    cell["source"] = exercise_corpus.WRONG
        path.write_text(json.dumps(nb))
        _lesson_copy(files, student, "01_why_donate", WRONG_TRAIN_STEP if keep[student] == "forged" else None)
        _lesson_copy(files, student, "04_pytrees", WRONG_SGD_UPDATE if keep[student] == "forged" else None)
    grade(env, files, "--course", course, "--workers", "1", "--timeout", "300", "--cell-timeout", "30",
          "--no-progress")
    from donation_course.course import Course
    from donation_course.grading.run.state import load_state

    state = load_state(Course(course).state_file, print)
    return read_grades(course / ".grading" / "grades.csv"), state


def test_a_forging_kernel_gets_only_what_the_referee_computed_and_is_flagged(forged):
    from donation_course.corpus import exercise as exercise_corpus

    rows, state = forged
    row, summary = rows["cap-nodonate"], state.students["cap-nodonate"].summary
    assert row["status"] == "flagged", row
    withheld = summary.withheld[exercise_corpus.EXERCISE]  # what accepting the flag would give: the combined score
    # update_with_donate = state * 0: the referee passes its donation (2 + 2) and fails its values
    assert {g: withheld[g] for g in exercise_corpus.EXERCISE_GRADES} == {
        "ex-example": 0, "ex-donated": 2, "ex-values": 0, "ex-buffer-reuse": 2, "ex-training-loop": 0}
    # a non-donating step: the referee passes its values and fails its donation; the untied state and the NaN
    # hunt rest on the kernel's checks alone (docs/threat-model.md), which this kernel forged
    assert {g: withheld[g] for g in exercise_corpus.CAPSTONE_GRADES} == {
        "cap-public": 1, "cap-values": 2, "cap-donated-leaves": 0, "cap-buffer-reuse": 0, "cap-untied": 1,
        "cap-nan-hunt": 2, "cap-loop": 0}
    # each refuted pass is a flag with both verdicts (the reason's flag line names the first five)
    refuted = {"ex-example", "ex-values", "ex-training-loop", "cap-donated-leaves", "cap-buffer-reuse", "cap-loop"}
    named = {gid for gid in exercise_corpus.EXERCISE_GRADES | exercise_corpus.CAPSTONE_GRADES
             if f"/{gid}: the kernel's check" in row["reason"]}
    assert named <= refuted and len(named) == 5, row["reason"]
    assert "the kernel's check 'worked example' passed, the referee's failed: update_with_donate([1.0, 2.0], " \
           "[0.5, 0.5]) gave [0.0, 0.0]" in row["reason"], row["reason"]
    assert float(row[exercise_corpus.EXERCISE]) == 0  # flagged: no automatic points until the instructor looks


def test_a_forging_kernel_gets_only_what_the_referee_computed_for_a_lesson_self_check_and_is_flagged(forged):
    rows, state = forged
    row, summary = rows["cap-nodonate"], state.students["cap-nodonate"].summary
    # the kernel's public checks were no-ops, so it claimed both points of each; the referee refuted them
    assert summary.withheld["01_why_donate"]["l1-q1-check"] == 0, summary.withheld
    assert summary.withheld["04_pytrees"]["l4-q1-check"] == 0, summary.withheld
    assert summary.withheld["04_pytrees"]["l4-q2-check"] == 2  # untied_params: right, and the kernel's alone
    assert "l1-q1-check: the kernel's check 'train_step (lesson 1)' passed, the referee's failed: for " \
           "train_step(float32[3]) its program donates nothing" in row["reason"], row["reason"]
    assert float(row["01_why_donate"]) == 0 and float(row["04_pytrees"]) == 0  # flagged: nothing until looked at


def test_an_honest_neighbour_of_a_forging_kernel_gets_full_marks_unflagged(forged):
    from donation_course.corpus import exercise as exercise_corpus

    rows, _ = forged
    row = rows["cap-right"]
    assert row["status"] == "ok" and float(row[exercise_corpus.EXERCISE]) == exercise_corpus.MAX, row
    from donation_course.course import COURSE

    assert float(row["01_why_donate"]) == COURSE.points["01_why_donate"], row
    assert float(row["04_pytrees"]) == COURSE.points["04_pytrees"], row


@pytest.mark.parametrize("handover", [
    {"programs": "x", "checks": {"values": 0}},
    {"programs": [{"programs": ["not", "a", "dict"]}], "checks": {"values": 0}},
    {"programs": [{"programs": {"float32[0]": {"text": 5, "kept": "all"}}}], "checks": {"values": 0}},
    {"programs": [None], "checks": {"values": 0, "training loop": "0"}},
])
def test_a_hand_over_of_any_other_shape_is_not_judged_and_breaks_nothing(handover):
    verdicts = list(judge.judge(asks.EXERCISE, handover))
    assert [v.check for v in verdicts] == EXERCISE_CHECKS and {v.outcome for v in verdicts} == {UNJUDGED}


def test_the_worked_example_of_an_honest_answer_is_compiled_run_and_passed():
    # the everyday tier's one compile: the referee's path from hand-over to verdict
    handed = {"programs": [handover._entry(asks.EXERCISE, PARTIAL)], "checks": {"worked example": 0}}
    verdicts = {v.check: v for v in judge.judge(asks.EXERCISE, handed)}
    assert verdicts.pop("worked example").outcome == PASS
    assert {v.outcome for v in verdicts.values()} == {UNJUDGED}  # the others were never handed over


# --- lessons 1, 2 and 4: the graded self-checks' jax.jit answers -------------------------------------------------

def _add(state, delta):
    return state + delta


def _sgd(params, grads):
    return jax.tree.map(lambda p, g: p - 0.5 * g, params, grads)


@pytest.mark.slow  # compiles and runs two programs per answer
@pytest.mark.parametrize("answer, fn", [
    # the lessons' solutions and the other honest forms they teach
    (asks.TRAIN_STEP, jax.jit(lambda params, grads: params - 0.5 * grads, donate_argnums=0)),
    (asks.TRAIN_STEP, jax.jit(lambda params, grads: params - 0.5 * grads, donate_argnames="params")),
    (asks.APPLY_DELTA, jax.jit(_add, donate_argnames="state")),
    (asks.APPLY_DELTA, jax.jit(_add, donate_argnums=0)),  # the lesson: the very same request
    (asks.SGD_UPDATE, jax.jit(_sgd, donate_argnames="params")),
    (asks.SGD_UPDATE, jax.jit(_sgd, donate_argnums=0)),
])
def test_honest_lesson_answers_pass_the_referee(answer, fn):
    assert set(_outcomes(answer, fn).values()) == {PASS}


@pytest.mark.slow  # compiles and runs up to two programs per answer
@pytest.mark.parametrize("answer, fn, said", [
    (asks.TRAIN_STEP, jax.jit(lambda params, grads: params - 0.5 * grads), "donates nothing"),
    (asks.TRAIN_STEP, jax.jit(lambda params, grads: params * 0, donate_argnums=0), "expected"),
    (asks.TRAIN_STEP, jax.jit(lambda params, grads: params - 0.5 * grads, donate_argnums=1), "donates grads"),
    (asks.APPLY_DELTA, jax.jit(_add, donate_argnums=1), "donates delta"),
    (asks.APPLY_DELTA, jax.jit(_add, donate_argnums=(0, 1)), "donates delta"),  # seen on the keyword call
    (asks.APPLY_DELTA, jax.jit(lambda state, delta: state - delta, donate_argnames="state"), "expected"),
    (asks.SGD_UPDATE, jax.jit(_sgd), "donates nothing"),
    (asks.SGD_UPDATE, jax.jit(lambda params, grads: {"w": params["w"] - 0.5 * grads["w"]}, donate_argnums=0),
     "donates params['w']"),
    (asks.SGD_UPDATE, jax.jit(lambda params, grads: tuple(_sgd(params, grads).values()), donate_argnums=0),
     "returns result[0], result[1]"),
    (asks.SGD_UPDATE, jax.jit(lambda params, grads: _sgd(params, grads) | {"b": params["b"]}, donate_argnums=0),
     "expected"),
])
def test_a_wrong_lesson_answer_fails_the_referee_with_why(answer, fn, said):
    (verdict,) = judge.judge(answer, _handover(answer, fn))
    assert verdict.outcome == FAIL and said in verdict.message, verdict


def test_a_lesson_answer_of_another_shape_is_told_the_shape_it_must_have():
    step = jax.jit(lambda params, grads: params - 0.5 * grads, donate_argnums=0)
    (verdict,) = judge.judge(asks.TRAIN_STEP, _handover(asks.TRAIN_STEP, lambda params, grads: step(params, grads)))
    assert verdict.outcome == UNJUDGED and "train_step must be made by jax.jit" in verdict.message
    (nothing,) = judge.judge(asks.SGD_UPDATE, None)
    assert nothing.outcome == UNJUDGED and "received no program" in nothing.message


def test_a_lesson_call_is_flattened_as_jax_flattens_it():
    # keyword arguments by sorted name, dict keys sorted: the order of the program's arguments
    assert [p for p, _ in asks.flat_specs(asks.APPLY_DELTA.signatures[1], asks.APPLY_DELTA.arguments)] == \
        ["delta", "state"]
    assert [p for p, _ in asks.flat_specs(asks.SGD_UPDATE.signatures[0], asks.SGD_UPDATE.arguments)] == \
        ["params['b']", "params['w']", "grads['b']", "grads['w']"]
    spec = handover._spec({"w": "float32[2]", "b": "float32[]"})
    flat = jax.tree_util.tree_flatten_with_path(((spec, spec), {}))[0]
    assert [jax.tree_util.keystr(path[1:]) for path, _ in flat] == ["[0]['b']", "[0]['w']", "[1]['b']", "[1]['w']"]


# --- lesson 3: the debugging exercise's fixed_step ---------------------------------------------------------------

def _l3_loss(params, batch):
    return jnp.mean((batch["x"] @ params["w"] + params["b"] - batch["y"]) ** 2)


def _l3_step_fn(batch, params, opt_state):  # the setup cell's step_fn
    loss, grads = jax.value_and_grad(_l3_loss)(params, batch)
    m = jax.tree.map(lambda m, g: 0.5 * m + g, opt_state["m"], grads)
    return jax.tree.map(lambda p, m: p - 0.05 * m, params, m), {"m": m}, loss


L3_CHECKS = judge.checks_of(asks.FIXED_STEP)
L3_DONATION = {"fixed_step worked example", "fixed_step donated leaves", "fixed_step buffer reuse and loop"}


@pytest.mark.slow  # compiles one program and runs it two dozen times per answer
@pytest.mark.parametrize("fn, failed", [
    # the corpus's cases (corpus/debugging.py): the same checks fail as in the kernel (the batch asked to donate,
    # which JAX drops with a warning and no mark in the program, is read from the request handed over with it:
    # bug-unfixed's values check; test_referee_requests.py)
    (jax.jit(_l3_step_fn, donate_argnums=(1, 2)), set()),
    (jax.jit(_l3_step_fn, donate_argnames=("params", "opt_state")), set()),
    (jax.jit(_l3_step_fn, donate_argnums=1), L3_DONATION),
    (jax.jit(_l3_step_fn), L3_DONATION),
    (jax.jit(_l3_step_fn, donate_argnums=(0, 1)), L3_DONATION | {"fixed_step values and batch"}),
    (jax.jit(lambda b, p, o: _l3_step_fn(b, p, o)[:2] + (jnp.float32(0),), donate_argnums=(1, 2)),
     {"fixed_step worked example", "fixed_step values and batch"}),
])
def test_lesson_3s_fixed_step_fails_exactly_the_checks_a_program_shows(fn, failed):
    outcomes = _outcomes(asks.FIXED_STEP, fn)
    assert {c for c, o in outcomes.items() if o == FAIL} == failed
    assert {c for c, o in outcomes.items() if o == PASS} == set(L3_CHECKS) - failed


# --- lesson 5: values handed over as data ------------------------------------------------------------------------

def _values(answer, **values) -> list:
    """The referee's verdicts on `values` as the grading kernel hands them over (hand_over_values)."""
    published = []
    real, handover._publish = handover._publish, lambda data, metadata: published.append(data[asks.MIME])
    try:
        handover.hand_over_values(answer.name, judge.checks_of(answer)[0], values)
    finally:
        handover._publish = real
    (record,) = published
    json.dumps(record)  # data only: it crosses as JSON
    return list(judge.judge(answer, {"programs": [record["entry"]], "checks": {record["check"]: 0}}))


def test_lesson_5s_values_are_judged_from_their_bytes_and_text():
    scale = jax.jit(lambda y: 3.0 * y)
    assert [v.outcome for v in _values(asks.Y_OUT, y_out=scale(jnp.array([1.0, 2.0])))] == [PASS]
    (wrong,) = _values(asks.Y_OUT, y_out=jnp.array([1.0, 2.0]))
    assert wrong.outcome == FAIL and "expected [3.0, 6.0]" in wrong.message
    (other,) = _values(asks.Y_OUT, y_out=[3.0, 6.0])
    assert other.outcome == UNJUDGED and "y_out is list" in other.message and "JAX array" in other.message
    deleted = jnp.array([3.0, 6.0])
    deleted.delete()
    assert [v.outcome for v in _values(asks.Y_OUT, y_out=deleted)] == [UNJUDGED]
    # find_nan's texts, on steps the grading kernel makes at grading time: test_referee_held_out.py


@pytest.mark.parametrize("entry", [
    {"values": {"y_out": {"dtype": "float32", "shape": [2], "data": "AAAA"}}},  # 3 bytes for 8
    {"values": {"y_out": {"dtype": "object", "shape": [2], "data": "AAAAAAAAAAA="}}},
    {"values": {"y_out": {"dtype": "float32", "shape": [-2], "data": ""}}},
    {"values": {"y_out": {"dtype": "float32", "shape": [2], "data": "not base64!"}}},
    {"values": {"y_out": "x"}}, {"values": []}, None,
])
def test_a_value_hand_over_of_another_shape_is_not_judged(entry):
    (verdict,) = judge.judge(asks.Y_OUT, {"programs": [entry], "checks": {"y_out (lesson 5)": 0}})
    assert verdict.outcome == UNJUDGED, verdict


def test_every_graded_self_check_of_lessons_1_to_6_is_judged_by_the_referee_or_listed_as_kernel_only():
    from donation_course.course import COURSE

    for path in sorted(COURSE.source.glob("0[1-6]_*.ipynb")):
        judged = {grade_id for grade_id, _answer, _check in judged_cells(path)}
        for grade_id in COURSE.grades[path.stem]:
            assert grade_id in judged or ("lesson", grade_id) in asks.KERNEL_ONLY, grade_id


# --- lesson 6: sharded programs, judged on the referee's own 8 CPU devices ---------------------------------------

L6_ANSWERS = '''
import json, jax
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
from donation_course.grading.referee import asks, judge
from donation_course.hidden import handover
mesh = jax.make_mesh((8,), ("x",))
split, replicated = NamedSharding(mesh, P("x")), NamedSharding(mesh, P())
auto_mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))
auto_split, auto_replicated = NamedSharding(auto_mesh, P("x")), NamedSharding(auto_mesh, P())
constrained = lambda s: (lambda v: jax.lax.with_sharding_constraint(2.0 * v, s))
cases = {
    "shift right": (asks.SHIFT_SPLIT, jax.jit(lambda v: v + 1.0, in_shardings=split, out_shardings=split,
                                              donate_argnums=0)),
    "shift no shardings": (asks.SHIFT_SPLIT, jax.jit(lambda v: v + 1.0, donate_argnums=0)),
    "shift gathers": (asks.SHIFT_SPLIT, jax.jit(lambda v: v + 1.0, in_shardings=split, out_shardings=replicated,
                                                donate_argnums=0)),
    "shift keeps v": (asks.SHIFT_SPLIT, jax.jit(lambda v: v + 1.0, in_shardings=split, out_shardings=split)),
    "shift wrong": (asks.SHIFT_SPLIT, jax.jit(lambda v: v + 2.0, in_shardings=split, out_shardings=split,
                                              donate_argnums=0)),
    "quiet right": (asks.QUIET_FIXED, jax.jit(constrained(auto_split), donate_argnums=0)),
    "quiet replicated": (asks.QUIET_FIXED, jax.jit(constrained(auto_replicated), donate_argnums=0)),
    "quiet no constraint": (asks.QUIET_FIXED, jax.jit(lambda v: 2.0 * v, donate_argnums=0)),
}
found = {}
for name, (answer, fn) in cases.items():
    handed = {"programs": [handover._entry(answer, fn)], "checks": {c: 0 for c in judge.checks_of(answer)}}
    found[name] = {"answer": answer.name, "handover": handed,
                   "in_process": [v.outcome for v in judge.judge(answer, handed)]}
print("RESULT" + json.dumps(found))
'''
L6_EXPECTED = {"shift right": PASS, "shift no shardings": FAIL, "shift gathers": FAIL, "shift keeps v": FAIL,
               "shift wrong": FAIL, "quiet right": PASS, "quiet replicated": FAIL, "quiet no constraint": FAIL}


def test_lesson_6s_sharded_answers_are_judged_on_eight_devices_in_process_and_by_the_server(referee):
    from helpers import result_on_eight_devices

    found = result_on_eight_devices(L6_ANSWERS)
    assert {name: case["in_process"] for name, case in found.items()} == \
        {name: [outcome] for name, outcome in L6_EXPECTED.items()}
    # the server's child asks for its 8 devices itself, before its backend starts (no XLA_FLAGS needed)
    for name, case in found.items():
        (verdict,) = referee.judge({case["answer"]: case["handover"]}).verdicts
        assert verdict.outcome == L6_EXPECTED[name], (name, verdict)


def test_a_point_needs_both_verdicts_and_says_what_the_referee_judged(tmp_path):
    from types import SimpleNamespace

    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    from donation_course.grading.referee.combine import apply

    grades = {gid: SimpleNamespace(max_score=2.0, auto_score=score)
              for gid, score in (("l1-q1-check", 2.0), ("l5-q1-check", 2.0), ("l2-q1-check", 0.0))}
    gradebook = SimpleNamespace(find_grade=lambda gid, *_: grades[gid], db=SimpleNamespace(commit=lambda: None))
    path = tmp_path / "nb.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell("x", metadata={"nbgrader": {"grade_id": gid, "grade": True}})
                                       for gid in grades]), path)
    verdicts = [Verdict("train_step (lesson 1)", FAIL, "it donates nothing."),
                Verdict("y_out (lesson 5)", UNJUDGED, "y_out is list."),
                Verdict("apply_delta (lesson 2)", FAIL, "it donates delta.")]
    cells = {"nb": [("l1-q1-check", "l1-train-step", "train_step (lesson 1)"),
                    ("l5-q1-check", "l5-y-out", "y_out (lesson 5)"),
                    ("l2-q1-check", "l2-apply-delta", "apply_delta (lesson 2)")]}
    flags = apply(verdicts, cells, gradebook, {"nb": path}, "a", "s")
    # the kernel's pass refuted: lost and flagged; not judged: lost, unflagged; the kernel's failure: its own
    assert [f.cell for f in flags] == ["l1-q1-check"] and "it donates nothing" in flags[0].reason
    assert {gid: g.auto_score for gid, g in grades.items()} == {"l1-q1-check": 0, "l5-q1-check": 0, "l2-q1-check": 0}
    said = [c.outputs[-1]["evalue"] if c.outputs else "" for c in nbformat.read(path, as_version=4).cells]
    assert said[0].endswith("(judged by the grader on the program your function compiles to)")
    assert said[1].endswith("(judged by the grader on the value your cell handed over)") and said[2] == ""
