"""The LMSes the grader reads exports of and writes import files for: one `Lms` object each
(base.py says what one holds), registered once. Every module of this package that names its
LMSes in `LMSES` is registered when the package is imported: adding an LMS is one new file
here, with its `Lms` and its export plugins; `--lms NAME`, detection, its column flag and its
import files all follow from the registry.

files.py matches each file of an export to a student and a notebook; times.py reads the
LMS's local times.
"""
from __future__ import annotations

import importlib
import pkgutil
import re

from .base import Lms

REGISTRY: dict[str, Lms] = {}
FALLBACK = "flat"


def register(lms: Lms) -> Lms:
    REGISTRY[lms.name] = lms
    return lms


for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    for _lms in getattr(importlib.import_module(f"{__name__}.{_module}"), "LMSES", ()):
        register(_lms)


def detect(rels: list[str], assignment: str) -> str:
    """The detected LMS whose naming matches the most notebooks, or the fallback."""
    best, hits = FALLBACK, 0
    for lms in REGISTRY.values():
        if not lms.detected:
            continue
        rx = re.compile(lms.regexp(assignment))
        n = sum(1 for r in rels if r.endswith(".ipynb") and rx.match(r))
        if n > hits:
            best, hits = lms.name, n
    return best


def origin(student: str, files: str, assignment: str) -> str:
    """The LMS whose export `student`'s files (grades.csv's `files`) came from; '' when none says so
    (nbgrader's own gradebook, a flat folder, a --name-regex)."""
    for lms in REGISTRY.values():
        if lms.owns(student, files, assignment):
            return lms.name
    return ""


def with_files() -> list[Lms]:
    """The LMSes that have import files, in registry order."""
    return [lms for lms in REGISTRY.values() if lms.exporters]


from .files import Collected, File, collect_files, lesson_file, notebook_of, roster_fields, valid_student_id  # noqa: E402
from .times import course_timezone, parse_timestamp, zone  # noqa: E402

__all__ = ["REGISTRY", "Collected", "File", "Lms", "collect_files", "course_timezone", "detect", "lesson_file",
           "notebook_of", "origin", "parse_timestamp", "register", "roster_fields", "valid_student_id", "with_files",
           "zone"]
