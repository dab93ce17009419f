"""Benchmark `./course grade` against serial `nbgrader autograde`, in one run.

    .venv/instructor/bin/python benchmarks/bench_grading.py [--n 40] [--workers N]
    .venv/instructor/bin/python benchmarks/bench_grading.py --cold [--n 10] [--workers 2] [--rounds 3]

Figures, all measured here on the same machine in the same run:
  1. throughput: wall time of serial `nbgrader autograde` on N submissions
     divided by the wall time of `./course grade` on the same N (target >= 2.5x
     for 20 on 2 workers, issue #32; a fresh course's first run of 10, >= 1.8x, issue #30),
     on a warm course and on a fresh one. The fresh course's
     first run is timed whole, set-up included (`./course` itself, generating
     the assignment, filling the compile cache, starting the workers); the
     warm run is the second, on the same course;
  2. per-submission cost: `./course grade` wall time per submission for
     the graded exercise, divided by the same for a floor notebook that only imports
     jax (one trivial graded cell), graded the same way (target <= 1.3x);
  3. the sandbox's and the runtime audit's cost: `./course grade` (sandboxed
     and audited, the default) per submission beside `--no-sandbox` with the
     audit off (c.GradingSettings.audit = False), same submissions, same run
     (target: at most 10% slower); `--no-sandbox` with the audit on gives the
     audit's own share. All read the course's compile cache (what the
     source's hidden tests compiled, grading/run/compile_cache.py); a sandboxed
     `--no-compile-cache` run shows what the cache saves.
  --sandbox-only measures figure 3 alone.
  --cold: figure 1 on fresh courses alone, `--rounds` times, serial and
     ours alternating (serial first in even rounds, ours first in odd ones:
     a neighbour's load falls on both alike), with the set-up's parts of
     each first run (logs/timings.json) and the load average.
  --cpu: where the CPU goes: N submissions graded on a warm course (the class graded once before, as the
     warm run above) and by serial `nbgrader autograde`, each process of the tree sampled every 0.03 s (its
     user and system time, psutil), summed by role: the run's own process, the grading processes (nbgrader,
     the referee's client), the kernels, their launchers and zygotes, the referee servers and their children.
  --setup: a class of 8 on a warm course (generated, compile cache filled,
     graded once): the run's setup, read from its logs/timings.json
     (target: at most 3 s), and the peak memory of the whole process tree
     (the run, its workers, their kernels and sandboxes), sampled every
     0.05 s as the sum of RSS and of PSS (which shares a page between the
     processes mapping it), beside serial `nbgrader autograde` on the same 8.
Everything runs in scratch courses; autograder/ is never touched.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_notebook

from donation_course.corpus import capstone as capstone_corpus
from donation_course.corpus import exercise as corpus
from donation_course.course import COURSE, nbgrader_command, venv_env

ROOT = Path(__file__).resolve().parents[1]

ASSIGNMENT = COURSE.assignment

EX = corpus.EXERCISE
MIX = ["partial", "wrapped", "argnames", "lambda", "nodonate", "nojit", "wrongvalue", "wrongarg"]
# Each submission answers the capstone right in a student's own words (the capstone corpus's RIGHT: a decorated
# train_step, its jit cache cleared around the NaN hunt), not in the solution's: its programs are not in the
# course's compile cache, as most students' are not, so they are compiled while the class is graded.
CAPSTONE = capstone_corpus.RIGHT


def sh(cmd, cwd=ROOT):
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=venv_env(), capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"failed: {' '.join(map(str, cmd))}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r


def make_course(dest: Path, floor=False) -> Path:
    dest.mkdir(parents=True)
    shutil.copy2(ROOT / "autograder" / "nbgrader_config.py", dest)
    src = dest / "source" / ASSIGNMENT
    if floor:
        src.mkdir(parents=True)
        setup = new_code_cell("import jax")
        setup.id = "setup"
        setup.metadata["nbgrader"] = dict(grade=True, solution=False, locked=True, grade_id="setup",
                                          points=1, schema_version=3)
        nb = new_notebook(cells=[setup])
        nb.metadata = {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python",
                                      "name": "python3"}, "language_info": {"name": "python"}}
        nbformat.write(nb, src / f"{EX}.ipynb")
    else:
        shutil.copytree(ROOT / "autograder" / "source" / ASSIGNMENT, src)
    return dest


def submissions(dest: Path, n: int, floor_course: Path = None) -> Path:
    files = dest / "files"
    if floor_course is not None:
        files.mkdir(parents=True)
        release = floor_course / "release" / ASSIGNMENT / f"{EX}.ipynb"
        for i in range(n):
            shutil.copy(release, files / f"s{i:03d}_{EX}.ipynb")
        return files
    corpus.build(dest / "corpus", capstone_answer=CAPSTONE)
    files.mkdir(parents=True)
    for i in range(n):
        shutil.copy(dest / "corpus" / f"{MIX[i % len(MIX)]}_{EX}.ipynb", files / f"s{i:03d}_{EX}.ipynb")
    return files


def serial_course(dest: Path, files: Path) -> Path:
    """A course for serial `nbgrader autograde` of the same submissions: generated, in nbgrader's layout."""
    serial = make_course(dest)
    sh(nbgrader_command("generate_assignment", ASSIGNMENT, "--force"), cwd=serial)
    for f in files.iterdir():
        d = serial / "submitted" / f.name.split("_")[0] / ASSIGNMENT
        d.mkdir(parents=True)
        shutil.copy(f, d / f"{EX}.ipynb")
    return serial


