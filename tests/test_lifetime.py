"""Every process the grader starts dies with the process that started it (grading/integrity/lifetime.py), even
when that one died first, before the child could ask; and a started kernel's sandbox ends when its launcher
dies, even when bwrap's own parent-death signals were never set up (kernel._watch).

test_lms.py's interrupted run checks the whole: a run stopped by Ctrl-C leaves no process behind."""
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from donation_course.grading.integrity.lifetime import PARENT_ENV

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

# A parent that starts a child, says the child's pid, and then either ends at once or waits for a line. The
# child waits until its parent has had time to end, then asks to die with the pid it was given, then prints.
PARENT = """
import os, subprocess, sys
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], env={**os.environ, sys.argv[3]: str(os.getpid())})
print(child.pid, flush=True)
if sys.argv[2] == "wait":
    sys.stdin.readline()
"""
CHILD = """
import sys, time
from donation_course.grading.integrity.lifetime import die_with_starter
time.sleep(1)
die_with_starter()
print("alive", flush=True)
time.sleep(60)
"""


def _gone(pid: int, within: float = 20) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True  # dead, not yet reaped
        except OSError:
            return True
        time.sleep(0.05)
    return False


def test_a_child_whose_parent_died_before_it_asked_ends_at_once(tmp_path):
    """The parent ends before the child asks for its parent-death signal: the child must not take init (its
    parent now) for the process that started it."""
    out = tmp_path / "out"
    with open(out, "w") as fh:
        parent = subprocess.run([sys.executable, "-c", PARENT, CHILD, "end", PARENT_ENV], stdout=subprocess.PIPE,
                                stderr=fh, text=True, timeout=60)
    child = int(parent.stdout.split()[0])
    assert _gone(child), "the orphaned child went on running"


