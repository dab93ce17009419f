"""The LMS import files: each LMS's own (lms/canvas.py, moodle.py, blackboard.py say the format),
for the LMS the class came from, or the ones asked for, never another LMS's ids in a file.

Which files (`import_targets`): the LMSes named by `--lms-files`, or whose column option is
given; else the LMSes the class's exports came from (a student's origin, read from the
files grades.csv lists); else, for a class of nbgrader or flat ids only (the school's
logins, which every LMS can key), every LMS's file. A file of an LMS not written this run
is removed, so that no stale grades are left to import.

A student whose work is not graded yet is exported BLANK, never 0: a cell waits for manual
grading (nbgrader's needs_manual_grade: a flagged submission, or one whose grading errored
or timed out), or grading failed and nobody has scored it by hand since. Why, and why a
student is not in a file, is in `import-notes.csv`. The points count the notebooks
`GradingSettings.lms_points` names: by default those the class handed in (any student's
`submitted/` holds them), after nbgrader's late penalty.
"""
from __future__ import annotations

from pathlib import Path

from ...course import Course, CourseError
from ..lms import origin, with_files
from ..lms.base import ColumnError, LmsGrade, Picked, csv_text, pick_column, shorten, with_roster
from ..lms.times import course_timezone
from ..results.result import Status
from ..run.state import write_atomic

NOTES_FIELDS = ["student", "name", "status", "note"]
NOT_GRADED = (Status.ERROR.value, Status.TIMEOUT.value, Status.INVALID.value)
HANDED_IN = "submitted"


def counted_notebooks(spec: str, notebooks: list[str], exercise: str | None) -> list[str]:
    """The notebooks an LMS grade counts: 'all', 'exercise' (the graded exercise, Course.exercise), or
    names separated by commas ('submitted', before export_settings resolves it: all)."""
    if spec in ("", "all", HANDED_IN):
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
                         f"submitted, all, exercise, or the assignment's notebooks ({', '.join(notebooks)})")
    return [n for n in notebooks if n in names]


def handed_in(course: Course) -> list[str]:
    """The assignment's notebooks that some student handed in (nbgrader's submitted/ holds them)."""
    found = {p.stem for p in (course.root / "submitted").glob(f"*/{course.assignment}/*.ipynb")}
    return [nb for nb in course.notebooks if nb in found]


def export_settings(course: Course, settings, canvas_column: str = ""):
    """The GradingSettings the files follow: the run's, or the course's own (nbgrader_config.py), with
    `lms_points = 'submitted'` resolved to the notebooks the class handed in."""
    from ..run.settings import GradingSettings

    if settings is None:
        settings = GradingSettings(config=course.config)
        if canvas_column:
            settings.canvas_column = canvas_column
    if settings.lms_points == HANDED_IN:
        settings.lms_points = ",".join(handed_in(course)) or "all"
    return settings


def lms_grade(row: dict, counted: list[str], assignment: str = "") -> LmsGrade:
    """The LMS grade of one grades.csv row (report.student_row): the counted notebooks' points after
    nbgrader's late penalty, or blank with the reason; with the LMS the student's files came from."""
    cells = {k: c for k, c in row["cells"].items() if k.split(":", 1)[0] in counted}
    waiting = [k for k, c in cells.items() if c.waiting]
    top = round(sum(row["notebook_max"].get(nb, 0.0) for nb in counted), 3)
    note = ""
    if row["status"] in NOT_GRADED and not any(c.by_hand for c in cells.values()):
        first = shorten(row["reason"].split(" | ")[0], 200)
        note = f"not graded ({row['status']}{': ' + first if first else ''}); grade it again, or by hand"
    elif waiting:
        shown = ", ".join(waiting[:3]) + (f" and {len(waiting) - 3} more" if len(waiting) > 3 else "")
        note = f"waiting for manual grading in formgrader: {len(waiting)} cell(s) ({shown})"
    points = None if note else round(sum(row.get(nb, 0.0) - row["penalties"].get(nb, 0.0) for nb in counted), 3)
    return LmsGrade(row["student"], row["name"], points, top, note, status=row["status"],
                    origin=origin(row["student"], row.get("files", ""), assignment) if assignment else "",
                    first_name=row.get("first_name", ""), last_name=row.get("last_name", ""),
                    timestamp=row.get("timestamp", ""))


