"""The exercise's grading corpus: one learner copy of the graded notebook per
case, with a different answer to update_with_donate (or a different kind of
breakage). The expected score of each case is in CASES (its exercise score,
out of EXERCISE_MAX, plus what it earns in the capstone). Every number of
points is read from the source notebook's grade cells (donation_course.course).

    python -m donation_course.corpus.exercise DEST   # writes DEST/<student>_<notebook>.ipynb
"""
import json
import sys
from pathlib import Path

import nbformat
from nbgrader.utils import is_grade, is_solution

from ..course import CAPSTONE_ANSWER, COURSE, EXERCISE_ANSWER, NOTEBOOKS, SOLUTIONS, grade_id

EXERCISE = COURSE.exercise  # the graded notebook: the one holding update_with_donate's answer cell
LEARNER = NOTEBOOKS / f"{EXERCISE}.ipynb"
EXERCISE_GRADES = COURSE.part(EXERCISE_ANSWER)  # {grade_id: points} of update_with_donate's checks
CAPSTONE_GRADES = COURSE.part(CAPSTONE_ANSWER)  # {grade_id: points} of the capstone's checks
EXERCISE_MAX = sum(EXERCISE_GRADES.values())
CAPSTONE_POINTS = sum(CAPSTONE_GRADES.values())  # answered right in every case below but CAPSTONE's (capstone.py)
MAX = COURSE.points[EXERCISE]  # the notebook's points: a case that answers both parts right
# Cases in which the capstone's cells never run or score: the kernel dies, the file is not a notebook, or
# nothing is answered. Every other case gets CAPSTONE_POINTS on top of its exercise score.
NO_CAPSTONE = {"kernelexit", "kernelkill", "malformed", "unanswered"}

PARTIAL = ("@functools.partial(jax.jit, donate_argnums=(0,))\n"
           "def update_with_donate(state, delta):\n    return state + delta\n")

WRONG = PARTIAL.replace("state + delta", "state * 0")  # scores 4 without any tampering
FLAG = "flagged for manual grading"
SHAPE = "update_with_donate must be made by jax.jit"  # the referee's message to an answer of another shape

