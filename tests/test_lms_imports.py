"""The LMS import files, for the family of classes an instructor brings (issue 30): one class in
the gradebook whose students came from a Canvas export, a Moodle export, a Blackboard export,
nbgrader's exchange and a flat folder, with odd names, a late penalty, flagged and failed work.

Each LMS's file is written for the students that LMS can find, keyed by the ids it matches on,
in the columns its documented import reads; the column is picked by title from the LMS's own
gradebook download, in that download's real layout; a title no download holds stops before
anything is written. Every test shares the one graded class (`lms_class`)."""
import csv
import dataclasses
import textwrap

import pytest

from donation_course.course import COURSE, Course, CourseError
from synthetic_class import Student, build_class

EX = COURSE.exercise
A = COURSE.assignment
TOP = float(COURSE.points[EX])  # the class handed in the exercise alone: the total is out of its points
LONG = ("the kernel died while running the notebook because the learner's training step allocated "
        "an array of sixteen gibibytes, which the grading sandbox refused, as it refuses every kernel that "
        "asks for more memory than its limit, which the instructor sets with --memory-mb on the command line")

# sid -> (Student, the files grades.csv lists, the roster's (first, last, e-mail[, Canvas user id]) or None)
CLASS = {
    # Canvas: a roster name, a late penalty with an accent and no roster, flagged work
    "1002": (Student({EX: 1.0}), f"submissions/doejane_1002_5001_{EX}.ipynb", ("Jane", "Doe", "")),
    "1005": (Student({EX: 1.0}, late_penalty=3.0, minutes_late=5, name="müllerjosé"),
             f"submissions/müllerjosé_LATE_1005_5030_{EX}-1.ipynb", None),
    "1007": (Student({EX: 1.0}, kind="flagged"), f"smithjohn_1007_5044_{EX}.ipynb", None),
    # Moodle: per-student folders; one with the roster's e-mail, one without
    "4102": (Student({EX: 0.5}), f"export/Wei Chen_4102_assignsubmission_file_/{EX}.ipynb",
             ("Wei", "Chen", "wei.chen@uni.example")),
    "4200": (Student({EX: 1.0}, name="José Müller"), f"José Müller_4200_assignsubmission_file_{EX}.ipynb", None),
    # Blackboard: a username with '_', a display name of three words; a failure with a long reason
    "jane_doe": (Student({EX: 1.0}, name="Jane van Berg"),
                 f"Assignment_jane_doe_attempt_2024-03-01-10-00-00_{EX}.ipynb", None),
    "k.roe": (Student({EX: 1.0}, kind="error"), f"HW 7_k.roe_attempt_2024-03-01-11-00-00_{EX}.ipynb", None),
    "dan": (Student({EX: 1.0}, kind="timeout"), f"HW 7_dan_attempt_2024-03-01-11-30-00_{EX}.ipynb", None),
    # nbgrader's exchange, and a flat folder: the school's logins
    "ann": (Student({EX: 1.0}), f"ann/{A}/{EX}.ipynb", ("Ann", "Lee", "ann.lee@uni.example", "7001")),
    "bob_2": (Student({EX: 0.5}), f"bob_2_{EX}.ipynb", None),
    # flagged, then graded by hand
    "eve": (Student({EX: 0.0}, kind="flagged", by_hand={EX: 0.5}), f"eve_{EX}.ipynb", None),
}
ORIGIN = {"canvas": ["1002", "1005", "1007"], "moodle": ["4102", "4200"], "blackboard": ["jane_doe", "k.roe", "dan"],
          "exchange": ["ann", "bob_2", "eve"]}
FILES = ("canvas-import.csv", "moodle-worksheet.csv", "moodle-grades.csv", "blackboard-import.csv")


