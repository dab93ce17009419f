"""The class report: one HTML page (class-report.html beside grades.csv) of how
the class did, from the gradebook's rows (report.class_rows) and nbgrader's
submitted/ folder:

- the score distribution: the LMS grade (exports.lms_grade: the notebooks
  GradingSettings.lms_points counts, after the late penalty) of every student
  who has one; students still waiting for a person are counted apart;
- the pass rate of each check (full marks on the grade cell), among the students
  who submitted its notebook and whose cell is not waiting for manual grading,
  lowest first: the checks most students fail, likely a lesson to improve;
- the students flagged, waiting for a review, whose grading errored or timed out, and those late.

Both charts are HTML and CSS, each bar labelled with its figure: the page needs
no image beside it, and a run no plotting library.

`write_class_report(course, summaries, out)` is all a caller needs; run/steps.py's
reports call it through report.write_reports.
"""
from __future__ import annotations

import datetime as dt
import html
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from ...course import Course
from ..results.result import Status, Summary
from ..run.state import write_atomic
from .exports import NOT_GRADED, counted_notebooks, export_settings, lms_grade

HTML = "class-report.html"
OLD_PLOT = "class-report.png"  # what earlier versions drew beside the page: removed, so none goes stale
STYLE = ("body{font-family:sans-serif;max-width:70em;margin:2em auto}td,th{border:1px solid #ccc;padding:.2em .6em;"
         "text-align:left}table{border-collapse:collapse;margin:1em 0}.low{background:#fdd}"
         "figure{margin:1em 0}figcaption{font-weight:bold;margin-bottom:.5em}"
         ".cols{display:flex;gap:.3em;height:12em;border-bottom:1px solid #888}"
         ".col{flex:1;display:flex;flex-direction:column;text-align:center}.n{flex:none;height:1.4em}"
         ".area{flex:1;display:flex;align-items:flex-end}.bar{width:100%;background:#4a7ebb}"
         ".ticks{display:flex;gap:.3em;font-size:small}.ticks span{flex:1;text-align:center}"
         ".rates{display:grid;grid-template-columns:minmax(10em,max-content) 1fr 4em;gap:.2em .6em;"
         "font-size:small;align-items:center}.track{display:block;height:1em;background:#eee}"
         ".fill{display:block;height:100%;background:#4a7ebb}.fill.low{background:#c0504d}")


@dataclass(frozen=True)
class CheckFigure:
    check: str          # '<notebook>:<grade id>'
    points: float
    graded: int         # students who submitted the notebook, the cell not waiting for a person
    passed: int         # of those, with full marks

    @property
    def rate(self) -> float | None:
        return self.passed / self.graded if self.graded else None

    @property
    def low(self) -> bool:
        """Passed by fewer than half the students graded on it: likely a lesson to improve (drawn red)."""
        return self.rate is not None and self.rate < 0.5


