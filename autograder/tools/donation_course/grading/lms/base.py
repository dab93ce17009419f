"""What every LMS is to the grader: one `Lms` object, registered once (lms/__init__.py).

An `Lms` holds, in the one file that defines it (canvas.py, moodle.py, ...):
- its file naming: a `named_regexp` for nbgrader's `FileNameCollectorPlugin`
  (groups `student_id` and `file_id`; optionally `timestamp`, `name`, `late`,
  `attempt`), and how it orders two files of one notebook (`order`);
- its sidecar reader (`sidecars`): the files beside the notebooks that say
  whose or when they are (Blackboard's receipts, nbgrader's timestamp.txt);
- its import files: `exporters`, each an nbgrader `ExportPlugin` whose
  `export(gradebook)` writes one file in the format the LMS documents;
- its column option (`column`): the flag naming the LMS's assignment column,
  the pattern of that column in the LMS's own gradebook download, and the
  columns of that download that name a student (`Download`).
"""
from __future__ import annotations

import csv
import io
import re
import textwrap
from dataclasses import dataclass, field, replace
from pathlib import Path

from nbgrader.plugins import ExportPlugin
from traitlets import Bool, Unicode

PREFIX = r"(?:.*/)?"  # any folders of the export or zip in front
SKIP = re.compile(r"(^|/)(__MACOSX|\.[^/]*)(/|$)")  # macOS zip debris, hidden files


class ColumnError(ValueError):
    """An assignment column that cannot be picked: one line, listing the candidates."""


# --- what the import files say of one student --------------------------------------


@dataclass(frozen=True)
class LmsGrade:
    """One student's grade for the LMS: the roster's names beside the points, or blank with why."""

    student: str
    name: str                 # the roster's name, else the LMS's display name, else ''
    points: float | None      # None: exported blank
    max_points: float
    note: str = ""            # why it is blank ('' when it is not)
    status: str = ""
    origin: str = ""          # the Lms the student's files came from ('' unknown: nbgrader's own)
    first_name: str = ""
    last_name: str = ""
    email: str = ""
    lms_user_id: str = ""     # the roster's (nbgrader db student add --lms-user-id): the LMS's own user id
    timestamp: str = ""       # nbgrader's submission time, ISO, UTC ('' none)

    def names(self) -> tuple[str, str]:
        """(first, last): the roster's; a name held whole (an LMS's display name, which the roster keeps
        as last_name alone) is split at its last space."""
        if self.first_name:
            return self.first_name, self.last_name
        first, _, last = (self.last_name or self.name).strip().rpartition(" ")
        return first, last


def shorten(text: str, width: int = 200) -> str:
    """`text` in at most `width` characters, cut between words, never inside one."""
    return textwrap.shorten(" ".join(text.split()), width=width, placeholder=" ...")


def number(points: float | None, digits: int | None = None) -> str:
    if points is None:
        return ""
    return f"{points:.{digits}f}" if digits is not None else str(points)


def csv_text(fields: list[str], rows: list[dict], quote_all: bool = False, delimiter: str = ",") -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore", delimiter=delimiter,
                            quoting=csv.QUOTE_ALL if quote_all else csv.QUOTE_MINIMAL)
    writer.writeheader()
    writer.writerows({k: row.get(k, "") for k in fields} for row in rows)
    return buf.getvalue()


def loose(text: str) -> str:
    """A title compared as people read it: case, spaces and punctuation aside."""
    return re.sub(r"[^0-9a-z]", "", text.casefold())


# --- the LMS's own gradebook download ------------------------------------------------


@dataclass(frozen=True)
class Download:
    """An LMS's gradebook download: its header and its rows (CSV, or Blackboard's UTF-16 tab-separated .xls)."""

    path: Path
    header: list[str]
    rows: list[dict[str, str]]

    @classmethod
    def read(cls, path: Path) -> Download:
        data = path.read_bytes()
        if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
            text = data.decode("utf-16")
        else:
            try:
                text = data.decode("utf-8-sig")
            except UnicodeDecodeError:
                raise ColumnError(f"{path}: not a text gradebook download (CSV or tab-separated)") from None
        first = text.split("\n", 1)[0]
        delimiter = max("\t,;:", key=first.count)  # Moodle's export may use any of these
        lines = list(csv.reader(io.StringIO(text), delimiter=delimiter if delimiter in first else ","))
        header = [h.strip() for h in lines[0]] if lines else []
        rows = [dict(zip(header, (v.strip() for v in line), strict=False)) for line in lines[1:] if any(line)]
        return cls(path, header, rows)

    def find(self, keys: tuple[str, ...], ids: set[str]) -> dict | None:
        """The one row whose `keys` columns hold one of `ids` (compared without case), or None."""
        wanted = {i.casefold() for i in ids if i}
        found = [r for r in self.rows if any(r.get(k, "").casefold() in wanted for k in keys if r.get(k))]
        return found[0] if len(found) == 1 else None