# student: (answer cell source or a special edit, expected score, expected status, reason must contain)
CASES = {
    # correct, written several ways
    "partial":      (PARTIAL, EXERCISE_MAX, "ok", ""),
    "wrapped":      ("def _f(state, delta):\n    return state + delta\n"
                     "update_with_donate = jax.jit(_f, donate_argnums=0)\n", EXERCISE_MAX, "ok", ""),
    "argnames":     ("def _f(state, delta):\n    return state + delta\n"
                     "update_with_donate = jax.jit(_f, donate_argnames='state')\n", EXERCISE_MAX, "ok", ""),
    "lambda":       ("update_with_donate = jax.jit(lambda state, delta: state + delta, donate_argnums=(0,))\n",
                     EXERCISE_MAX, "ok", ""),
    # correct, with what honest answers use: warnings and %timeit (lesson 3), functools.partial,
    # jax.tree_util, jax.lax, dataclasses, type hints, a helper function, jnp methods, np.asarray
    "warnedtimed":  (PARTIAL + "import warnings\nwith warnings.catch_warnings():\n    warnings.simplefilter('ignore')\n"
                     "    out = update_with_donate(jnp.ones(3), jnp.ones(3))\n"
                     "%timeit -n 2 -r 1 update_with_donate(jnp.ones(3), jnp.ones(3))\n", EXERCISE_MAX, "ok", ""),
    "treelax":      ("from functools import partial\n\n@partial(jax.jit, donate_argnums=(0,))\n"
                     "def update_with_donate(state, delta):\n"
                     "    return jax.tree_util.tree_map(jax.lax.add, state, delta)\n", EXERCISE_MAX, "ok", ""),
    # another shape: honest wrappers around a jit function. The referee reads the program a jax.jit function
    # lowers to (grading/referee/asks.py), so each point the kernel gives them is lost with the shape it must have
    "plainwrapper": ("_step = jax.jit(lambda s, d: s + d, donate_argnums=0)\n\n"
                     "def update_with_donate(state, delta):\n    return _step(state, delta)\n", 0, "partial", SHAPE),
    "classy":       ("class Updater:\n    def __init__(self):\n"
                     "        self.step = jax.jit(lambda s, d: s + d, donate_argnums=0)\n"
                     "    def __call__(self, state, delta):\n        return self.step(state, delta)\n\n"
                     "update_with_donate = Updater()\n", 0, "partial", SHAPE),
    "dataclassy":   ("import dataclasses\nfrom typing import Callable\nimport numpy as np\n\n\n"
                     "def add_arrays(state: jax.Array, delta: jax.Array) -> jax.Array:\n"
                     "    return jnp.add(state, delta)\n\n\n"
                     "@dataclasses.dataclass\nclass Step:\n    fn: Callable\n\n"
                     "    def __call__(self, state: jax.Array, delta: jax.Array) -> jax.Array:\n"
                     "        return self.fn(state, delta)\n\n\n"
                     "update_with_donate = Step(jax.jit(add_arrays, donate_argnums=0))\n"
                     "print(np.asarray(update_with_donate(jnp.ones(2), jnp.ones(2))).sum(), jnp.ones(2).mean())\n",
                     0, "partial", SHAPE),
    # wrong
    "nodonate":     ("update_with_donate = jax.jit(lambda state, delta: state + delta)\n",
                     4, "partial", "still alive"),
    "nojit":        ("def update_with_donate(state, delta):\n    return state + delta\n", 0, "partial", SHAPE),
    "wrongvalue":   (PARTIAL.replace("state + delta", "state - delta"), 4, "partial", "ex-values"),
    "wrongarg":     (PARTIAL.replace("(0,)", "(1,)"), 4, "partial", "delta"),
    "overdonate":   (PARTIAL.replace("(0,)", "(0, 1)"), 8, "partial", "delta"),
    "overwrapper":  ("_step = jax.jit(lambda s, d: s + d, donate_argnums=(0, 1))\n\n"
                     "def update_with_donate(state, delta):\n    return _step(state, delta)\n", 0, "partial", SHAPE),
    "manualdelete": ("def update_with_donate(state, delta):\n"
                     "    out = state + delta\n    state.delete()\n    return out\n", 0, "partial", SHAPE),
    "copying":      ("@functools.partial(jax.jit, donate_argnums=(0,))\ndef update_with_donate(state, delta):\n"
                     "    return jnp.array(state + delta, copy=True)\n", EXERCISE_MAX, "ok", ""),
    # broken
    "syntax":       ("def update_with_donate(state, delta)\n    return state + delta\n", 0, "partial", "SyntaxError"),
    "importerror":  ("import no_such_module_xyz\n" + PARTIAL, 0, "partial", "ModuleNotFoundError"),
    "loopafter":    (PARTIAL + "while True:\n    pass\n", EXERCISE_MAX, "ok", ""),
    "kernelexit":   ("import os\nos._exit(1)\n", 0, "flagged", "kernel died"),
    "kernelkill":   ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", 0, "flagged", "kernel died"),
    # 1.5 GB into the working folder (the scan flags tofile; the notebook still runs, sandboxed): stops at the
    # disk cap (ENOSPC) and the class goes on
    "diskfill":     (PARTIAL + "import numpy as np\nfor i in range(24):\n    np.ones(2**23).tofile(f'fill-{i}')\n",
                     0, "flagged", "disk cap"),
    "memoryhog":    (PARTIAL + "import numpy as np\nhog = np.ones(2**31)\n", EXERCISE_MAX, "ok", ""),
    "tamperer":     (PARTIAL.replace("state + delta", "state * 0") +
                     "import numpy as np, builtins, jax.numpy as jnp\n"
                     "np.allclose = lambda *a, **k: True\nnp.array_equal = lambda *a, **k: True\n"
                     "np.testing.assert_allclose = lambda *a, **k: None\njnp.allclose = lambda *a, **k: True\n"
                     "def assert_allclose(*a, **k):\n    return None\n"
                     "builtins.all = lambda *a, **k: True\nbuiltins.any = lambda *a, **k: False\n",
                     0, "flagged", FLAG),
    # tampering with the checks or the grader, and hostile code: flagged by the scan before any
    # kernel starts (the notebook still runs, sandboxed, for the instructor to read; no points)
    "hiddenpatch":  (WRONG + "import donation_course.hidden.exercise as h\nfrom donation_lab import checks as c\n"
                     "for name in dir(h):\n    if name.startswith('check_'):\n"
                     "        setattr(h, name, lambda *a, **k: None)\n"
                     "c.expect_allclose = lambda *a, **k: None\n", 0, "flagged", "donation_course"),
    "transformer":  (WRONG + "get_ipython().input_transformers_post.append(lambda lines: [])\n",
                     0, "flagged", "get_ipython"),
    "magicshell":   (PARTIAL + "!ls / > /dev/null\n%env JAX_ENABLE_X64=1\n", 0, "flagged", "get_ipython"),
    "snoop":        (PARTIAL + "import glob\nprint(glob.glob('/**/gradebook.db', recursive=True))\n",
                     0, "flagged", "glob"),
    "dbwrite":      (PARTIAL + "with open('../../../gradebook.db', 'w') as fh:\n    fh.write('gone')\n",
                     0, "flagged", "open"),
    "killparent":   (PARTIAL + "import psutil, signal\npsutil.Process().parent().send_signal(signal.SIGKILL)\n",
                     0, "flagged", "psutil"),
    "network":      (PARTIAL + "import socket\nsocket.create_connection(('example.com', 80), timeout=2)\n",
                     0, "flagged", "socket"),
    "subclasses":   (WRONG + "for k in ().__class__.__base__.__subclasses__():\n    pass\n", 0, "flagged", "__class__"),
    "viaglobals":   (WRONG + "g = globals()\ng['checks'] = None\n", 0, "flagged", "globals"),
    "getattrname":  (WRONG + "getattr(jnp, 'all' + 'close')\nx = getattr(checks, '_'.join(['expect', 'allclose']))\n",
                     0, "flagged", "getattr"),
    # a red-team pass (2026-11): each scored full marks unflagged. A non-donating answer returning an object of a class
    # that subclasses jax.Array and lies about its buffer; over-donation hidden from the checks by a `lower`
    # attribute, by warning filters in the answer's own code, or by a jit function's attributes copied from an
    # honest twin (functools.wraps used as a function, which also plants attributes)
    "fakearray":    ("import numpy as np\nimport numpy.lib.user_array as ua\n\n\n"
                     "class Result(ua.container, jax.Array):\n    def __init__(self, value, pointer):\n"
                     "        super().__init__(value)\n        self.pointer = pointer\n        self.deleted = False\n\n"
                     "    def unsafe_buffer_pointer(self):\n        return self.pointer\n\n"
                     "    def is_deleted(self):\n        return self.deleted\n\n"
                     "    def delete(self):\n        self.deleted = True\n\n"
                     "    def block_until_ready(self):\n        return self\n\n\n"
                     "def update_with_donate(state, delta):\n    pointer = state.unsafe_buffer_pointer()\n"
                     "    out = jnp.add(np.asarray(state), delta)  # no jit, no donation: a new buffer\n"
                     "    state.delete()\n    if out.dtype == jnp.bfloat16:\n        return out\n"
                     "    return Result(np.asarray(out), pointer)\n", 0, "partial", "JAX array"),
    "lyinglower":   ("class Step:\n    def __init__(self):\n"
                     "        self.run = jax.jit(lambda s, d: s + d, donate_argnums=(0, 1))\n"
                     "        self.lower = jax.jit(lambda s, d: s + d, donate_argnums=0).lower\n\n"
                     "    def __call__(self, state, delta):\n        return self.run(state, delta)\n\n\n"
                     "update_with_donate = Step()\n", 0, "partial", SHAPE),
    "hushwrapper":  ("import warnings\n\n_step = jax.jit(lambda s, d: s + d, donate_argnums=(0, 1))\n\n\n"
                     "def update_with_donate(state, delta):\n    with warnings.catch_warnings():\n"
                     "        warnings.simplefilter('ignore')\n        return _step(state, delta)\n",
                     0, "partial", SHAPE),
    "copiedjit":    ("_shown = jax.jit(lambda s, d: s + d, donate_argnums=0)\n"
                     "update_with_donate = functools.wraps(_shown)(\n"
                     "    jax.jit(lambda s, d: s + d, donate_argnums=(0, 1)))\n", 0, "flagged", "wraps"),
    "plantedlower": ("class Shown:\n    def __init__(self):\n"
                     "        self.lower = jax.jit(lambda s, d: s + d, donate_argnums=0).lower\n\n\n"
                     "update_with_donate = jax.jit(lambda state, delta: state + delta, donate_argnums=(0, 1))\n"
                     "functools.wraps(Shown())(update_with_donate)\n", 0, "flagged", "wraps"),
    # their honest neighbours: a wrapper that silences warnings, @functools.wraps on a def, jax.Array in annotations
    "hushedhonest": ("import warnings\n\n_step = jax.jit(lambda s, d: s + d, donate_argnums=0)\n\n\n"
                     "def update_with_donate(state, delta):\n    with warnings.catch_warnings():\n"
                     "        warnings.simplefilter('ignore')\n        return _step(state, delta)\n",
                     0, "partial", SHAPE),
    "wrapsdeco":    ("def add(state: jax.Array, delta: jax.Array) -> jax.Array:\n    return state + delta\n\n\n"
                     "@functools.partial(jax.jit, donate_argnums=0)\n@functools.wraps(add)\n"
                     "def update_with_donate(state, delta):\n    out = add(state, delta)\n"
                     "    assert isinstance(out, jax.Array)\n    return out\n", EXERCISE_MAX, "ok", ""),
    # a second red-team pass (2026-11): each earned points it should not, unflagged. A result of NaN for every float
    # input (a NaN compared with `>` is never "too far": ex-values and ex-training-loop passed); state itself
    # returned, donating nothing (ex-buffer-reuse saw state's pointer); the answer cell saved as a markdown cell,
    # which nbgrader makes code again and runs but the scan did not read (here a reflective getattr)
    "nanresult":    (PARTIAL.replace("return state + delta", "return state + delta + (delta * 0 + jnp.nan).astype("
                                     "state.dtype)  # NaN for floats, + 0 for ints"), 4, "partial", "nan"),
    "returnsstate": ("def update_with_donate(state, delta):\n    return state\n", 0, "partial", "nothing was donated"),
    # a jit whose program calls back into the kernel (a custom call): the referee refuses to run it, so every point
    # the kernel gives it is lost with why, and the class goes on
    "callback":     ("@functools.partial(jax.jit, donate_argnums=(0,))\ndef update_with_donate(state, delta):\n"
                     "    shape = jax.ShapeDtypeStruct(state.shape, state.dtype)\n"
                     "    return jax.pure_callback(lambda a: a, shape, state) + delta\n",
                     0, "partial", "custom call"),
    "markdowncell": ("@markdown:" + WRONG + "x = getattr(jnp, 'all' + 'close')\n", 0, "flagged", "getattr"),
    # their honest neighbours: an answer that guards against NaN, the answer cell as markdown (run as code all the
    # same) beside a markdown note quoting reflective code, a capstone step jitted apart from its def
    "nanguard":     (PARTIAL.replace("return state + delta",
                                     "return jnp.where(jnp.isnan(delta), state, state + delta)"),
                     EXERCISE_MAX, "ok", ""),
    "markdownok":   ("@markdown:" + PARTIAL, EXERCISE_MAX, "ok", ""),
    "capwrapped":   (PARTIAL, EXERCISE_MAX, "ok", ""),
    "capwrapper":   (PARTIAL, EXERCISE_MAX, "partial", "train_step must be made by jax.jit"),
    "capkeepsold":  (PARTIAL, EXERCISE_MAX, "partial", "still alive after the step"),
    "capmarkdown":  (PARTIAL, 0, "flagged", "_dl_capstone"),
    "edited":       ("@edit-test-cells", EXERCISE_MAX, "ok", ""),
    "deleted":      ("@delete-test-cells", EXERCISE_MAX, "ok", ""),
    "duplicated":   ("@duplicate-answer", EXERCISE_MAX, "ok", ""),
    "unanswered":   ("@as-released", 0, "partial", "NotImplementedError"),
    "malformed":    ("@malformed-json", 0, "invalid", "not valid notebook JSON"),
}
# Forgeries written against the grader's source by a red-team pass (corpus/forgeries/*.cell): each
# answer returns state * 0, and each earned full marks unflagged before the layers it now meets. Their honest
# look-alikes (*.honest) earn full marks unflagged. A NEXT_CELL line splits a file: the rest is one more code cell
# of the learner's each, right after the answer cell.
FORGERIES = Path(__file__).with_name("forgeries")
NEXT_CELL = "\n# --- next cell ---\n"
CASES |= {f"forged-{path.stem.replace('_', '-')}": (path.read_text(encoding="utf-8"), 0, "flagged", FLAG)
          for path in sorted(FORGERIES.glob("*.cell"))}