@dataclass(frozen=True)
class ClassFigures:
    students: int
    scores: list[float]            # the LMS grade of every student who has one
    max_points: float
    blank: int                     # students exported blank (waiting for a person, or not graded)
    checks: list[CheckFigure]      # lowest pass rate first; never-graded checks last
    flagged: list[tuple[str, str]]  # (student, detail), likewise below
    failed: list[tuple[str, str]]
    late: list[tuple[str, str]]
    pending: list[tuple[str, str]] = ()  # graded, with cells waiting for a person (a review of other answers)

    def bins(self) -> list[tuple[float, float, int]]:
        """(low, high, students) of equal bins over 0..max_points; the last one holds max_points."""
        n = max(1, min(10, math.ceil(self.max_points)))
        width = (self.max_points or 1) / n
        counts = [0] * n
        for s in self.scores:
            counts[min(n - 1, max(0, int(s // width)))] += 1
        return [(round(i * width, 2), round((i + 1) * width, 2), c) for i, c in enumerate(counts)]


def figures(course: Course, rows: list[dict], checks: list[str], counted: list[str]) -> ClassFigures:
    grades = [lms_grade(row, counted) for row in rows]
    submitted = course.root / "submitted"
    stats = {c: [0, 0] for c in checks}
    for row in rows:
        for key, cell in row["cells"].items():
            nb = key.split(":", 1)[0]
            if key in stats and not cell.waiting and (submitted / row["student"] / course.assignment /
                                                      f"{nb}.ipynb").is_file():
                stats[key][0] += 1
                stats[key][1] += cell.passed
    points = {key: cell.max_score for row in rows for key, cell in row["cells"].items()}
    figs = [CheckFigure(c, points.get(c, 0.0), *stats[c]) for c in checks]
    figs.sort(key=lambda f: (f.rate is None, f.rate if f.rate is not None else 0.0, f.check))
    waiting = {row["student"]: sum(c.waiting for c in row["cells"].values()) for row in rows}
    return ClassFigures(
        students=len(rows), scores=[g.points for g in grades if g.points is not None],
        max_points=grades[0].max_points if grades else 0.0, blank=sum(g.points is None for g in grades),
        checks=figs,
        flagged=[(r["student"], f"{waiting[r['student']]} cell(s) waiting for manual grading"
                  if waiting[r["student"]] else "graded by hand since") for r in rows
                 if r["status"] == Status.FLAGGED.value],
        failed=[(r["student"], f"{r['status']}: {r['reason'][:200]}") for r in rows if r["status"] in NOT_GRADED],
        late=[(r["student"], f"submitted {r['timestamp']}, due {r['due']}, late penalty {r['late_penalty']:g}")
              for r in rows if r["late"]],
        pending=[(r["student"], f"{waiting[r['student']]} cell(s) waiting for manual grading: {r['reason'][:200]}")
                 for r in rows if r["status"] == Status.PENDING.value])


def distribution_chart(figs: ClassFigures) -> str:
    """The score histogram: a column per bin, its bar's height the bin's share of the fullest bin (of the room
    left under the count written above it)."""
    bins = figs.bins()
    top = max((n for *_, n in bins), default=0) or 1
    cols = "".join(f"<div class=col><span class=n>{n}</span><div class=area><div class=bar "
                   f"style='height:{100 * n / top:.1f}%'></div></div></div>" for *_, n in bins)
    ticks = "".join(f"<span>{lo:g}-{hi:g}</span>" for lo, hi, _ in bins)
    return (f"<figure id='distribution-chart'><figcaption>Scores of {len(figs.scores)} student(s) (out of "
            f"{figs.max_points:g} points)</figcaption><div class=cols>{cols}</div><div class=ticks>{ticks}</div>"
            "</figure>")


def pass_rate_chart(figs: ClassFigures) -> str:
    """A bar per graded check, most failed first: its width the check's pass rate, red below 50%."""
    rows = "".join(f"<span>{html.escape(f.check)}</span><span class=track><span class='fill{' low' * f.low}' "
                   f"style='width:{100 * f.rate:.1f}%'></span></span><span>{100 * f.rate:.1f}%</span>"
                   for f in figs.checks if f.rate is not None)
    body = f"<div class=rates>{rows}</div>" if rows else "<p>No check graded yet.</p>"
    return ("<figure id='pass-rate-chart'><figcaption>Pass rate per check (full marks, % of the students graded on "
            f"it)</figcaption>{body}</figure>")


def table(table_id: str, header: list[str], rows: list[list], low: list[bool] | None = None) -> str:
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(f"<tr{' class=low' if low and low[i] else ''}>"
                   + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>" for i, row in enumerate(rows))
    return f"<table id='{table_id}'><tr>{cells}</tr>{body}</table>"


def page(course: Course, figs: ClassFigures, counted: list[str]) -> str:
    s = figs.scores
    summary = [["students", figs.students], ["with a grade", len(s)], ["blank (waiting, or not graded)", figs.blank],
               ["mean", f"{statistics.fmean(s):.2f}" if s else "-"],
               ["median", f"{statistics.median(s):.2f}" if s else "-"],
               ["lowest", f"{min(s):g}" if s else "-"], ["highest", f"{max(s):g}" if s else "-"],
               ["out of", f"{figs.max_points:g}"]]
    checks = [[f.check, f"{f.points:g}", f.graded, f.passed, f"{100 * f.rate:.1f}%" if f.rate is not None else "-"]
              for f in figs.checks]
    people = [[sid, what, detail] for what, group in (("flagged", figs.flagged), ("pending", figs.pending),
                                                      ("not graded", figs.failed), ("late", figs.late))
              for sid, detail in group]
    return "\n".join([
        f"<!doctype html><meta charset='utf-8'><title>Class report: {html.escape(course.assignment)}</title>",
        f"<style>{STYLE}</style><h1>Class report: {html.escape(course.assignment)}</h1>",
        f"<p>From the gradebook, {dt.datetime.now():%Y-%m-%d %H:%M}. Grades count "
        f"{html.escape(', '.join(counted))}, after the late penalty.</p>",
        "<h2>Scores</h2>", distribution_chart(figs), table("summary", ["", "value"], summary),
        table("distribution", ["points", "students"], [[f"{lo:g}-{hi:g}", n] for lo, hi, n in figs.bins()]),
        "<h2>Checks, most failed first</h2><p>Pass rate: full marks, among the students who submitted the "
        "notebook and whose cell does not wait for manual grading. Below 50% (red): likely a lesson to improve.</p>",
        pass_rate_chart(figs),
        table("checks", ["check", "points", "graded", "passed", "pass rate"], checks,
              [f.low for f in figs.checks]),
        "<h2>Students to look at</h2>", table("students", ["student", "what", "detail"], people)])


def write_class_report(course: Course, summaries: dict[str, Summary], out: Path, rows: list[dict] | None = None,
                       checks: list[str] | None = None, settings=None) -> Path:
    """class-report.html in `out`, for the whole gradebook; returns the page's path."""
    if rows is None or checks is None:
        from .report import class_rows

        rows, checks = class_rows(course, summaries)
    counted = counted_notebooks(export_settings(course, settings).lms_points, course.notebooks, course.exercise)
    figs = figures(course, rows, checks, counted)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / HTML, page(course, figs, counted))
    (out / OLD_PLOT).unlink(missing_ok=True)
    return out / HTML