@pytest.fixture(scope="module")
def lms_class(tmp_path_factory, generated_course):
    """(course, {sid: grades.csv row}) of the one class, graded into one gradebook."""
    from donation_course.grading.reports.report import class_rows
    from donation_course.grading.results.gradebook import open_gradebook

    course = Course(generated_course(tmp_path_factory.mktemp("lms") / "course"))
    summaries = build_class(course.root, {sid: spec for sid, (spec, _, _) in CLASS.items()})
    with open_gradebook(course) as gb:
        for sid, (_, _, roster) in CLASS.items():
            if roster:
                gb.update_or_create_student(sid, first_name=roster[0], last_name=roster[1], email=roster[2] or None,
                                            lms_user_id=roster[3] if len(roster) > 3 else None)
    summaries = {sid: dataclasses.replace(s, files=CLASS[sid][1], name=CLASS[sid][0].name)
                 for sid, s in summaries.items()}
    summaries["k.roe"].reasons[:] = [LONG]
    rows, _ = class_rows(course, summaries)
    return course, {r["student"]: r for r in rows}


def export(course, rows, out, **traits):
    """write_exports for these rows (a class of one origin, or the whole one); the lines it says."""
    from donation_course.grading.reports.exports import export_settings, write_exports
    from donation_course.grading.run.settings import GradingSettings

    settings = GradingSettings(config=course.config)
    for name, value in traits.items():
        setattr(settings, name, value)
    out.mkdir(parents=True, exist_ok=True)
    return write_exports(course, rows, out, export_settings(course, settings))


def rows_of(rows, *groups):
    return [rows[sid] for g in groups for sid in ORIGIN[g]]


def read(path, delimiter=","):
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.reader(fh, delimiter=delimiter))


def records(path):
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def notes(out):
    return {r["student"]: r["note"] for r in records(out / "import-notes.csv")}


def written(out):
    return sorted(f for f in FILES if (out / f).exists())


# --- each class gets its own LMS's file, keyed by the ids that LMS matches on -------------