CASES |= {f"honest-{path.stem.replace('_', '-')}": (path.read_text(encoding="utf-8"), EXERCISE_MAX, "ok", "")
          for path in sorted(FORGERIES.glob("*.honest"))}
# The capstone's answer (and the capstone checks it fails) where a case does not answer it right: a non-donating
# step whose outputs carry the old leaves along (cap-buffer-reuse saw their pointers: 2 points), momentum-free SGD
# that set the hidden module's BETA to 0 from a markdown answer cell (the scan did not read it; cap-values passed);
# and a markdown note
NOT_DONATING = ["cap-public", "cap-donated-leaves", "cap-buffer-reuse", "cap-nan-hunt", "cap-loop"]
# Its step is a def around a jit, so the referee has no program of it: cap-values (the referee's too) is lost as well.
# capwrapper's step is an honest def around a donating jit: the kernel passes all but cap-donated-leaves (no .lower),
# and the referee's checks of the step are lost with the shape train_step must have (the untied state and the NaN
# hunt rest on the kernel's checks alone)
REFEREED = ["cap-public", "cap-values", "cap-donated-leaves", "cap-buffer-reuse", "cap-loop"]
CAPSTONE_FAILS = {"capwrapped": [], "capkeepsold": NOT_DONATING + ["cap-values"], "capmarkdown": list(CAPSTONE_GRADES),
                  "capwrapper": REFEREED}


