"""The referee's own share of grading time, per submission.

    .venv/instructor/bin/python benchmarks/bench_referee.py [--n 20] [--workers 2]

Grades N submissions of the graded notebook (bench_grading.py's mix of right
and wrong answers to the exercise, each with the capstone answered) with
`./course grade --workers W` in a scratch course whose assignment was
generated and compile cache filled by an untimed one-student run, then reads
each worker's log, where the referee writes one line per student it judged
(`referee: <student>: <seconds> s`: the round trip to the worker's referee
server, its screening, compiling and running of the handed-over programs
included). The share is the referee's seconds over the workers' grading
seconds (wall time x workers), both from this one run.
"""
import argparse
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_grading import EX, make_course, submissions, time_grade  # noqa: E402

LINE = re.compile(r"^referee: (\S+): ([0-9.]+) s$", re.M)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=20)
    p.add_argument("--workers", type=int, default=2)
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-referee-") as tmp:
        tmp = Path(tmp)
        files = submissions(tmp, a.n)
        course = make_course(tmp / "course")
        one = tmp / "one"
        one.mkdir()
        shutil.copy(next(files.iterdir()), one)
        time_grade(one, course, 1)  # untimed: generate_assignment and the compile cache
        logs = course / ".grading" / "logs"
        for log in logs.glob("worker-*.log"):
            log.unlink()
        start = time.perf_counter()
        wall = time_grade(files, course, a.workers)
        assert time.perf_counter() - start >= wall
        found = {}
        for log in logs.glob("worker-*.log"):
            for student, seconds in LINE.findall(log.read_text(errors="replace")):
                found[student] = float(seconds)
    per = sorted(found.values())
    graded = wall * a.workers / a.n
    print(f"\n{a.n} submissions of {EX}, {a.workers} workers; the referee judged {len(per)} of them "
          "(the others had no check the kernel passed that the referee judges)\n")
    print("| figure | value |\n|---|---|")
    print(f"| `./course grade` wall time | {wall:.1f} s |")
    print(f"| worker time per submission (wall x workers / n) | {graded:.2f} s |")
    if per:
        mean = sum(per) / a.n
        print(f"| referee time per submission (all n) | {mean:.2f} s |")
        print(f"| referee time per judged submission: median, max | {statistics.median(per):.2f} s, {per[-1]:.2f} s |")
        print(f"| the referee's share of grading time | {100 * mean / graded:.0f}% |")
    print(f"\nreproduce: .venv/instructor/bin/python benchmarks/bench_referee.py --n {a.n} --workers {a.workers}")


if __name__ == "__main__":
    main()
