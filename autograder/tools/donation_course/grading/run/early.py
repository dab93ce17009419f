"""What `./course grade` starts before it imports nbgrader, from its command line alone.

The run's own start is about a second on one core: Python, then nbgrader, nbconvert and SQLAlchemy imported
(its forked workers share them). The processes the run needs next each import JAX, and used to start only after
it: each grading worker's kernel zygote (executors/early_zygotes.py) and, on a course with no compile cache yet,
the Python that fills it (compile_cache.EarlyFill). They are started first and import on the idle core. What the
command line cannot tell (the course's nbgrader_config.py, the students handed in) is known later: the run takes
what fits its settings and ends the rest, which then start as before, so a wrong guess costs a little CPU, never
a grade.
"""
from __future__ import annotations

import argparse
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..executors.early_zygotes import EarlyZygotes
from .compile_cache import EarlyFill

MAX_ZYGOTES = 4  # zygotes started before the run knows its class: a machine's first few workers


@dataclass
class Early:
    zygotes: EarlyZygotes | None = None
    fill: EarlyFill | None = None

    def close(self) -> None:
        """End what is left of them (the run's end, however it ends)."""
        if self.zygotes is not None:
            self.zygotes.close()
        if self.fill is not None:
            self.fill.close()


def start_early(argv: list[str]) -> Early:
    """Start what the local run `./course grade argv` will most likely need: none for a cluster, --no-sandbox,
    --help, or a course that cannot be read; zygotes for the workers asked for (at most one per --student, at most
    MAX_ZYGOTES); the fill's Python where the course's compile cache folder does not exist yet."""
    from ...course import AUTOGRADER, Course, CourseError
    from .settings import available_cores

    p = _QuietParser(add_help=False)
    p.add_argument("--course", type=Path, default=AUTOGRADER)
    p.add_argument("--assignment", default=None)
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--student", action="append", default=None)
    p.add_argument("--scheduler", default=None)
    p.add_argument("--no-sandbox", action="store_true")
    p.add_argument("--no-compile-cache", action="store_true")
    p.add_argument("-h", "--help", action="store_true")
    try:
        args, _ = p.parse_known_args(argv)
    except ValueError:  # a malformed flag: the run's own parser says so, once
        return Early()
    scheduler = args.scheduler if args.scheduler is not None else os.environ.get("DASK_SCHEDULER_ADDRESS")
    if args.help or args.no_sandbox or scheduler not in (None, "", "local") or not shutil.which("bwrap"):
        return Early()
    try:
        course = Course(args.course.resolve(), args.assignment)
        if course.several and (course.root / ".grading" / "state.json").exists():
            return Early()  # grading_dir would move the one-assignment files: the run does that, under its lock
        folder = course.compile_cache
    except (CourseError, OSError):
        return Early()
    early = Early()
    try:
        if not args.no_compile_cache and not folder.exists():
            early.fill = EarlyFill(folder)
        workers = available_cores() if args.workers is None else args.workers
        count = min(workers, len(args.student or ()) or MAX_ZYGOTES, MAX_ZYGOTES)
        if count > 0:
            early.zygotes = EarlyZygotes("" if args.no_compile_cache else str(folder), count)
    except Exception:  # (a folder it cannot write): the run meets the same and says so in one line
        early.close()
        return Early()
    except BaseException:
        early.close()
        raise
    return early


class _QuietParser(argparse.ArgumentParser):
    def error(self, message: str):
        raise ValueError(message)