def capstone_points(failed=()) -> float:
    """The capstone's points of an answer that fails the checks `failed` (grade ids) and passes the others."""
    return CAPSTONE_POINTS - sum(CAPSTONE_GRADES[g] for g in failed)


CAPSTONE = {student: capstone_points(failed) for student, failed in CAPSTONE_FAILS.items()}  # their capstone points
NOTE = "A note to self, not run: `getattr(params, name)` reads any attribute; `exec(code)` runs a string."


def _capstone(right: str) -> dict:  # the capstone answers of CAPSTONE (capstone.py's RIGHT, rewritten)
    jitted = '@functools.partial(jax.jit, donate_argnames=("params", "opt_state"))\ndef train_step('
    helper = right.replace("train_step.clear_cache()", "_step.clear_cache()")
    return {
        "capwrapped": right.replace(jitted, "def train_step(")  # the jit applied after the def, by position
        + "\n\ntrain_step = jax.jit(train_step, donate_argnums=(0, 1))\n",
        "capkeepsold": helper.replace(jitted, "@jax.jit\ndef _step(") + "\n\ndef train_step(params, opt_state, x, y):\n"
        '    params = {"w": params["w"], "b": params["b"]}\n'
        '    opt_state = {"m": opt_state["m"], "count": opt_state["count"]}\n'
        "    new_params, new_opt, loss = _step(params, opt_state, x, y)\n"
        '    return {**new_params, "old": params}, {**new_opt, "old": opt_state}, loss\n',
        "capwrapper": helper.replace(jitted, '@functools.partial(jax.jit, donate_argnames=("params", "opt_state"))\n'
                                     "def _step(") + "\n\ndef train_step(params, opt_state, x, y):\n"
        "    return _step(params, opt_state, x, y)\n",
        "capmarkdown": "@markdown:" + right.replace("BETA * m + g", "g").replace(
            "def init_opt_state(params):\n", "def init_opt_state(params):\n    _dl_capstone.BETA = 0.0\n"),
    }


