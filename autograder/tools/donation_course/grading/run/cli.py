"""`./course grade SUBMISSIONS [options]`: the command line, parsed into GradingSettings.

Flags override what the course's nbgrader_config.py sets in
`c.GradingSettings` (settings.py); steps.py does the work.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from ...course import AUTOGRADER, Course, CourseError
from ..lms import REGISTRY, course_timezone, with_files, zone
from ..reports.exports import asked_files, check_columns, counted_notebooks
from .settings import GradingSettings

# flag -> the GradingSettings trait it overrides when given
FLAG_TRAITS = {"workers": "workers", "timeout": "timeout", "cell_timeout": "cell_timeout",
               "memory_mb": "memory_mb", "max_processes": "max_processes", "max_file_mb": "max_file_mb",
               "lms": "lms", "name_regex": "name_regex", "lms_points": "lms_points", "timezone": "timezone",
               "lms_title": "lms_title", "lms_files": "lms_files",
               **{lms.column.trait: lms.column.trait for lms in with_files() if lms.column}}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="./course grade", description=(
        "Grade a class: SUBMISSIONS is an nbgrader submitted/ folder (<student>/<assignment>/*.ipynb), "
        "or a Canvas, Blackboard or Moodle export (folder or .zip), or a flat folder or .zip of "
        "<student>_<notebook>.ipynb / <student>.ipynb files. Defaults come from the course's "
        "nbgrader_config.py (c.GradingSettings), then from these flags."))
    p.add_argument("submissions", type=Path)
    p.add_argument("--course", type=Path, default=AUTOGRADER, help="nbgrader course folder (default: autograder/)")
    p.add_argument("--assignment", default=None, metavar="NAME",
                   help="which assignment of the course (a folder under source/); needed when it has several")
    p.add_argument("--workers", type=int, help="parallel workers (default: the cores this process may use)")
    p.add_argument("--scheduler", default=None, metavar="tcp://HOST:PORT",
                   help="grade on a running Dask cluster (workers: `./course worker SCHEDULER`); default: "
                   "$DASK_SCHEDULER_ADDRESS if set, else on this machine ('local' forces that)")
    p.add_argument("--timeout", type=int, help="seconds per whole submission (default 300)")
    p.add_argument("--cell-timeout", type=int,
                   help="seconds per cell (default: the course's Execute.timeout, at most --timeout)")
    p.add_argument("--memory-mb", type=int, help="address-space limit of each kernel (default 3072)")
    p.add_argument("--max-processes", type=int, help="processes and threads of each kernel (default 256)")
    p.add_argument("--max-file-mb", type=int, help="largest file a kernel may write, in MiB (default 256)")
    p.add_argument("--out", type=Path, default=None, help="where grades.csv and feedback/ go (default "
                   "COURSE/.grading, or COURSE/.grading/NAME in a course with several assignments)")
    p.add_argument("--only-changed", action="store_true", help="grade only new or changed submissions")
    p.add_argument("--lms", choices=sorted(REGISTRY), default=None,
                   help="the export's file naming (default: detected from the file names)")
    p.add_argument("--name-regex", default=None, metavar="REGEX",
                   help="any other naming: an nbgrader FileNameCollectorPlugin.named_regexp with groups "
                   "student_id and file_id (optional: timestamp, name), matched on each file's path in the export")
    p.add_argument("--student", action="append", default=None, metavar="ID",
                   help="grade only this student (repeatable); grades.csv still lists the whole gradebook")
    for lms in with_files():  # each LMS's column option (grading/lms/<lms>.py)
        p.add_argument(lms.column.flag, dest=lms.column.trait, default=None, metavar="HEADER|DOWNLOAD",
                       help=f"assignment column of {lms.title}'s import file as {lms.title} writes it, e.g. "
                       f"'{lms.column.example}', or {lms.title}'s own gradebook download to pick it from by "
                       "the assignment's title (also writes that LMS's file)")
    p.add_argument("--lms-title", default=None, metavar="TITLE",
                   help="the assignment's title in the LMS, to pick its column from a gradebook download "
                   "(default: the assignment's folder name)")
    p.add_argument("--lms-files", default=None, metavar="LMS,LMS",
                   help="write the import files of these LMSes (canvas, moodle, blackboard); default: the LMS the "
                   "export came from, or all of them for nbgrader or flat ids")
    p.add_argument("--lms-points", default=None, metavar="submitted|all|exercise|NB,NB",
                   help="what the LMS import files' grade counts: the notebooks the class handed in (submitted, "
                   "the default), every notebook (all), the graded exercise alone, or the notebooks named")
    p.add_argument("--timezone", default=None, metavar="ZONE",
                   help="zone of the LMS's local times (Blackboard's attempt times), e.g. Europe/Berlin "
                   "(default: the course's nbgrader timezone, c.Exchange.timezone, else UTC)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--no-compile-cache", action="store_true",
                   help="compile every submission's JAX code afresh (default: the grading kernels read, "
                   "never write, a JAX compilation cache of what the course's own solution compiled)")
    p.add_argument("--no-sandbox", action="store_true",
                   help="run the grading kernels without bubblewrap (every CSV row then says 'sandbox off')")
    return p


def settings_from(args: argparse.Namespace, course: Course) -> GradingSettings:
    """The course's GradingSettings with this command line's flags on top."""
    settings = GradingSettings(config=course.config)
    for flag, trait in FLAG_TRAITS.items():
        value = getattr(args, flag)
        if value is not None:
            setattr(settings, trait, value)
    scheduler = args.scheduler if args.scheduler is not None else os.environ.get("DASK_SCHEDULER_ADDRESS")
    if scheduler is not None:
        settings.scheduler = "" if scheduler in ("", "local") else scheduler
    if args.out is not None:
        settings.out = str(args.out.resolve())
    if args.no_progress:
        settings.progress = False
    if args.no_compile_cache:
        settings.compile_cache = False
    if args.no_sandbox:
        settings.sandbox = False
    if args.workers is not None and args.workers < 1:
        raise CourseError("--workers must be at least 1")
    try:
        settings.validate()
        settings.timezone = settings.timezone or course_timezone(course.config)
        zone(settings.timezone)
        counted_notebooks(settings.lms_points, course.notebooks, course.exercise)
        asked_files(settings)
    except ValueError as exc:
        raise CourseError(str(exc)) from None
    check_columns(course, settings)  # a column no download holds stops here, before anything is graded
    return settings


def main(argv: list[str], early=None) -> int:
    """`early`: what was started before this (early.py), for the run to take."""
    from .steps import GradeRequest, grade_class

    args = parser().parse_args(argv)
    course = Course(args.course.resolve(), args.assignment)
    settings = settings_from(args, course)
    request = GradeRequest(submissions=args.submissions, students=tuple(args.student or ()),
                           only_changed=args.only_changed)
    return grade_class(course, settings, request, early=early)
