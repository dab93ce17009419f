"""The referee's scratch folder (TMPDIR/referee-*) leaves nothing behind: its owner removes it when it ends
normally (atexit; a forked grading worker at its own shutdown), and the folder of an owner that was killed is
removed by the next referee made in the same TMPDIR, never a living owner's."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from donation_course.grading.executors import scratch
from donation_course.grading.referee import client

MAKE = ("import os, signal, sys; from donation_course.grading.referee.client import Referee; "
        "r = Referee(sandbox=False, memory_mb=0); r.start(); print(r.folder, r.proc.pid, flush=True); "
        "sys.stdin.readline(); {end}")


def _owner_process(tmp_path: Path, end: str):
    proc = subprocess.Popen([sys.executable, "-c", MAKE.format(end=end)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(tmp_path)})
    folder, server = proc.stdout.readline().split()
    return proc, Path(folder), int(server)


def _gone(pid: int, within: float = 30) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not scratch.started(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.slow  # starts referee servers (each imports JAX)
def test_a_referee_ends_with_its_process_folder_and_server(tmp_path):
    proc, folder, server = _owner_process(tmp_path, "sys.exit(0)")
    assert folder.parent == tmp_path and (folder / scratch.OWNER).read_text().split()[0] == str(proc.pid)
    proc.communicate("\n", timeout=60)
    assert proc.returncode == 0
    assert not folder.exists()
    assert _gone(server)


@pytest.mark.slow  # starts referee servers (each imports JAX)
def test_a_killed_owners_folder_is_removed_by_the_next_referee_and_a_living_owners_is_kept(tmp_path):
    proc, folder, server = _owner_process(tmp_path, "")
    living, living_folder, living_server = _owner_process(tmp_path, "")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert folder.exists()  # nothing of the killed process ran
    assert _gone(server)    # its server died with it (PR_SET_PDEATHSIG)
    unmarked = tmp_path / f"{client.PREFIX}unmarked"  # not a referee's folder as this code makes them: kept
    unmarked.mkdir()
    try:
        assert client.remove_stale(tmp_path) == [folder]
        assert not folder.exists() and living_folder.exists() and unmarked.exists()
        # a pid reused by another process is not the owner: the mark holds its start time too
        reused = tmp_path / f"{client.PREFIX}reused"
        reused.mkdir()
        (reused / scratch.OWNER).write_text(f"{os.getpid()} 1")
        assert client.remove_stale(tmp_path) == [reused]
    finally:
        living.communicate("\n", timeout=60)
    assert not living_folder.exists()


FORKED_WORKER = """
import multiprocessing as mp, sys, tempfile
from pathlib import Path
from donation_course.grading.referee import client, student

def worker(tmp, conn):
    tempfile.tempdir = tmp
    ref = student.referee()
    ref.start()
    folder = Path(ref.folder)
    student.close()  # what worker.serve does when it ends
    conn.send((folder.parent == Path(tmp), ref.proc is None, folder.exists()))

inherited = client.Referee(sandbox=False, memory_mb=0)  # the parent's referee (never started)
student._REFEREE[:] = [inherited]
parent, child = mp.Pipe()
proc = mp.get_context("fork").Process(target=worker, args=(sys.argv[1], child))
proc.start()
print(parent.recv(), proc.join(30) or proc.exitcode, student._REFEREE == [inherited], flush=True)
"""


@pytest.mark.slow  # starts a referee server (it imports JAX)
def test_a_forked_worker_closes_its_own_referee_and_never_its_parents(tmp_path):
    # in a fresh one-thread process that forks, as the run forks its workers
    out = subprocess.run([sys.executable, "-c", FORKED_WORKER, str(tmp_path)], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.split("\n")[0] == "(True, True, False) 0 True", out.stderr[-2000:]
    assert list(tmp_path.glob(f"{client.PREFIX}*")) == []