# Every other case also answers the capstone right (build() fills it in: as the solution does, unless told
# otherwise), so it earns the capstone's points too, except where nothing of the notebook can be graded:
# a dead kernel, an unreadable file, the untouched release, and a flagged
# notebook (all its grade cells wait for the instructor, with no automatic points).
CASES = {student: (answer, score if student in NO_CAPSTONE or status == "flagged"
                   else score + CAPSTONE.get(student, CAPSTONE_POINTS), status, reason)
         for student, (answer, score, status, reason) in CASES.items()}


def solution_capstone() -> str:
    """The capstone answered as the instructor's solution answers it: its answer cell in the solved copy
    (solutions/, made from the source notebook), read as the debugging corpus reads its solved cells. Its programs
    are those the course's compile cache holds (grading/run/compile_cache.py fills it from the same notebook), so a
    kernel that runs it compiles nothing of its own for the capstone."""
    path = SOLUTIONS / f"{EXERCISE}.ipynb"
    cells = [c.source for c in nbformat.read(path, as_version=4).cells if grade_id(c) == CAPSTONE_ANSWER]
    if len(cells) != 1:
        raise ValueError(f"{path} has {len(cells)} cells with grade id {CAPSTONE_ANSWER!r}, not one")
    return cells[0]


def build(dest: Path, capstone_answer: str | None = None) -> dict:
    """Each case's notebook in dest. Where a case answers the capstone right, it answers `capstone_answer`, by
    default the solution's (solution_capstone)."""
    from .capstone import RIGHT  # imported here: capstone.py imports this module

    capstone = _capstone(RIGHT)
    # (the solution's capstone defines a global _step, as some exercise answers do: theirs is replaced after the
    # exercise's checks, whose cells come first, have run)
    right = capstone_answer if capstone_answer is not None else solution_capstone()

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
                if is_grade(c):
                    c.source = "pass  # edited by the student"
            answer = PARTIAL
        if answer == "@delete-test-cells":
            nb.cells = cells = [c for c in cells if not is_grade(c)]
            answer = PARTIAL
        for i, c in enumerate(cells):
            if is_solution(c) and answer != "@as-released":
                if grade_id(c) == CAPSTONE_ANSWER:  # the capstone answered right, or as CAPSTONE says
                    c.source = capstone.get(student, right)
                else:
                    c.source = PARTIAL if answer == "@duplicate-answer" else answer
                if c.source.startswith("@markdown:"):  # the same cell, saved as markdown: id, metadata and all
                    cells[i] = md = nbformat.v4.new_markdown_cell(c.source.removeprefix("@markdown:"))
                    md.id, md.metadata = c.id, c.metadata
        if student == "markdownok":
            cells.insert(1, nbformat.v4.new_markdown_cell(NOTE))
        for i, c in reversed(list(enumerate(cells))):  # a forgery's further cells, after its answer cell
            if c.cell_type == "code" and NEXT_CELL in c.source:
                c.source, *more = c.source.split(NEXT_CELL)
                cells[i + 1:i + 1] = [nbformat.v4.new_code_cell(text) for text in more]
        if answer == "@duplicate-answer":
            i = next(i for i, c in enumerate(cells) if is_solution(c))
            twin = nbformat.from_dict(json.loads(json.dumps(cells[i])))
            twin.id = "copy-of-answer"
            cells.insert(i + 1, twin)
        nbformat.write(nb, path)
    return CASES


if __name__ == "__main__":
    build(Path(sys.argv[1]))
