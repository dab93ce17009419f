"""The LMS import files, each in the format its LMS documents for importing grades.

- `canvas-import.csv`: Canvas's gradebook import (Grades > Import). Columns
  `Student, ID, SIS User ID, SIS Login ID, Section`, then one assignment
  column named `Title (assignment id)` (a title without `(id)` makes Canvas
  create a new assignment), and a `Points Possible` row. Canvas matches a
  row on `ID` (its user id: the numeric ids of a Canvas export), else on
  `SIS Login ID` (where any other id goes: a hub's, Blackboard's).
- `moodle-import.csv`: Moodle's offline grading worksheet (Assignment >
  Upload grading worksheet), with the columns Moodle's "Download grading
  worksheet" writes. Moodle matches on `Identifier`, `Participant N`, the N
  of a Moodle export's file names; it skips a blank grade and one above the
  assignment's maximum, and one changed in Moodle after `Last modified (grade)`.
- `blackboard-import.csv`: Blackboard Learn's Grade Center upload (Work
  Offline > Upload), with the columns of its offline download: every value
  quoted, the student by `Username`, the column named
  `Title [Total Pts: N Score] |column id` (without the id, Blackboard adds a
  new column), the note in `Grading Notes` (the instructor's only).

A student whose work is not graded yet is exported BLANK, never 0: a cell
waits for manual grading (nbgrader's needs_manual_grade: a flagged
submission, or one whose grading errored or timed out), or grading failed
and nobody has scored it by hand since. Why is in `import-notes.csv`. The
points count the notebooks `GradingSettings.lms_points` names (the whole
assignment, or the graded exercise alone), after nbgrader's late penalty.
"""
from __future__ import annotations

import csv
import datetime as dt
import io
import re
from dataclasses import dataclass
from pathlib import Path

from ..course import Course
from .lms import course_timezone, zone
from .result import Status
from .state import write_atomic

CANVAS_FIELDS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
MOODLE_FIELDS = ["Identifier", "Full name", "Email address", "Status", "Grade", "Maximum Grade",
                 "Grade can be changed", "Last modified (submission)", "Last modified (grade)"]
BLACKBOARD_FIELDS = ["Last Name", "First Name", "Username", "Student ID", "Last Access", "Availability"]
BLACKBOARD_NOTES = ["Grading Notes", "Notes Format"]
NOTES_FIELDS = ["student", "name", "status", "note"]
CANVAS_COLUMN = re.compile(r"^(?P<title>.+) \((?P<id>\d+)\)$")
BLACKBOARD_COLUMN = re.compile(r"^(?P<title>.+?) \[Total Pts: [^\]]*\] \|(?P<id>\d+)$")
NOT_GRADED = (Status.ERROR.value, Status.TIMEOUT.value, Status.INVALID.value)


@dataclass(frozen=True)
class LmsGrade:
    """What the LMS files say of one student."""

    student: str
    name: str
    points: float | None   # None: exported blank
    max_points: float
    note: str               # why it is blank ('' when it is not)


def counted_notebooks(spec: str, notebooks: list[str], exercise: str | None) -> list[str]:
    """The notebooks an LMS grade counts: 'all', 'exercise' (the graded exercise, Course.exercise), or
    names separated by commas."""
    if spec in ("", "all"):
        return list(notebooks)
    if spec == "exercise":
        if exercise is None:
            raise ValueError("--lms-points exercise: this assignment has no graded exercise (no notebook holds "
                             "its answer cell); name the notebooks instead")
        return [exercise]
    names = [n.strip().removesuffix(".ipynb") for n in spec.split(",") if n.strip()]
    unknown = [n for n in names if n not in notebooks]
    if unknown or not names:
        raise ValueError(f"--lms-points {spec!r}: {', '.join(unknown) or 'no notebook'} is not one of "
                         f"all, exercise, or the assignment's notebooks ({', '.join(notebooks)})")
    return [n for n in notebooks if n in names]


