"""Build the grading corpus: one learner copy of exercise 7 per case, with a
different answer (or a different kind of breakage). The expected score of
each case is in CASES (out of 10 points for 07_update_with_donate).

    python tests/submissions/build.py DEST   # writes DEST/<student>.ipynb
"""
import json
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
LEARNER = ROOT / "notebooks" / "07_update_with_donate.ipynb"
EXERCISE = "07_update_with_donate"
EXERCISE_MAX = 10   # update_with_donate's cells
CAPSTONE_POINTS = 12  # the capstone's cells, answered right in every case below (tests/submissions/capstone.py)
MAX = EXERCISE_MAX + CAPSTONE_POINTS
# Cases in which the capstone's cells never run or score: the kernel dies, the file is not a notebook, or
# nothing is answered. Every other case gets CAPSTONE_POINTS on top of its exercise score.
NO_CAPSTONE = {"kernelexit", "kernelkill", "malformed", "unanswered"}

PARTIAL = "@functools.partial(jax.jit, donate_argnums=(0,))\ndef update_with_donate(state, delta):\n    return state + delta\n"

# student: (answer cell source or a special edit, expected score, expected status, reason must contain)
CASES = {
    # correct, written several ways
    "partial":      (PARTIAL, 10, "ok", ""),
    "wrapped":      ("def _f(state, delta):\n    return state + delta\nupdate_with_donate = jax.jit(_f, donate_argnums=0)\n", 10, "ok", ""),
    "argnames":     ("def _f(state, delta):\n    return state + delta\nupdate_with_donate = jax.jit(_f, donate_argnames='state')\n", 10, "ok", ""),
    "lambda":       ("update_with_donate = jax.jit(lambda state, delta: state + delta, donate_argnums=(0,))\n", 10, "ok", ""),
    # wrong
    "nodonate":     ("update_with_donate = jax.jit(lambda state, delta: state + delta)\n", 4, "partial", "still alive"),
    "nojit":        ("def update_with_donate(state, delta):\n    return state + delta\n", 4, "partial", "still alive"),
    "wrongvalue":   (PARTIAL.replace("state + delta", "state - delta"), 4, "partial", "ex-values"),
    "wrongarg":     (PARTIAL.replace("(0,)", "(1,)"), 4, "partial", "delta"),
    "overdonate":   (PARTIAL.replace("(0,)", "(0, 1)"), 8, "partial", "delta"),
    # broken
    "syntax":       ("def update_with_donate(state, delta)\n    return state + delta\n", 0, "partial", "SyntaxError"),
    "importerror":  ("import no_such_module_xyz\n" + PARTIAL, 0, "partial", "ModuleNotFoundError"),
    "loopafter":    (PARTIAL + "while True:\n    pass\n", 10, "ok", ""),
    "kernelexit":   ("import os\nos._exit(1)\n", 0, "error", "kernel died"),
    "kernelkill":   ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", 0, "error", "kernel died"),
    "memoryhog":    (PARTIAL + "import numpy as np\nhog = np.ones(2**31)\n", 10, "ok", ""),
    "tamperer":     (PARTIAL.replace("state + delta", "state * 0") +
                     "import numpy as np, builtins, jax.numpy as jnp\n"
                     "np.allclose = lambda *a, **k: True\nnp.array_equal = lambda *a, **k: True\n"
                     "np.testing.assert_allclose = lambda *a, **k: None\njnp.allclose = lambda *a, **k: True\n"
                     "def assert_allclose(*a, **k):\n    return None\n"
                     "builtins.all = lambda *a, **k: True\nbuiltins.any = lambda *a, **k: False\n", 4, "partial", "ex-values"),
    "edited":       ("@edit-test-cells", 10, "ok", ""),
    "deleted":      ("@delete-test-cells", 10, "ok", ""),
    "duplicated":   ("@duplicate-answer", 10, "ok", ""),
    "unanswered":   ("@as-released", 0, "partial", "NotImplementedError"),
    "malformed":    ("@malformed-json", 0, "invalid", "not valid notebook JSON"),
}
CASES = {student: (answer, score if student in NO_CAPSTONE else score + CAPSTONE_POINTS, status, reason)
         for student, (answer, score, status, reason) in CASES.items()}


def build(dest: Path) -> dict:
    from capstone import RIGHT as CAPSTONE  # noqa: N811  (imported here: capstone.py imports this module)

    dest.mkdir(parents=True, exist_ok=True)
    for student, (answer, *_rest) in CASES.items():
        path = dest / f"{student}_{EXERCISE}.ipynb"
        if answer == "@malformed-json":
            path.write_text(LEARNER.read_text()[:-200])
            continue
        nb = nbformat.read(LEARNER, as_version=4)
        cells = nb.cells
        if answer == "@edit-test-cells":
            for c in cells:
                if c.metadata.get("nbgrader", {}).get("grade"):
                    c.source = "pass  # edited by the student"
            answer = PARTIAL
        if answer == "@delete-test-cells":
            nb.cells = cells = [c for c in cells if not c.metadata.get("nbgrader", {}).get("grade")]
            answer = PARTIAL
        for c in cells:
            if c.metadata.get("nbgrader", {}).get("solution") and answer != "@as-released":
                if c.metadata["nbgrader"].get("grade_id") == "cap-answer":
                    c.source = CAPSTONE  # the capstone (tests/submissions/capstone.py) answered right
                else:
                    c.source = PARTIAL if answer == "@duplicate-answer" else answer
        if answer == "@duplicate-answer":
            i = next(i for i, c in enumerate(cells) if c.metadata.get("nbgrader", {}).get("solution"))
            twin = nbformat.from_dict(json.loads(json.dumps(cells[i])))
            twin.id = "copy-of-answer"
            cells.insert(i + 1, twin)
        nbformat.write(nb, path)
    return CASES


if __name__ == "__main__":
    build(Path(sys.argv[1]))
