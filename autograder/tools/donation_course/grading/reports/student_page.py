"""The learner's feedback page: score, status, and each check with its message.

Written for every student a run grades, into OUT/feedback/<student>.html,
beside a copy of nbgrader's feedback HTML of each notebook (feedback.py
strips hidden tests and tracebacks from those).
"""
from __future__ import annotations

import html
import shutil
from pathlib import Path

from ...course import Course
from ..results.result import CellGrade, StudentResult

STYLE = ("body{font-family:sans-serif;max-width:60em;margin:2em auto;padding:0 1em}td,th{border:1px solid #ccc;"
         "padding:.3em .6em;vertical-align:top}table{border-collapse:collapse;width:100%}"
         "td:first-child{white-space:nowrap}pre{white-space:pre-wrap;overflow-wrap:anywhere;margin:0}"
         ".pass{color:#070}.fail{color:#a00}")
MARKS = ("\u2714", "\u2718")  # passed, failed: as ./course check prints them


def mark_and_message(grade: CellGrade) -> tuple[str, str]:
    """A row's one mark, ✔ when the cell passed and ✘ when it failed, and its
    message without a mark of its own (a hidden check's message carries one, a
    public check's (CheckFailed) or an error's none)."""
    message = grade.message.strip()
    while message[:1] in MARKS:
        message = message[1:].strip()
    return MARKS[0] if grade.passed else MARKS[1], message or ("passed" if grade.passed else "failed")


def marked(grade: CellGrade) -> str:
    """A row's message behind its one mark, whichever check wrote it."""
    return " ".join(mark_and_message(grade))


def write_page(row: dict, result: StudentResult, course: Course, out: Path) -> Path:
    sid = row["student"]
    parts = [f"<!doctype html><meta charset='utf-8'><title>Feedback: {html.escape(sid)}</title>",
             f"<style>{STYLE}</style>",
             f"<h1>Buffer Donation Lab: feedback for {html.escape(sid)}</h1>",
             f"<p><b>Score: {row['total']:g} / {row['max']:g}</b> (status: {html.escape(row['status'])})</p>"]
    if row.get("late_penalty"):
        parts.append(f"<p class='fail'>Submitted after the due date: {row['late_penalty']:g} points deducted.</p>")
    if result.reasons:
        parts.append(f"<p class='fail'>{html.escape(' | '.join(result.reasons))}</p>")
    for nb in course.notebooks:
        data = result.notebooks.get(nb)
        if not data or not data.graded:
            continue
        parts.append(f"<h2>{html.escape(nb)}: {row[nb]:g} points</h2><table><tr><th>check</th><th>points</th>"
                     "<th>result</th><th>message</th></tr>")
        for g in data.grades:
            verdict = "pass" if g.passed else "fail"
            parts.append(f"<tr><td>{html.escape(g.name)}</td><td>{g.score:g} / {g.max_score:g}</td>"
                         f"<td class='{verdict}'>{verdict}</td><td><pre>{html.escape(marked(g))}</pre></td></tr>")
        parts.append("</table>")
        notebook_page = course.root / "feedback" / sid / course.assignment / f"{nb}.html"
        if notebook_page.exists():
            dest = out / "feedback" / sid / f"{nb}.html"
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(notebook_page, dest)
            parts.append(f"<p><a href='{html.escape(sid)}/{html.escape(nb)}.html'>Your graded notebook</a></p>")
    page = out / "feedback" / f"{sid}.html"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text("\n".join(parts), encoding="utf-8")
    return page