def test_a_canvas_class_gets_canvas_file_alone_keyed_by_canvas_user_id(tmp_path, lms_class):
    course, rows = lms_class
    (tmp_path / "moodle-worksheet.csv").write_text("stale\n")  # an earlier run's: removed, never left to import
    lines = export(course, rows_of(rows, "canvas"), tmp_path)
    assert written(tmp_path) == ["canvas-import.csv"] and "canvas-import.csv (3)" in lines[0]
    table = read(tmp_path / "canvas-import.csv")
    assert table[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", A]
    assert table[1] == ["    Points Possible", "", "", "", "", str(TOP)]  # the exercise the class handed in, not 43
    by_id = {r[1]: r for r in table[2:]}
    assert by_id["1002"][:4] == ["Doe, Jane", "1002", "", ""]  # the roster's name, as Canvas sorts it
    assert by_id["1005"][0] == "müllerjosé" and float(by_id["1005"][5]) == TOP - 3.0  # after the late penalty
    assert by_id["1007"][5] == "" and notes(tmp_path)["1007"].startswith("waiting for manual grading")


def test_a_moodle_class_gets_the_worksheet_and_the_gradebook_import_by_email(tmp_path, lms_class):
    course, rows = lms_class
    export(course, rows_of(rows, "moodle"), tmp_path, timezone="Europe/Berlin")
    assert written(tmp_path) == ["moodle-grades.csv", "moodle-worksheet.csv"]
    sheet = records(tmp_path / "moodle-worksheet.csv")
    assert list(sheet[0]) == ["Identifier", "Full name", "Email address", "Status", "Grade", "Maximum Grade",
                              "Grade can be changed", "Last modified (submission)", "Last modified (grade)"]
    assert {r["Identifier"]: (r["Full name"], r["Grade"], r["Maximum Grade"]) for r in sheet} == {
        "Participant 4102": ("Wei Chen", f"{TOP / 2:.2f}", f"{TOP:.2f}"),
        "Participant 4200": ("José Müller", f"{TOP:.2f}", f"{TOP:.2f}")}
    [grades] = records(tmp_path / "moodle-grades.csv")  # only whom Moodle's import can find: by e-mail
    assert grades == {"First name": "Wei", "Last name": "Chen", "ID number": "",
                      "Email address": "wei.chen@uni.example", "Username": "", A: f"{TOP / 2:.2f}"}
    assert "no e-mail" in notes(tmp_path)["4200"] and "moodle-worksheet.csv" in notes(tmp_path)["4200"]


def test_a_blackboard_class_gets_names_in_their_columns_and_whole_words(tmp_path, lms_class):
    course, rows = lms_class
    export(course, rows_of(rows, "blackboard"), tmp_path)
    assert written(tmp_path) == ["blackboard-import.csv"]
    text = (tmp_path / "blackboard-import.csv").read_text(encoding="utf-8")
    assert all(line.startswith('"') and line.endswith('"') for line in text.splitlines())  # every value quoted
    table = {r["Username"]: r for r in records(tmp_path / "blackboard-import.csv")}
    column = f"{A} [Total Pts: {TOP:g} Score]"
    assert list(table["jane_doe"])[:7] == ["Last Name", "First Name", "Username", "Student ID", "Last Access",
                                           "Availability", column]
    assert (table["jane_doe"]["First Name"], table["jane_doe"]["Last Name"]) == ("Jane van", "Berg")
    assert table["jane_doe"][column] == str(TOP) and table["k.roe"][column] == table["dan"][column] == ""
    assert table["dan"]["Grading Notes"].startswith("not graded (timeout") and table["dan"]["Notes Format"]
    note = table["k.roe"]["Grading Notes"]
    shown = note.split("(error: ", 1)[1].split(")", 1)[0].removesuffix(" ...")
    assert LONG.startswith(shown) and LONG[len(shown)] == " " and len(shown) < len(LONG)  # cut between words


def test_an_exchange_class_gets_every_lms_file_keyed_by_login_and_email(tmp_path, lms_class):
    course, rows = lms_class
    lines = export(course, rows_of(rows, "exchange"), tmp_path)
    assert written(tmp_path) == ["blackboard-import.csv", "canvas-import.csv", "moodle-grades.csv"]
    assert "--lms-files" in lines[0]
    canvas = {r["SIS Login ID"]: r for r in records(tmp_path / "canvas-import.csv")[1:]}
    assert canvas["ann"]["Student"] == "Lee, Ann" and set(canvas) == {"ann", "bob_2", "eve"}
    assert float(canvas["eve"][A]) == TOP / 2 and "eve" not in notes(tmp_path)  # the hand-graded score, not blank
    assert (canvas["ann"]["ID"], canvas["bob_2"]["ID"]) == ("7001", "")  # the roster's lms_user_id, where it has one
    moodle = {r["Username"]: r["Email address"] for r in records(tmp_path / "moodle-grades.csv")}
    assert moodle == {"ann": "ann.lee@uni.example", "bob_2": "", "eve": ""}
    assert {r["Username"] for r in records(tmp_path / "blackboard-import.csv")} == {"ann", "bob_2", "eve"}
    export(course, rows_of(rows, "exchange"), tmp_path, lms_files="moodle")  # the one asked for
    assert written(tmp_path) == ["moodle-grades.csv"]


def test_a_mixed_class_never_puts_one_lms_ids_in_another_lms_file(tmp_path, lms_class):
    course, rows = lms_class
    export(course, list(rows.values()), tmp_path)
    assert written(tmp_path) == sorted(FILES)
    canvas = records(tmp_path / "canvas-import.csv")[1:]
    assert {r["SIS Login ID"] or r["ID"] for r in canvas} == {*ORIGIN["canvas"], *ORIGIN["exchange"]}
    board = {r["Username"] for r in records(tmp_path / "blackboard-import.csv")}
    assert board == {*ORIGIN["blackboard"], *ORIGIN["exchange"]}
    sheet = {r["Identifier"] for r in records(tmp_path / "moodle-worksheet.csv")}
    assert sheet == {"Participant 4102", "Participant 4200"}
    said = notes(tmp_path)
    assert "not in canvas-import.csv: a moodle id" in said["4102"] and "a canvas id" in said["1002"]


# --- the column, picked by title from the LMS's own gradebook download -----------------------

def canvas_download(path):
    """Canvas's gradebook export (Grades > Export): its columns, a Points Possible row, a test student."""
    header = ("Student,ID,SIS User ID,SIS Login ID,Section,Quiz 1 (811),Buffer Donation Lab (4711),"
              "Assignments Current Score,Current Score,Final Score")
    path.write_text(header + "\n" + textwrap.dedent(f"""\
            Points Possible,,,,,5.00,{TOP:.2f},(read only),(read only),(read only)
        "Doe, Jane",1002,S1002,jdoe,CS 101,4.00,,80.00,80.00,40.00
        "Müller, José",1005,S1005,jmuller,CS 101,,,,,
        "Student, Test",9999,,,CS 101,,,,,
        """), encoding="utf-8")
    return path


def moodle_download(path):
    """Moodle's grades export (Grades > Export > Plain text file), semicolon-separated, with two display
    types of the assignment (the real grade is the one imported)."""
    header = ('"First name";"Last name";"ID number";Institution;Department;"Email address";'
              '"Assignment: Buffer Donation Lab (Real)";"Assignment: Buffer Donation Lab (Percentage)";'
              '"Course total (Real)";"Last downloaded from this course"')
    path.write_text(header + "\n" + textwrap.dedent("""\
        Wei;Chen;S4102;Uni;CS;wei.chen@uni.example;-;-;-;1709290000
        Ann;Lee;S0001;Uni;CS;ann.lee@uni.example;-;-;-;1709290000
        """), encoding="utf-8")
    return path


def blackboard_download(path):
    """Blackboard's Grade Center download (Work Offline > Download): tab-separated UTF-16, every value quoted."""
    header = ["Last Name", "First Name", "Username", "Student ID", "Last Access", "Availability",
              f"Buffer Donation Lab [Total Pts: {TOP:g} Score] |123456", "Total [Total Pts: up to 100 Score] |123450"]
    people = [["van Berg", "Jane", "jane_doe", "S7", "2024-03-01 10:00:00", "Available", "", ""]]
    text = "\n".join("\t".join(f'"{v}"' for v in line) for line in [header, *people]) + "\n"
    path.write_bytes(text.encode("utf-16"))
    return path


def test_canvas_column_and_rows_come_from_canvas_own_download(tmp_path, lms_class):
    course, rows = lms_class
    download = canvas_download(tmp_path / "2024-03-02T1000_Grades-CS_101.csv")
    export(course, rows_of(rows, "canvas"), tmp_path / "out", canvas_column=str(download),
           lms_title="Buffer Donation Lab")
    table = records(tmp_path / "out" / "canvas-import.csv")
    assert list(table[0])[-1] == "Buffer Donation Lab (4711)"
    by_id = {r["ID"]: r for r in table[1:]}
    assert set(by_id) == {"1002", "1005"}  # 1007 is in no row of the download: left out, with why
    assert by_id["1002"]["SIS Login ID"] == "jdoe" and by_id["1002"]["Section"] == "CS 101"
    assert "no row of 2024-03-02T1000_Grades-CS_101.csv" in notes(tmp_path / "out")["1007"]


def test_moodle_column_and_rows_come_from_moodle_grades_export(tmp_path, lms_class):
    course, rows = lms_class
    download = moodle_download(tmp_path / "CS101 Grades.csv")
    export(course, rows_of(rows, "moodle", "exchange"), tmp_path / "out", moodle_column=str(download),
           lms_title="Buffer Donation Lab")
    assert written(tmp_path / "out") == ["moodle-grades.csv", "moodle-worksheet.csv"]  # asked: Moodle's alone
    table = records(tmp_path / "out" / "moodle-grades.csv")
    column = "Assignment: Buffer Donation Lab (Real)"
    assert {r["Email address"]: (r["ID number"], r[column]) for r in table} == {
        "wei.chen@uni.example": ("S4102", f"{TOP / 2:.2f}"), "ann.lee@uni.example": ("S0001", f"{TOP:.2f}")}


def test_blackboard_column_and_rows_come_from_the_grade_center_download(tmp_path, lms_class):
    course, rows = lms_class
    download = blackboard_download(tmp_path / "gc_CS101_fullgc_2024-03-02-10-00-00.xls")
    export(course, rows_of(rows, "blackboard"), tmp_path / "out", blackboard_column=str(download),
           lms_title="buffer donation lab")  # titles compare as people read them
    table = {r["Username"]: r for r in records(tmp_path / "out" / "blackboard-import.csv")}
    column = f"Buffer Donation Lab [Total Pts: {TOP:g} Score] |123456"
    assert set(table) == {"jane_doe"} and table["jane_doe"][column] == str(TOP)
    assert (table["jane_doe"]["Last Name"], table["jane_doe"]["First Name"]) == ("van Berg", "Jane")


@pytest.mark.parametrize("lms", ["canvas", "moodle", "blackboard"])
def test_a_title_no_download_holds_stops_before_anything_is_written(tmp_path, lms_class, lms):
    from donation_course.grading.reports.exports import check_columns
    from donation_course.grading.run.settings import GradingSettings

    course, rows = lms_class
    download = {"canvas": canvas_download, "moodle": moodle_download,
                "blackboard": blackboard_download}[lms](tmp_path / f"download-{lms}.csv")
    settings = GradingSettings(config=course.config)
    setattr(settings, f"{lms}_column", str(download))  # the title is the folder's name, which the LMS lacks
    with pytest.raises(CourseError) as raised:
        check_columns(course, settings)
    line = str(raised.value)
    assert "\n" not in line and "Buffer Donation Lab" in line and "--lms-title" in line
    from donation_course.grading.run.cli import parser, settings_from

    args = ["export.zip", "--course", str(course.root), f"--{lms}-column", str(download)]
    with pytest.raises(CourseError, match="candidates"):  # ./course grade stops before grading anyone
        settings_from(parser().parse_args(args), course)
    assert getattr(settings_from(parser().parse_args([*args, "--lms-title", "Buffer Donation Lab"]), course),
                   f"{lms}_column") == str(download)  # the LMS's title picks it
    with pytest.raises(CourseError):
        export(course, list(rows.values()), tmp_path / "out", **{f"{lms}_column": str(download)})
    assert written(tmp_path / "out") == []


def test_a_header_without_the_lms_id_is_written_with_a_note(tmp_path, lms_class):
    course, rows = lms_class
    lines = export(course, rows_of(rows, "canvas", "blackboard"), tmp_path)
    assert any("has no Canvas id" in line for line in lines) and any("has no Blackboard id" in line for line in lines)
    lines = export(course, rows_of(rows, "canvas"), tmp_path, canvas_column="Buffer Donation Lab (4711)")
    assert read(tmp_path / "canvas-import.csv")[0][-1] == "Buffer Donation Lab (4711)"
    assert not any("id:" in line for line in lines)


def test_points_can_count_every_notebook_or_the_exercise(tmp_path, lms_class):
    course, rows = lms_class
    export(course, rows_of(rows, "canvas"), tmp_path, lms_points="all")
    assert float(read(tmp_path / "canvas-import.csv")[1][5]) == sum(COURSE.points.values()) > TOP
    export(course, rows_of(rows, "canvas"), tmp_path, lms_points="exercise")
    assert float(read(tmp_path / "canvas-import.csv")[1][5]) == TOP


def test_the_export_plugins_work_as_nbgrader_exporters(tmp_path, lms_class):
    """`nbgrader export --exporter donation_course.grading.lms.canvas.CanvasExport`: nbgrader's own call."""
    from nbgrader.plugins import ExportPlugin

    from donation_course.grading.lms.blackboard import BlackboardExport
    from donation_course.grading.results.gradebook import open_gradebook

    course, _ = lms_class
    plugin = BlackboardExport(to=str(tmp_path / "bb.csv"), assignment=[A], student=["ann", "k.roe"])
    assert isinstance(plugin, ExportPlugin)
    with open_gradebook(course) as gb:
        plugin.export(gb)
    table = {r["Username"]: r for r in records(tmp_path / "bb.csv")}
    assert set(table) == {"ann", "k.roe"} and table["ann"]["Last Name"] == "Lee"
    assert float(next(v for k, v in table["ann"].items() if "Total Pts" in k)) == TOP


def test_each_lms_is_one_registered_object_and_its_options_follow(lms_class):
    """--lms, detection, the column flag and the import files all come from the one registry."""
    from donation_course.grading.lms import REGISTRY, with_files
    from donation_course.grading.run.cli import parser, settings_from

    course, _ = lms_class
    assert set(REGISTRY) == {"canvas", "moodle", "blackboard", "nbgrader", "flat"}
    assert {lms.name for lms in with_files()} == {"canvas", "moodle", "blackboard"}
    for lms in with_files():
        args = parser().parse_args(["x", "--course", str(course.root), "--lms", lms.name, lms.column.flag,
                                    lms.column.example])
        settings = settings_from(args, course)
        assert settings.lms == lms.name and getattr(settings, lms.column.trait) == lms.column.example
        assert all(e.filename.startswith(lms.name) for e in lms.exporters)
