"""A notebook of another course (or of an old version of this assignment), told
apart before any kernel runs: nbgrader's graded cells carry ids (grade_id),
and a submitted notebook none of whose graded cells is one of the
assignment's is not this assignment's work, whatever its file name says.
Grading it would restore every one of the assignment's cells into it and
fail, or score it 0, with no word of why; instead it gets one problem line.
A notebook with no graded cell at all is left to the repair (repair.py),
which puts the release's cells back.
"""
from __future__ import annotations

from pathlib import Path

from ...course import grade_id


def foreign_cells(path: Path, expected: set) -> list | None:
    """The graded cells' ids of a notebook none of which is one of `expected`, or None (it is the
    assignment's, or it has no graded cell at all: then the repair puts the release's back)."""
    from nbformat import reads

    try:
        ids = sorted({grade_id(c) for c in reads(path.read_text(encoding="utf-8"), as_version=4).cells} - {None})
    except Exception:  # noqa: BLE001  nbformat and jsonschema raise many kinds for a broken file
        # unreadable, or not a notebook (truncated, binary, `{}`, a cell without its keys): the run
        # makes that student invalid with one line (run.plan), and grades everyone else
        return None
    return ids if ids and not set(ids) & expected else None


def foreign_problem(rel: str, nb: str, ids: list, expected: set) -> str:
    return (f"{rel}: not this assignment's {nb}: none of its graded cells ({', '.join(ids[:3])}"
            f"{', ...' if len(ids) > 3 else ''}) is one of the assignment's ({', '.join(sorted(expected)[:3])}, ...); "
            "a notebook of another course, or of an old version? not graded")


def expected_ids(source: Path, notebooks: list) -> dict:
    """{notebook: its graded cells' ids} of the assignment's source notebooks."""
    from nbformat import read

    out = {}
    for nb in notebooks:
        path = source / f"{nb}.ipynb"
        if path.is_file():
            out[nb] = {grade_id(c) for c in read(path, as_version=4).cells} - {None}
    return out
