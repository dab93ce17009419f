"""Moodle: its assignment download, its grades export, and two ways back in.

Files: `<Full Name>_<participant id>_assignsubmission_file_<original>`, or a folder of that
name holding the originals. A participant id is the assignment's own number for a student
(not the user id, not the e-mail). Moodle names a second upload of a file already there
`name (1).ext`, then ` (2)`: two files of one notebook are ordered by that number.

Two import files:
- `moodle-worksheet.csv`, for students of a Moodle export: the assignment's offline grading
  worksheet (Assignment > View all submissions > Grading action: Upload grading worksheet),
  with the columns Moodle's "Download grading worksheet" writes, keyed by `Participant N`.
  The assignment needs the "Offline grading worksheet" feedback type. Moodle skips a blank
  grade, one above the maximum, and one changed in Moodle after `Last modified (grade)`.
- `moodle-grades.csv`, for every student Moodle can find: the gradebook's CSV import (Grades >
  Import > CSV file), keyed by `Email address` (the roster's e-mail), `Username` (an nbgrader
  or flat id: the school's login) or `ID number`; "Identify user by" maps one of them to
  useremail, username or useridnumber, and the grade column is mapped to the assignment's
  grade item. With Moodle's grades export (`--moodle-column grades.csv`), the column is the
  export's `Assignment: Title (Real)` and each row Moodle's own row for that student.
"""
from __future__ import annotations

import datetime as dt
import re

from .base import PREFIX, Column, Lms, LmsExport, LmsGrade, csv_text, number

WORKSHEET = ["Identifier", "Full name", "Email address", "Status", "Grade", "Maximum Grade",
             "Grade can be changed", "Last modified (submission)", "Last modified (grade)"]
GRADES = ["First name", "Last name", "ID number", "Email address", "Username"]
KEYS = ("Email address", "ID number", "Username")
COPY = re.compile(r" \((?P<n>\d+)\)(?:\.[^./]+)?$")


class MoodleColumn(Column):
    def default(self, title: str, top: float) -> str:
        return title


COLUMN = MoodleColumn(flag="--moodle-column", trait="moodle_column",
                      pattern=re.compile(r"^(?:[^:]+: )?(?P<title>.+?) \((?:Real|Percentage|Letter)\)$"),
                      example="Assignment: Buffer Donation (Real)", keys=KEYS, needs_id=False,
                      prefer=r"\(Real\)$")


def moodle_time(when: dt.datetime) -> str:
    """A time as Moodle's worksheet writes it (userdate: 'Friday, 1 March 2024, 1:05 PM'), which the
    upload reads back with PHP's strtotime, in the site's zone."""
    return f"{when:%A}, {when.day} {when:%B %Y}, {int(f'{when:%I}')}:{when:%M %p}"


class MoodleWorksheet(LmsExport):
    """moodle-worksheet.csv: the assignment's offline grading worksheet, for a Moodle export's students."""

    filename = "moodle-worksheet.csv"

    def write(self, grades: list[LmsGrade]) -> str:
        from zoneinfo import ZoneInfo

        local = ZoneInfo(self.timezone or "UTC")
        now = moodle_time(dt.datetime.now(local))
        out = []
        for g in grades:
            if g.origin != "moodle":
                self.leave_out(g, "not from a Moodle export: the worksheet knows participant numbers only")
                continue
            submitted = g.timestamp and dt.datetime.fromisoformat(g.timestamp).replace(tzinfo=dt.UTC)
            out.append({"Identifier": f"Participant {g.student}", "Full name": g.name or g.student,
                        "Email address": g.email,
                        "Status": "Submitted for grading" + (" - Graded" if g.points is not None else ""),
                        "Grade": number(g.points, 2), "Maximum Grade": number(g.max_points, 2),
                        "Grade can be changed": "Yes",
                        "Last modified (submission)": moodle_time(submitted.astimezone(local)) if submitted else "-",
                        "Last modified (grade)": now})
        return csv_text(WORKSHEET, out)


class MoodleGrades(LmsExport):
    """moodle-grades.csv: the gradebook's CSV import, keyed by e-mail, username or ID number."""

    filename = "moodle-grades.csv"

    def write(self, grades: list[LmsGrade]) -> str:
        header = self.column or self.assignment[0]
        out = []
        for g in grades:
            row = self.key(g)
            if row is not None:
                out.append({**row, header: number(g.points, 2)})
        return csv_text([*GRADES, header], out)

    def key(self, g: LmsGrade) -> dict | None:
        first, last = g.names()
        if self.download is not None:
            row = self.match(g, KEYS)
            if row is None:
                self.leave_out(g, f"no row of {self.download.path.name} has e-mail, ID number or username "
                                  f"{g.email or g.student!r}")
                return None
            return {"First name": row.get("First name", first), "Last name": row.get("Last name", row.get(
                "Surname", last)), "ID number": row.get("ID number", ""), "Email address": row.get("Email address", ""),
                    "Username": row.get("Username", "")}
        username = g.student if g.origin in ("nbgrader", "flat", "") else ""
        if not (g.email or username):
            self.leave_out(g, f"a {g.origin} id and no e-mail in the roster: Moodle's gradebook import cannot "
                              "find the student" + (" (see moodle-worksheet.csv)" if g.origin == "moodle" else ""))
            return None
        return {"First name": first, "Last name": last, "Email address": g.email, "Username": username}


class Moodle(Lms):
    def order(self, gd: dict) -> tuple:
        m = COPY.search(gd.get("file_id") or "")
        return (int(m["n"]) if m else 0,)


MOODLE = Moodle(
    name="moodle", title="Moodle",
    pattern=PREFIX + r"(?P<name>[^/]+?)_(?P<student_id>\d+)_assignsubmission_(?:file|onlinetext)"
                     r"(?:_|_?/(?:.*/)?)(?P<file_id>[^/]+)$",
    layout="<Full Name>_<participant id>_assignsubmission_file_<original>.ipynb, or a folder of that name",
    column=COLUMN, exporters=(MoodleWorksheet, MoodleGrades),
    signature=r"_{student}_assignsubmission_")

LMSES = (MOODLE,)  # registered by lms/__init__.py
