"""The benchmark scripts the docs quote still run to their tables (a smoke
run, one or two submissions): a change that breaks a benchmark fails here, not when
someone next tries to reproduce a figure. No figure is asserted: timings
belong in docs/performance.md, measured on a quiet machine."""
import re
import subprocess
import sys

import pytest

from helpers import ROOT

pytestmark = pytest.mark.slow


def test_the_grading_benchmark_runs_to_its_table():
    # one submission on one worker: every step the documented run (--n 20 --workers 2) takes, at the least CPU
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_grading.py"), "--n", "1", "--workers", "1"],
                       cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    for row in ("serial `nbgrader autograde`", "`./course grade --workers 1`", "floor: `import jax` only",
                "fresh course, set-up included", "throughput vs serial nbgrader",
                "throughput vs serial nbgrader, fresh course (first run, set-up included)",
                "per-submission time vs floor"):
        assert re.search(rf"^\|[^\n]*{re.escape(row)}[^\n]*\| [\d.]+ ?[sx] \|", r.stdout, re.M), (row, r.stdout)
    # the fresh course's first run step by step (what --cold prints for each round): serial autograde and
    # generate_assignment, ours whole, its set-up, seven steps from its logs/timings.json, the ratio
    assert re.search(r"^\| 1 \|( [\d.]+ s \|){11} [\d.]+x \|$", r.stdout, re.M), r.stdout


def test_the_grading_benchmarks_cpu_table_runs_and_names_each_role():
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_grading.py"), "--cpu", "--n", "1",
                        "--workers", "1"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    for role in ("the run's own process", "grading processes", "kernels (", "kernel launchers", "kernel zygotes",
                 "referee servers"):
        assert re.search(rf"^\| {re.escape(role)}[^\n]*\| [\d.]+ s \| [\d.]+ s \|", r.stdout, re.M), (role, r.stdout)
    assert re.search(r"^\| kernels \([^|]*\|( [\d.]+ s \|){4}$", r.stdout, re.M), r.stdout  # serial's kernels too
    assert re.search(r"^\| \*\*all\*\* \|", r.stdout, re.M) and "cores busy on average" in r.stdout, r.stdout


def test_the_cpu_table_names_a_process_by_what_it_execs_not_by_its_parent_before_the_exec(tmp_path):
    """A process first sampled between its fork and its exec (as serial nbgrader's kernel can be: jupyter_client
    forks, then execs ipykernel_launcher) is named by the command it runs after, not by its parent's."""
    # the parent's command line (this code) does not hold the name the child execs: 'ipykernel' + '_launcher';
    # the child spends 0.5 s of CPU, however loaded the machine is
    code = ("import os, sys, time\npid = os.fork()\nif pid == 0:\n    time.sleep(0.3)\n"
            "    os.execv(sys.executable, [sys.executable, '-c', 'import time\\n"
            "while time.process_time() < 0.5: pass', 'ipykernel' + '_launcher'])\nos.waitpid(pid, 0)\n")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_grading
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    _, roles = bench_grading.tree_cpu([sys.executable, "-c", code], cwd=tmp_path)
    kernels = roles.get("kernels (the notebook's cells and the hidden checks)", 0.0)
    assert kernels > 0.2, roles


def test_the_cluster_benchmark_runs_to_its_table():
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_cluster.py"), "--n", "2", "--workers", "1",
                        "--once"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    for row in ("`./course grade --workers 1` (local fork pool)", "`./course grade --scheduler` (LocalCluster",
                "queue wait (s)", "grading wall time (s)", "core-seconds", "peak RSS (MiB)"):
        assert re.search(rf"^\|[^\n]*{re.escape(row)}[^\n]*\| [\d.]+", r.stdout, re.M), (row, r.stdout)
    assert re.search(r"^cluster overhead per submission: [+-][\d.]+ s", r.stdout, re.M), r.stdout
    assert re.search(r"^\| 10,000 \| 256 \| [\d.]+ min \| [\d.]+ min \|", r.stdout, re.M), r.stdout


def test_the_lessons_benchmark_runs_to_its_table():
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_lessons.py"), "--lesson",
                        "02_the_contract.ipynb", "--mib", "1", "--steps", "1"],
                       cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    row = r"^\| 02_the_contract\.ipynb \| [\d.]+ \| [+-][\d.]+ \| \d+ \| (yes|NO) \|$"
    assert re.search(row, r.stdout, re.M), r.stdout
    for loop in ("without donation", "with donation"):
        assert re.search(rf"^\| {loop} \| [\d.]+ \| [\d.]+% \| [\d., ]+ \|$", r.stdout, re.M), (loop, r.stdout)
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_lessons.py"), "--lesson", "99_none.ipynb"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "no such lesson in solutions/: 99_none.ipynb" in r.stderr, r.stderr


def test_the_referee_benchmark_runs_to_its_table():
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_referee.py"), "--n", "2", "--workers", "1"],
                       cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    for row in ("`./course grade` wall time", "worker time per submission", "referee time per submission (all n)",
                "referee time per judged submission: median, max", "the referee's share of grading time"):
        assert re.search(rf"^\| {re.escape(row)}[^\n]*\| [\d.]+ s(, [\d.]+ s)? \|$|^\| {re.escape(row)} \| \d+% \|$",
                         r.stdout, re.M), (row, r.stdout)
    assert "the referee judged 2 of them" in r.stdout, r.stdout  # both right answers: the referee judges each


def test_the_state_benchmark_runs_to_its_table():
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_state.py"), "--n", "200", "--repeat", "2"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    for row in ("the whole state file written again (save_state)", "one line appended to the journal"):
        assert re.search(rf"^\| {re.escape(row)}[^\n]*\| [\d.]+ ms \| [\d.]+ min \|$", r.stdout, re.M), (row, r.stdout)
    assert re.search(r"^reading the state back with a journal of 200 lines \(load_state\): [\d.]+ s$", r.stdout, re.M)
