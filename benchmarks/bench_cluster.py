"""Benchmark `./course grade --scheduler` on a local 2-worker Dask cluster against the local pool, in one run.

    .venv/instructor/bin/python benchmarks/bench_cluster.py [--n 40] [--workers 2] [--once]

(--once: A then B, one run each and no untimed warm-up runs before them, so
no figures worth quoting: the smoke run tests/test_benchmarks.py makes with
two submissions.)

The same N submissions (bench_grading's mix of right and wrong answers),
each run in a fresh copy of one prepared course (assignment generated,
compile cache filled: untimed), in A B B A order:
  A. `./course grade --workers W` (the local fork pool);
  B. `./course grade --scheduler ADDR` on a dask LocalCluster of W worker
     processes of one thread each, started once before (its start-up is
     timed on its own; the course bundle reaches the workers in an untimed
     one-student run first, as it does once per course).
Figures: the cluster's overhead per submission over the local run; bytes
sent and returned per task and the bundle's size (from logs/cluster.log);
p50 and p95 of queue wait, grading wall time, core-seconds and peak RSS; the
cost of replacing the fork pool by a LocalCluster started per run; and,
from the measured core-seconds and per-worker throughput, 1,000 and 10,000
submissions projected on N workers.
"""
import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_grading import ROOT, submissions

from donation_course.authoring import scratch_course
from donation_course.course import Course
from donation_course.grading.executors.cluster_log import percentile
from donation_course.grading.run.prepare import prepare

LIMITS = ["--timeout", "300", "--no-progress"]


def grade(files: Path, course: Path, *extra) -> tuple[float, str]:
    import subprocess

    from donation_course.course import venv_env

    t = time.perf_counter()
    r = subprocess.run([str(ROOT / "course"), "grade", str(files), "--course", str(course), *LIMITS, *extra],
                       env=venv_env(), capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"grade failed (its course: {course}):\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
    return time.perf_counter() - t, r.stderr


def figures(course: Path) -> list[dict]:
    rows = []
    for line in (course / ".grading" / "logs" / "cluster.log").read_text().splitlines():
        if " student=" in line:
            rows.append({k: v for k, v in re.findall(r"(\w+)=(\S+)", line)})
    return rows


def numbers(rows, key, scale=1.0):
    return [float(r[key]) * scale for r in rows if r.get(key) not in (None, "None")]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=40)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--once", action="store_true", help="A then B once (a smoke run; the figures are not means)")
    a = p.parse_args()
    import dask
    from distributed import LocalCluster

    tmp = Path(tempfile.mkdtemp(prefix="bench-cluster-"))  # kept if a run fails, for its logs
    files = submissions(tmp, a.n)
    one = tmp / "one"
    one.mkdir()
    shutil.copy(next(files.iterdir()), one)
    base = scratch_course(tmp / "base")
    prepare(Course(base), base / ".grading", say=print)
    copies = iter(range(100))
    fresh = lambda: shutil.copytree(base, tmp / f"course-{next(copies)}")  # noqa: E731

    dask.config.set({"temporary-directory": str(tmp / "dask")})  # the scheduler's folder too
    t = time.perf_counter()
    cluster = LocalCluster(n_workers=a.workers, threads_per_worker=1, processes=True, dashboard_address=None,
                           local_directory=str(tmp / "dask"))
    cluster.get_client().wait_for_workers(a.workers)
    startup = time.perf_counter() - t
    address = cluster.scheduler_address
    try:
        if not a.once:  # warm-ups for figures worth quoting; a smoke run only needs the table
            grade(one, fresh(), "--workers", "1")                  # page cache, imports
            grade(one, fresh(), "--scheduler", address)            # the course bundle reaches the workers
        local, remote, rows = [], [], []
        for mode in ("local", "cluster") if a.once else ("local", "cluster", "cluster", "local"):
            course = fresh()
            if mode == "local":
                local.append(grade(files, course, "--workers", str(a.workers))[0])
            else:
                wall, stderr = grade(files, course, "--scheduler", address)
                remote.append(wall)
                rows += figures(course)
                summary = [ln for ln in stderr.splitlines() if ln.startswith("cluster:")]
    finally:
        cluster.close()
    shutil.rmtree(tmp)
    n, w = a.n, a.workers
    t_local, t_cluster = statistics.mean(local), statistics.mean(remote)
    per = (t_cluster - t_local) / n
    runs = "one run (--once: a smoke run)" if a.once else "the mean of two runs"
    print(f"\n{n} submissions, {w} workers, {os.cpu_count()} cores; each figure {runs}\n")
    print("| run | wall (two runs) | per submission |\n|---|---|---|")
    print(f"| `./course grade --workers {w}` (local fork pool) | {' / '.join(f'{x:.1f}' for x in local)} s "
          f"| {t_local / n:.3f} s |")
    print(f"| `./course grade --scheduler` (LocalCluster, {w} x 1 thread) | "
          f"{' / '.join(f'{x:.1f}' for x in remote)} s | {t_cluster / n:.3f} s |")
    print(f"\ncluster overhead per submission: {per:+.3f} s ({t_cluster / t_local - 1:+.1%}; target <= +10%)")
    print(f"LocalCluster start-up ({w} workers): {startup:.1f} s; a LocalCluster started per run instead of the "
          f"fork pool: {(t_cluster + startup) / t_local - 1:+.1%} for {n} submissions")
    sent, back = numbers(rows, "sent", 1e-3), numbers(rows, "returned", 1e-3)
    print(f"per task: sent {statistics.mean(sent):.1f} kB, returned {statistics.mean(back):.1f} kB (pickled)")
    print("last cluster run's summary: " + (summary[-1] if summary else "(none)"))
    print("\n| per submission | p50 | p95 |\n|---|---|---|")
    for key, label, scale in (("wait", "queue wait (s)", 1), ("wall", "grading wall time (s)", 1),
                              ("cpu", "core-seconds", 1), ("rss", "peak RSS (MiB)", 2**-20)):
        v = numbers(rows, key, scale)
        print(f"| {label} | {percentile(v, 50):.2f} | {percentile(v, 95):.2f} |")
    cpu = statistics.mean(numbers(rows, "cpu"))
    per_worker = t_cluster * w / n  # measured wall seconds per submission per one-thread worker
    print(f"\nprojection: {cpu:.2f} core-seconds per submission (mean), {per_worker:.2f} s per submission per "
          "worker as measured here (one core each)\n")
    print("| submissions | workers | from core-seconds | from measured throughput |\n|---|---|---|---|")
    for count in (1000, 10000):
        for workers in (2, 16, 64, 256):
            print(f"| {count:,} | {workers} | {count * cpu / workers / 60:.1f} min | "
                  f"{count * per_worker / workers / 60:.1f} min |")
    print(f"\nreproduce: .venv/instructor/bin/python benchmarks/bench_cluster.py --n {n} --workers {w}")


if __name__ == "__main__":
    sys.exit(main())