def time_grade(files, course, workers, extra=()):
    t = time.perf_counter()
    sh([ROOT / "course", "grade", files, "--course", course, "--workers", workers, "--no-progress", *extra])
    return time.perf_counter() - t


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=40)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--sandbox-only", action="store_true", help="only the sandbox's cost (figure 3)")
    p.add_argument("--setup", action="store_true", help="setup and peak memory of a small class (8 by default)")
    p.add_argument("--cold", action="store_true", help="a fresh course's first run against serial nbgrader")
    p.add_argument("--rounds", type=int, default=3, help="--cold: how many fresh courses (and serial runs)")
    p.add_argument("--cpu", action="store_true", help="CPU seconds by process role, ours and serial nbgrader's")
    a = p.parse_args()
    if a.cpu:
        return cpu_by_role(a)
    if a.sandbox_only:
        return sandbox_cost(a)
    if a.setup:
        return setup_and_memory(a)
    if a.cold:
        return cold_course(a)
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as tmp:
        tmp = Path(tmp)
        files = submissions(tmp, a.n)
        # serial nbgrader, then ./course grade on the exercise: a fresh course's first run (set-up included),
        # then a warm one on that course
        t_serial, t_generate, t_cold, phases, par = cold_round(tmp, files, a.workers, ours_first=False)
        t_par = time_grade(files, par, a.workers)
        # the floor: a notebook that only imports jax, graded the same way
        floor = make_course(tmp / "floor", floor=True)
        sh(nbgrader_command("generate_assignment", ASSIGNMENT, "--force"), cwd=floor)  # its release is the submission
        ffiles = submissions(tmp / "fl", a.n, floor_course=floor)
        floor_one = tmp / "floor-one"
        floor_one.mkdir()
        shutil.copy(next(ffiles.iterdir()), floor_one)
        time_grade(floor_one, floor, 1)  # untimed, as for the exercise: the course's one-time preparation
        t_floor = time_grade(ffiles, floor, a.workers)
    n = a.n
    rows = [
        ("serial `nbgrader autograde`", f"{t_serial:.1f} s", f"{t_serial / n:.2f} s"),
        (f"`./course grade --workers {a.workers}` ({EX}), fresh course, set-up included", f"{t_cold:.1f} s",
         f"{t_cold / n:.2f} s"),
        (f"`./course grade --workers {a.workers}` ({EX})", f"{t_par:.1f} s", f"{t_par / n:.2f} s"),
        (f"`./course grade --workers {a.workers}` (floor: `import jax` only)", f"{t_floor:.1f} s",
         f"{t_floor / n:.2f} s"),
    ]
    print(f"\n{n} submissions, {os.cpu_count()} cores\n")
    print("| run | wall | per submission |\n|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} |")
    print("\n| figure | value | target |\n|---|---|---|")
    print(f"| throughput vs serial nbgrader | {t_serial / t_par:.2f}x | >= 2.5x (#32) |")
    print(f"| throughput vs serial nbgrader, fresh course (first run, set-up included) | {t_serial / t_cold:.2f}x "
          "| >= 1.8x |")
    print(f"| per-submission time vs floor | {t_par / t_floor:.2f}x | <= 1.3x |")
    print("\nthe fresh course's first run, step by step:\n")
    cold_table([(t_serial, t_generate, t_cold, phases)])
    print(f"\nreproduce: .venv/instructor/bin/python benchmarks/bench_grading.py --n {n} --workers {a.workers}")


