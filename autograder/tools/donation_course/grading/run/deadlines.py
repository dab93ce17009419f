"""Due dates: per-student extensions (the course's `extensions.csv`) and the late penalty.

nbgrader keeps an extension per submission (`SubmittedAssignment.extension`,
what `Gradebook.grant_extension` sets); its due date is the assignment's plus
that extension, and `total_seconds_late` counts from it. `extensions.csv`,
beside `nbgrader_config.py`, is the instructor's one list of them:

    student,assignment,due,extra
    jdoe,,2024-03-04 12:00:00 UTC,
    k.roe,buffer-donation,,2 days 6 hours

One row per student (and assignment: blank means every assignment), with a
new due date (`due`, read as nbgrader reads `--duedate`: UTC unless the time
names its zone, e.g. `2024-03-04 12:00:00 Europe/Berlin`) or an extra
duration (`extra`: weeks, days, hours, minutes, e.g. `36h` or `1 day 30 min`).
When the file exists it is the whole truth: every grade, regrade and export
writes these extensions into the gradebook, and takes away one that is no
longer listed.

The late penalty is what nbgrader's `AssignLatePenalties` gives, with the
course's own plugin (`c.AssignLatePenalties.plugin_class`,
`c.LateSubmissionPlugin.penalty_method`): reset, then set again only for a
late notebook, and kept between 0 and the notebook's score. It is computed in
the run process from the gradebook as it is when the student's result lands
(its due date, the extension, the submission time, the scores a person
entered), so a due date moved with `nbgrader db assignment add` or a time
read again with `--timezone` clears a penalty as serial nbgrader does.
"""
from __future__ import annotations

import csv
import datetime as dt
import re
from dataclasses import dataclass
from pathlib import Path

from ...course import Course, CourseError

FILE = "extensions.csv"
UNITS = {"w": "weeks", "week": "weeks", "weeks": "weeks", "d": "days", "day": "days", "days": "days",
         "h": "hours", "hr": "hours", "hrs": "hours", "hour": "hours", "hours": "hours",
         "m": "minutes", "min": "minutes", "mins": "minutes", "minute": "minutes", "minutes": "minutes"}
PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*,?", re.IGNORECASE)


@dataclass(frozen=True)
class Extension:
    student: str
    assignment: str             # '' = every assignment
    due: dt.datetime | None     # a new due date (naive UTC), or
    extra: dt.timedelta | None  # an extra duration
    line: int

    def of(self, duedate: dt.datetime | None) -> dt.timedelta | None:
        """nbgrader's extension for an assignment due at `duedate` (None: no due date, nothing to extend)."""
        if duedate is None:
            return None
        return self.extra if self.extra is not None else self.due - duedate


def duration(text: str) -> dt.timedelta:
    """'2 days 6 hours', '36h', '1 day, 30 min' as a timedelta; ValueError otherwise."""
    parts, pos, kw = text.strip(), 0, {}
    for m in PART.finditer(parts):
        if m.start() != pos or m.group(2).lower() not in UNITS:
            break
        unit = UNITS[m.group(2).lower()]
        kw[unit] = kw.get(unit, 0.0) + float(m.group(1))
        pos = m.end()
    if not kw or pos != len(parts):
        raise ValueError(f"extra {text!r} is not a duration (e.g. '2 days', '36h', '1 day 30 min')")
    return dt.timedelta(**kw)


def read_extensions(course: Course) -> dict[tuple[str, str], Extension] | None:
    """{(student, assignment or ''): Extension} from the course's extensions.csv; None when it has none.
    A malformed row stops the run with one line naming it."""
    path = course.root / FILE
    if not path.is_file():
        return None
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise CourseError(f"{path}: cannot be read ({exc})") from None
    rows = csv.DictReader(text.splitlines())
    fields = [f.strip().lower() for f in rows.fieldnames or []]
    if "student" not in fields or not ({"due", "extra"} & set(fields)):
        raise CourseError(f"{path}: the first line must name the columns student and due or extra "
                          f"(and optionally assignment); it has {', '.join(fields) or 'none'}")
    out: dict[tuple[str, str], Extension] = {}
    from nbgrader.utils import parse_utc

    for n, raw in enumerate(rows, start=2):
        row = {(k or "").strip().lower(): (v or "").strip() for k, v in raw.items() if k is not None}
        sid, assignment, due, extra = (row.get(k, "") for k in ("student", "assignment", "due", "extra"))
        if not any(row.values()):
            continue
        where = f"{path}, line {n}"
        if not sid:
            raise CourseError(f"{where}: no student")
        if bool(due) == bool(extra):
            raise CourseError(f"{where}: give either a new due date (due) or an extra duration (extra) for {sid}")
        try:
            when = parse_utc(due) if due else None
            more = duration(extra) if extra else None
        except (ValueError, OverflowError) as exc:
            raise CourseError(f"{where}: {str(exc).splitlines()[0]}") from None
        key = (sid, assignment)
        if key in out:
            raise CourseError(f"{where}: {sid} is listed again (line {out[key].line}); keep one row")
        out[key] = Extension(sid, assignment, when, more, n)
    return out


def extension_for(extensions: dict | None, student: str, assignment: str, duedate) -> dt.timedelta | None:
    """The extension nbgrader should hold for this student's submission; None: none."""
    if not extensions:
        return None
    ext = extensions.get((student, assignment)) or extensions.get((student, ""))
    return ext.of(duedate) if ext else None


def penalty_plugin(course: Course):
    """The course's late submission plugin, configured as nbgrader's AssignLatePenalties configures it."""
    from nbgrader.preprocessors import AssignLatePenalties

    step = AssignLatePenalties(config=course.config)
    step.init_plugin()
    return step.plugin_inst


def assign_late_penalty(plugin, submission, notebook) -> None:
    """nbgrader's AssignLatePenalties.preprocess for one notebook already in the gradebook."""
    notebook.late_submission_penalty = None  # reset to None (zero), as nbgrader does
    late = submission.total_seconds_late
    if late > 0:
        penalty = plugin.late_submission_penalty(submission.student.id, notebook.score, late)
        if penalty is not None:
            notebook.late_submission_penalty = min(max(penalty, 0), notebook.score)


def due_text(submission) -> str:
    """The due date nbgrader counts for this submission (extension included), as grades.csv shows it."""
    due = submission.duedate
    return due.isoformat(sep=" ") if due is not None else ""


def unknown_students(extensions: dict | None, known: set, assignment: str) -> list[str]:
    """Students extensions.csv names for this assignment that the gradebook and this run do not know."""
    if not extensions:
        return []
    return sorted(e.student for (sid, a), e in extensions.items()
                  if a in ("", assignment) and sid not in known)


def path_of(course: Course) -> Path:
    return course.root / FILE
