"""The grading sandbox (bubblewrap), the static scan and the fixed kernel
environment: what a grading kernel can reach, what the scan flags (and
never flags), and that scores do not depend on the instructor's shell."""
import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest

from donation_course.corpus import exercise as corpus
from donation_course.course import COURSE, EXERCISE_ANSWER, ROOT, Course
from donation_course.grading.integrity.audit import end_source
from donation_course.grading.integrity.scan import scan_notebook, scan_source
from helpers import GRADE_LIMITS, LIMIT_SCALE, grade, gradebook_scores, make_course, read_grades
from kernel_runner import KernelRunner

ASSIGNMENT = COURSE.assignment
EX = corpus.EXERCISE
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


# --- the static scan -------------------------------------------------------------

def test_no_solution_of_the_course_is_flagged():
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        release = nbformat.read(ROOT / "notebooks" / path.name, as_version=4)
        answers = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
        assert answers, path  # the scan really reads answer cells here
        assert scan_notebook(nb, path.stem, release) == [], path


def test_no_honest_corpus_answer_is_flagged_and_every_tampering_one_is(tmp_path):
    corpus.build(tmp_path)
    release = nbformat.read(corpus.LEARNER, as_version=4)
    for student, (_, _, status, _) in corpus.CASES.items():
        if status == "invalid":
            continue
        nb = nbformat.read(tmp_path / f"{student}_{EX}.ipynb", as_version=4)
        flags = scan_notebook(nb, EX, release)
        assert bool(flags) == (status == "flagged"), (student, [str(f) for f in flags])


@pytest.mark.parametrize("source", [
    "import math\nx = math.sqrt(2)\n",
    "class A:\n    def __init__(self):\n        self.f = jax.jit(lambda s, d: s + d, donate_argnums=0)\n",
    "n = getattr(state, 'shape')\n",
    "update_with_donate = jax.jit(lambda s, d: s + d, donate_argnums=(0,))\n",
    "print(f'{state.dtype} {len(state)}')\n",
    "def f(a):\n    return a.__len__()\n",
    "import warnings\nwith warnings.catch_warnings():\n    warnings.simplefilter('ignore')\n",  # lesson 3 teaches it
    "%timeit update_with_donate(x, d)\n",
])
def test_ordinary_code_is_not_flagged(source):
    assert scan_source(source) == []


@pytest.mark.parametrize("source, reason", [
    ("display({'application/vnd.donation-lab.handover+json': {}}, raw=True)\n", "hand-over output type"),
    ("kind = f'application/vnd.{x}donation-lab.handover+json'\n", "hand-over output type"),
    ("import os\n", "imports os"),
    ("from importlib import reload\n", "imports importlib"),
    ("import numpy as np\nnp.allclose = lambda *a: True\n", "assigns attribute np.allclose"),
    ("checks.expect_allclose = print\n", "assigns attribute checks.expect_allclose"),
    ("del jnp.allclose\n", "deletes attribute"),
    ("setattr(checks, 'require', print)\n", "setattr"),
    ("get_ipython().input_transformers_post.append(lambda l: [])\n", "IPython's shell"),
    ("%env XLA_FLAGS=x\n", "IPython's shell"),
    ("!cat /etc/passwd\n", "IPython's shell"),
    ("exec('1')\n", "exec"), ("eval('1')\n", "eval"), ("compile('1', 'f', 'exec')\n", "compile"),
    ("__import__('os')\n", "__import__"), ("vars(checks)['x'] = 1\n", "vars()"),
    ("().__class__.__mro__\n", "dunder attribute"), ("f.__globals__\n", "dunder attribute"),
    ("open('/etc/hosts')\n", "open"), ("x = getattr(jnp, name)\n", "getattr"),
    ("jax._src.config\n", "private attribute"), ("import ctypes\n", "imports ctypes"),
    ("import gc\n", "imports gc"), ("import inspect\n", "imports inspect"), ("import signal\n", "imports signal"),
    ("import psutil\n", "imports psutil"), ("import socket\n", "imports socket"),
    ("import donation_course.hidden.exercise\n", "imports donation_course"),
])
def test_tampering_constructs_are_flagged(source, reason):
    found = scan_source(source)
    assert any(reason in r for _, r in found), found


def test_the_locked_and_unchanged_cells_are_trusted_an_edited_lesson_cell_is_not():
    nb = nbformat.read(ROOT / "solutions" / "06_shardings.ipynb", as_version=4)
    release = nbformat.read(ROOT / "notebooks" / "06_shardings.ipynb", as_version=4)
    assert scan_notebook(nb, "06", release) == []  # its own `import os` cell is the course's code
    cell = next(c for c in nb.cells if c.cell_type == "code" and "import os" in c.source)
    cell.source += "\nos.environ['JAX_ENABLE_X64'] = '1'\n"
    assert scan_notebook(nb, "06", release)


# --- inside a grading kernel -------------------------------------------------------

FORKED_OR_NOT = pytest.mark.parametrize("forked", [True, False], ids=["forked", "started"])


def run_in_sandbox(tmp_path, code, cache=None, trusted=(), forked=True, audit=True):
    """Start one grading kernel the way a worker does (kernelspec, ipc,
    scratch folder, the compile cache `cache` if given) with its working
    folder in a course, run `code` (one cell's source, or a list of cells;
    those in `trusted` are the course's own), return (course, working
    folder, stdout: the outputs, then a line 'AUDIT <json>' with each
    kernel's audit records). `forked`: the kernel is forked into its sandbox
    from the worker's kernel zygote (the default, kernel_zygote.py), else
    started as a new Python there (kernel.py's --inner step, its fallback).
    `audit`: c.GradingSettings.audit (the runtime audit, on by default).
    Without a cache the kernel comes from this test process's kernel runner
    (kernel_runner.py: one zygote for all its kernels, as in a worker); with
    one, from a runner of its own, whose zygote gets that cache."""
    course = make_course(tmp_path / "course")
    (course / "gradebook.db").write_text("secret grades")
    bob = course / "submitted" / "bob" / "a"
    bob.mkdir(parents=True)
    (bob / "answer.ipynb").write_text("bob's work")
    cwd = course / "autograded" / "alice" / "a"
    cwd.mkdir(parents=True)
    (cwd / "mine.txt").write_text("alice's file")
    cells = [code] if isinstance(code, str) else list(code)
    runner = KERNELS if cache is None else KernelRunner(TOKEN, str(cache))
    try:
        reply = runner.run({"cwd": str(cwd), "cells": cells, "trusted": list(trusted), "forked": forked,
                            "audit": audit})
    finally:
        if runner is not KERNELS:
            runner.close()
    return course, cwd, reply["out"] + "\n" + "AUDIT " + json.dumps(reply["audit"]) + "\n"


