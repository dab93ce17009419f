"""The capstone's grading corpus: one learner copy of the graded notebook per
case, the exercise answered correctly (EXERCISE_POINTS) and the capstone
answered right or wrong. Each case names the capstone checks (grade ids) it
must fail (those of the step's program both in the kernel and in the referee,
grading/referee/); its expected capstone score in CASES is CAPSTONE_MAX less their
points, all read from the source notebook (donation_course.course), and a
case's total is EXERCISE_POINTS + its capstone score.

    python -m donation_course.corpus.capstone DEST   # writes DEST/<student>_<notebook>.ipynb
"""
import sys
from pathlib import Path

import nbformat
from nbgrader.utils import is_solution

from ..course import CAPSTONE_ANSWER, grade_id
from . import exercise as exercise_corpus

LEARNER = exercise_corpus.LEARNER
EXERCISE = exercise_corpus.EXERCISE
EXERCISE_POINTS = exercise_corpus.EXERCISE_MAX
GRADE_IDS = list(exercise_corpus.CAPSTONE_GRADES)  # the capstone's checks, in the notebook's order
CAPSTONE_MAX = exercise_corpus.CAPSTONE_POINTS

INIT = """def init_opt_state(params):
    return {"m": jax.tree.map(jnp.zeros_like, params), "count": jnp.zeros((), jnp.int32)}
"""
STEP = """@functools.partial(jax.jit, donate_argnames=("params", "opt_state"))
def train_step(params, opt_state, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    m = jax.tree.map(lambda m, g: BETA * m + g, opt_state["m"], grads)
    new_params = jax.tree.map(lambda p, m: p - LR * m, params, m)
    return new_params, {"m": m, "count": opt_state["count"] + 1}, loss
"""
HUNT = """def hunt_nans(params, opt_state, x, y):
    train_step.clear_cache()
    try:
        with jax.debug_nans(True):
            train_step(params, opt_state, x, y)
    except FloatingPointError as exc:
        return str(exc)
    finally:
        train_step.clear_cache()
    return None
"""
RIGHT = INIT + STEP + HUNT

# student: (capstone answer source, grade ids that must lose points)
FAILS = {
    # right, written two ways
    "cap-right":        (RIGHT, []),
    "cap-argnums":      (INIT + STEP.replace('donate_argnames=("params", "opt_state")', "donate_argnums=(0, 1)") + HUNT,
                         []),
    # right: lesson 5's recipe, a separate non-donating jit for the hunt (train_step is never touched)
    "cap-separate-debug": (INIT + STEP.replace('@functools.partial(jax.jit, donate_argnames=("params", "opt_state"))\n'
                                               'def train_step(', "def _step(")
                           + 'train_step = jax.jit(_step, donate_argnames=("params", "opt_state"))\n'
                           + "def hunt_nans(params, opt_state, x, y):\n"
                           + "    with jax.debug_nans(True):\n"
                           + "        try:\n"
                           + "            jax.jit(_step)(params, opt_state, x, y)\n"
                           + "        except FloatingPointError as exc:\n"
                           + "            return str(exc)\n"
                           + "    return None\n", []),
    # wrong
    "cap-nodonate":     (INIT + STEP.replace(', donate_argnames=("params", "opt_state")', "") + HUNT,
                         exercise_corpus.NOT_DONATING),
    "cap-params-only":  (INIT + STEP.replace('donate_argnames=("params", "opt_state")', 'donate_argnames="params"')
                         + HUNT, exercise_corpus.NOT_DONATING),
    "cap-overdonate":   (INIT + STEP.replace('donate_argnames=("params", "opt_state")',
                                             'donate_argnames=("params", "opt_state", "x")') + HUNT,
                         # x cannot be reused (no output fits) so it survives: only the request shows it
                         ["cap-donated-leaves"]),
    "cap-tied":         (INIT.replace("jax.tree.map(jnp.zeros_like, params)", "params") + STEP + HUNT,
                         ["cap-public", "cap-untied"]),
    "cap-no-momentum":  (INIT + STEP.replace("p - LR * m, params, m", "p - LR * g, params, grads")
                         .replace("lambda p, m:", "lambda p, g:") + HUNT, ["cap-values"]),
    "cap-no-clear-before": (INIT + STEP + HUNT.replace("    train_step.clear_cache()\n    try:", "    try:"),
                            ["cap-nan-hunt"]),
    "cap-no-clear-after": (INIT + STEP + HUNT.replace("    finally:\n        train_step.clear_cache()\n", ""),
                           ["cap-nan-hunt", "cap-loop"]),
    "cap-unanswered":   (None, GRADE_IDS),  # every check fails
    # right in the kernel, but its program calls back into the kernel (jax.debug.print is a host callback): the
    # referee does not run it, so the checks of the step's program are lost, each with why (unflagged)
    "cap-debug-print":  (INIT + STEP.replace("    loss, grads =", '    jax.debug.print("loss at {x}", x=x[0, 0])\n'
                                             "    loss, grads =") + HUNT, exercise_corpus.REFEREED),
}
# Forgeries of the capstone written against the checks (corpus/forgeries/*.capstone): each donates nothing, and
# must earn no more than an honest non-donating step earns (cap-nodonate), unflagged (nothing in them is tampering).
# Their train_step is a def around a jit, not a jax.jit function: the referee has no program of it, so cap-values
# (the referee's as well as the kernel's) is lost too
FAILS |= {f"cap-forged-{path.stem.replace('_', '-')}": (path.read_text(encoding="utf-8"),
                                                         exercise_corpus.NOT_DONATING + ["cap-values"])
          for path in sorted(exercise_corpus.FORGERIES.glob("*.capstone"))}
# student: (capstone answer source, expected capstone points, grade ids that must lose points)
CASES = {student: (answer, exercise_corpus.capstone_points(failed), failed)
         for student, (answer, failed) in FAILS.items()}


def build(dest: Path) -> dict:
    dest.mkdir(parents=True, exist_ok=True)
    for student, (answer, *_rest) in CASES.items():
        nb = nbformat.read(LEARNER, as_version=4)
        for c in nb.cells:
            if is_solution(c):
                if grade_id(c) == CAPSTONE_ANSWER:
                    if answer is not None:
                        c.source = answer
                else:
                    c.source = exercise_corpus.PARTIAL
        nbformat.write(nb, dest / f"{student}_{EXERCISE}.ipynb")
    return CASES


if __name__ == "__main__":
    build(Path(sys.argv[1]))
