"""Grading kernels forked from the worker's kernel zygote (grading/integrity/kernel_zygote.py).

test_sandbox.py runs its sandbox tests (reach, disk, runtime folder, the runtime audit) on forked kernels
and on kernels started as a new Python; here: what forking itself could get wrong, and what happens when
the zygote is not there."""
import json
import shutil
import subprocess
import sys

import pytest

from helpers import LIMIT_SCALE

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

SCRIPT = """
import json, os, signal, sys, tempfile
from pathlib import Path
from jupyter_client.manager import KernelManager
from donation_course.grading.run.settings import GradingSettings
from donation_course.grading.executors import worker
tmp = tempfile.mkdtemp(prefix="dlz-", dir="/tmp")
os.environ["JUPYTER_PATH"] = str(worker.make_kernelspec(Path(tmp) / "jupyter", sys.executable))
settings = GradingSettings(audit=False).kernel("")
worker.use_kernel_settings(settings)
worker.spawn_kernel_zygote(settings, tmp)
code = "import os, random, numpy; print(f'{os.getpid()}/{os.getppid()}', random.random(), numpy.random.random())"
for step in json.loads(sys.argv[1]):
    if step == "kill":  # the zygote dies between two students
        worker._zygote.ready()
        os.kill(worker._zygote.proc.pid, signal.SIGKILL)
        worker._zygote.proc.wait()
        continue
    if step == "unlink":  # its socket is gone: the launcher cannot reach it
        os.unlink(worker._zygote.path)
        continue
    runtime = worker.new_student_dir(Path(tmp) / "w0")
    cwd = Path(tmp) / "student"
    cwd.mkdir(exist_ok=True)
    km = KernelManager(kernel_name=worker.KERNEL_NAME, transport="ipc")
    km.ip = str(runtime / "kernel-ipc")
    km.start_kernel(cwd=str(cwd))
    kc = km.client(); kc.start_channels(); kc.wait_for_ready(timeout=60)
    out = []
    kc.execute_interactive(code, timeout=60, output_hook=lambda m: out.append(m["content"].get("text", "")))
    km.shutdown_kernel(now=True)
    print("KERNEL", "".join(out).strip(), flush=True)
worker._zygote.stop()
import shutil; shutil.rmtree(tmp)
"""


FORKED, STARTED = "3/0", "3/2"


def kernels(steps: list) -> list:
    """Run the steps ("kernel", "kill", "unlink") in one grading process; each kernel's (pid/parent's pid, random
    draws). A forked kernel is FORKED: the third process of its sandbox, beside bwrap's init and the holder, whose
    parent (the zygote's child that joined the sandbox) is outside it; a started one is STARTED: the third too, a
    child of the launcher's inner step (kernel._watch)."""
    r = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(steps)], capture_output=True, text=True,
                       timeout=240 * LIMIT_SCALE)
    assert r.returncode == 0, r.stderr[-3000:]
    return [line.split()[1:] for line in r.stdout.splitlines() if line.startswith("KERNEL")]


@needs_bwrap
def test_kernels_forked_from_one_zygote_draw_different_random_numbers():
    """A fork copies the zygote's random state: NumPy's global one stays the same in every child (Python's
    random module reseeds itself after a fork), so each kernel reseeds both from the system, and two students of
    one worker do not draw the same numbers, as two started Pythons would not."""
    first, second = kernels(["kernel", "kernel"])
    assert first[0] == second[0] == FORKED, (first, second)
    assert first[1] != second[1] and first[2] != second[2], (first, second)


@needs_bwrap
def test_a_dead_zygote_is_started_once_more_then_kernels_start_as_before():
    """A zygote that dies is started again at the next student; one that dies again is left, and the kernels
    after it start as a new Python in the sandbox (kernel.py's --inner step): slower, graded the same."""
    pids = [pid for pid, *_ in kernels(["kernel", "kill", "kernel", "kill", "kernel"])]
    assert pids == [FORKED, FORKED, STARTED], pids


@needs_bwrap
def test_a_launcher_that_cannot_reach_the_zygote_starts_the_kernel_itself():
    pids = [pid for pid, *_ in kernels(["kernel", "unlink", "kernel"])]
    assert pids == [FORKED, STARTED], pids


