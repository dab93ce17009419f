"""Canvas: its submissions download, its gradebook download, and its gradebook import.

Files: `<lastfirst>_[LATE_]<user id>_<attachment id>_<original>[-N].<ext>`. Canvas adds
`-N` when a file of the same name is uploaded again, and an attachment id grows with each
upload: two files of one notebook are ordered by (attachment id, N), the later graded.

Import (Grades > Import): the columns of Canvas's own gradebook export, `Student, ID,
SIS User ID, SIS Login ID, Section`, then the assignment column `Title (assignment id)`
(without `(id)` Canvas makes a new assignment), after a `Points Possible` row. Canvas
matches a row on `ID` (its user id), else `SIS User ID`, else `SIS Login ID`. A student
from a Canvas export is keyed by `ID`; an nbgrader or flat id (the school's login) by
`SIS Login ID` (and by `ID` where the roster holds its Canvas user id, nbgrader's
`lms_user_id`); with the gradebook download (`--canvas-column Grades.csv`), every row
is Canvas's own row for that student, and a student it lacks is left out, with the reason.
"""
from __future__ import annotations

import re

from .base import PREFIX, Column, Lms, LmsExport, LmsGrade, csv_text, number

FIELDS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
KEYS = ("ID", "SIS User ID", "SIS Login ID")
COLUMN = Column(flag="--canvas-column", trait="canvas_column", pattern=re.compile(r"^(?P<title>.+) \((?P<id>\d+)\)$"),
                example="Buffer Donation (1234)", keys=KEYS)


class CanvasExport(LmsExport):
    """canvas-import.csv: Canvas's gradebook import."""

    filename = "canvas-import.csv"

    def write(self, grades: list[LmsGrade]) -> str:
        top = grades[0].max_points if grades else 0.0
        header = self.column or self.assignment[0]
        rows = [{"Student": "    Points Possible", header: number(top)}]
        for g in grades:
            row = self.key(g)
            if row is not None:
                rows.append({**row, header: number(g.points)})
        return csv_text([*FIELDS, header], rows)

    def key(self, g: LmsGrade) -> dict | None:
        first, last = g.names()
        name = f"{last}, {first}" if first and last else g.name or g.student
        if self.download is not None:
            row = self.match(g, KEYS)
            if row is None:
                self.leave_out(g, f"no row of {self.download.path.name} has id or login {g.student!r}")
                return None
            return {k: row.get(k, "") for k in FIELDS}
        if g.origin == "canvas":
            return {"Student": name, "ID": g.student}
        if g.origin in NEUTRAL:  # the school's login; the roster's Canvas user id where nbgrader has it
            return {"Student": name, "ID": g.lms_user_id, "SIS Login ID": g.student}
        self.leave_out(g, f"a {g.origin} id, which Canvas does not know")
        return None


NEUTRAL = ("nbgrader", "flat", "")

class Canvas(Lms):
    def order(self, gd: dict) -> tuple:
        return int(gd.get("submission") or 0), int(gd.get("attempt") or 0)


CANVAS = Canvas(
    name="canvas", title="Canvas",
    pattern=PREFIX + r"(?P<name>[^/_]*)_(?:(?P<late>LATE)_)?(?P<student_id>\d+)_(?P<submission>\d+)_"
                     r"(?P<file_id>[^/]+?)(?:-(?P<attempt>\d+))?(?P<ext>\.[^./]+)$",
    layout="<lastfirst>_[LATE_]<userid>_<attachmentid>_<original>[-N].ipynb",
    column=COLUMN, exporters=(CanvasExport,),
    signature=r"(?:^|[/ ])[^/_ ]*_(?:LATE_)?{student}_\d+_")

LMSES = (CANVAS,)  # registered by lms/__init__.py
