"""What the tests share that is not a fixture: paths, running commands and
`./course grade`, reading grades, starting a JupyterLab server, checking an
executed notebook. The fixtures are in conftest.py; tests import these with
`from helpers import ...` (tests/ is on sys.path: pyproject.toml's
`pythonpath`)."""
import csv
import importlib.machinery
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from donation_course.authoring import scratch_course
from donation_course.course import COURSE, NOTEBOOKS, ROOT, SOLUTIONS

ASSIGNMENT = COURSE.assignment
SOURCE = COURSE.source

COURSE_CMD = ROOT / "course"


def load_course_script():
    """The ./course script as a module (it is stdlib-only; tests reuse its
    free_port and ensure_venv)."""
    loader = importlib.machinery.SourceFileLoader("course_script", str(COURSE_CMD))
    spec = importlib.util.spec_from_loader("course_script", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


free_port = load_course_script().free_port


def built_once(tmp_path_factory, name: str, build) -> Path:
    """The folder `name`, made by build(folder) once per session: the first
    pytest-xdist process to ask builds it, under a lock, in the folder the
    processes share; the others wait and read it. It is there complete, or
    not at all (built under another name, then renamed)."""
    import fcntl

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    done = shared / name
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            building = shared / f"{name}.building"
            shutil.rmtree(building, ignore_errors=True)  # what a build that failed left
            build(building)
            building.rename(done)
    return done


def timeout_line(exc: BaseException) -> str:
    """One line for a test whose subprocess (or wait) ran out of time: what
    timed out, after how long, and how busy the machine was. conftest.py puts
    it in place of the traceback of any subprocess.TimeoutExpired or
    TimeoutError, so a slow machine reads as a timeout, not as a bug."""
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    machine = f"load average {load} over 1/5/15 min on {os.cpu_count()} cores"
    if isinstance(exc, subprocess.TimeoutExpired):
        cmd = exc.cmd if isinstance(exc.cmd, str) else " ".join(map(str, exc.cmd))
        return f"TIMEOUT after {exc.timeout:.0f} s ({machine}): {cmd[:200]}"
    what = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
    return f"TIMEOUT ({machine}): {what}"


def run(cmd, env, cwd=ROOT, timeout=None, check=True):
    """Run a command; fail with its output unless check=False. `timeout`:
    600 s, scaled with the machine's load (LIMIT_SCALE), unless given."""
    timeout = timeout or 600 * LIMIT_SCALE
    result = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, cmd))} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def machine_load() -> float:
    """How many times over its cores this machine is busy (the last minute's
    load average per core), at least 1."""
    return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


# Limits for test grading runs: one worker, a short per-cell time. The runs
# that use them grade the exercise (and two short lessons), whose slowest cell
# (the capstone's NaN hunt) takes about 0.35 s alone. The suite itself keeps
# the machine busy: three xdist processes, each grading on one or two workers, beside
# the browser and cluster tests, so such a cell runs 10 to 20 times slower
# than alone at its worst (a fresh-clone CI run at c502333 lost the NaN hunt's
# points to a 6 s limit). 12 s leaves room for that, and the corpus's endless
# cells (loopafter, snoop) burn no more CPU than that. A machine busier than
# its cores when the tests start (a shared CI runner, a CPU-burning process
# beside) gets limits scaled with its load, up to 4 times.
LIMIT_SCALE = min(4.0, machine_load())
GRADE_LIMITS = ["--workers", "1", "--timeout", str(round(150 * LIMIT_SCALE)),
                "--cell-timeout", str(round(12 * LIMIT_SCALE)), "--no-progress"]
# The same on two workers, for the runs that grade a class in parallel on purpose: the graded corpora
# (grade_class), the deadline-day class and the LMS exports, each compared with serial nbgrader, and the
# local run the cluster is compared with. Elsewhere one worker: a second costs about 2 s of CPU a run
# (a kernel zygote, a referee server; docs/performance.md), which a class of one to three students does
# not win back on a machine the suite keeps busy.
PARALLEL_LIMITS = ["--workers", "2", *GRADE_LIMITS[2:]]