def asked_files(settings) -> list[str]:
    """The LMSes `--lms-files` names (ValueError in one line for a name no LMS has)."""
    names = [n.strip().lower() for n in (settings.lms_files or "").split(",") if n.strip()]
    known = [lms.name for lms in with_files()]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"--lms-files {settings.lms_files!r}: {', '.join(unknown)} is not one of {', '.join(known)}")
    return names


def column_given(lms, settings) -> str:
    return getattr(settings, lms.column.trait, "") if lms.column else ""


def import_targets(settings, grades: list[LmsGrade]) -> tuple[list, str]:
    """(the LMSes whose files this run writes, a note or '')."""
    asked = set(asked_files(settings)) | {lms.name for lms in with_files() if column_given(lms, settings)}
    if asked:
        return [lms for lms in with_files() if lms.name in asked], ""
    origins = {g.origin for g in grades}
    came = [lms for lms in with_files() if lms.name in origins]
    if came:
        return came, ""
    return with_files(), ("the class's ids are nbgrader's or a flat folder's (logins any LMS can key): wrote every "
                          "LMS's file; name yours with --lms-files (canvas, moodle, blackboard) to write its alone")


def check_columns(course: Course, settings) -> dict[str, Picked]:
    """{LMS name: the column its file writes} for every LMS whose column option is given: CourseError in one
    line (with the candidates) when a gradebook download holds no column of the assignment's title. Run
    before grading, and again before writing."""
    title = settings.lms_title or course.assignment
    picked = {}
    try:
        for lms in with_files():
            given = column_given(lms, settings)
            if given:
                picked[lms.name] = pick_column(lms, given, title, 0.0)
    except ColumnError as exc:
        raise CourseError(str(exc)) from None
    return picked


def write_exports(course: Course, rows: list[dict], out: Path, settings) -> list[str]:
    """Write the import files of the LMSes this class goes to, and import-notes.csv; return notes for the
    instructor (one line each)."""
    from ..results.gradebook import open_gradebook

    counted = counted_notebooks(settings.lms_points, course.notebooks, course.exercise)
    grades = [lms_grade(row, counted, course.assignment) for row in rows]
    top = grades[0].max_points if grades else 0.0
    targets, target_note = import_targets(settings, grades)
    title = settings.lms_title or course.assignment
    lines, left_out, written = [], {}, []
    picks = {}
    for lms in targets:
        try:
            picks[lms.name] = pick_column(lms, column_given(lms, settings), title, top)
        except ColumnError as exc:
            raise CourseError(str(exc)) from None
    with open_gradebook(course) as gb:
        for lms in targets:
            picked = picks[lms.name]
            for exporter in lms.exporters:
                plugin = exporter(grades=grades, download=picked.download, to=str(out / exporter.filename),
                                  assignment=[course.assignment], column=picked.header, skip_empty=True,
                                  timezone=settings.timezone or course_timezone(course.config))
                plugin.export(gb)
                if plugin.kept:  # who a file not written leaves out is no news
                    written.append(f"{exporter.filename} ({plugin.kept})")
                    for sid, why in plugin.notes.items():
                        left_out.setdefault(sid, []).append(why)
            if picked.note:
                lines.append(f"{lms.title}: {picked.note}")
    for lms in with_files():  # no stale file of an LMS not written this run
        for exporter in lms.exporters:
            if not any(w.startswith(exporter.filename + " ") for w in written):
                (out / exporter.filename).unlink(missing_ok=True)
    notes = []
    with open_gradebook(course) as gb:
        grades = [with_roster(g, gb) for g in grades]
    for g in grades:
        said = ([g.note] if g.note else []) + left_out.get(g.student, [])
        if said:
            notes.append({"student": g.student, "name": g.name, "status": g.status, "note": "; ".join(said)})
    write_atomic(out / "import-notes.csv", csv_text(NOTES_FIELDS, notes))
    lines.insert(0, f"LMS import files (students in each): {', '.join(written) or 'none'}"
                 + (f"; {target_note}" if target_note else ""))
    missing = sorted(left_out)
    if missing:
        lines.append(f"{len(missing)} student(s) left out of an import file: "
                     f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}; why: {out / 'import-notes.csv'}")
    blank = [g for g in grades if g.points is None]
    if blank:
        lines.append(f"{len(blank)} student(s) exported blank, not 0 (waiting for manual grading, or not graded): "
                     f"{', '.join(g.student for g in blank[:5])}{' ...' if len(blank) > 5 else ''}; "
                     f"why: {out / 'import-notes.csv'}")
    return lines