@needs_bwrap
@FORKED_OR_NOT
def test_a_kernel_writing_1_5_gb_stops_at_the_disk_cap_in_its_folder_and_its_tmp(tmp_path, forked):
    """The working folder and /tmp are tmpfs of settings.disk_mb (256 MiB)
    each: writing 1.5 GB in 64 MiB files stops with ENOSPC near the cap, in
    the sandbox only; nothing of it reaches the grader's disk."""
    code = """
import errno, os
chunk = b"x" * (64 << 20)
for where in (".", "/tmp"):
    written = 0
    try:
        for i in range(24):  # 1.5 GB
            with open(os.path.join(where, f"fill-{i}"), "wb") as fh:
                fh.write(chunk)
            written += len(chunk)
    except OSError as exc:
        print(where, "stopped", errno.errorcode[exc.errno], written >> 20, "MiB")
    else:
        print(where, "NOT STOPPED", written >> 20, "MiB")
"""
    course, cwd, out = run_in_sandbox(tmp_path, code, forked=forked)
    assert ". stopped ENOSPC" in out and "/tmp stopped ENOSPC" in out, out
    for line in out.splitlines():
        if "stopped" in line:
            assert 128 <= int(line.split()[-2]) <= 256, out
    assert not list(cwd.glob("fill-*")), "the kernel's writes reached the real working folder"


@needs_bwrap
@FORKED_OR_NOT
def test_the_kernels_runtime_folder_is_a_small_tmpfs_and_its_writes_never_reach_the_grader(tmp_path, forked):
    """The folder that holds the connection file and the sockets is a tmpfs of sandbox.RUNTIME_BYTES inside (the
    grader reaches the sockets through links): 600 MB written there stop at its cap, and none of it is outside."""
    from donation_course.grading.integrity.sandbox import RUNTIME_BYTES

    code = """
import errno, os, sys
runtime = os.path.dirname(sys.argv[sys.argv.index("-f") + 1])
written = 0
try:
    for i in range(10):
        with open(os.path.join(runtime, f"fill-{i}"), "wb") as fh:
            fh.write(b"x" * (60 << 20))
        written += 60 << 20
except OSError as exc:
    print("runtime stopped", errno.errorcode[exc.errno], written, "bytes")
try:
    open(os.path.join(runtime, "connection.json"), "a").write("x")
except OSError as exc:
    print("connection file", errno.errorcode[exc.errno])
print("runtime holds", sorted(n for n in os.listdir(runtime) if not n.startswith("kernel-ipc")))
"""
    course, cwd, out = run_in_sandbox(tmp_path, code, forked=forked)
    assert "runtime stopped ENOSPC" in out and "connection file EROFS" in out, out
    assert int(out.split("runtime stopped ENOSPC ")[1].split()[0]) <= RUNTIME_BYTES, out


@needs_bwrap
@pytest.mark.parametrize("forked, audit", [(True, True), (False, True), (False, False)],
                         ids=["forked", "started", "started-unaudited"])
def test_a_grading_kernel_offers_no_debugger_yet_a_learner_can_import_debugpy(tmp_path, forked, audit):
    """kernel_app.py: however a grading kernel starts, ipykernel finds no debugpy while it starts, so it imports
    neither debugpy nor pydevd and offers no debugger; a learner's own `import debugpy` still works."""
    code = """
import sys, ipykernel.debugger
print("debugger", ipykernel.debugger._is_debugpy_available, "pydevd" in sys.modules, "debugpy" in sys.modules)
import debugpy
print("imported", debugpy.__name__, "kernel", getattr(get_ipython().kernel, "debugger", None))
"""
    _, _, out = run_in_sandbox(tmp_path, code, forked=forked, audit=audit)
    assert "debugger False False False" in out, out
    assert "imported debugpy kernel None" in out, out


@needs_bwrap
@FORKED_OR_NOT
def test_a_grading_kernel_reaches_nothing_but_its_own_copy(tmp_path, forked):
    cache = tmp_path / "course-cache"  # as the course's compile cache: read, never written
    cache.mkdir()
    (cache / "entry-cache").write_text("compiled by the instructor")
    code = f"""
import os, socket, sys
def tryit(label, f):
    try:
        f(); print(label, "REACHED")
    except Exception as e:
        print(label, "blocked", type(e).__name__)
course = os.path.dirname(os.path.dirname(os.path.dirname(os.getcwd())))
cache = os.environ["JAX_COMPILATION_CACHE_DIR"]
print("cache-entry", open(os.path.join(cache, "entry-cache")).read(), "|")
print("cache-min-time", os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"])
tryit("cache-overwrite", lambda: open(os.path.join(cache, "entry-cache"), "w").write("planted"))
tryit("cache-plant", lambda: open(os.path.join(cache, "new-cache"), "w").write("planted"))
tryit("gradebook", lambda: open(os.path.join(course, "gradebook.db")).read())
tryit("classmate", lambda: os.listdir(os.path.join(course, "submitted", "bob")))
tryit("course-source", lambda: os.listdir(os.path.join(course, "source")))
tryit("repo-source", lambda: os.listdir({str(ROOT / 'autograder' / 'source')!r}))
print("home", sorted(os.listdir("/root")) if os.path.isdir("/root") else [])
tryit("network", lambda: socket.create_connection(("1.1.1.1", 53), timeout=3))
tryit("overwrite", lambda: open(os.path.join(course, "gradebook.db"), "w").write("x"))
# the sandbox's root tmpfs (no size cap) and the folders bwrap made on it: read-only, whoever the kernel runs as
tryit("root-tmpfs", lambda: open("/planted", "w").write("x"))
tryit("made-folder", lambda: open(os.path.join(os.path.dirname(sys.prefix), "planted"), "w").write("x"))
print("own-file", open("mine.txt").read())
open("mine.txt", "w").write("changed in the sandbox")
print("uid", os.getuid(), "pid1", open("/proc/1/cmdline").read().split(chr(0))[0])
print("pid", os.getpid(), "pid2", os.path.basename(open("/proc/2/cmdline").read().split(chr(0))[0]))
print("processes", sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
print("own-session", os.getsid(0) == os.getpid() == os.getpgid(0))
status = dict(line.split(":", 1) for line in open("/proc/%d/status" % os.getpid()).read().splitlines())
caps = ("CapInh", "CapPrm", "CapEff", "CapAmb")
print("caps", *(status[k].strip() for k in caps), "nnp", status["NoNewPrivs"].strip())
"""
    course, cwd, out = run_in_sandbox(tmp_path, code, cache=cache, forked=forked)
    # the instructor's home: at most the folder holding the interpreter the venv was made from
    assert "home []" in out or "home ['.pyenv']" in out, out
    for label in ("gradebook", "classmate", "course-source", "repo-source", "network", "overwrite",
                  "cache-overwrite", "cache-plant", "root-tmpfs", "made-folder"):
        assert f"{label} blocked" in out, out
    assert "cache-entry compiled by the instructor |" in out and "cache-min-time inf" in out, out
    assert [p.name for p in cache.iterdir()] == ["entry-cache"]
    assert (cache / "entry-cache").read_text() == "compiled by the instructor"
    assert "REACHED" not in out, out
    assert "own-file alice's file" in out, out
    assert "uid 65534" in out, out  # not root: RLIMIT_NPROC applies
    assert "pid1 bwrap" in out or "pid1 /" in out, out  # its own PID namespace: the grader is not in it
    # the kernel is the third process there, beside bwrap's init and what ends the sandbox when its launcher
    # dies: the holder (`cat`) when it was forked in (kernel_zygote.py), the launcher's inner step (kernel._watch)
    # when it was started there. Either way no capability, and no privilege an exec could gain
    assert f"pid 3 pid2 {'cat' if forked else 'python'}" in out and "processes [1, 2, 3]" in out, out
    # its own session and process group: ipykernel's interrupt (a cell's time limit) signals the group only
    assert "own-session True" in out, out
    assert "caps 0000000000000000 0000000000000000 0000000000000000 0000000000000000 nnp 1" in out, out
    assert (course / "gradebook.db").read_text() == "secret grades"
    assert (cwd / "mine.txt").read_text() == "alice's file"  # writes went to the scratch copy


