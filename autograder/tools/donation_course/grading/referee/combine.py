"""A point needs both verdicts: the kernel's (nbgrader's score of the grade
cell) and the referee's (judge.py) for the same check.

- both pass: the point stands;
- the kernel fails: the point is lost with the kernel's message, as without a referee;
- the kernel passes and the referee fails: the point is lost, and the row is
  flagged for the instructor with both verdicts in the reason (an honest
  kernel cannot pass a check its own program fails);
- the kernel passes and the referee could not judge (another shape of
  answer, nothing handed over, a program refused or capped): the point is
  lost with the referee's message, nothing is flagged.

A lost point is written where nbgrader keeps it: the worker's gradebook copy
(auto_score 0) and the autograded notebook (an error output with the
message, which the feedback and the learner's page show), before the
feedback is generated.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .asks import ANSWERS, CHECKS, VALUES
from .received import write_back
from .verdict import FAIL, PASS

_IMPORT = re.compile(r"import\s+donation_course\.hidden\.(\w+)\s+as\s+(\w+)")
_CALL = re.compile(r"\b(\w+)\.(\w+)\s*\(")  # alias.function(...): kept when (module, function) is in CHECKS


@dataclass(frozen=True)
class RefereeFlag:
    """A pass the kernel claimed and the referee refuted (result.flag reads .reason, str())."""

    notebook: str
    cell: str
    reason: str

    def __str__(self):
        return f"{self.notebook}/{self.cell}: {self.reason}"


@lru_cache(maxsize=32)
def _judged_cells(path: str, mtime: float) -> tuple:
    import nbformat

    from ...course import grade_id

    nb = nbformat.read(path, as_version=4)
    found = []
    for cell in nb.cells:
        if cell.cell_type != "code" or not cell.get("metadata", {}).get("nbgrader", {}).get("grade"):
            continue
        found += [(grade_id(cell), answer, check) for answer, check in checks_in(cell.source)]
    return tuple(found)


def checks_in(source: str) -> list:
    """[(answer, check)] that a grade cell of this source hands over (the calls of asks.CHECKS it makes)."""
    aliases = dict((alias, module) for module, alias in _IMPORT.findall(source))
    return [CHECKS[(aliases.get(alias), function)] for alias, function in _CALL.findall(source)
            if (aliases.get(alias), function) in CHECKS]


def judged_cells(source: Path) -> list:
    """[(grade_id, answer, check)] for the grade cells of a source notebook that the referee judges."""
    if not source.is_file():
        return []
    return list(_judged_cells(str(source), source.stat().st_mtime))


def apply(verdicts, cells: dict, gradebook, autograded: dict, assignment: str, student: str) -> list:
    """Combine the referee's `verdicts` (verdict.Verdict) with the kernel's scores.
    cells: {notebook: [(grade_id, answer, check)]}; gradebook: an open nbgrader Gradebook (the worker's copy);
    autograded: {notebook: its autograded .ipynb}. Returns the RefereeFlags."""
    import nbformat

    by_check = {v.check: v for v in verdicts}
    flags = []
    for notebook, judged in cells.items():
        lost = {}
        for grade_id, answer, check in judged:
            verdict = by_check.get(check)
            if verdict is None or verdict.outcome == PASS:
                continue
            try:
                grade = gradebook.find_grade(grade_id, notebook, assignment, student)
            except Exception:
                continue
            if grade.max_score is None or (grade.auto_score or 0) < grade.max_score:
                continue  # the kernel failed it: its own message stands
            grade.auto_score = 0.0
            judged_on = "the value your cell handed over" if ANSWERS[answer].kind == VALUES \
                else "the program your function compiles to"
            lost[grade_id] = f"\u2718 {check}: {verdict.message} (judged by the grader on {judged_on})"
            if verdict.outcome == FAIL:
                flags.append(RefereeFlag(notebook, grade_id,
                                         f"the kernel's check '{check}' passed, the referee's failed: "
                                         f"{verdict.message}"))
        if lost:
            gradebook.db.commit()
            _note_in_notebook(nbformat, autograded.get(notebook), lost)
    return flags


def _note_in_notebook(nbformat, path, lost: dict) -> None:
    """The referee's message as the grade cell's last output (an error, as a failed check's)."""
    if path is None or not Path(path).is_file():
        return
    from ...course import grade_id

    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        message = lost.get(grade_id(cell)) if cell.cell_type == "code" else None
        if message:
            cell.setdefault("outputs", []).append(nbformat.v4.new_output(
                "error", ename="HiddenCheckFailed",
                evalue=message,
                traceback=[]))
    write_back(nb, path)
