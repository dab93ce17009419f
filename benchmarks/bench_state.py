"""What keeping the grader's state costs a run for each graded student, as the class grows.

    .venv/instructor/bin/python benchmarks/bench_state.py [--n 10000] [--repeat 20]

Builds the state of a class of N students (each like a graded student of the
course: its files, the notebooks it handed in, a reason, the digests), then
times, for --repeat students, the two ways a run can keep a graded student
on disk before taking the next one (both fsync, as a run does):
  - the whole state file written again (save_state), as runs did after
    each student before the state had a journal;
  - one line appended to the state's journal (record_student), as they do now;
and reading the state back with a journal of N lines (load_state), what a
run killed just before its end leaves the next one. The last column
projects the writes over a first run of the whole class, whose state grows
from 0 to N students (half of N on average).
"""
import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from donation_course.course import COURSE
from donation_course.grading.results.result import Summary
from donation_course.grading.run.state import State, StudentState, load_state, record_student, save_state


def student(i: int) -> StudentState:
    nb = COURSE.exercise
    return StudentState(
        hash=f"{i:064x}::{'b' * 64}",
        summary=Summary(status="partial", reasons=[f"{nb}/ex-values: values differ from the expected update at "
                                                   "index 3 (got 1.5, expected 2.0)"],
                        files=f"s{i:05d}_{nb}.ipynb", name=f"Student {i}", submitted=[nb],
                        content={nb: f"{i:020x}"}))


def timed(action, repeat: int) -> float:
    """The median seconds of `repeat` calls of action(k)."""
    times = []
    for k in range(repeat):
        t = time.perf_counter()
        action(k)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=10000)
    p.add_argument("--repeat", type=int, default=20)
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-state-") as tmp:
        path = Path(tmp) / "state.json"
        state = State(source="s" * 64, students={f"s{i:05d}": student(i) for i in range(a.n)})
        whole = timed(lambda k: save_state(path, state), a.repeat)
        size = path.stat().st_size
        line = timed(lambda k: record_student(path, state, f"s{k:05d}"), a.repeat)
        run = State(source="s" * 64)
        save_state(path, run)
        for i in range(a.n):
            run.students[f"s{i:05d}"] = student(i)
            record_student(path, run, f"s{i:05d}")
        t = time.perf_counter()
        back = load_state(path, print)
        read = time.perf_counter() - t
        assert len(back.students) == a.n
    print(f"\nthe state of {a.n:,} students: {size / 2**20:.1f} MiB; median of {a.repeat} writes each\n")
    print("| keeping one graded student | per student | a first run of the whole class |\n|---|---|---|")
    print(f"| the whole state file written again (save_state) | {whole * 1000:.1f} ms "
          f"| {a.n * whole / 2 / 60:.1f} min |")
    print(f"| one line appended to the journal (record_student) | {line * 1000:.2f} ms "
          f"| {a.n * line / 60:.2f} min |")
    print(f"\nreading the state back with a journal of {a.n:,} lines (load_state): {read:.2f} s")
    print(f"\nreproduce: .venv/instructor/bin/python benchmarks/bench_state.py --n {a.n} --repeat {a.repeat}")


if __name__ == "__main__":
    sys.exit(main())