def sandbox_cost(a):
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as tmp:
        tmp = Path(tmp)
        files = submissions(tmp, a.n)
        one = tmp / "one"
        one.mkdir()
        shutil.copy(next(files.iterdir()), one)
        modes = {"sandbox and audit (default)": [], "--no-sandbox": ["--no-sandbox"],
                 "--no-sandbox, audit off": ["--no-sandbox"],
                 "--no-compile-cache (sandboxed)": ["--no-compile-cache"]}
        courses, times = {}, {name: 0.0 for name in modes}
        for i, (name, extra) in enumerate(modes.items()):
            courses[name] = make_course(tmp / f"c{i}")
            if "audit off" in name:  # the runtime audit off: a course setting, never a flag
                with open(courses[name] / "nbgrader_config.py", "a") as fh:
                    fh.write("\nc.GradingSettings.audit = False\n")
            time_grade(one, courses[name], 1, extra)  # generates the assignment (and the compile cache)
        # the three like-for-like modes in A B C C B A order (page cache, CPU
        # neighbours), each the mean of two runs; the uncached mode once
        trio = list(modes)[:3]
        for name in [*trio, *reversed(trio)]:
            times[name] += time_grade(files, courses[name], a.workers, modes[name]) / 2
        last = list(modes)[3]
        times[last] = time_grade(files, courses[last], a.workers, modes[last])
    n = a.n
    print(f"\n{n} submissions, {a.workers} workers, {os.cpu_count()} cores\n")
    print("| run | wall | per submission |\n|---|---|---|")
    for name, t in times.items():
        print(f"| `./course grade` {name} | {t:.1f} s | {t / n:.2f} s |")
    base, default = times["--no-sandbox, audit off"], times["sandbox and audit (default)"]
    print(f"\nsandbox and audit, per submission: {(default - base) / n:+.2f} s "
          f"({default / base - 1:+.1%} vs --no-sandbox with the audit off; target <= +10%)")
    print(f"the audit alone (both --no-sandbox): {times['--no-sandbox'] / base - 1:+.1%}")
    print(f"compile cache: {times['--no-compile-cache (sandboxed)'] / default:.2f}x "
          "faster than without it (sandboxed)")
    print(f"reproduce: .venv/instructor/bin/python benchmarks/bench_grading.py --sandbox-only --n {n} "
          f"--workers {a.workers}")


COLD_PARTS = ("collect", "prepare", "prepare.generate_assignment", "prepare.compile_cache", "workers", "grading",
              "reports")


def cold_round(tmp: Path, files: Path, workers: int, ours_first: bool) -> tuple[float, float, float, dict, Path]:
    """One fresh course's first `./course grade` (set-up included) and serial `nbgrader autograde` of the same
    files (its generate_assignment timed apart), in the order given; (serial autograde, serial
    generate_assignment, ours, our run's timings.json, our course, graded once)."""
    course = make_course(tmp / "cold")
    serial = make_course(tmp / "serial")

    def ours() -> float:
        return time_grade(files, course, workers)

    def theirs() -> tuple[float, float]:
        t = time.perf_counter()
        sh(nbgrader_command("generate_assignment", ASSIGNMENT, "--force"), cwd=serial)
        t_generate = time.perf_counter() - t
        for f in files.iterdir():
            d = serial / "submitted" / f.name.split("_")[0] / ASSIGNMENT
            d.mkdir(parents=True)
            shutil.copy(f, d / f"{EX}.ipynb")
        t = time.perf_counter()
        sh(nbgrader_command("autograde", ASSIGNMENT, "--force"), cwd=serial)
        return time.perf_counter() - t, t_generate

    if ours_first:
        t_ours = ours()
        t_serial, t_generate = theirs()
    else:
        t_serial, t_generate = theirs()
        t_ours = ours()
    phases = json.loads((course / ".grading" / "logs" / "timings.json").read_text())
    shutil.rmtree(serial)
    return t_serial, t_generate, t_ours, phases, course


