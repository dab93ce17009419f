"""The commands behind ./course: `regenerate`, `grade` and `feedback` (the instructor's), `check` (a learner's).

Every failure a user can cause (a malformed notebook, a missing folder) ends
with one line on stderr and a non-zero exit, never a traceback.
"""
import argparse
import sys
from pathlib import Path

from .course import COURSE, NOTEBOOKS, SOLUTIONS, CourseError


def fail(message: str, code: int = 1) -> int:
    print(f"course: error: {message}", file=sys.stderr, flush=True)
    return code


def regenerate(argv) -> int:
    parser = argparse.ArgumentParser(
        prog="./course regenerate",
        description="Rebuild notebooks/ (learner copies) and solutions/ from autograder/source/.",
    )
    parser.add_argument("--source", type=Path, default=None, help="source notebooks (default: the course's)")
    parser.add_argument("--notebooks", type=Path, default=NOTEBOOKS, help="where learner copies go")
    parser.add_argument("--solutions", type=Path, default=SOLUTIONS, help="where solution copies go")
    args = parser.parse_args(argv)
    from .authoring import regenerate as build

    names = build(notebooks=args.notebooks.resolve(), solutions=args.solutions.resolve(),
                  source=args.source.resolve() if args.source else COURSE.source)
    print(f"regenerated {len(names)} notebooks into {args.notebooks} and {args.solutions}: {', '.join(names)}")
    return 0


def grade(argv) -> int:
    from .grading.run.early import start_early

    early = start_early(argv)  # first: they import JAX while this process imports nbgrader
    try:
        from .grading.run.cli import main as grade_main

        return grade_main(argv, early=early)
    finally:
        early.close()


def check(argv) -> int:
    from .grading.run.selfcheck import main as check_main

    return check_main(argv)


def feedback(argv) -> int:
    from .grading.reports.refresh_feedback import main as feedback_main

    return feedback_main(argv)


COMMANDS = {"regenerate": regenerate, "grade": grade, "check": check, "feedback": feedback}


def main(argv=None) -> int:
    """Run a command; Ctrl-C, SIGTERM and SIGHUP unwind it alike (interrupts.py) and it exits 128 + the signal,
    even when the signal's first raise was lost in a finalizer and the command ran to its end."""
    from . import interrupts

    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        return fail(f"usage: donation-course {{{','.join(COMMANDS)}}} [options]", 2)
    before = interrupts.install()
    try:
        code = COMMANDS[argv[0]](argv[1:])
        return interrupts.exit_code() if interrupts.received() else code
    except CourseError as exc:
        return interrupts.exit_code() if interrupts.received() else fail(str(exc))
    except KeyboardInterrupt as exc:
        return interrupts.exit_code(exc)
    finally:
        interrupts.uninstall(before)


if __name__ == "__main__":
    sys.exit(main())