def lms_grade(row: dict, counted: list[str]) -> LmsGrade:
    """The LMS grade of one grades.csv row (report.student_row): the counted notebooks' points after
    nbgrader's late penalty, or blank with the reason."""
    cells = {k: c for k, c in row["cells"].items() if k.split(":", 1)[0] in counted}
    waiting = [k for k, c in cells.items() if c.waiting]
    top = round(sum(row["notebook_max"].get(nb, 0.0) for nb in counted), 3)
    note = ""
    if row["status"] in NOT_GRADED and not any(c.by_hand for c in cells.values()):
        first = row["reason"].split(" | ")[0][:200]
        note = f"not graded ({row['status']}{': ' + first if first else ''}); grade it again, or by hand"
    elif waiting:
        shown = ", ".join(waiting[:3]) + (f" and {len(waiting) - 3} more" if len(waiting) > 3 else "")
        note = f"waiting for manual grading in formgrader: {len(waiting)} cell(s) ({shown})"
    if note:
        return LmsGrade(row["student"], row["name"], None, top, note)
    points = sum(row.get(nb, 0.0) - row["penalties"].get(nb, 0.0) for nb in counted)
    return LmsGrade(row["student"], row["name"], round(points, 3), top, "")


def export_settings(course: Course, settings, canvas_column: str = ""):
    """The GradingSettings the files follow: the run's, or the course's own (nbgrader_config.py)."""
    from .settings import GradingSettings

    if settings is None:
        settings = GradingSettings(config=course.config)
        if canvas_column:
            settings.canvas_column = canvas_column
    return settings


def read_header(path: Path) -> list[str]:
    """The first row of an LMS's gradebook download: CSV, or Blackboard's tab-separated UTF-16 '.xls'."""
    data = path.read_bytes()
    text = data.decode("utf-16") if data[:2] in (b"\xff\xfe", b"\xfe\xff") else data.decode("utf-8-sig")
    first = text.splitlines()[0] if text else ""
    return next(csv.reader([first], delimiter="\t" if "\t" in first else ","), [])


def loose(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def lms_column(given: str, pattern: re.Pattern, assignment: str, fallback: str, lms: str) -> tuple[str, str]:
    """(the assignment column's header, a note or ''): `given` as it is, or the column of the LMS's own
    gradebook download that `given` names (the only one with an id, or the one titled as the assignment)."""
    path = Path(given) if given else None
    if path is None or not path.is_file():
        header = given or fallback
        return header, "" if pattern.match(header) else f"column {header!r} has no {lms} id"
    found = [h for h in read_header(path) if pattern.match(h)]
    named = [h for h in found if loose(pattern.match(h)["title"]) == loose(assignment)]
    pick = found if len(found) == 1 else named
    if len(pick) == 1:
        return pick[0], ""
    return fallback, (f"{path.name} has {len(found)} assignment columns with an id "
                      f"({', '.join(found[:4]) or 'none'}), none titled {assignment!r}")


def csv_text(fields: list[str], rows: list[dict], quote_all: bool = False) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore",
                            quoting=csv.QUOTE_ALL if quote_all else csv.QUOTE_MINIMAL)
    writer.writeheader()
    writer.writerows({k: row.get(k, "") for k in fields} for row in rows)
    return buf.getvalue()


def moodle_time(when: dt.datetime) -> str:
    """A time as Moodle's worksheet writes it (userdate: 'Friday, 1 March 2024, 1:05 PM'), which the
    upload reads back with PHP's strtotime, in the site's zone."""
    return f"{when:%A}, {when.day} {when:%B %Y}, {int(f'{when:%I}')}:{when:%M %p}"


def number(points: float | None, digits: int | None = None) -> str:
    if points is None:
        return ""
    return f"{points:.{digits}f}" if digits is not None else str(points)


def canvas_rows(grades: list[LmsGrade], header: str, top: float) -> list[dict]:
    rows = [{"Student": "    Points Possible", header: number(top)}]
    for g in grades:
        canvas_id = g.student.isdigit()  # a Canvas user id; any other id is matched as the SIS login
        rows.append({"Student": g.name or g.student, "ID": g.student if canvas_id else "",
                     "SIS Login ID": "" if canvas_id else g.student, header: number(g.points)})
    return rows