def test_a_child_whose_parent_lives_runs_and_dies_with_it():
    parent = subprocess.Popen([sys.executable, "-c", PARENT, CHILD, "wait", PARENT_ENV], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    time.sleep(1.5)
    assert not _gone(child, within=0), "the child ended while its parent lived"
    parent.kill()
    parent.wait()
    assert _gone(child), "the child outlived its parent"


WATCH = """
import os, sys
from donation_course.grading.integrity.kernel import _watch
lifeline, end, marker, pidfd = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
if pidfd == "refused":  # Linux before 5.3, or a seccomp profile that refuses it: _watch polls instead
    def refused(pid, flags=0):
        raise OSError(38, "Function not implemented")
    os.pidfd_open = refused
if end == "launcher" and os.fork() == 0:  # a process the kernel started and left running
    os.execvp("sleep", ["sleep", marker])
kernel = os.fork()
if kernel == 0:
    command = ["sleep", marker] if end == "launcher" else ["sh", "-c", "exit 3"]
    os.execvp(command[0], command)
sys.exit(_watch(kernel, lifeline))
"""


def _sleeping(marker: str) -> list:
    import psutil

    return [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", marker]]


@needs_bwrap
@pytest.mark.parametrize("pidfd", ["pidfd", "refused"])
@pytest.mark.parametrize("end", ["launcher", "kernel"])
def test_a_started_kernels_sandbox_ends_with_its_launcher_or_with_the_kernel(end, pidfd):
    """kernel._watch in a PID namespace of its own, with no parent-death signal anywhere (bwrap without
    --die-with-parent): when the launcher's end of the lifeline closes, every process of the sandbox is
    killed; when the kernel ends first, the sandbox ends with the kernel's exit status."""
    marker = f"600.{os.getpid()}{'1' if end == 'launcher' else '2'}{'1' if pidfd == 'pidfd' else '2'}"
    lifeline, lifeline_w = os.pipe()
    bwrap = ["bwrap", "--unshare-pid", "--dev-bind", "/", "/", "--proc", "/proc", "--",
             os.path.realpath(sys.executable), "-c", WATCH, str(lifeline), end, marker, pidfd]
    proc = subprocess.Popen(bwrap, pass_fds=[lifeline], env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    os.close(lifeline)
    try:
        if end == "launcher":
            deadline = time.monotonic() + 60
            while len(_sleeping(marker)) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(_sleeping(marker)) == 2 and proc.poll() is None, "the sandbox ended while its launcher lived"
            os.close(lifeline_w)
            assert proc.wait(timeout=20) == 128 + signal.SIGKILL
            deadline = time.monotonic() + 10
            while _sleeping(marker) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _sleeping(marker) == [], "a process of the sandbox outlived its launcher"
        else:
            assert proc.wait(timeout=60) == 3
            os.close(lifeline_w)
    finally:
        if proc.poll() is None:
            proc.kill()
        for p in _sleeping(marker):
            p.kill()


ORPHANS = """
import os, subprocess, sys, time
from donation_course.grading.executors.orphans import Orphans, _subreaper
marker = sys.argv[1]
own = subprocess.Popen(["sleep", marker + "1"])   # the run's own, from before: never touched
orphans = Orphans()
kept = subprocess.Popen(["sleep", marker + "2"])  # a live worker: kept
# a worker's process whose parent dies: handed to this process (a subreaper), not to init
subprocess.run([sys.executable, "-c", "import subprocess, sys; subprocess.Popen(['sleep', sys.argv[1]])",
                marker + "3"], check=True)
time.sleep(0.5)
print("subreaper", orphans.subreaper, flush=True)
print("handed", sorted(p.cmdline()[-1][-1] for p in orphans.me.children()), flush=True)
print("ended", len(orphans.end(keep={kept.pid})), flush=True)
print("left", sorted(p.cmdline()[-1][-1] for p in orphans.me.children()), flush=True)
orphans.release()
print("released", not _subreaper(), flush=True)
own.kill(); kept.kill()
"""


def test_a_process_handed_to_the_run_is_ended_and_its_own_and_its_workers_are_kept():
    """orphans.py: what a dead worker's process leaves comes to the run's process, which ends it; the run's own
    children and its live workers are not touched."""
    marker = f"600.{os.getpid()}"
    r = subprocess.run([sys.executable, "-c", ORPHANS, marker], capture_output=True, text=True, timeout=60)
    try:
        assert r.returncode == 0, r.stderr
        assert "subreaper True" in r.stdout, r.stdout
        assert "handed ['1', '2', '3']" in r.stdout, r.stdout  # the orphan came to it, beside its own two
        assert "ended 1" in r.stdout and "left ['1', '2']" in r.stdout, r.stdout
        assert "released True" in r.stdout, r.stdout  # the process as it was, once the pool is done
    finally:
        for p in _sleeping_any(marker):
            p.kill()
    assert _sleeping_any(marker) == [], "a process of the test outlived it"


def _sleeping_any(marker: str) -> list:
    import psutil

    return [p for p in psutil.process_iter(["cmdline"])
            if (p.info["cmdline"] or [""])[0] == "sleep" and p.info["cmdline"][-1].startswith(marker)]


KILLED_WORKER = """
import multiprocessing as mp, os, subprocess, sys, time
from donation_course.grading.executors.orphans import Orphans
from donation_course.grading.executors.pool import LocalPool, Slot
marker = sys.argv[1]

def worker(conn):  # a stand-in grading worker: its processes (a zygote, a launcher) under it, then it waits
    subprocess.Popen(["sleep", marker + "1"])
    subprocess.Popen(["sleep", marker + "2"])
    conn.send("up")
    time.sleep(600)

ctx = mp.get_context("fork")
pool = LocalPool.__new__(LocalPool)  # the pool's kill alone: no nbgrader, no kernel
pool.orphans = Orphans()
parent, child = ctx.Pipe()
proc = ctx.Process(target=worker, args=(child,), daemon=True)
proc.start()
assert parent.recv() == "up"
slot = Slot(0, proc, parent)
pool.slots = [slot]
print("left", pool.kill(slot), flush=True)
print("worker", proc.exitcode, flush=True)
pool.orphans.release()
"""


def test_a_killed_workers_processes_are_gone_when_the_pools_kill_returns():
    """pool.LocalPool.kill: the worker is killed before its processes are waited for, so they are reaped (by the
    run's process, their subreaper) and none is left to wait out the kill's time limit as the worker's zombie."""
    marker = f"600.{os.getpid()}"
    r = subprocess.run([sys.executable, "-c", KILLED_WORKER, marker], capture_output=True, text=True, timeout=120)
    try:
        assert r.returncode == 0, r.stderr
        assert "left []" in r.stdout, r.stdout
        assert "worker -9" in r.stdout, r.stdout
    finally:
        for p in _sleeping_any(marker):
            p.kill()
    assert _sleeping_any(marker) == [], "a process of the killed worker outlived it"
