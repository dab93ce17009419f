"""The grading corpus of lesson 3's debugging exercise (a training loop with one
donation bug; hidden/debugging.py): one learner copy of lesson 3 per case, its
other answer cells answered as the solution copy answers them, and `fixed_step`
(the answer cell ANSWER) answered right or wrong. Each case names the
exercise's checks (grade ids) it must fail; its expected score in CASES is the
exercise's points less theirs, all read from the source notebook
(donation_course.course), and a case's lesson total is LESSON_MAX less the same.

    python -m donation_course.corpus.debugging DEST   # writes DEST/<student>_<notebook>.ipynb
"""
import sys
from pathlib import Path

import nbformat
from nbgrader.utils import is_solution

from ..course import COURSE, NOTEBOOKS, SOLUTIONS, grade_id

ANSWER = "l3-bug-answer"
LESSON = next(nb for nb, cells in COURSE.cells.items() if any(c.grade_id == ANSWER for c in cells))
LEARNER = NOTEBOOKS / f"{LESSON}.ipynb"
SOLVED = SOLUTIONS / f"{LESSON}.ipynb"
GRADES = COURSE.part(ANSWER)        # {grade id: points}: the exercise's checks, in the notebook's order
MAX = sum(GRADES.values())          # the exercise's points
LESSON_MAX = COURSE.points[LESSON]  # the lesson's points, this exercise's among them
PUBLIC, VALUES, DONATED, LOOP = GRADES  # l3-bug-check, l3-bug-values, l3-bug-donated, l3-bug-loop
ALL = list(GRADES)

# student: (answer cell source, grade ids that must lose points)
FAILS = {
    # the fix, written two ways: donate what the loop replaces (params and opt_state), not the batch
    "bug-argnums":  ("fixed_step = jax.jit(step_fn, donate_argnums=(1, 2))\n", []),
    "bug-argnames": ('fixed_step = jax.jit(step_fn, donate_argnames=("params", "opt_state"))\n', []),
    # silences the warning only: the batch is no longer asked to donate, but opt_state still is not donated
    "bug-silenced": ("fixed_step = jax.jit(step_fn, donate_argnums=1)\n", [PUBLIC, DONATED, LOOP]),
    # copies: no donation at all, so every step allocates new params and opt_state
    "bug-copying":  ("fixed_step = jax.jit(step_fn)\n", [PUBLIC, DONATED, LOOP]),
    # the bug left as it is: the batch asked to donate (not usable), opt_state not donated
    "bug-unfixed":  ("fixed_step = train_step\n", ALL),
}
CASES = {student: (answer, MAX - sum(GRADES[g] for g in losing), losing)
         for student, (answer, losing) in FAILS.items()}


def build(dest: Path) -> dict:
    solved = {grade_id(c): c.source for c in nbformat.read(SOLVED, as_version=4).cells if is_solution(c)}
    dest.mkdir(parents=True, exist_ok=True)
    for student, (answer, *_rest) in CASES.items():
        nb = nbformat.read(LEARNER, as_version=4)
        for c in nb.cells:
            if is_solution(c):
                c.source = answer if grade_id(c) == ANSWER else solved[grade_id(c)]
        nbformat.write(nb, dest / f"{student}_{LESSON}.ipynb")
    return CASES


if __name__ == "__main__":
    build(Path(sys.argv[1]))
