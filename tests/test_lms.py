"""Real class input for `./course grade`: Canvas, Blackboard and Moodle exports
(flat and with folders, zipped or not), nbgrader's own state kept intact, late
penalties as serial `nbgrader autograde` gives them, ambiguous input reported,
and an interrupted run that leaves nothing behind."""
import datetime as dt
import shutil
import signal
import subprocess
import time
import zipfile

import nbformat
import pytest

from donation_course.corpus import exercise as corpus
from donation_course.course import COURSE, EXERCISE_ANSWER, ROOT, Course
from donation_course.grading.run.state import load_state
from helpers import GRADE_LIMITS, LIMIT_SCALE, PARALLEL_LIMITS, grade, nbgrader, read_grades

ASSIGNMENT = COURSE.assignment
NBS = COURSE.notebooks

EX = corpus.EXERCISE
FULL = corpus.CASES["partial"][1]  # a right answer: the exercise and the capstone
WRONG = corpus.CASES["wrongvalue"][1]  # the same score for nodonate and wrongvalue
assert corpus.CASES["nodonate"][1] == WRONG
LIMITS = GRADE_LIMITS
DUE = "2024-03-01 12:00:00 UTC"


read_csv = read_grades


def gradebook(course):
    """{student: (exercise score, late penalty, timestamp)} as nbgrader's gradebook holds them."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        return {s.student.id: ({nb.name: nb.score for nb in s.notebooks}[EX], s.late_submission_penalty,
                               s.timestamp) for s in gb.find_assignment(ASSIGNMENT).submissions}


def late_course(course):
    """The scratch course `course` (a generated one), made one whose late
    penalty is nbgrader's LateSubmissionPlugin ('zero'), with a due date in
    the gradebook (what `nbgrader db assignment add --duedate` writes, through
    nbgrader's own API: test_deadline_day.py runs the command), on which the
    grader's first step (prepare: nbgrader's generate_assignment, for the
    changed config) has run."""
    from nbgrader.api import Gradebook

    from donation_course.course import Course
    from donation_course.grading.run.prepare import prepare

    with open(course / "nbgrader_config.py", "a") as fh:
        fh.write('\nc.LateSubmissionPlugin.penalty_method = "zero"\n')
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", COURSE.course_id) as gb:
        gb.update_or_create_assignment(ASSIGNMENT, duedate=DUE)  # the command's own call
    prepare(Course(course), course / ".grading", say=print)
    return course


def collect(root, lms=None):
    from donation_course.grading.lms import collect_files

    found, preset = collect_files(root, NBS, ASSIGNMENT, lms=lms, exercise=COURSE.exercise)
    return found, preset, {s: {nb: f.rel for nb, f in files.items()} for s, files in found.students.items()}


def touch(root, *names):
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
    return root


# --- which file is whose (units, nbgrader's FileNameCollectorPlugin underneath) ---

def test_canvas_same_names_resubmissions_late_flags_accents(tmp_path):
    touch(tmp_path, f"smithjohn_1002_5001_{EX}.ipynb", f"smithjohn_1004_5002_{EX}.ipynb",
          f"leeann_1003_5021_{EX}.ipynb", f"leeann_1003_5021_{EX}-2.ipynb", f"leeann_1003_5021_{EX}-1.ipynb",
          "leeann_1003_5021_03_pitfalls-1.ipynb",
          f"müllerjosé_LATE_1005_5030_{EX}.ipynb")
    found, preset, files = collect(tmp_path)
    assert preset == "canvas" and not found.problems
    assert files == {"1002": {EX: f"smithjohn_1002_5001_{EX}.ipynb"},
                     "1004": {EX: f"smithjohn_1004_5002_{EX}.ipynb"},
                     "1003": {EX: f"leeann_1003_5021_{EX}-2.ipynb",
                              "03_pitfalls": "leeann_1003_5021_03_pitfalls-1.ipynb"},
                     "1005": {EX: f"müllerjosé_LATE_1005_5030_{EX}.ipynb"}}
    assert found.names == {"1002": "smithjohn", "1004": "smithjohn", "1003": "leeann", "1005": "müllerjosé"}
    assert found.students["1005"][EX].late and not found.students["1002"][EX].late


def test_blackboard_attempts_latest_wins_and_receipts_are_skipped(tmp_path):
    for ts in ("2024-03-01-10-00-00", "2024-03-02-09-30-00"):
        touch(tmp_path, f"Buffer Donation Lab_jdoe_attempt_{ts}_{EX}.ipynb",
              f"Buffer Donation Lab_jdoe_attempt_{ts}.txt")
    touch(tmp_path, f"Buffer Donation Lab_m.smith2_attempt_2024-02-28-23-59-59_{EX}.ipynb",
          "Buffer Donation Lab_jdoe_attempt_2024-03-02-09-30-00_03_pitfalls.ipynb")
    found, preset, files = collect(tmp_path)
    assert preset == "blackboard" and not found.problems
    assert files == {"jdoe": {EX: f"Buffer Donation Lab_jdoe_attempt_2024-03-02-09-30-00_{EX}.ipynb",
                              "03_pitfalls": "Buffer Donation Lab_jdoe_attempt_2024-03-02-09-30-00_03_pitfalls.ipynb"},
                     "m.smith2": {EX: f"Buffer Donation Lab_m.smith2_attempt_2024-02-28-23-59-59_{EX}.ipynb"}}
    assert found.students["jdoe"][EX].timestamp == dt.datetime(2024, 3, 2, 9, 30)


def test_blackboard_receipts_settle_usernames_with_underscores(tmp_path):
    ts = "2024-03-01-10-00-00"
    touch(tmp_path, f"HW 7_due_mar_jane_doe_attempt_{ts}_{EX}.ipynb", f"HW 7_due_mar_kim_attempt_{ts}_{EX}.ipynb")
    (tmp_path / f"HW 7_due_mar_jane_doe_attempt_{ts}.txt").write_text(
        "Name: Jane Doe (jane_doe)\nAssignment: HW 7_due_mar\n\nFiles:\n\tOriginal filename: "
        f"{EX}.ipynb\n")
    found, preset, files = collect(tmp_path)
    assert preset == "blackboard" and set(files) == {"jane_doe", "kim"}  # kim: no receipt, no `_` needed
    assert found.names == {"jane_doe": "Jane Doe"}


def test_copy_suffixes_are_the_notebook(tmp_path):
    touch(tmp_path, f"leeann_1003_5021_{EX}-Copy1.ipynb", "roe_1007_5050_03_pitfalls (1).ipynb")
    found, preset, files = collect(tmp_path)
    assert files == {"1003": {EX: f"leeann_1003_5021_{EX}-Copy1.ipynb"},
                     "1007": {"03_pitfalls": "roe_1007_5050_03_pitfalls (1).ipynb"}}


@pytest.mark.parametrize("folders", [False, True])
def test_moodle_flat_and_per_student_folders(tmp_path, folders):
    people = [("Wei Chen", 4102), ("Wei Chen", 4177), ("José Müller", 4200)]
    for name, pid in people:
        sep = "/" if folders else ""
        touch(tmp_path, f"export/{name}_{pid}_assignsubmission_file_{sep}{EX}.ipynb")
    found, preset, files = collect(tmp_path)
    assert preset == "moodle" and not found.problems
    assert set(files) == {"4102", "4177", "4200"}
    assert found.names == {"4102": "Wei Chen", "4177": "Wei Chen", "4200": "José Müller"}


def test_nbgrader_ids_kept_exactly(tmp_path):
    for sid in ("jane_doe", "J.Smith", "x-1"):
        touch(tmp_path, f"{sid}/{ASSIGNMENT}/{EX}.ipynb")
    (tmp_path / "jane_doe" / ASSIGNMENT / "timestamp.txt").write_text("2024-03-01 13:00:00.000000 UTC")
    found, preset, files = collect(tmp_path)
    assert preset == "nbgrader" and set(files) == {"jane_doe", "J.Smith", "x-1"}
    assert found.students["jane_doe"][EX].timestamp == dt.datetime(2024, 3, 1, 13, 0)


def test_ambiguous_input_is_reported_naming_the_files(tmp_path):
    touch(tmp_path, f"smithjohn_1002_5001_{EX}.ipynb", f"smithjohn_1002_5001_{EX} (1).ipynb",
          "doe_1006_5040_homework.ipynb",  # matches no notebook
          f"roe_1007_5050_{EX}.ipynb")
    found, preset, files = collect(tmp_path)
    assert preset == "canvas"
    text = "\n".join(found.problems)  # one attachment id, and a copy suffix Canvas never writes: no order
    [line] = found.student_problems["1002"]
    assert f"smithjohn_1002_5001_{EX}.ipynb" in line and f"smithjohn_1002_5001_{EX} (1).ipynb" in line
    assert "doe_1006_5040_homework.ipynb: matches none of the assignment's notebooks" in text
    assert files["1007"] == {EX: f"roe_1007_5050_{EX}.ipynb"}  # the rest is there to grade
    assert files["1002"] == {} and files["1006"] == {}  # listed, so the CSV says why they got nothing


# Two files for one notebook in one submission: the later where the LMS orders them, else neither.
TWO_FILES = {
    "canvas-attachment-ids": ([f"doejane_1002_5009_{EX}.ipynb", f"doejane_1002_5001_{EX}.ipynb"],
                              f"doejane_1002_5009_{EX}.ipynb"),
    "canvas-late-reupload": ([f"doejane_1002_5001_{EX}.ipynb", f"doejane_LATE_1002_5020_{EX}-1.ipynb"],
                             f"doejane_LATE_1002_5020_{EX}-1.ipynb"),
    "moodle-copy-number": ([f"Jane Doe_4102_assignsubmission_file_/{EX} (1).ipynb",
                            f"Jane Doe_4102_assignsubmission_file_/{EX}.ipynb",
                            f"Jane Doe_4102_assignsubmission_file_/{EX} (2).ipynb"],
                           f"Jane Doe_4102_assignsubmission_file_/{EX} (2).ipynb"),
    "blackboard-one-attempt": ([f"HW_jdoe_attempt_2024-03-01-10-00-00_{EX}.ipynb",
                                f"HW_jdoe_attempt_2024-03-01-10-00-00_{EX} (1).ipynb"], None),
    "exchange-copy": ([f"jdoe/{ASSIGNMENT}/{EX}.ipynb", f"jdoe/{ASSIGNMENT}/{EX}-Copy1.ipynb"], None),
    "flat-browser-copy": ([f"jdoe_{EX}.ipynb", f"jdoe_{EX} (1).ipynb"], None),
}


@pytest.mark.parametrize("case", TWO_FILES)
def test_two_files_for_one_notebook_grade_the_lms_latest_or_neither(tmp_path, case):
    names, chosen = TWO_FILES[case]
    touch(tmp_path, *names)
    found, preset, files = collect(tmp_path)
    [sid] = files
    if chosen is None:  # nothing orders them: that notebook is not graded, and the line names both files
        assert files[sid] == {} and len(found.student_problems[sid]) == 1
        assert all(n in found.student_problems[sid][0] for n in names)
    else:
        assert files[sid] == {EX: chosen} and not found.problems
        assert any(chosen in n and "took last" in n for n in found.notes), found.notes


def test_custom_name_regex(tmp_path):
    touch(tmp_path, f"hw-7--ab123--{EX}.ipynb")
    from donation_course.grading.lms import collect_files

    found, preset = collect_files(tmp_path, NBS, ASSIGNMENT,
                                  regex=r"hw-7--(?P<student_id>[a-z0-9]+)--(?P<file_id>.+)")
    assert preset == "custom" and {s: list(f) for s, f in found.students.items()} == {"ab123": [EX]}


def test_zip_entries_outside_the_export_are_refused(tmp_path):
    from donation_course.grading.submissions.collect import extract

    archive = tmp_path / "x.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr(f"../evil_1_2_{EX}.ipynb", "{}")
        zf.writestr(f"/abs_1_2_{EX}.ipynb", "{}")
        zf.writestr(f"in/ok_1_2_{EX}.ipynb", "{}")
    dest = tmp_path / "out" / "export"
    dest.mkdir(parents=True)
    problems = extract(archive, dest)
    assert len(problems) == 2 and "../evil" in problems[0] and "/abs" in problems[1]
    extracted = [p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.ipynb")]
    assert extracted == [f"out/export/in/ok_1_2_{EX}.ipynb"]


def test_merge_is_one_transaction(tmp_path, generated_course):
    """A result that fails half-way leaves the gradebook as it was."""
    from nbgrader.api import Gradebook, MissingEntry

    from donation_course.grading.results.gradebook import merge
    from donation_course.grading.results.result import CellGrade, NotebookResult, StudentResult

    db = generated_course(tmp_path / "course") / "gradebook.db"  # the assignment, as generate_assignment wrote it
    bad = StudentResult.graded("half", {EX: NotebookResult(grades=[CellGrade("no-such-cell", 1, auto_score=1)])})
    with Gradebook(f"sqlite:///{db}") as gb:
        before = sorted((s.id, s.last_name) for s in gb.students)
        with pytest.raises(MissingEntry):
            merge(gb, ASSIGNMENT, bad)
    with Gradebook(f"sqlite:///{db}") as gb:
        assert sorted((s.id, s.last_name) for s in gb.students) == before
        good = StudentResult.graded("half", {})
        merge(gb, ASSIGNMENT, good, name="Half Way")
    with Gradebook(f"sqlite:///{db}") as gb:
        assert sorted((s.id, s.last_name) for s in gb.students) == sorted(before + [("half", "Half Way")])
        assert gb.find_submission(ASSIGNMENT, "half")


# --- end to end: three LMS exports into one course, then serial nbgrader -------

def _zip(folder, archive):
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                zf.write(path, path.relative_to(folder.parent).as_posix())
    return archive


def test_lms_exports_grade_like_serial_nbgrader_with_late_penalty(tmp_path, env, generated_course):
    files = tmp_path / "corpus"
    corpus.build(files)
    answer = {k: files / f"{k}_{EX}.ipynb" for k in ("partial", "nodonate", "wrongvalue")}
    # Canvas (zipped, inner folder): same-name students, a resubmission, a late flag, an accent
    canvas = tmp_path / "canvas" / "submissions"
    canvas.mkdir(parents=True)
    shutil.copy(answer["partial"], canvas / f"smithjohn_1002_5001_{EX}.ipynb")
    shutil.copy(answer["nodonate"], canvas / f"smithjohn_1004_5002_{EX}.ipynb")
    shutil.copy(answer["nodonate"], canvas / f"leeann_1003_5021_{EX}.ipynb")
    shutil.copy(answer["partial"], canvas / f"leeann_1003_5021_{EX}-1.ipynb")
    shutil.copy(answer["partial"], canvas / f"müllerjosé_LATE_1005_5030_{EX}.ipynb")
    # Blackboard (folder): two attempts, the later one after the due date, and a receipt
    bb = tmp_path / "blackboard"
    bb.mkdir()
    shutil.copy(answer["wrongvalue"], bb / f"Buffer Donation_jdoe_attempt_2024-03-01-11-00-00_{EX}.ipynb")
    shutil.copy(answer["partial"], bb / f"Buffer Donation_jdoe_attempt_2024-03-01-13-00-00_{EX}.ipynb")
    (bb / "Buffer Donation_jdoe_attempt_2024-03-01-13-00-00.txt").write_text("Name: Jane Doe (jdoe)\n")
    shutil.copy(answer["wrongvalue"], bb / f"Buffer Donation_k.roe_attempt_2024-02-28-09-00-00_{EX}.ipynb")
    # Moodle (zipped, per-student folders): same names, an accent
    moodle = tmp_path / "moodle" / "export"
    for (name, pid), key in zip([("Wei Chen", 4102), ("Wei Chen", 4177), ("José Müller", 4200)],
                                ("partial", "nodonate", "wrongvalue"), strict=True):
        dest = moodle / f"{name}_{pid}_assignsubmission_file_"
        dest.mkdir(parents=True)
        shutil.copy(answer[key], dest / f"{EX}.ipynb")

    course = late_course(generated_course(tmp_path / "course"))
    serial = shutil.copytree(course, tmp_path / "serial")  # the same course, for serial nbgrader below
    grade(env, _zip(canvas, tmp_path / "canvas.zip"), "--course", course, *PARALLEL_LIMITS)
    grade(env, bb, "--course", course, *PARALLEL_LIMITS)
    r = grade(env, _zip(moodle, tmp_path / "moodle.zip"), "--course", course, *PARALLEL_LIMITS)
    expected = {"1002": (FULL, 0), "1004": (WRONG, 0), "1003": (FULL, 0), "1005": (FULL, FULL),
                "jdoe": (FULL, FULL), "k.roe": (WRONG, 0), "4102": (FULL, 0), "4177": (WRONG, 0), "4200": (WRONG, 0)}
    ours = gradebook(course)
    assert {s: (v[0], v[1]) for s, v in ours.items()} == expected, r.stderr
    rows = read_csv(course / ".grading" / "grades.csv")  # the whole gradebook, not the last run's 3
    assert set(rows) == set(expected)
    assert rows["1005"]["name"] == "müllerjosé" and rows["4200"]["name"] == "José Müller"
    assert rows["1002"]["name"] == rows["1004"]["name"] == "smithjohn"
    assert rows["1003"]["files"] == f"submissions/leeann_1003_5021_{EX}-1.ipynb"
    assert rows["jdoe"]["files"].endswith(f"2024-03-01-13-00-00_{EX}.ipynb")
    assert float(rows["jdoe"]["late_penalty"]) == FULL and float(rows["jdoe"]["total"]) == 0
    canvas_csv = (course / ".grading" / "canvas-import.csv").read_text(encoding="utf-8").splitlines()
    assert canvas_csv[0] == f"Student,ID,SIS User ID,SIS Login ID,Section,{ASSIGNMENT}"
    assert f"smithjohn,1004,,,,{float(WRONG)}" in canvas_csv

    # serial nbgrader autograde on the same staged submissions (timestamp.txt included),
    # in the copy of the course made before our runs
    shutil.copytree(course / "submitted", serial / "submitted")
    nbgrader(serial, "autograde", ASSIGNMENT, "--force", env=env, timeout=900 * LIMIT_SCALE)
    theirs = gradebook(serial)
    assert {s: v[:2] for s, v in theirs.items()} == {s: v[:2] for s, v in ours.items()}
    assert {s: v[2] for s, v in theirs.items()} == {s: v[2] for s, v in ours.items()}


# --- nbgrader's state kept ------------------------------------------------------

def test_extra_file_does_not_destroy_an_nbgrader_submission(tmp_path, env, generated_course):
    """An nbgrader-collected submission (two notebooks, timestamp.txt) gets one
    more notebook from a flat folder: the rest stays and is graded; a
    --student run rewrites grades.csv with the whole class."""
    files = tmp_path / "corpus"
    corpus.build(files)
    course = generated_course(tmp_path / "course")
    sub = course / "submitted" / "jane_doe" / ASSIGNMENT
    sub.mkdir(parents=True)
    shutil.copy(files / f"partial_{EX}.ipynb", sub / f"{EX}.ipynb")
    shutil.copy(ROOT / "solutions" / "02_the_contract.ipynb", sub / "02_the_contract.ipynb")
    (sub / "timestamp.txt").write_text("2024-02-01 10:00:00.000000 UTC")
    other = course / "submitted" / "bob" / ASSIGNMENT
    other.mkdir(parents=True)
    shutil.copy(files / f"nodonate_{EX}.ipynb", other / f"{EX}.ipynb")
    grade(env, course / "submitted", "--course", course, *LIMITS)
    assert (sub / "timestamp.txt").read_text() == "2024-02-01 10:00:00.000000 UTC"
    before = read_csv(course / ".grading" / "grades.csv")
    assert set(before) == {"jane_doe", "bob"}

    extra = tmp_path / "extra"
    extra.mkdir()
    shutil.copy(ROOT / "solutions" / "05_debug_nans.ipynb", extra / "jane_doe_05_debug_nans.ipynb")
    grade(env, extra, "--course", course, "--lms", "flat", "--student", "jane_doe", *LIMITS)
    assert sorted(p.name for p in sub.iterdir()) == sorted(
        [f"{EX}.ipynb", "02_the_contract.ipynb", "05_debug_nans.ipynb", "timestamp.txt"])
    assert (sub / "timestamp.txt").read_text() == "2024-02-01 10:00:00.000000 UTC"
    after = read_csv(course / ".grading" / "grades.csv")
    assert set(after) == {"jane_doe", "bob"}  # the whole class, not the one student graded
    assert after["bob"] == before["bob"]
    assert float(after["jane_doe"][EX]) == FULL and float(after["jane_doe"]["02_the_contract"]) > 0
    assert float(after["jane_doe"]["05_debug_nans"]) > 0
    assert float(after["jane_doe"]["total"]) > float(before["jane_doe"]["total"])


def test_corrupt_state_is_reported_in_one_line_and_rebuilt(tmp_path, env, generated_course):
    files = tmp_path / "corpus"
    corpus.build(files)
    only = tmp_path / "one"
    only.mkdir()
    shutil.copy(files / f"partial_{EX}.ipynb", only / f"ann_{EX}.ipynb")
    course = generated_course(tmp_path / "course")
    grade(env, only, "--course", course, *LIMITS)
    state = course / ".grading" / "state.json"
    state.write_text(state.read_text()[:40])  # truncated
    r = grade(env, only, "--course", course, "--only-changed", *LIMITS)
    warning = [ln for ln in r.stderr.splitlines() if "state.json" in ln]
    assert len(warning) == 1 and "rebuilding it from the gradebook" in warning[0] and "Traceback" not in r.stderr
    assert "graded 1 submission(s)" in r.stdout
    assert set(read_csv(course / ".grading" / "grades.csv")) == {"ann"}


# --- interrupted and re-run ----------------------------------------------------

def grader_processes(course) -> list:
    """Processes still running for a grading run of `course` (the grader, its workers, their kernels)."""
    import psutil

    found = []
    for p in psutil.process_iter(["cmdline", "cwd"]):
        if str(course) in " ".join(p.info["cmdline"] or []) or str(course) in (p.info["cwd"] or ""):
            found.append(p)
    return found


# SIGTERM (kill, a batch queue's limit) and SIGHUP (a closed terminal, an SSH
# drop) take Ctrl-C's path in the grader, from one handler (interrupts.py):
# test_commands.py::test_ctrl_c_sigterm_and_sighup_stop_a_command_in_one_way.
def test_interrupted_run_rerun_holds_every_student_once_and_leaves_no_temp(tmp_path, env, generated_course):
    """Ctrl-C stops a run: no process, lock or temporary folder left behind,
    and the next run grades everyone once."""
    signum = signal.SIGINT
    files = tmp_path / "corpus"
    corpus.build(files)
    export = tmp_path / "export"
    export.mkdir()
    for i, key in enumerate(("partial", "nodonate", "wrongvalue", "lambda", "wrongarg", "argnames")):
        shutil.copy(files / f"{key}_{EX}.ipynb", export / f"s{i}_{EX}.ipynb")
    # s0, graded first, ends its answer cell by sleeping 600 s. The first
    # run's cell limit is longer: it cannot end before the signal, however
    # fast or slow this machine. The rerun's cell limit (LIMITS) stops the
    # sleep, and s0 gets full marks.
    sleeper = nbformat.read(export / f"s0_{EX}.ipynb", as_version=4)
    answer = next(c for c in sleeper.cells if c.metadata.get("nbgrader", {}).get("grade_id") == EXERCISE_ANSWER)
    answer.source += "\nimport time\ntime.sleep(600)\n"
    nbformat.write(sleeper, export / f"s0_{EX}.ipynb")
    archive = _zip(export, tmp_path / "export.zip")
    course = generated_course(tmp_path / "course")
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    run_env = dict(env, TMPDIR=str(tmpdir))
    # Ctrl-C as in a terminal: SIGINT at its default in the grader, whatever
    # this test process's own disposition is (an ignored SIGINT is inherited).
    unending = ["--workers", "2", "--timeout", "900", "--cell-timeout", "800", "--no-progress"]
    proc = subprocess.Popen([str(ROOT / "course"), "grade", str(archive), "--course", str(course), *unending],
                            env=run_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if load_state(Course(course).state_file, print).students:
            break  # at least one student is in (the state's journal); others are being graded
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, (f"SIGINT in this test process: {signal.getsignal(signal.SIGINT)}",
                                             out, err)
    deadline = time.monotonic() + 10
    while grader_processes(course) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert grader_processes(course) == [], "the stopped run left processes behind"
    assert not (course / ".grading" / "lock").read_text().strip(), "the stopped run left its pid in the lock"
    partial = read_csv(course / ".grading" / "grades.csv")  # written after Ctrl-C too
    assert 1 <= len(partial) <= 6
    assert list(tmpdir.iterdir()) == [], "the interrupted run left temporary files"
    grade(env | {"TMPDIR": str(tmpdir)}, archive, "--course", course, *LIMITS)
    rows = read_csv(course / ".grading" / "grades.csv")
    assert set(rows) == {f"s{i}" for i in range(6)}
    assert set(gradebook(course)) == set(rows)
    assert float(rows["s0"][EX]) == FULL and float(rows["s1"][EX]) == WRONG
    assert list(tmpdir.iterdir()) == []