def moodle_rows(grades: list[LmsGrade], rows: list[dict], local) -> list[dict]:
    now = moodle_time(dt.datetime.now(local))
    out = []
    for g, row in zip(grades, rows, strict=True):
        if not g.student.isdigit():
            continue  # not a Moodle participant number: Moodle could match it to nobody
        submitted = row["timestamp"] and dt.datetime.fromisoformat(row["timestamp"]).replace(tzinfo=dt.UTC)
        out.append({"Identifier": f"Participant {g.student}", "Full name": g.name or g.student,
                    "Status": "Submitted for grading" + (" - Graded" if g.points is not None else ""),
                    "Grade": number(g.points, 2), "Maximum Grade": number(g.max_points, 2),
                    "Grade can be changed": "Yes",
                    "Last modified (submission)": moodle_time(submitted.astimezone(local)) if submitted else "-",
                    "Last modified (grade)": now})
    return out


def blackboard_rows(grades: list[LmsGrade], rows: list[dict], header: str) -> list[dict]:
    out = []
    for g, row in zip(grades, rows, strict=True):
        first, last = row["first_name"], row["last_name"] or g.name
        out.append({"Last Name": last, "First Name": first, "Username": g.student, header: number(g.points),
                    "Grading Notes": g.note, "Notes Format": "SMART_TEXT" if g.note else ""})
    return out


def write_exports(course: Course, rows: list[dict], out: Path, settings) -> list[str]:
    """Write the three import files and import-notes.csv; return notes for the instructor (one line each)."""
    counted = counted_notebooks(settings.lms_points, course.notebooks, course.exercise)
    grades = [lms_grade(row, counted) for row in rows]
    top = grades[0].max_points if grades else 0.0
    title = course.assignment
    canvas, canvas_note = lms_column(settings.canvas_column, CANVAS_COLUMN, title, title, "Canvas")
    board, board_note = lms_column(settings.blackboard_column, BLACKBOARD_COLUMN, title,
                                   f"{title} [Total Pts: {top:g} Score]", "Blackboard")
    local = zone(settings.timezone or course_timezone(course.config))
    write_atomic(out / "canvas-import.csv", csv_text([*CANVAS_FIELDS, canvas], canvas_rows(grades, canvas, top)))
    moodle = moodle_rows(grades, rows, local)
    write_atomic(out / "moodle-import.csv", csv_text(MOODLE_FIELDS, moodle))
    write_atomic(out / "blackboard-import.csv", csv_text([*BLACKBOARD_FIELDS, board, *BLACKBOARD_NOTES],
                                                         blackboard_rows(grades, rows, board), quote_all=True))
    blank = [g for g in grades if g.points is None]
    notes = []
    for g, r in zip(grades, rows, strict=True):
        said = [g.note] if g.note else []
        if moodle and not g.student.isdigit():  # a Moodle class with others in the gradebook
            said.append("not in moodle-import.csv: not a Moodle participant number")
        if said:
            notes.append({"student": g.student, "name": g.name, "status": r["status"], "note": "; ".join(said)})
    write_atomic(out / "import-notes.csv", csv_text(NOTES_FIELDS, notes))
    lines = []
    missing = [f"{name}: {note}" for name, note in (("canvas-import.csv", canvas_note),
                                                            ("blackboard-import.csv", board_note)) if note]
    if missing:
        lines.append("; ".join(missing) + ": the LMS would add a new assignment or column rather than grade yours "
                     "(give --canvas-column 'Title (id)' / --blackboard-column 'Title [Total Pts: N Score] |id', "
                     "or the LMS's own gradebook download to read it from)")
    if blank:
        lines.append(f"{len(blank)} student(s) exported blank, not 0 (waiting for manual grading, or not graded): "
                     f"{', '.join(g.student for g in blank[:5])}{' ...' if len(blank) > 5 else ''}; "
                     f"why: {out / 'import-notes.csv'}")
    return lines