ADOPT = """
import json, os, sys, tempfile
from pathlib import Path
from jupyter_client.manager import KernelManager
from donation_course.grading.run.settings import GradingSettings
from donation_course.grading.executors import worker
from donation_course.grading.executors.early_zygotes import EarlyZygotes

def children(pid):
    names = []
    for task in os.listdir(f"/proc/{pid}/task"):
        for child in open(f"/proc/{pid}/task/{task}/children").read().split():
            names.append(open(f"/proc/{child}/comm").read().strip())
    return names

settings = GradingSettings(audit=False).kernel("")
early = EarlyZygotes("", 3)
first = early.take(0, settings.sandbox, settings.fork, settings.compile_cache)
print("TAKEN", first is not None, early.take(0, settings.sandbox, settings.fork, "") is None,
      early.take(1, settings.sandbox, False, "") is None, early.take(1, False, True, "") is None,
      early.take(2, settings.sandbox, settings.fork, "/another/cache") is None, flush=True)
early.end_unused()
print("LEFT", sum(z is not None for z in early.zygotes), flush=True)
grader = os.fork()
if grader == 0:  # a grading process, forked as the pool forks its workers
    tmp = tempfile.mkdtemp(prefix="dlw-", dir="/tmp")
    os.environ["JUPYTER_PATH"] = str(worker.make_kernelspec(Path(tmp) / "jupyter", sys.executable))
    worker.use_kernel_settings(settings)
    worker.spawn_kernel_zygote(settings, tmp, first)
    worker.prepare_kernel_zygote()
    runtime = worker.new_student_dir(Path(tmp) / "w0")
    cwd = Path(tmp) / "student"
    cwd.mkdir()
    km = KernelManager(kernel_name=worker.KERNEL_NAME, transport="ipc")
    km.ip = str(runtime / "kernel-ipc")
    km.start_kernel(cwd=str(cwd))
    kc = km.client(); kc.start_channels(); kc.wait_for_ready(timeout=60)
    out = []
    kc.execute_interactive("import os; print(f'{os.getpid()}/{os.getppid()}')", timeout=60,
                           output_hook=lambda m: out.append(m["content"].get("text", "")))
    print("KERNEL", "".join(out).strip(), "under", " ".join(children(first.pid)),
          "own", " ".join(c for c in children(os.getpid()) if c == "dl-kzygote") or "none", flush=True)
    km.shutdown_kernel(now=True)
    worker._zygote.stop()
    import shutil; shutil.rmtree(tmp)
    os._exit(0)
_, status = os.waitpid(grader, 0)
print("GRADER", os.waitstatus_to_exitcode(status), flush=True)
folder, pid = early.folder, first.pid
early.close()
print("CLOSED", os.path.exists(folder), os.path.exists(f"/proc/{pid}"), flush=True)
"""


@needs_bwrap
def test_a_grading_process_adopts_the_zygote_its_run_started_before_it_and_forks_its_kernels_there():
    """`./course grade` starts its kernel zygotes before it imports nbgrader (executors/early_zygotes.py). Each
    is taken once, only for kernels sandboxed, forked and reading the cache it was started for; one no worker
    takes is ended. A grading process forked after it adopts it: its kernel is forked there (FORKED, the zygote's
    child that joined the sandbox under the run's zygote), and it starts no zygote of its own. Closing ends the
    zygote and removes its folder."""
    r = subprocess.run([sys.executable, "-c", ADOPT], capture_output=True, text=True, timeout=240 * LIMIT_SCALE)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = {line.split()[0]: line.split()[1:] for line in r.stdout.splitlines() if line.strip()}
    assert lines["TAKEN"] == ["True"] * 5, r.stdout
    assert lines["LEFT"] == ["1"], r.stdout
    kernel = lines["KERNEL"]
    assert kernel[0] == FORKED and "dl-kjoin" in kernel[kernel.index("under") + 1:kernel.index("own")], r.stdout
    assert kernel[-1] == "none", r.stdout
    assert lines["GRADER"] == ["0"] and lines["CLOSED"] == ["False", "False"], r.stdout