def grade(env, *args, check=True, cwd=ROOT, timeout=None):
    """Run `./course grade ARGS` as an instructor would; fail with its output unless check=False.
    A run that graded the class passes the check whether or not students need the instructor
    (exit 0 or run.EXIT_NEEDS_YOU); tests of who needs the instructor assert the code themselves.
    `timeout`: 600 s, scaled with the machine's load (LIMIT_SCALE), unless given."""
    from donation_course.grading.run.steps import EXIT_ALL_GRADED, EXIT_NEEDS_YOU

    r = subprocess.run([str(COURSE_CMD), "grade", *map(str, args)], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=timeout or 600 * LIMIT_SCALE)
    if check and r.returncode not in (EXIT_ALL_GRADED, EXIT_NEEDS_YOU):
        raise AssertionError(f"grade failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


def read_grades(path) -> dict:
    """grades.csv as {student: row}; a student listed twice fails the test."""
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    ids = [r["student"] for r in rows]
    assert len(ids) == len(set(ids)), f"a student appears twice in {path}: {ids}"
    return {r["student"]: r for r in rows}


def gradebook_scores(course) -> dict:
    """{student: {notebook: score}} as the course's nbgrader gradebook holds them."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        return {s.student.id: {nb.name: nb.score for nb in s.notebooks}
                for s in gb.find_assignment(ASSIGNMENT).submissions}


@dataclass(frozen=True)
class GradedClass:
    """A class graded once by `./course grade` (PARALLEL_LIMITS): its scratch course, the folder of files it
    graded, what the command said, and the gradebook's scores as the run left them ({student: {notebook:
    score}}). Read it; a test that changes the course works on a copy (shutil.copytree)."""

    course: Path
    files: Path
    returncode: int
    stdout: str
    stderr: str
    scores: dict


def grade_class(folder: Path, course: Path, build, env) -> None:
    """Build a class's submissions (build(files)) as one flat LMS folder, folder/files, grade it once with
    ./course grade in `course`, and keep what the command said beside them (folder/grade.json). The
    command may take as long as its students may (PARALLEL_LIMITS' limit for each, two at a time): a class
    of dozens takes minutes, longer than `grade`'s 600 s on a busy machine."""
    files = folder / "files"
    build(files)
    students = len({p.name.split("_", 1)[0] for p in files.iterdir()})
    each = float(PARALLEL_LIMITS[PARALLEL_LIMITS.index("--timeout") + 1])
    r = grade(env, files, "--course", course, *PARALLEL_LIMITS, timeout=600 * LIMIT_SCALE + students * each / 2)
    (folder / "grade.json").write_text(json.dumps({"returncode": r.returncode, "stdout": r.stdout,
                                                   "stderr": r.stderr}))


def graded_class(folder: Path) -> GradedClass:
    """What grade_class left in `folder`."""
    said = json.loads((folder / "grade.json").read_text())
    return GradedClass(folder / "course", folder / "files", said["returncode"], said["stdout"], said["stderr"],
                       gradebook_scores(folder / "course"))


def nbgrader(course_dir, *args, env, check=True, timeout=None):
    return run([sys.executable, "-m", "nbgrader", *args], env=env, cwd=course_dir,
               check=check, timeout=timeout)


make_course = scratch_course  # a scratch copy of the nbgrader course (config + source), no state


def wait_for_http(url, timeout=90.0, proc=None):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"server exited early with code {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return resp.status, resp.read()
        except Exception as exc:  # not up yet
            last = exc
            time.sleep(0.3)
    raise TimeoutError(f"{url} did not answer within {timeout:.0f}s: {last}")


class LabServer:
    def __init__(self, proc, port, token, log):
        self.proc, self.port, self.token, self.log = proc, port, token, log
        self.base = f"http://127.0.0.1:{port}"

    def api(self, path):
        status, body = wait_for_http(f"{self.base}{path}?token={self.token}", proc=self.proc)
        return status, json.loads(body)

    def stop(self):
        """Stop the server as a service manager would: SIGTERM (Jupyter shuts
        its kernels down and exits; SIGINT would ask "shut down?" on stdin and,
        with no terminal there, carry on), then kill what is left of its group."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # its own session: kernels it left behind
        except ProcessLookupError:
            pass
        self.proc.wait()


def start_server(cmd, *, port, token, env, cwd, log: Path, timeout=90.0) -> LabServer:
    """Start a Jupyter server command that listens on `port` with `token`;
    return once it answers (the one way every test starts a server)."""
    with open(log, "w") as out:
        proc = subprocess.Popen([str(c) for c in cmd], cwd=cwd, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    server = LabServer(proc, port, token, log)
    try:
        wait_for_http(f"{server.base}/api/status?token={token}", timeout=timeout, proc=proc)
    except TimeoutError as exc:
        server.stop()
        raise TimeoutError(f"{exc} (its log: {log})") from exc
    except Exception as exc:
        server.stop()
        raise AssertionError(f"{exc}\n{log.read_text()}") from exc
    return server


def start_lab(env, tmp_path, extra=()):
    """Start JupyterLab with the README's lab command on a free port."""
    # The learner's environment is built (first run: minutes) before the clock starts.
    load_course_script().ensure_venv("learner")
    port, token = free_port(), "test-token-" + os.urandom(6).hex()
    return start_server([COURSE_CMD, "lab", "--no-browser", "--port", port, "--token", token, *extra],
                        port=port, token=token, env=env, cwd=ROOT, log=tmp_path / "lab.log")


RAISES = "raises-exception"  # the tag of a cell that is meant to fail


def describe_errors(errors) -> str:
    return "\n".join(f"  cell {e.cell_id!r}: {e.ename}: {e.evalue[:200]}" for e in errors)


def assert_only_tagged_cells_raise(label: str, nb) -> None:
    """An executed solved notebook: errors only in cells tagged
    raises-exception, and each of those cells does raise (a meant-to-fail
    cell that stops failing means JAX changed and the lesson is now wrong);
    and every cell shows what its output claims say it shows
    (donation_course.execute.OUTPUT_CLAIMS), e.g. which error a read raises."""
    from donation_course.execute import notebook_errors, output_claim_mismatches

    mismatched = output_claim_mismatches(nb)
    assert not mismatched, f"{label}: outputs contradict the prose:\n  " + "\n  ".join(mismatched)

    errors = notebook_errors(nb)
    unexpected = [e for e in errors if RAISES not in e.tags]
    assert not unexpected, f"{label} raised outside tagged cells:\n{describe_errors(unexpected)}"
    tagged = {c.get("id") for c in nb.cells if c.cell_type == "code" and RAISES in c.metadata.get("tags", [])}
    silent = tagged - {e.cell_id for e in errors}
    assert not silent, f"{label}: cells tagged {RAISES} no longer raise: {sorted(silent)}"


def answered_copy(name: str, dest: Path) -> Path:
    """The learner copy of `name` with every answer cell filled in from the
    solution, as a learner who solved it would save it."""
    import nbformat

    learner = nbformat.read(NOTEBOOKS / name, as_version=4)
    solution = {c.id: c for c in nbformat.read(SOLUTIONS / name, as_version=4).cells}
    for cell in learner.cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = solution[cell.id].source
    dest.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(learner, dest)
    return dest


# Code that only the instructor's tools hold: none of it may be importable,
# or even readable as a file, in a learner's environment.
INSTRUCTOR_ONLY = ("HiddenCheckFailed", "def check_real_donation", "def restore_helpers", "class StripHiddenTests")

LEARNER_ENV_PROBE = r"""
import importlib.util, json, pathlib, sys
found = {"importable": [m for m in ("donation_course", "donation_lab.grading", "donation_lab.course")
                        if importlib.util.find_spec(m.split(".")[0]) and importlib.util.find_spec(m)],
         "files": []}
import donation_lab  # the learner's package must be there
# sys.path, plus the folders of packages an editable install maps in by a finder hook
roots = list(sys.path) + list(donation_lab.__path__)
roots += [p for m in found["importable"] for p in importlib.util.find_spec(m).submodule_search_locations or []]
for entry in roots:
    root = pathlib.Path(entry)
    if not root.is_dir() or root.resolve() == pathlib.Path(sys.base_prefix).resolve():
        continue
    for path in root.rglob("*.py"):
        try:
            text = path.read_text(errors="ignore")
        except OSError:
            continue
        if any(marker in text for marker in MARKERS):
            found["files"].append(str(path))
print(json.dumps(found))
"""


def grading_code_in_environment(python, env) -> dict:
    """What of the instructor's tools a Python environment can import or read
    on its sys.path: {"importable": [...], "files": [...]}, both empty if none."""
    code = f"MARKERS = {INSTRUCTOR_ONLY!r}\n" + LEARNER_ENV_PROBE
    result = run([str(python), "-c", code], env=env, cwd=NOTEBOOKS, timeout=600)
    return json.loads(result.stdout.strip().splitlines()[-1])


PYTHON3_KERNEL_PROBE = """
import json
from jupyter_client.manager import start_new_kernel
manager, client = start_new_kernel(kernel_name="python3")
try:
    client.kernel_info()
    reply = client.get_shell_msg(timeout=60)
    print(json.dumps({"argv": manager.kernel_spec.argv, "version": reply["content"]["language_info"]["version"]}))
finally:
    client.stop_channels()
    manager.shutdown_kernel(now=True)
"""


def python3_kernel(python, env) -> dict:
    """The `python3` kernel a Python environment's Jupyter starts, started for
    real: {"argv": its kernelspec's command, "version": the Python version its
    kernel_info reports}."""
    result = run([str(python), "-c", PYTHON3_KERNEL_PROBE], env=env, cwd=NOTEBOOKS, timeout=120)
    return json.loads(result.stdout.strip().splitlines()[-1])


def run_on_eight_devices(script: str, *argv: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run `script` in a fresh Python on 8 simulated CPU devices (XLA reads the
    device count only when JAX starts, and this process started it already)."""
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    return subprocess.run([sys.executable, "-c", script, *argv], env=env, capture_output=True, text=True,
                          timeout=timeout)


def result_on_eight_devices(script: str) -> dict:
    """What `script`, run on 8 devices, printed as JSON on its line starting
    with RESULT; the script must exit 0."""
    proc = run_on_eight_devices(script)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(out for out in proc.stdout.splitlines() if out.startswith("RESULT"))
    return json.loads(line[len("RESULT"):])