@needs_bwrap
def test_a_grading_kernel_loads_what_the_source_compiled_and_writes_nothing(tmp_path, course_template):
    """The course's compile cache (compile_cache.py, filled by the grader's
    prepare from the source's hidden tests) serves a correct answer's
    programs to a sandboxed kernel; a program the source never compiled
    compiles as usual and is not written."""
    cache = Course(course_template).compile_cache
    before = sorted(p.name for p in cache.iterdir())
    code = """
import functools, logging, sys
import jax, jax.numpy as jnp
log = logging.getLogger("jax._src.compiler")
log.addHandler(logging.StreamHandler(sys.stdout)); log.setLevel(logging.DEBUG)
def update_with_donate(state, delta):
    return state + delta
def other_name(state, delta):
    return state + delta
for f in (update_with_donate, other_name):
    jax.jit(f, donate_argnums=(0,))(jnp.array([1.0, 2.0]), jnp.array([0.5, 0.5]))
"""
    _, _, out = run_in_sandbox(tmp_path, code, cache=cache)
    lines = [ln for ln in out.splitlines() if "update_with_donate" in ln or "other_name" in ln]
    assert any("cache hit for 'jit_update_with_donate'" in ln.lower() for ln in lines), out
    assert any("CACHE MISS for 'jit_other_name'" in ln for ln in lines), out
    assert not any("cache hit for 'jit_other_name'" in ln.lower() for ln in lines), out
    assert sorted(p.name for p in cache.iterdir()) == before


RECOMPILING = """
import logging, sys
import jax, jax.numpy as jnp
log = logging.getLogger("jax._src.compiler")
log.addHandler(logging.StreamHandler(sys.stdout)); log.setLevel(logging.DEBUG)
def own_step(state, delta):
    return jnp.tanh(state) * 2.0 + delta
step = jax.jit(own_step, donate_argnums=(0,))
for clear in (step.clear_cache, jax.clear_caches, lambda: None):
    state = jnp.ones(5)
    out = step(state, jnp.ones(5))
    print("donated", state.is_deleted(), "value", round(float(out[0]), 4))
    clear()
"""


@needs_bwrap
@FORKED_OR_NOT
def test_a_grading_kernel_compiles_a_program_once_and_the_next_kernel_compiles_it_again(tmp_path, course_template,
                                                                                       forked):
    """An answer that clears its jit cache makes JAX compile the same program
    again: a grading kernel loads it from its own memory instead
    (kernel_compile_memo.py), and what it loads donates and computes as the
    compiled program did. The memory is the kernel's alone: the next kernel
    of the same grading process, forked from the same zygote or not,
    compiles the program for itself, and the course's cache stays as it was."""
    cache = Course(course_template).compile_cache
    before = sorted(p.name for p in cache.iterdir())
    course = make_course(tmp_path / "course")
    runner = KernelRunner(TOKEN, str(cache))
    try:
        outs = []
        for student in ("alice", "bob"):
            cwd = course / "autograded" / student / "a"
            cwd.mkdir(parents=True)
            outs.append(runner.run({"cwd": str(cwd), "cells": [RECOMPILING], "trusted": [], "forked": forked,
                                    "audit": True})["out"])
    finally:
        runner.close()
    for out in outs:
        lines = [ln for ln in out.splitlines() if "'jit_own_step'" in ln]
        assert sum("CACHE MISS for 'jit_own_step'" in ln for ln in lines) == 1, out
        assert sum("cache hit for 'jit_own_step'" in ln.lower() for ln in lines) == 2, out
        assert out.count(f"donated True value {round(2 * math.tanh(1) + 1, 4)}") == 3, out
    assert sorted(p.name for p in cache.iterdir()) == before