@dataclass(frozen=True)
class Column:
    """An LMS's assignment column option: `--<lms>-column` takes the header as the LMS writes it, or the
    LMS's own gradebook download to pick it from by the assignment's title."""

    flag: str                      # e.g. --canvas-column
    trait: str                     # GradingSettings trait that holds it in nbgrader_config.py
    pattern: re.Pattern            # a header of the download that is an assignment column (group 'title')
    example: str                   # for help texts
    keys: tuple[str, ...] = ()     # the download's columns that name a student
    needs_id: bool = True          # a header without the LMS's id makes a new column on import
    prefer: str = ""               # among several columns of one title, the one this regex finds

    def default(self, title: str, top: float) -> str:
        return title


@dataclass
class Picked:
    """The column an import file writes, the download it came from (None), and a note ('' none)."""

    header: str
    download: Download | None = None
    note: str = ""


def pick_column(lms: Lms, given: str, title: str, top: float) -> Picked:
    """The assignment column of `lms`'s import file: `given` as the LMS writes it, or picked by `title`
    from the LMS's gradebook download `given`; ColumnError (one line, the candidates) when it cannot be."""
    column = lms.column
    if given and (Path(given).is_file() or re.search(r"\.(csv|xls|xlsx|txt|tsv)$", given, re.I)):
        path = Path(given)
        if not path.is_file():
            raise ColumnError(f"{column.flag} {given}: no such file")
        download = Download.read(path)
        found = [h for h in download.header if column.pattern.match(h)]
        named = [h for h in found if loose(column.pattern.match(h)["title"]) == loose(title)]
        if len(named) > 1 and column.prefer:
            named = [h for h in named if re.search(column.prefer, h)] or named
        if len(named) == 1:
            return Picked(named[0], download)
        shown = ", ".join(repr(h) for h in found) or "none"
        why = "more than one" if named else "none"
        raise ColumnError(f"{column.flag} {path.name}: {why} of its {lms.title} assignment columns is titled "
                          f"{title!r} (candidates: {shown}); give --lms-title 'the title in {lms.title}', or "
                          f"{column.flag} 'the column as written there'")
    if given and column.pattern.match(given):
        return Picked(given)
    header = column.default(given or title, top)
    if not column.needs_id:
        return Picked(header)
    return Picked(header, note=f"column {header!r} has no {lms.title} id: {lms.title} would add a new "
                  f"{'assignment' if lms.name == 'canvas' else 'column'} rather than grade yours (give "
                  f"{column.flag} with {lms.title}'s gradebook download, or '{column.example}')")


# --- the import files: nbgrader export plugins -----------------------------------------


class LmsExport(ExportPlugin):
    """An nbgrader ExportPlugin writing one LMS's import file (`to`) for one assignment.

    The grader hands it the class's `grades` (exports.lms_grade: late penalty off, blank while a person
    must look) and the `column` picked (pick_column); `nbgrader export --exporter` may use it alone:
    then the grades are read from the gradebook (nbgrader's score less its late penalty)."""

    column = Unicode("", help="The assignment column, as the LMS names it.").tag(config=True)
    timezone = Unicode("UTC", help="The LMS's local time zone, for the times an import file holds.").tag(config=True)
    skip_empty = Bool(False, help="Write no file when no student can be keyed in it.").tag(config=True)
    filename = "import.csv"

    def __init__(self, grades: list[LmsGrade] | None = None, download: Download | None = None, **kwargs):
        super().__init__(**kwargs)
        self.grades, self.download = grades, download
        self.notes: dict[str, str] = {}  # student -> why the file leaves them out ('' never)
        self.kept = 0  # students the file holds

    def export(self, gradebook) -> None:
        if not self.assignment:  # nbgrader export without --assignment: the gradebook's one assignment
            names = [a.name for a in gradebook.assignments]
            if len(names) != 1:
                raise ValueError(f"{type(self).__name__}: one file is one assignment: give --assignment "
                                 f"(the gradebook has {', '.join(names) or 'none'})")
            self.assignment = names
        grades = self.grades if self.grades is not None else gradebook_grades(gradebook, self.assignment[0])
        if self.student:
            grades = [g for g in grades if g.student in self.student]
        grades = [with_roster(g, gradebook) for g in grades]
        self.notes = {}
        text = self.write(grades)
        self.kept = len(grades) - len(self.notes)
        if self.kept or not self.skip_empty:
            from ..run.state import write_atomic

            write_atomic(Path(self.to or self.filename), text)

    def write(self, grades: list[LmsGrade]) -> str:
        raise NotImplementedError

    def leave_out(self, grade: LmsGrade, why: str) -> None:
        self.notes[grade.student] = f"not in {Path(self.to or self.filename).name}: {why}"

    def match(self, grade: LmsGrade, keys: tuple[str, ...]) -> dict | None:
        """The download's row of this student (by id or e-mail), or None without a download."""
        if self.download is None:
            return None
        return self.download.find(keys, {grade.student, grade.email, grade.lms_user_id})