def cold_table(rows: list) -> None:
    """Per round: serial autograde, serial generate_assignment, ours whole, our set-up and steps, the ratio."""
    print("| round | serial `nbgrader autograde` | serial `generate_assignment` | `./course grade`, fresh course "
          "(whole) | set-up | " + " | ".join(COLD_PARTS) + " | ratio |\n|" + "---|" * (6 + len(COLD_PARTS)))
    for i, (t_serial, t_generate, t_ours, ph) in enumerate(rows):
        parts = " | ".join(f"{ph.get(k, 0):.1f} s" for k in COLD_PARTS)
        print(f"| {i + 1}{' (ours first)' if i % 2 else ''} | {t_serial:.1f} s | {t_generate:.1f} s | {t_ours:.1f} s "
              f"| {ph['setup']:.1f} s | {parts} | {t_serial / t_ours:.2f}x |")


def cold_course(a):
    n = a.n if a.n != 40 else 10
    rows, loads = [], [os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="bench-cold-") as tmp:
        tmp = Path(tmp)
        files = submissions(tmp, n)
        for i in range(a.rounds):
            *row, course = cold_round(tmp / f"r{i}", files, a.workers, ours_first=i % 2 == 1)
            shutil.rmtree(course)
            rows.append(tuple(row))
            loads.append(os.getloadavg())
    print(f"\n{n} submissions, {a.workers} workers, {os.cpu_count()} cores; load average (1, 5, 15 min) before: "
          + ", ".join(f"{x:.1f}" for x in loads[0]) + "; after each round: "
          + "; ".join(", ".join(f"{x:.1f}" for x in load) for load in loads[1:]) + "\n")
    cold_table(rows)
    serial, ours = sum(r[0] for r in rows), sum(r[2] for r in rows)
    print("\n| figure | value | target |\n|---|---|---|")
    print(f"| fresh course's first run vs serial nbgrader autograde (sum of {len(rows)} rounds) | {serial / ours:.2f}x "
          "| >= 1.8x |")
    print(f"| the same, serial's generate_assignment counted too | "
          f"{(serial + sum(r[1] for r in rows)) / ours:.2f}x | |")
    print(f"\nreproduce: .venv/instructor/bin/python benchmarks/bench_grading.py --cold --n {n} --workers {a.workers} "
          f"--rounds {a.rounds}")


