"""grades.csv, the LMS import files (exports.py) and the class report
(class_report.py), from the gradebook plus each student's Summary.

A row is derived in one place (`student_row`): the numbers from nbgrader's
gradebook, whatever run graded them and whatever an instructor changed in
formgrader since, and the status, reasons and files from the run that
graded the student (result.Summary, kept in the state file). Besides the
grades.csv columns, a row carries what the exports and the class report
read: each grade cell's state (`cells`), each notebook's late penalty and
maximum, whether nbgrader counts the submission late, and the roster's names.
"""
from __future__ import annotations

import csv
import io
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ...course import Course
from ..results.gradebook import open_gradebook
from ..results.result import WITHHELD_NOTE, Status, StudentResult, Summary
from ..results.reviews import reviewed_cells
from ..run.deadlines import due_text
from ..run.state import write_atomic
from .messages import cap_hit


@dataclass(frozen=True)
class Cell:
    """One grade cell of one student, as the gradebook holds it."""

    score: float          # nbgrader's score: the manual score if any, else the automatic one, plus extra credit
    max_score: float
    waiting: bool         # nbgrader's needs_manual_grade (flagged, errored, never graded, a manual score
                          # after a regrade), unless a person's review of these same answers scored it
    by_hand: bool         # a person entered a manual score (formgrader)

    @property
    def passed(self) -> bool:
        return self.score >= self.max_score


def summarize(result: StudentResult, notebooks: list[str], max_scores: dict[str, float], submitted: set[str],
              files: str = "", name: str = "", sandbox: bool = True, audit: bool = True) -> Summary:
    """The status and reasons of a freshly graded student: the result's own
    reasons, then each answer cell that raised and each check that lost
    points (with its learner message), then the notebooks not submitted."""
    reasons = list(result.reasons)
    for nb in notebooks:
        data = result.notebooks.get(nb)
        if data is None or nb not in submitted:
            continue
        for cell, msg in data.solution_errors.items():
            first = msg.splitlines()[0][:240] if msg else "an error"
            reasons.append(f"{nb}/{cell}: your code raised {first}{cap_hit(first)}")
        for g in data.grades:
            if g.withheld is not None:
                continue  # flagged: the flag's own line says why; what the check said waits (withheld_reasons)
            if not g.passed:
                reasons.append(cell_line(nb, g.name, g.score, g.max_score, g.message))
    missing = [nb for nb in notebooks if nb not in submitted]
    if missing and len(missing) < len(notebooks):
        reasons.append("not submitted: " + ", ".join(missing))
    if result.status is not None:
        status = result.status.value
    else:
        full = all((result.notebooks[nb].score if nb in result.notebooks else 0.0) >= max_scores[nb]
                   for nb in submitted if nb in max_scores)
        status = Status.OK.value if full else Status.PARTIAL.value
    if not sandbox:  # said on every row: these grades came from unsandboxed kernels
        reasons.insert(0, "sandbox off")
    if not audit:
        reasons.insert(0, "audit off")
    withheld = {nb: {g.name: g.withheld for g in data.grades if g.withheld is not None}
                for nb, data in result.notebooks.items()}
    for nb, cells in withheld.items():
        if cells:
            top = sum(g.max_score for g in result.notebooks[nb].grades if g.name in cells)
            reasons.append(f"{nb}: the automatic checks gave {sum(cells.values()):g} of {top:g} points, "
                           f"{WITHHELD_NOTE}")
    lost = {f"{nb}/{g.name}": cell_line(nb, g.name, g.withheld, g.max_score, g.withheld_message)
            for nb, data in result.notebooks.items() for g in data.grades
            if g.withheld is not None and g.withheld < (g.max_score or 0)}
    return Summary(status=status, reasons=reasons, files=files, name=name,
                   withheld={nb: cells for nb, cells in withheld.items() if cells},
                   submitted=[nb for nb in notebooks if nb in submitted], withheld_reasons=lost)


def cell_line(nb: str, cell: str, score: float, max_score: float, message: str) -> str:
    """The reason line of a check that lost points: what it gave and what it said."""
    msg = (message or "failed").splitlines()[0].lstrip("\u2718 ")[:240]
    return f"{nb}/{cell} ({score:g}/{max_score:g}): {msg}"


def roster_name(student) -> str:
    """The gradebook roster's name of a student (nbgrader's first and last name), or ''."""
    return " ".join(n for n in (student.first_name, student.last_name) if n)