def test_the_compile_memo_is_only_for_kernels_that_read_a_course_cache_they_cannot_write(monkeypatch):
    """The instructor's own fill writes the course's cache (its minimum compile time is 0), a kernel without a
    course cache has none to layer: neither gets the memory."""
    from donation_course.grading.integrity import kernel_compile_memo

    for env in ({"JAX_COMPILATION_CACHE_DIR": "/nonexistent", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"},
                {"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "inf"}):
        monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        assert kernel_compile_memo.install() is False


# --- through ./course grade -------------------------------------------------------

PLANTER = """
import os
from jax._src import compilation_cache
cache = os.environ["JAX_COMPILATION_CACHE_DIR"]
before = len(os.listdir(cache))
compilation_cache.reset_cache()  # JAX's own cache of the folder again, not the kernel's memory over it
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
jax.jit(lambda x: x * 3)(jnp.ones(3))
print("planted", len(os.listdir(cache)) - before)
"""


def test_an_unsandboxed_run_leaves_the_courses_compile_cache_as_it_was(tmp_path, env, generated_course):
    """--no-sandbox kernels run as the instructor: only JAX's settings keep
    them from writing the compile cache, so they get this run's copy of it.
    A submission that turns writing back on (JAX's cache of the folder instead
    of the kernel's memory, kernel_compile_memo.py, and no minimum compile
    time) writes into the copy alone."""
    subs = tmp_path / "subs"
    subs.mkdir()
    corpus.build(tmp_path / "files")
    nb = nbformat.read(tmp_path / "files" / f"partial_{EX}.ipynb", as_version=4)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == EXERCISE_ANSWER:
            cell.source += PLANTER
    nbformat.write(nb, subs / f"planter_{EX}.ipynb")
    course = generated_course(tmp_path / "course")
    before = sorted(p.name for p in (Course(course).compile_cache).iterdir())
    grade(env, subs, "--course", course, "--no-sandbox", *GRADE_LIMITS)
    graded = (course / "autograded" / "planter" / ASSIGNMENT / f"{EX}.ipynb").read_text()
    assert "planted 1" in graded
    assert sorted(p.name for p in (Course(course).compile_cache).iterdir()) == before



HOSTILE_ENV = {"PYTHONWARNINGS": "default", "JAX_DEBUG_NANS": "1", "JAX_ENABLE_X64": "1",
               "XLA_FLAGS": "--xla_force_host_platform_device_count=3", "JAX_DISABLE_JIT": "1",
               "OMP_NUM_THREADS": "7", "LANG": "tr_TR.UTF-8"}
SMALL_CLASS = ["partial", "plainwrapper", "overdonate", "nodonate", "transformer"]


def live_processes_under(path):
    import psutil

    found = []
    for p in psutil.process_iter(["cmdline", "cwd"]):
        try:
            text = " ".join(p.info["cmdline"] or []) + " " + (p.info["cwd"] or "")
        except (psutil.Error, TypeError):
            continue
        if str(path) in text and p.pid != os.getpid():
            found.append((p.pid, text[:200]))
    return found


@needs_bwrap
def test_scores_do_not_depend_on_the_instructors_shell_and_outputs_are_capped(tmp_path, env, generated_course):
    files = tmp_path / "files"
    corpus.build(files)
    for f in files.iterdir():
        if f.name.split("_")[0] not in SMALL_CLASS:
            f.unlink()
    nb = nbformat.read(files / f"partial_{EX}.ipynb", as_version=4)
    for cell in nb.cells:  # update_with_donate's answer floods; the capstone stays answered
        if cell.metadata.get("nbgrader", {}).get("grade_id") == EXERCISE_ANSWER:
            cell.source = corpus.PARTIAL + "for i in range(200):\n    print('x' * 100_000)\n"
    nbformat.write(nb, files / f"flood_{EX}.ipynb")
    course = generated_course(tmp_path / "course")
    grade({**env, **HOSTILE_ENV}, files, "--course", course, "--workers", "2",
          "--timeout", str(round(150 * LIMIT_SCALE)), "--cell-timeout", str(round(15 * LIMIT_SCALE)), "--no-progress")
    rows = read_grades(course / ".grading" / "grades.csv")
    for student in SMALL_CLASS:
        _, score, status, reason = corpus.CASES[student]
        assert (float(rows[student][EX]), rows[student]["status"]) == (score, status), rows[student]
        assert reason in rows[student]["reason"], rows[student]
    assert float(rows["flood"][EX]) == corpus.MAX, rows["flood"]
    flooded = (course / "autograded" / "flood" / ASSIGNMENT / f"{EX}.ipynb").read_text()
    assert "output capped by the grader" in flooded and len(flooded) < 4 << 20
    assert set(gradebook_scores(course)) == set(SMALL_CLASS) | {"flood"}
    assert live_processes_under(course) == []


def test_without_bwrap_grading_stops_with_one_line(tmp_path, env):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    found = shutil.which("python3") or sys.executable  # maybe a launcher script (pyenv's shim): the Python it runs
    real = subprocess.run([found, "-c", "import sys; print(sys.executable)"], capture_output=True, text=True)
    os.symlink(real.stdout.strip() or found, bindir / "python3")
    (tmp_path / "subs").mkdir()
    nbformat.write(nbformat.read(corpus.LEARNER, as_version=4), tmp_path / "subs" / f"ann_{EX}.ipynb")
    r = grade({**env, "PATH": str(bindir)}, tmp_path / "subs", "--course", make_course(tmp_path / "c"),
              check=False)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 1 and len(lines) == 1 and "apt-get install bubblewrap" in lines[0], r.stderr


def test_feedback_strips_what_learner_code_printed_in_grade_cells_and_server_paths():
    from nbformat.v4 import new_code_cell, new_output

    from donation_course.grading.reports.feedback import StripHiddenTests

    grade = new_code_cell("### BEGIN HIDDEN TESTS\nh.check_values(f)\n### END HIDDEN TESTS\n")
    grade.metadata["nbgrader"] = {"grade": True, "grade_id": "g", "points": 1}
    grade.outputs = [new_output("stream", name="stdout", text="hidden input [0.25, 0.5]\n\u2714 values: ok\n"),
                     new_output("error", ename="ValueError", evalue="bad /work/course/autograded/x.py",
                                traceback=["File /work/course/tools/hidden.py line 3"])]
    answer = new_code_cell("print(1)")
    answer.outputs = [new_output("stream", name="stdout", text="mine: 1\n"),
                      new_output("error", ename="OSError", evalue="/srv/course/gradebook.db: denied",
                                 traceback=["File \"/root/.venv/lib/x.py\", line 1"])]
    pre = StripHiddenTests()
    for cell in (grade, answer):
        pre.preprocess_cell(cell, {}, 0)
    assert "hidden input" not in grade.outputs[0]["text"] and "\u2714 values: ok" in grade.outputs[0]["text"]
    assert answer.outputs[0]["text"] == "mine: 1\n"  # the learner's own cell keeps its output
    text = str(grade.outputs) + str(answer.outputs)
    for path in ("/work/course", "/srv/course", "/root/.venv"):
        assert path not in text, text


# --- the runtime audit (audit.py) ----------------------------------------------------

TOKEN = "0123456789abcdef0123456789abcdef"  # this file's kernels' end token (run_in_sandbox)
KERNELS = KernelRunner(TOKEN)  # this test process's kernels, one zygote for all (kernel_runner.py)
END = end_source(TOKEN)


def audit_of(out: str) -> list:
    return json.loads(out.rsplit("AUDIT ", 1)[1])


def events(out: str) -> list:
    return [r["what"] for kernel in audit_of(out) for r in kernel["records"] if r["kind"] == "event"]


# family: (learner code, what the audit records of it)
AUDITED = [
    ("exec", "exec('x = 1')", "exec of code built at run time"),
    ("eval via alias", "e = eval\ne('1 + 1')", "exec of code built at run time"),
    ("compile", "c = compile('1', 'f', 'eval')", "compile of code built at run time"),
    ("pickle", "import pickle\npickle.loads(pickle.dumps(print))", "pickle.find_class"),
    ("numpy pickle", "import numpy as np, io\nb = io.BytesIO()\nnp.save(b, np.array([print], dtype=object), "
     "allow_pickle=True)\nb.seek(0)\nnp.load(b, allow_pickle=True)", "pickle.find_class"),
    ("frames", "import sys\nsys._getframe()", "sys._getframe"),
    ("code objects", "f = lambda: 1\nf.__code__", "object.__getattr__"),
    ("gc", "import gc\ngc.get_objects()", "gc.get_objects"),
    ("tracing", "import sys\nsys.settrace(None)", "sys.settrace"),
    ("subprocess", "import subprocess\nsubprocess.run(['true'])", "subprocess.Popen"),
    ("shell", "import os\nos.system('true')", "os.system"),
    ("dangerous import", "import pty", "imports pty"),
    ("import outside the allowlist", "import xml.dom", "imports xml.dom"),
    ("ctypes", "import ctypes\nctypes.string_at(id(1), 8)", "ctypes.string_at"),
    ("outside writes", "open('/tmp/../etc/x', 'w')", "writes /etc/x"),
    ("proc fds", "open('/proc/self/fd/1')", "opens /proc/self/fd/1"),
]


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    """Every family of AUDITED run in one sandboxed kernel, each in a cell of its own after `import jax`:
    ({family: the events recorded in its cell}, the kernel's audit, its output). An event names the cell
    whose code made it, and the cells start in order (each its own "cell" record): no family is seen
    through another's events. (One kernel for all: a fresh one each cost about 3 s of CPU apiece.)"""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    cells = ["import jax", *(code for _, code, _ in AUDITED), END]
    _, _, out = run_in_sandbox(tmp_path_factory.mktemp("audited"), cells)
    kernel = audit_of(out)[0]
    order = list(dict.fromkeys(r["cell"] for r in kernel["records"] if r["kind"] == "cell"))
    assert len(order) == len(cells), (order, out[-2000:])  # one name per cell, in the order they ran
    made = {}
    for r in kernel["records"]:
        if r["kind"] == "event":
            made.setdefault(r["cell"], []).append(r["what"])
    return {family: made.get(name, []) for (family, _, _), name in zip(AUDITED, order[1:-1], strict=True)}, kernel, out


@needs_bwrap
@pytest.mark.parametrize("family, seen", [(family, seen) for family, _, seen in AUDITED])
def test_the_audit_records_what_learner_code_does_at_run_time(audited, family, seen):
    found, kernel, out = audited
    assert any(seen in e for e in found[family]), (family, found, out[-2000:])
    assert kernel["bad"] == 0 and kernel["records"][0]["kind"] == "start"


@needs_bwrap
def test_the_audit_is_silent_on_honest_code_and_library_internals(tmp_path):
    """dataclasses and namedtuple exec code, jax reads code objects, imports
    open files, matplotlib writes its cache in /tmp: none of it is the learner's."""
    honest = ["import functools, dataclasses, collections, warnings, typing\nimport jax, jax.numpy as jnp\n"
              "import numpy as np",
              "@dataclasses.dataclass\nclass State:\n    w: jax.Array\n    step: int = 0\n"
              "P = collections.namedtuple('P', 'a b')",
              "@functools.partial(jax.jit, donate_argnums=(0,))\ndef update(state, delta):\n    return state + delta\n"
              "x = update(jnp.ones(3), jnp.ones(3))\nprint(np.asarray(x), jax.tree_util.tree_map(jnp.sum, {'a': x}))",
              "with warnings.catch_warnings(record=True) as w:\n    warnings.simplefilter('always')\n"
              "    y = jax.jit(lambda a, b: a + b, donate_argnums=(0, 1))(jnp.ones(2), jnp.ones(2))",
              "%timeit -n 3 -r 1 update(jnp.ones(3), jnp.ones(3))",
              "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\nplt.plot([1, 2])\n"
              "open('result.txt', 'w').write('mine')",
              "from __future__ import annotations\n\ndef typed(x: jax.Array) -> jax.Array:\n    return x",
              "# the grader's audit: end of notebook\npass",  # its old text: now a learner's cell like any other
              END]
    course, cwd, out = run_in_sandbox(tmp_path, honest)
    assert events(out) == [], out[-3000:]
    assert audit_verdict(out, honest[:-1], []) == [], out[-3000:]
    kinds = [r["kind"] for r in audit_of(out)[0]["records"]]
    assert kinds[0] == "start" and "tamper" not in kinds and kinds.count("cell") == len(honest), kinds


@needs_bwrap
def test_replacing_a_hidden_check_or_checks_through_a_namespace_is_a_tamper_record(tmp_path):
    """No audit event fires for a dict item assignment: the snapshot taken at
    kernel start, compared before every cell, sees the replacement."""
    attack = ("import jax.numpy as jnp\nimport donation_course.hidden.exercise as h\n"
              "h.__dict__['check_values'] = lambda *a, **k: None\n")
    course, cwd, out = run_in_sandbox(tmp_path, ["from donation_lab import checks", attack, END])
    tampers = [r for r in audit_of(out)[0]["records"] if r["kind"] == "tamper"]
    assert tampers and "donation_course.hidden.exercise.check_values" in tampers[0]["what"], out[-2000:]
    rebind = ["from donation_lab import checks", "class Yes:\n    def __getattr__(self, name):\n"
              "        return lambda *a, **k: None\nchecks = Yes()", END]
    (tmp_path / "b").mkdir()
    course, cwd, out = run_in_sandbox(tmp_path / "b", rebind)
    tampers = [r for r in audit_of(out)[0]["records"] if r["kind"] == "tamper"]
    assert tampers and "checks (the notebook's name" in tampers[0]["what"][0], out[-2000:]
    constant = ["from donation_lab import checks", "import donation_course.hidden.capstone as c\n"
                "c.__dict__['BETA'] = 0.0\n", END]  # a constant the checks read, not a function
    (tmp_path / "c").mkdir()
    course, cwd, out = run_in_sandbox(tmp_path / "c", constant)
    tampers = [w for r in audit_of(out)[0]["records"] if r["kind"] == "tamper" for w in r["what"]]
    assert "donation_course.hidden.capstone.BETA" in tampers, out[-2000:]


@needs_bwrap
@pytest.mark.parametrize("family, code, seen", [
    ("the body a check's wrapper holds in its closure",
     "import donation_course.hidden.exercise as h\n"
     "held = dict(zip(h.check_values.__code__.co_freevars, h.check_values.__closure__))['body']\n"
     "held.cell_contents = lambda *a, **k: 'every case is right'",
     "donation_course.hidden.exercise.check_values (code or closure)"),
    ("the originals the checks put back", "import donation_course.hidden.safe as s\n"
     "s._ORIGINAL[('numpy', 'allclose')] = (s.np, 'allclose', lambda *a, **k: True)",
     "donation_course.hidden.safe._ORIGINAL (contents)"),
    ("a __future__ feature", "from __future__ import barry_as_FLUFL", "a __future__ feature"),
])
def test_what_a_check_runs_is_in_the_snapshot_closures_and_tables_included(tmp_path, family, code, seen):
    """Red-team (issue 32): a closure cell and a table's item are rebound with no audit event, and no module global
    changes; the snapshot holds both. So does the kernel's compiler flags (a __future__ feature)."""
    course, cwd, out = run_in_sandbox(tmp_path, ["from donation_lab import checks", code, "x = 1", END])
    tampers = [w for r in audit_of(out)[0]["records"] if r["kind"] == "tamper" for w in r["what"]]
    assert any(seen in w for w in tampers), (family, tampers, out[-1500:])


@needs_bwrap
def test_no_program_runs_even_from_code_that_raises_no_audit_event(tmp_path):
    """libc's system() through ctypes forks and execs with no audit event (ctypes itself is recorded): the kernel's
    seccomp filter makes the exec fail, so the program never runs."""
    cells = ["import ctypes\nstatus = ctypes.CDLL(None).system(b'touch ran-by-libc')",
             "import os\nprint('libc ran it', os.path.exists('ran-by-libc'), status != 0)", END]
    course, cwd, out = run_in_sandbox(tmp_path, cells)
    assert "libc ran it False True" in out, out[-2000:]


@needs_bwrap
@pytest.mark.parametrize("family, code, seen", [
    ("input transformer", "import typing\nshell = typing.stdlib_re.enum.bltns.get_ipython()\n"
     "shell.input_transformers_post.append(lambda lines: [])", "shell.input_transformers_post"),
    ("exception handler", "get_ipython().set_custom_exc((Exception,), lambda *a, **k: None)",
     "shell.custom_exceptions"),
    ("stdout", "import sys\nclass Quiet:\n    def write(self, text):\n        return len(text)\n"
     "    def flush(self):\n        pass\nkeep = sys.stdout\nsys.stdout = Quiet()", "sys.stdout"),
    ("kernel method", "k = get_ipython().kernel\nk.do_execute = k.do_execute", "kernel.do_execute"),
])
def test_changing_how_cells_run_or_report_is_a_tamper_record(tmp_path, family, code, seen):
    """Red-team: a transformer that blanks grade cells, a handler that hides
    their errors, a stream that swallows output, a patched kernel method."""
    course, cwd, out = run_in_sandbox(tmp_path, ["import jax", code, "x = 1", END])
    tampers = [w for r in audit_of(out)[0]["records"] if r["kind"] == "tamper" for w in r["what"]]
    assert any(seen in w for w in tampers), (family, tampers, out[-1500:])


@needs_bwrap
def test_code_built_through_a_library_and_forged_check_passes_are_seen(tmp_path):
    """Red-team: compile reached through jax.tree.map (a library frame calls
    it), and a check's pass announced by the learner instead of the check."""
    cells = ["import jax\nimport typing\nc = typing.stdlib_re.enum.bltns.compile\n"
             "jax.tree.map(c, ['1 + 1'], ['<lib>'], ['eval'])",
             "import sys\nsys.audit('donation_lab.check', 'values')", END]
    course, cwd, out = run_in_sandbox(tmp_path, cells)
    assert any("compile of code built at run time" in e for e in events(out)), events(out)
    assert any("announced by other code" in e for e in events(out)), events(out)


@needs_bwrap
def test_a_cell_is_the_courses_only_if_its_text_is_exactly_the_courses(tmp_path):
    """The audit trusts a cell by the exact text IPython parses (SHA-256),
    not by ipykernel's 32-bit name for it, so a one-character change (or a
    crafted hash collision) makes it the learner's."""
    course_cell = "import gc\nn = len(gc.get_objects()) > 0"
    course, cwd, out = run_in_sandbox(tmp_path, [course_cell, course_cell + " ", END], trusted=[course_cell, END])
    assert events(out) == ["gc.get_objects"], events(out)


def audit_verdict(out: str, cells: list, course_cells: list) -> list:
    """The grader's flags for one kernel's records (audit_log.kernel_flags), with the scan's reading of the
    learner's `cells` (scan.read_notebook; `course_cells` are the release's, the course's own)."""
    from nbformat.v4 import new_code_cell, new_notebook

    from donation_course.grading.integrity.audit_log import kernel_flags
    from donation_course.grading.integrity.scan import read_notebook

    scanned = read_notebook(new_notebook(cells=[new_code_cell(c) for c in cells]), "nb",
                            new_notebook(cells=[new_code_cell(c) for c in course_cells]))
    kernel = audit_of(out)[0] if audit_of(out) else {"records": [], "bad": 0}
    return [f.reason for f in kernel_flags(kernel["records"], kernel["bad"], "nb", {}, None, scanned)]


# what the audit's verdict says for the forgeries written against it (issue #32); every other forgery is seen too,
# but three that are no audit matter. first_output's display-hook output comes first in the grade cell, and the
# scores follow the checks' signed passes whatever the outputs' order (test_scores_follow_signed_passes_not_the_order_
# of_outputs). future_feature turns on features that are no-ops on this Python (they set no compiler flag: nothing
# changes at run time; the one that does, barry_as_FLUFL, is a tamper record:
# test_what_a_check_runs_is_in_the_snapshot_closures_and_tables_included); the scan's rule is their layer.
# handover_padded displays a forged hand-over record, an output like any other: the worker's reading of the
# hand-overs (test_referee_received.py) and the scan's rule are its layers.
SEEN_AS = {"future_barry": "(code or closure)", "self_inject": "the static scan never read",
           "ffmpeg_shell": "starts a process", "fake_end": "stopped before the notebook's end"}
SCORED_NOT_SEEN = {"first_output", "future_feature", "handover_padded"}


@needs_bwrap
@pytest.mark.parametrize("forgery", sorted(p.stem for p in corpus.FORGERIES.glob("*.cell")))
def test_every_red_team_forgery_is_seen_at_run_time_too(tmp_path, forgery):
    """Each forgery in the corpus is flagged by the static policy; here the
    runtime audit alone, with the scan out of the way, sees each as well."""
    setup = "import functools\nimport jax\nimport jax.numpy as jnp\nfrom donation_lab import checks"
    graded = ("import donation_course.hidden.exercise as h\nfor f in (h.check_example, h.check_values):\n"
              "    try:\n        f(update_with_donate)\n    except AssertionError as e:\n        print(e)")
    answer = (corpus.FORGERIES / f"{forgery}.cell").read_text(encoding="utf-8").split(corpus.NEXT_CELL)
    cells = [setup, *answer, graded, graded, END]  # the graded cell twice: a request sent meanwhile runs between
    course, cwd, out = run_in_sandbox(tmp_path, cells, trusted=[setup, graded, END])
    flags = audit_verdict(out, cells[:-1], [setup, graded])
    if forgery in SCORED_NOT_SEEN:
        return
    assert flags, out[-3000:]
    assert forgery not in SEEN_AS or any(SEEN_AS[forgery] in f for f in flags), (flags, out[-3000:])


@needs_bwrap
def test_a_cell_runs_only_if_the_scan_read_it_and_a_typo_cell_is_never_flagged(tmp_path):
    """A cell the scan did not read (one it could not parse, or one that was never in the notebook: an execute
    request from elsewhere) that runs flags the notebook; a cell with a typo that neither can parse does not."""
    cells = ["x = 1", "print(x", "y = x + 1\nprint('y', y)", END]
    course, cwd, out = run_in_sandbox(tmp_path, cells)
    assert "y 2" in out, out[-2000:]
    assert audit_verdict(out, cells[:-1], []) == [], out[-2000:]
    unseen = audit_verdict(out, cells[:2], [])  # the third cell ran, but was not in the notebook the scan read
    assert len(unseen) == 1 and "the static scan never read" in unseen[0], unseen


@needs_bwrap
def test_no_process_starts_once_the_kernel_is_up_whatever_is_on_the_stack(tmp_path):
    """A process asked for by a thread (no learner frame on its stack) or by a library is refused and recorded;
    matplotlib, which would run fc-list for its font list, finds a ready one and starts nothing."""
    cells = ["import os, threading\nt = threading.Thread(target=os.system, args=('touch ran-by-thread',))\n"
             "t.start()\nt.join()",
             "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\nplt.plot([1, 2])\n"
             "plt.title('fonts')\nplt.gcf().canvas.draw()",
             "print('thread ran it', os.path.exists('ran-by-thread'))",
             "from donation_lab.memory import compare_donation\n"  # lesson 1 measures in fresh processes elsewhere
             "print('measured', sorted(compare_donation(1 << 18, steps=1)))", END]
    course, cwd, out = run_in_sandbox(tmp_path, cells)
    assert "thread ran it False" in out and "measured [False, True]" in out, out[-2000:]
    started = [e for e in events(out) if "starts a process" in e]
    assert len(started) == 1 and "os.system touch ran-by-thread" in started[0], events(out)


@needs_bwrap
def test_lines_written_into_the_audit_channel_or_a_closed_channel_are_seen(tmp_path):
    """The learner can write to the channel's fd, or close it: forged lines
    fail their signature, and a closed channel misses the end record."""
    from donation_course.grading.integrity.audit_log import kernel_flags

    channel = "[fd for fd in range(3, 64) if os.path.exists(f'/proc/self/fd/{fd}') and " \
              "os.readlink(f'/proc/self/fd/{fd}').endswith('.log')]"
    forge = ["import os\nfor fd in " + channel + ":\n    os.write(fd, b'{\"kind\": \"cell\"}\\tabc\\n')", END]
    course, cwd, out = run_in_sandbox(tmp_path, forge)
    kernel = audit_of(out)[0]
    assert kernel["bad"] >= 1, out[-2000:]
    close = ["import os\nfor fd in " + channel + ":\n    os.close(fd)", END]
    (tmp_path / "b").mkdir()
    course, cwd, out = run_in_sandbox(tmp_path / "b", close)
    kernel = audit_of(out)[0] if audit_of(out) else {"records": [], "bad": 0}
    flags = kernel_flags(kernel["records"], kernel["bad"], "nb", {})
    assert any("stopped before the notebook's end" in f.reason for f in flags), (flags, out[-2000:])


def test_a_forged_pass_line_is_seen_by_a_grader_that_never_imported_the_checks():
    """The grader process reads the audit without importing the hidden
    modules (no JAX there). A ✔ line of a real hidden check that the check did
    not sign is flagged; one it signed is not. Run in a fresh interpreter, so
    no test's import of the hidden modules can fill in the check names."""
    script = textwrap.dedent(r'''
        import json, sys
        from nbformat.v4 import new_code_cell, new_output
        from donation_course.grading.integrity.audit_log import kernel_flags, pass_lines
        cell = new_code_cell("_dl_hidden.check_values(update_with_donate)")
        cell.outputs = [new_output("stream", name="stdout", text="\u2714 values: every case is right\n")]
        passes = pass_lines(cell)
        forged = kernel_flags([{"kind": "end", "cell": "1", "seq": 1}], 0, "07", {}, passes)
        signed = kernel_flags([{"kind": "check", "name": "values", "seq": 1}, {"kind": "end", "cell": "1", "seq": 2}],
                              0, "07", {}, passes)
        print(json.dumps([dict(passes), [f.reason for f in forged], [f.reason for f in signed],
                          "donation_course.hidden.exercise" in sys.modules]))
    ''')
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    passes, forged, signed, imported = json.loads(out.stdout)
    assert passes == {"values": 1} and not imported, out.stdout
    assert forged == ["the pass line of check 'values' was printed 1 time(s), 0 by the check"], forged
    assert signed == [], signed


def test_the_check_names_read_from_the_sources_are_the_ones_the_checks_register():
    import donation_course.hidden.capstone  # noqa: F401  (each @check adds its name to safe.NAMES)
    import donation_course.hidden.debugging  # noqa: F401
    import donation_course.hidden.exercise  # noqa: F401
    from donation_course.grading.integrity.audit_log import hidden_check_names
    from donation_course.hidden.safe import NAMES

    assert hidden_check_names() == NAMES and len(NAMES) >= 15, (sorted(hidden_check_names()), sorted(NAMES))


# --- infrastructure: right or loud ---------------------------------------------------

@needs_bwrap
def test_an_environment_reached_through_a_symlink_grades_right(tmp_path, env, generated_course):
    """bubblewrap binds resolved paths; the kernel is exec'd at the resolved
    path too, so a venv reached through a symlink grades as the real one."""
    link = tmp_path / "venv-link"
    link.symlink_to(Path(sys.prefix).resolve(), target_is_directory=True)
    course = generated_course(tmp_path / "course")
    corpus.build(tmp_path / "all")
    subs = tmp_path / "subs"
    subs.mkdir()
    shutil.copy(tmp_path / "all" / f"partial_{EX}.ipynb", subs)
    linked = dict(env, PATH=f"{link / 'bin'}{os.pathsep}{env['PATH']}", VIRTUAL_ENV=str(link))
    r = subprocess.run([str(link / "bin" / "python"), "-m", "donation_course.cli", "grade", str(subs),
                        "--course", str(course), *GRADE_LIMITS], env=linked, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    row = read_grades(course / ".grading" / "grades.csv")["partial"]
    assert float(row[EX]) == corpus.MAX and row["status"] == "ok", row


@needs_bwrap
def test_kernels_that_cannot_start_stop_the_run_loudly_and_record_nobody(tmp_path, env, generated_course):
    """A sandbox that cannot start the kernel (here: a course setting that
    leaves bubblewrap no memory to start in) is the grader's failure: one line,
    exit 1, no student recorded, never a column of zeros."""
    course = generated_course(tmp_path / "course")
    with open(course / "nbgrader_config.py", "a") as fh:
        fh.write("\nc.GradingSettings.memory_mb = 1  # not even bubblewrap starts in 1 MiB\n")
    corpus.build(tmp_path / "all")
    subs = tmp_path / "subs"
    subs.mkdir()
    for student in ("partial", "nodonate", "lambda", "wrongvalue"):
        shutil.copy(tmp_path / "all" / f"{student}_{EX}.ipynb", subs)
    r = grade(env, subs, "--course", course, *GRADE_LIMITS, check=False)
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("course: error:")]
    assert r.returncode == 1 and len(errors) == 1 and "could not start" in errors[0], r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    assert read_grades(course / ".grading" / "grades.csv") == {}
    assert gradebook_scores(course) == {}


# --- scores: the checks' signed passes, never the order of outputs (audit_log.ScoreFromSignedPasses) --------------

def _scored(tmp_path, monkeypatch, outputs, signed=(), end=True):
    """nbgrader's score of the exercise's ex-values grade cell with `outputs`, after ScoreFromSignedPasses, given a
    kernel log (signed as the audit signs) whose end record is this notebook's (`end`) and in which the check
    'values' signed a pass in that cell (`signed`)."""
    import hashlib
    import hmac

    from nbgrader.utils import determine_grade

    from donation_course.grading.integrity.audit import end_digests
    from donation_course.grading.integrity.audit_log import END_TOKEN, ScoreFromSignedPasses, cell_hash
    from donation_course.grading.run.settings import STUDENT_DIR_ENV

    nb = nbformat.read(ROOT / "autograder" / "source" / ASSIGNMENT / f"{EX}.ipynb", as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "ex-values")
    cell.outputs = [nbformat.from_dict(o) for o in outputs]
    key, token = b"k" * 32, "feedbeef" * 4
    records = [{"kind": "start"}, *({"kind": "check", "cell": cell_hash(cell.source), "name": n} for n in signed)]
    records += [{"kind": "end", "cell": "9", "sha": end_digests(token if end else "another")[0]}]
    lines = [json.dumps(dict(r, seq=i), sort_keys=True) for i, r in enumerate(records)]
    (tmp_path / "audit-1.log").write_text("".join(
        f"{ln}\t{hmac.new(key, ln.encode(), hashlib.sha256).hexdigest()}\n" for ln in lines))
    (tmp_path / "audit-1.key").write_text(key.hex())
    monkeypatch.setenv(STUDENT_DIR_ENV, str(tmp_path))
    ScoreFromSignedPasses().preprocess(nb, {END_TOKEN: token})
    return determine_grade(cell)[0]


PASS_LINE = {"output_type": "stream", "name": "stdout", "text": "\u2714 values: every case is right\n"}
FIRST = {"output_type": "execute_result", "execution_count": 1, "metadata": {}, "data": {"text/plain": "'looks right'"}}
ERROR = {"output_type": "error", "ename": "HiddenCheckFailed", "evalue": "\u2718 values: wrong", "traceback": []}


@pytest.mark.parametrize("case, outputs, signed, end, points", [
    ("signed pass", [PASS_LINE], ["values"], True, 3),
    ("display hook first, then the check's error", [FIRST, ERROR], [], True, 0),
    ("display hook first, signed pass after", [FIRST, PASS_LINE], ["values"], True, 3),
    ("a pass line nobody signed", [PASS_LINE], [], True, 0),
    ("display hook output alone, nothing signed", [FIRST], [], True, 0),
    ("another check signed here", [PASS_LINE], ["training loop"], True, 0),
    ("the log is not this notebook's", [PASS_LINE], ["values"], False, 0),
])
def test_scores_follow_signed_passes_not_the_order_of_outputs(tmp_path, monkeypatch, case, outputs, signed, end,
                                                              points):
    assert _scored(tmp_path, monkeypatch, outputs, signed, end) == points, case


def test_without_the_audit_only_the_learners_execute_results_are_dropped(tmp_path, monkeypatch):
    """Audit off (no log at all): the signed passes cannot be read, so they decide nothing; an execute_result put
    before the check's error still does not count."""
    from nbgrader.utils import determine_grade

    from donation_course.grading.integrity.audit_log import END_TOKEN, ScoreFromSignedPasses
    from donation_course.grading.run.settings import STUDENT_DIR_ENV

    nb = nbformat.read(ROOT / "autograder" / "source" / ASSIGNMENT / f"{EX}.ipynb", as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "ex-values")
    monkeypatch.setenv(STUDENT_DIR_ENV, str(tmp_path))
    for outputs, points in (([PASS_LINE], 3), ([FIRST, ERROR], 0)):
        cell.outputs = [nbformat.from_dict(o) for o in outputs]
        ScoreFromSignedPasses().preprocess(nb, {END_TOKEN: "feedbeef"})
        assert determine_grade(cell)[0] == points, outputs


def test_records_missing_from_the_log_or_cells_after_its_end_are_seen():
    """The hook numbers every record it makes: a gap in the log's numbers is records written while the channel
    pointed elsewhere (or was closed). And no cell may run after the grader's last cell."""
    from donation_course.grading.integrity.audit_log import kernel_flags

    def flags(*kinds):
        return [f.reason for f in kernel_flags([{"kind": k, "cell": "1", "seq": n} for n, k in kinds], 0, "nb", {})]

    assert flags((1, "start"), (2, "cell"), (3, "end")) == []
    assert flags((1, "start"), (2, "cell"), (5, "end")) == [
        "2 record(s) missing from the audit's log (its channel was redirected or closed)"]
    assert flags((1, "start"), (2, "end"), (3, "cell")) == ["cells ran after the grader's last cell"]
    assert flags((1, "start"), (2, "cell")) == [
        "the audit channel stopped before the notebook's end (closed, redirected or the kernel died)"]