def with_roster(grade: LmsGrade, gradebook) -> LmsGrade:
    """The grade with the gradebook roster's first and last name and e-mail (nbgrader's Student)."""
    from nbgrader.api import MissingEntry

    try:
        s = gradebook.find_student(grade.student)
    except MissingEntry:
        return grade
    return replace(grade, first_name=s.first_name or grade.first_name, last_name=s.last_name or grade.last_name,
                   email=s.email or grade.email, lms_user_id=s.lms_user_id or grade.lms_user_id,
                   name=" ".join(n for n in (s.first_name, s.last_name) if n) or grade.name)


def gradebook_grades(gradebook, assignment: str) -> list[LmsGrade]:
    """Every submission of `assignment` as nbgrader scores it, less the late penalty; blank while a cell
    waits for manual grading (for `nbgrader export --exporter` without the grader's own rows)."""
    out = []
    a = gradebook.find_assignment(assignment)
    for sub in sorted(a.submissions, key=lambda s: s.student.id):
        waiting = sub.needs_manual_grade
        points = None if waiting else round(sub.score - (sub.late_submission_penalty or 0.0), 3)
        out.append(LmsGrade(sub.student.id, "", points, round(a.max_score, 3),
                            note="waiting for manual grading in formgrader" if waiting else "",
                            timestamp=sub.timestamp.isoformat(sep=" ") if sub.timestamp else ""))
    return out


# --- the LMS itself --------------------------------------------------------------


@dataclass
class Sidecars:
    """What the files beside the notebooks say (none by default): `apply` completes a file's match
    (student id, name, time) or returns None to leave the file to `problem`'s line."""

    problem: str = ""

    def apply(self, gd: dict, path: Path) -> dict | None:
        return gd


@dataclass
class Lms:
    name: str                 # --lms NAME, and the key of the registry
    title: str                # for people
    pattern: str              # a FileNameCollectorPlugin.named_regexp; {assignment} is the assignment's name
    layout: str               # the file naming, for people
    detected: bool = True     # tried by detect(); the fallback is not
    neutral_ids: bool = False  # its ids are the school's logins (nbgrader's exchange, a flat folder): any
                              # LMS's file can key them; an LMS's own ids (Canvas user id) mean nothing elsewhere
    column: Column | None = None
    exporters: tuple = ()     # LmsExport classes: its import files
    signature: str = ""       # a regex over grades.csv's `files` telling that a student's files came from it
    extra: dict = field(default_factory=dict)

    def regexp(self, assignment: str) -> str:
        return self.pattern.replace("{assignment}", re.escape(assignment))

    def sidecars(self, files: list[Path], rels: list[str], collector, assignment: str) -> Sidecars:
        return Sidecars()

    def skips(self, rel: str) -> bool:
        """A file that is not a notebook but belongs to the export (a receipt): passed over in silence."""
        return False

    def order(self, gd: dict) -> tuple | None:
        """Where the LMS itself orders two files of one notebook of one submission (an attachment id, a
        copy number it added), the later one's key is greater; None: the LMS does not order them."""
        return None

    def owns(self, student: str, files: str, assignment: str) -> bool:
        """Whether the files grades.csv lists for `student` came from this LMS's export."""
        if not self.signature or not files:
            return False
        sig = self.signature.replace("{student}", re.escape(student)).replace("{assignment}", re.escape(assignment))
        return re.search(sig, files) is not None