def sampled(cmd, look, cwd=ROOT, every: float = 0.05) -> float:
    """Run cmd; call look(its psutil.Process) every `every` seconds in a thread until it ends (look returns
    False to stop looking). Returns the wall seconds; stops the benchmark if cmd fails."""
    import psutil

    proc = subprocess.Popen([str(c) for c in cmd], cwd=cwd, env=venv_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    done = threading.Event()

    def sample():
        try:
            root = psutil.Process(proc.pid)
        except psutil.NoSuchProcess:
            return
        while not done.is_set() and look(root) is not False:
            done.wait(every)

    t = time.perf_counter()
    sampler = threading.Thread(target=sample)
    sampler.start()
    out, _ = proc.communicate()
    wall = time.perf_counter() - t
    done.set()
    sampler.join()
    if proc.returncode:
        raise SystemExit(f"failed: {' '.join(map(str, cmd))}\n{out[-3000:]}")
    return wall


def tree_memory(cmd, cwd=ROOT) -> tuple[float, int, int]:
    """Run cmd; (wall seconds, peak RSS sum, peak PSS sum) of it and all its descendants, in bytes."""
    import psutil

    peak = {"rss": 0, "pss": 0}

    def look(root):
        rss = pss = 0
        try:
            for q in [root, *root.children(recursive=True)]:
                try:
                    info = q.memory_full_info()
                    rss, pss = rss + info.rss, pss + info.pss
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    pass
        except psutil.NoSuchProcess:
            return False
        peak["rss"], peak["pss"] = max(peak["rss"], rss), max(peak["pss"], pss)

    wall = sampled(cmd, look, cwd)
    return wall, peak["rss"], peak["pss"]


def _role(pid: int, name: str, cmd: str, root: int) -> str:
    """A process's role, from its name and command line as last seen (a forked kernel and the zygote name
    themselves after they start)."""
    if pid == root:
        return "the run's own process (collect, merge, reports)"
    if name == "dl-kernel" or "ipykernel_launcher" in cmd:
        return "kernels (the notebook's cells and the hidden checks)"
    if name in ("dl-kzygote", "dl-kjoin"):
        return "kernel zygotes (one per grading process)"
    if "referee.server" in cmd:
        return "referee servers and their children"
    if re.search(r"integrity\.kernel( |$)", cmd) or name in ("bwrap", "cat"):
        return "kernel launchers and bubblewrap"
    if "donation_course.cli" in cmd:
        return "grading processes (nbgrader, the referee's client, feedback)"
    return f"other ({name})"


def tree_cpu(cmd, cwd=ROOT) -> tuple[float, dict]:
    """Run cmd; (wall seconds, {role: CPU seconds}) of it and all its descendants, each process's user and system
    time as last sampled (every 0.03 s: up to that much of a process's end is missed). The sampling loads the
    machine too: the wall times are not the throughput benchmark's."""
    import psutil

    last = {}  # (pid, create time) -> (name, command line, cpu seconds), as last sampled
    root_pid = []

    def look(root):
        root_pid[:] = [root.pid]
        try:
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return False
        for q in tree:
            try:
                with q.oneshot():
                    key, times = (q.pid, q.create_time()), q.cpu_times()
                    # read at every sample: a process first seen between its fork and its exec (serial nbgrader's
                    # kernel) shows its parent's command line until the exec; one that is exiting shows none
                    cmd = " ".join(q.cmdline()) or (last[key][1] if key in last else "")
                    last[key] = (q.name(), cmd, times.user + times.system)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                pass

    wall = sampled(cmd, look, cwd, every=0.03)
    roles = {}
    for (pid, _), (name, command, cpu) in last.items():
        role = _role(pid, name, command, root_pid[0] if root_pid else -1)
        roles[role] = roles.get(role, 0.0) + cpu
    return wall, roles


def cell_seconds(autograded: Path) -> dict:
    """{cell: mean seconds} over the autograded notebooks, from nbclient's execution timestamps; a cell is named
    by its grade id, else its first line."""
    import datetime as dt

    found = {}
    for path in autograded.rglob("*.ipynb"):
        for cell in nbformat.read(path, as_version=4).cells:
            times = cell.get("metadata", {}).get("execution", {})
            if cell.cell_type != "code" or not {"iopub.execute_input", "shell.execute_reply"} <= set(times):
                continue
            start, end = (dt.datetime.fromisoformat(times[k].replace("Z", "+00:00"))
                          for k in ("iopub.execute_input", "shell.execute_reply"))
            name = cell.metadata.get("nbgrader", {}).get("grade_id") or cell.source.strip().split("\n")[0][:50]
            found.setdefault(name, []).append((end - start).total_seconds())
    return {name: sum(v) / len(v) for name, v in found.items()}


def warm_course(tmp: Path, n: int, workers: int) -> tuple[Path, Path, list]:
    """n submissions and a course that has graded them once (generated, compile cache filled, the referee's
    programs kept): (the submissions, the course, the command that grades them again)."""
    files = submissions(tmp, n)
    course = make_course(tmp / "course")
    grade_cmd = [ROOT / "course", "grade", files, "--course", course, "--workers", workers, "--no-progress"]
    sh(grade_cmd)
    return files, course, grade_cmd


def cpu_by_role(a):
    n = a.n if a.n != 40 else 20
    with tempfile.TemporaryDirectory(prefix="bench-cpu-") as tmp:
        tmp = Path(tmp)
        files, course, grade_cmd = warm_course(tmp, n, a.workers)
        wall, ours = tree_cpu(grade_cmd)
        cells = cell_seconds(course / "autograded")
        serial = serial_course(tmp / "serial", files)
        s_wall, theirs = tree_cpu(nbgrader_command("autograde", ASSIGNMENT, "--force"), cwd=serial)
    print(f"\n{n} submissions, {a.workers} workers, {os.cpu_count()} cores: CPU seconds by process role\n")
    print("| role | `./course grade` (warm course) | per submission | serial `nbgrader autograde` | per submission |")
    print("|---|---|---|---|---|")
    for role in sorted(set(ours) | set(theirs), key=lambda r: -max(ours.get(r, 0), theirs.get(r, 0))):
        mine, its = ours.get(role), theirs.get(role)
        print(f"| {role} | {f'{mine:.1f} s' if mine is not None else ''} "
              f"| {f'{mine / n:.2f} s' if mine is not None else ''} "
              f"| {f'{its:.1f} s' if its is not None else ''} | {f'{its / n:.2f} s' if its is not None else ''} |")
    total, s_total = sum(ours.values()), sum(theirs.values())
    print(f"| **all** | **{total:.1f} s** | **{total / n:.2f} s** | **{s_total:.1f} s** | **{s_total / n:.2f} s** |")
    print(f"| wall time | {wall:.1f} s | | {s_wall:.1f} s | |")
    print(f"\nCPU over wall time: {total / wall:.2f} cores busy on average (ours), {s_total / s_wall:.2f} (serial)")
    print("\nThe kernels' cells, wall time from the execute request to its reply (nbclient's timestamps in the "
          "autograded notebooks), mean over the submissions, the slowest first:\n")
    print("| cell | seconds |\n|---|---|")
    for name, seconds in sorted(cells.items(), key=lambda kv: -kv[1])[:8]:
        print(f"| {name} | {seconds:.3f} |")
    print(f"| all cells | {sum(cells.values()):.3f} |")
    print(f"\nreproduce: .venv/instructor/bin/python benchmarks/bench_grading.py --cpu --n {n} --workers {a.workers}")


def setup_and_memory(a):
    n = a.n if a.n != 40 else 8
    with tempfile.TemporaryDirectory(prefix="bench-setup-") as tmp:
        tmp = Path(tmp)
        files, course, grade_cmd = warm_course(tmp, n, a.workers)
        rows = []
        for _ in range(3):
            wall, rss, pss = tree_memory(grade_cmd)
            phases = json.loads((course / ".grading" / "logs" / "timings.json").read_text())
            rows.append((wall, phases, rss, pss))
        serial = serial_course(tmp / "serial", files)
        s_wall, s_rss, s_pss = tree_memory(nbgrader_command("autograde", ASSIGNMENT, "--force"), cwd=serial)
    mib = 1 << 20
    print(f"\n{n} submissions on a warm course, {a.workers} workers, {os.cpu_count()} cores\n")
    print("| run | wall | setup | collect | prepare | plan | stage | backup | workers | grading | reports "
          "| peak RSS (sum) | peak PSS (sum) |\n|" + "---|" * 13)
    for wall, ph, rss, pss in rows:
        steps = " | ".join(f"{ph.get(k, 0):.2f} s" for k in ("collect", "prepare", "plan", "stage", "backup",
                                                            "workers", "grading", "reports"))
        print(f"| `./course grade` | {wall:.1f} s | **{ph['setup']:.2f} s** | {steps} | {rss / mib:.0f} MiB "
              f"| {pss / mib:.0f} MiB |")
    print(f"| serial `nbgrader autograde` | {s_wall:.1f} s | | | | | | | | | | {s_rss / mib:.0f} MiB "
          f"| {s_pss / mib:.0f} MiB |")
    print(f"\nreproduce: .venv/instructor/bin/python benchmarks/bench_grading.py --setup --workers {a.workers}")


if __name__ == "__main__":
    main()
