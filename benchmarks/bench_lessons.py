"""How long each lesson takes to run headless, beside the floor.

    .venv/instructor/bin/python benchmarks/bench_lessons.py [--copies solutions|notebooks] [--mib 64] [--lesson NAME]

(--lesson NAME, repeatable: only those lessons; tests/test_benchmarks.py's
smoke run takes one lesson and a 1 MiB loop.)

Runs every lesson top to bottom in a fresh kernel (the same
`donation_course.execute.run_notebook` the tests use), and, in the same run, a
fresh kernel that only imports jax: the floor no lesson can beat. Then
measures lesson 1's memory loop with and without donation. Prints a
markdown table. Targets: every lesson < 20 s, the whole course < 2 min, on
2 CPU cores. Timings depend on the machine and its load; run it on an idle
machine before quoting numbers.
"""
import argparse
import os
import platform
import sys
import tempfile
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_notebook

from donation_course.course import NOTEBOOKS, SOLUTIONS
from donation_course.execute import run_notebook
from donation_lab.memory import MiB, compare_donation, elements_for_mib

LESSON_TARGET_S = 20
COURSE_TARGET_S = 120


def floor_seconds() -> float:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "floor.ipynb"
        nb = new_notebook(cells=[new_code_cell("import jax\njax.numpy.zeros(1).block_until_ready()")])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, path)
        return run_notebook(path).seconds


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--copies", choices=["solutions", "notebooks"], default="solutions")
    parser.add_argument("--mib", type=float, default=64, help="array size for the memory loop")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--lesson", action="append", help="only this lesson's notebook (repeatable); default: all")
    args = parser.parse_args(argv)
    folder = SOLUTIONS if args.copies == "solutions" else NOTEBOOKS
    lessons = sorted(folder.glob("*.ipynb"))
    if args.lesson:
        unknown = sorted(set(args.lesson) - {p.name for p in lessons})
        if unknown:
            parser.error(f"no such lesson in {folder.name}/: {', '.join(unknown)}")
        lessons = [p for p in lessons if p.name in args.lesson]

    floor = floor_seconds()
    rows, total = [], 0.0
    for path in lessons:
        run = run_notebook(path)
        total += run.seconds
        errors = len(run.errors)
        ok = "yes" if run.seconds < LESSON_TARGET_S else "NO"
        rows.append(f"| {path.name} | {run.seconds:.1f} | {run.seconds - floor:+.1f} | {errors} | {ok} |")

    print(f"Machine: {platform.machine()}, {os.cpu_count()} CPUs visible, Python {platform.python_version()}")
    print(f"Copies: {folder.name}/; floor (fresh kernel that only imports jax): {floor:.1f} s\n")
    print("| lesson | seconds | above floor | errors (incl. meant-to-fail) | < 20 s |")
    print("|---|---:|---:|---:|---|")
    print("\n".join(rows))
    whole = "whole course" if not args.lesson else f"{len(lessons)} of the lessons"
    print(f"| **{whole}** | {total:.1f} | | | {'yes' if total < COURSE_TARGET_S else 'NO'} (< 120 s) |\n")

    results = compare_donation(elements_for_mib(args.mib), steps=args.steps)
    print(f"Memory loop, lesson 1 (`params = step(params, grads)`, {args.mib:g} MiB float32, "
          f"{args.steps} steps; {results[False].measure}):\n")
    print("| loop | extra peak per step (MiB) | of one array | per step (MiB) |")
    print("|---|---:|---:|---|")
    for donate in (False, True):
        m = results[donate]
        per_step = ", ".join(f"{b / MiB:.2f}" for b in m.extra_per_step)
        print(f"| {'with' if donate else 'without'} donation | {m.extra_peak_bytes / MiB:.2f} | "
              f"{m.extra_fraction:.1%} | {per_step} |")
    only = "".join(f" --lesson {name}" for name in args.lesson or [])
    print(f"\nReproduce: .venv/instructor/bin/python benchmarks/bench_lessons.py --copies {args.copies} "
          f"--mib {args.mib:g} --steps {args.steps}{only}")


if __name__ == "__main__":
    sys.exit(main())