def student_row(sub, summary: Summary, notebooks: list[str]) -> dict:
    """One student's grades.csv row: an nbgrader SubmittedAssignment plus its Summary.
    The name is the roster's (formgrader, `nbgrader db student`), else the LMS's display name."""
    row = {"student": sub.student.id, "name": roster_name(sub.student) or summary.name,
           "first_name": sub.student.first_name or "", "last_name": sub.student.last_name or "",
           "timestamp": sub.timestamp.isoformat(sep=" ") if sub.timestamp else "", "due": due_text(sub),
           "late_penalty": round(sub.late_submission_penalty or 0.0, 3), "late": sub.total_seconds_late > 0,
           "cells": {}, "penalties": {}, "notebook_max": {}}
    for nb in sub.notebooks:
        row[nb.name] = round(nb.score, 3)
        row["penalties"][nb.name] = nb.late_submission_penalty or 0.0
        row["notebook_max"][nb.name] = nb.max_score
        reviewed = reviewed_cells(summary.reviews.get(nb.name), summary.content.get(nb.name, ""), nb.grades)
        for g in nb.grades:
            row[f"{nb.name}:{g.name}"] = round(g.score, 3)
            row["cells"][f"{nb.name}:{g.name}"] = Cell(g.score, g.max_score,
                                                       bool(g.needs_manual_grade) and g.name not in reviewed,
                                                       g.manual_score is not None)
    points = sum(row.get(nb, 0.0) for nb in notebooks)
    full = all(row.get(nb, 0.0) >= row["notebook_max"].get(nb, 0.0) for nb in summary.submitted or notebooks)
    # a check a person scored since (and not waiting) no longer explains lost points: their score does
    scored = tuple(f"{key.replace(':', '/', 1)} (" for key, c in row["cells"].items() if c.by_hand and not c.waiting)
    reasons = [r for r in summary.reasons if not r.startswith(scored)] if scored else list(summary.reasons)
    if row["late_penalty"]:
        reasons.insert(0, f"late submission penalty {row['late_penalty']:g} (nbgrader; due {row['due']})")
    status = summary.status or Status.OK.value
    if status == Status.OK.value and (not full or row["late_penalty"]):
        status = Status.PARTIAL.value  # points lost since (a person's score, or the late penalty)
    handed_in = set(summary.submitted)  # cells of notebooks not handed in wait for nobody
    if status in (Status.OK.value, Status.PARTIAL.value) and any(
            c.waiting for key, c in row["cells"].items() if key.split(":", 1)[0] in handed_in):
        status = Status.PENDING.value  # a person's score of earlier answers no longer counts, or never came
    row.update(total=round(points - row["late_penalty"], 3), max=round(sub.max_score, 3),
               status=status, reason=" | ".join(reasons), files=summary.files)
    return row


def row_of(course: Course, student: str, summary: Summary) -> dict:
    with open_gradebook(course) as gb:
        return student_row(gb.find_submission(course.assignment, student), summary, course.notebooks)


def class_rows(course: Course, summaries: dict[str, Summary]) -> tuple[list[dict], list[str]]:
    """Every submission in the gradebook as a row, and the per-check column names."""
    rows, checks = [], []
    with open_gradebook(course) as gb:
        a = gb.find_assignment(course.assignment)
        for nb in a.notebooks:
            checks += [f"{nb.name}:{c.name}" for c in nb.grade_cells]
        for sub in sorted(a.submissions, key=lambda s: s.student.id):
            rows.append(student_row(sub, summaries.get(sub.student.id, Summary()), course.notebooks))
    return rows, checks


def csv_text(fields: list[str], rows: Iterable[dict]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: row.get(k, "") for k in fields})
    return buf.getvalue()


def write_reports(course: Course, summaries: dict[str, Summary], out: Path, canvas_column: str = "",
                  settings=None) -> list[dict]:
    """grades.csv, the LMS import files and the class report for the WHOLE gradebook, whatever this run
    graded. `settings` (GradingSettings) says what the LMS files count and name; without it, the course's."""
    from .class_report import write_class_report
    from .exports import export_settings, write_exports

    rows, checks = class_rows(course, summaries)
    fields = ["student", "name", *course.notebooks, "late_penalty", "total", "max", "status", "reason",
              "timestamp", "due", "files", *checks]
    write_atomic(out / "grades.csv", csv_text(fields, rows))
    settings = export_settings(course, settings, canvas_column)
    for line in write_exports(course, rows, out, settings):
        print(f"note: {line}", file=sys.stderr, flush=True)
    try:  # grades.csv and the LMS files are written: a class report that fails costs the run nothing else
        write_class_report(course, summaries, out, rows=rows, checks=checks, settings=settings)
    except Exception as exc:  # said in one line; the grades stand
        print(f"note: class-report.html not written: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    return rows
