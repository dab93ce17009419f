"""Deadline day (issue #30), on one class graded three times as an instructor
would: late penalties from the due date and time zone as they are now, the
course's extensions.csv, reviews that belong to the answers they were made
on (entered through formgrader's own API handlers), broken files that stop
no one, and exit codes a script can trust. Every regrade is compared with
serial `nbgrader autograde` on the same gradebook.

The class is graded once (the `story` fixture, which records what each step
gave); the tests read it, and a test that changes the class works on a copy.
Each step's serial nbgrader run grades, in one run, every student the tests
compare from that step's course. Broken-file kinds, extensions.csv and
durations have quick tests of their own at the bottom.
"""
import csv
import datetime as dt
import inspect
import json
import os
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest

from donation_course.corpus import exercise as corpus
from donation_course.course import COURSE, EXERCISE_ANSWER, ROOT
from helpers import GRADE_LIMITS, LIMIT_SCALE, PARALLEL_LIMITS, grade, nbgrader, read_grades, run

ASSIGNMENT = COURSE.assignment
EX = corpus.EXERCISE
CELL = "ex-donated"                 # a check of update_with_donate, scored by hand below
FULL = corpus.CASES["partial"][1]  # a right answer (both parts)
WRONG = corpus.CASES["wrongvalue"][1]
DUE = "2024-03-01 12:00:00 UTC"
MOVED = "2024-03-01 13:00:00 UTC"
NEEDS_YOU = 3  # run.EXIT_NEEDS_YOU, as the guide documents it

# student: (corpus case, flagged?, submitted at, UTC)
CLASS = {"ann": ("partial", False, "2024-03-01 10:00:00"),   # scored by hand, never changes
         "bob": ("nodonate", False, "2024-03-01 10:00:00"),  # scored by hand, then resubmits other answers
         "erin": ("partial", True, "2024-03-01 10:00:00"),   # flagged, accepted, then resubmits
         "lena": ("partial", False, "2024-03-01 12:30:00"),  # late, until the due date moves to 13:00
         "kim": ("partial", False, "2024-03-01 13:30:00"),   # late but for her new due date (extensions.csv)
         "kai": ("partial", False, "2024-03-01 12:20:00"),   # late but for 30 extra minutes
         "lou": ("partial", False, "2024-03-01 12:30:00")}   # 10 extra minutes: still late (until 13:00)
EXTENSIONS = "student,assignment,due,extra\nkim,,2024-03-01 14:00:00 UTC,\nkai,,,30 min\nlou,,,10 minutes\n"
GRANTED = {"kim": None, "kai": dt.timedelta(minutes=30), "lou": dt.timedelta(minutes=10)}  # kim: from the due


def broken_files() -> dict:
    """student: the bytes of a broken exercise notebook, one of each kind."""
    good = json.loads((ROOT / "notebooks" / f"{EX}.ipynb").read_text(encoding="utf-8"))
    cell = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [{"cell_type": "code", "source": "x"}]}
    return {"braces": b"{}", "versiononly": b'{"nbformat": 4}', "nokeys": json.dumps(cell).encode(),
            "truncated": json.dumps(good).encode()[:700], "binary": os.urandom(512), "empty": b"",
            "jsonlist": b"[1, 2, 3]"}


# --- formgrader, through its own API handlers ---------------------------------------

def formgrader(course):
    from nbgrader.api import Gradebook

    return Gradebook(f"sqlite:///{course / 'gradebook.db'}")


def put(handler, gb, entry_id, body: dict | None = None, method: str = "put") -> None:
    """What formgrader's browser page does: a PUT (or a POST) to nbgrader's own API handler (GradeHandler,
    CommentHandler, FlagSubmissionHandler), its code run as it is, on this gradebook."""
    page = SimpleNamespace(gradebook=gb, get_json_body=lambda: body, write=lambda _text: None)
    inspect.unwrap(getattr(handler, method))(page, entry_id)


def score_by_hand(course, student, manual, extra=None, comment=None, flag=False):
    """A person's review in formgrader: a manual score and extra credit on CELL, a comment on the answer,
    and (`flag`) the notebook flagged with formgrader's flag button."""
    from nbgrader.server_extensions.formgrader.apihandlers import CommentHandler, FlagSubmissionHandler, GradeHandler

    with formgrader(course) as gb:
        grade_ = gb.find_grade(CELL, EX, ASSIGNMENT, student)
        put(GradeHandler, gb, grade_.id, {"manual_score": manual, "extra_credit": extra})
        if comment:
            put(CommentHandler, gb, gb.find_comment(EXERCISE_ANSWER, EX, ASSIGNMENT, student).id,
                {"manual_comment": comment})
        if flag:
            put(FlagSubmissionHandler, gb, gb.find_submission_notebook(EX, ASSIGNMENT, student).id, method="post")


def state_of(course, students) -> dict:
    """What nbgrader's gradebook holds of each student: every cell, comment and penalty, the extension,
    formgrader's flag."""
    with formgrader(course) as gb:
        out = {}
        for sid in students:
            sub = gb.find_submission(ASSIGNMENT, sid)
            nb = gb.find_submission_notebook(EX, ASSIGNMENT, sid)
            out[sid] = {"cells": {g.name: (g.auto_score, g.manual_score, g.extra_credit, g.needs_manual_grade)
                                  for g in nb.grades},
                        "comments": {c.name: (c.auto_comment, c.manual_comment) for c in nb.comments},
                        "penalty": nb.late_submission_penalty, "timestamp": sub.timestamp,
                        "extension": sub.extension, "score": nb.score, "flagged": nb.flagged}
        return out


def serial(course, before, students, env, name) -> dict:
    """The same regrade by serial `nbgrader autograde`: `before` (a copy of the course made before our run),
    our run's staged submissions, the extensions granted with nbgrader's own Gradebook.grant_extension."""
    copy = shutil.copytree(before, before.parent / name)
    shutil.rmtree(copy / "submitted", ignore_errors=True)
    for sid in students:  # only these: one nbgrader run grades them all
        shutil.copytree(course / "submitted" / sid, copy / "submitted" / sid)
    with formgrader(copy) as gb:
        due = gb.find_assignment(ASSIGNMENT).duedate
        for sid, extra in GRANTED.items():
            extra = extra if extra is not None else dt.datetime(2024, 3, 1, 14) - due
            gb.update_or_create_student(sid)
            gb.update_or_create_submission(ASSIGNMENT, sid)  # nbgrader's extension lives on the submission
            gb.grant_extension(ASSIGNMENT, sid, minutes=extra.total_seconds() / 60)
    nbgrader(copy, "autograde", ASSIGNMENT, "--force", env=env, timeout=900 * LIMIT_SCALE)
    return state_of(copy, students)


# --- the class ----------------------------------------------------------------------------

def answer_edit(src: Path, dest: Path, flag: bool, sid: str, when: str) -> None:
    nb = nbformat.read(src, as_version=4)
    if flag:
        cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == EXERCISE_ANSWER)
        cell.source = "import os  # outside the policy: flagged, though the answer is right\n" + cell.source
    folder = dest / sid / ASSIGNMENT
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / f"{EX}.ipynb")
    (folder / "timestamp.txt").write_text(f"{when}.000000 UTC")


def make_class(dest: Path, corpus_dir: Path, changes: dict | None = None) -> Path:
    """An nbgrader submitted/ tree of the class (CLASS, with `changes`) and the broken files."""
    for sid, (case, flag, when) in {**CLASS, **(changes or {})}.items():
        answer_edit(corpus_dir / f"{case}_{EX}.ipynb", dest, flag, sid, when)
    for sid, data in broken_files().items():
        folder = dest / sid / ASSIGNMENT
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{EX}.ipynb").write_bytes(data)
        (folder / "timestamp.txt").write_text("2024-03-01 10:00:00.000000 UTC")
    return dest


def blackboard(dest: Path, corpus_dir: Path) -> Path:
    """A Blackboard export of jdoe's one attempt at 12:30 local time (Blackboard's server zone)."""
    dest.mkdir(parents=True)
    name = f"Buffer Donation_jdoe_attempt_2024-03-01-12-30-00_{EX}.ipynb"
    shutil.copy(corpus_dir / f"partial_{EX}.ipynb", dest / name)
    return dest


def exports(out: Path) -> dict:
    """{student: its row} of the Canvas import file (ids in SIS Login ID), with the notes file's reasons."""
    with open(out / "canvas-import.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    column = list(rows[0])[-1]
    ids = ("SIS Login ID", "ID", "SIS User ID")
    return {next(r[k] for k in ids if r.get(k)): r[column] for r in rows if any(r.get(k) for k in ids)}


def snapshot(course) -> dict:
    out = course / ".grading"
    return {"grades": read_grades(out / "grades.csv"), "exports": exports(out),
            "report": (out / "class-report.html").read_text(encoding="utf-8")}


@pytest.fixture(scope="module")
def story(tmp_path_factory, env, course_template):
    """The class graded, reviewed and regraded; every step's outputs, and serial nbgrader's beside them."""
    tmp = tmp_path_factory.mktemp("deadline")
    corpus.build(tmp / "corpus")
    course = shutil.copytree(course_template, tmp / "course")
    with open(course / "nbgrader_config.py", "a") as fh:
        fh.write('\nc.LateSubmissionPlugin.penalty_method = "zero"\n')
        fh.write('c.GradingSettings.lms_files = "canvas"\n')  # the one import file these tests read
    nbgrader(course, "db", "assignment", "add", ASSIGNMENT, f"--duedate={DUE}", env=env)
    (course / "extensions.csv").write_text(EXTENSIONS)
    subs1 = make_class(tmp / "subs1", tmp / "corpus")
    graded = [sid for sid in CLASS if sid != "erin"]
    s = SimpleNamespace(course=course)

    # 1. The whole class, broken files and all; then Blackboard's jdoe, read in UTC (late)
    before = shutil.copytree(course, tmp / "before1")
    s.first = grade(env, subs1, "--course", course, *PARALLEL_LIMITS)
    s.first_ours, s.first_serial = state_of(course, graded), serial(course, before, graded, env, "serial1")
    s.first_seen = snapshot(course)
    s.after_first = shutil.copytree(course, tmp / "after1")  # for a test that changes it (its own copy)
    board = blackboard(tmp / "board", tmp / "corpus")
    grade(env, board, "--course", course, *GRADE_LIMITS)
    s.board_late = state_of(course, ["jdoe"])["jdoe"]

    # 2. Reviews through formgrader; erin's flag accepted; the due date moves to 13:00
    score_by_hand(course, "ann", 1.0, extra=0.5, comment="see me about the jit", flag=True)
    score_by_hand(course, "bob", 2.0, comment="half of it")
    s.accepted = run([ROOT / "course", "feedback", "--course", course, "--accept", "erin"], env)
    nbgrader(course, "db", "assignment", "add", ASSIGNMENT, f"--duedate={MOVED}", env=env)

    # 3. A --student regrade of unchanged work; Blackboard's jdoe again, read in Berlin time (on time).
    # Serial nbgrader grades both from the same course (before2) in one run.
    before = shutil.copytree(course, tmp / "before2")
    s.second = grade(env, subs1, "--course", course, "--student", "ann", "--student", "erin", "--student", "lena",
                     *PARALLEL_LIMITS)
    second = ["ann", "erin", "lena", "lou", "kai", "kim"]
    s.second_ours = state_of(course, second)
    s.second_seen = snapshot(course)
    grade(env, board, "--course", course, "--timezone", "Europe/Berlin", *GRADE_LIMITS)
    s.board_berlin = state_of(course, ["jdoe"])["jdoe"]
    serial2 = serial(course, before, [*second, "jdoe"], env, "serial2")
    s.second_serial, s.board_serial = {sid: serial2[sid] for sid in second}, serial2["jdoe"]

    # 4. The whole class again: bob's answers changed (right now), erin's changed (wrong, flagged again)
    subs2 = make_class(tmp / "subs2", tmp / "corpus", {"bob": ("partial", False, "2024-03-01 10:00:00"),
                                                        "erin": ("wrongvalue", True, "2024-03-01 10:00:00")})
    # Serial nbgrader grades ann, bob and erin from the same course (before3) in one run.
    before = shutil.copytree(course, tmp / "before3")
    s.third = grade(env, subs2, "--course", course, *PARALLEL_LIMITS)
    serial3 = serial(course, before, ["ann", "bob", "erin"], env, "serial3")
    s.third_ours, s.third_serial = state_of(course, ["ann", "bob"]), {sid: serial3[sid] for sid in ("ann", "bob")}
    s.third_seen = snapshot(course)
    s.third_erin = state_of(course, ["erin"])["erin"]
    s.reaccepted = run([ROOT / "course", "feedback", "--course", course, "--accept", "erin"], env)
    s.erin_after = state_of(course, ["erin"])["erin"]
    s.erin_serial = serial3["erin"]  # erin's answers as this run staged them, accepted since
    s.after_accept = snapshot(course)
    s.everyone = run([ROOT / "course", "feedback", "--course", course, "--all"], env)
    return s


@pytest.mark.slow
def test_a_broken_file_makes_only_its_student_invalid_with_one_line(story):
    rows = story.first_seen["grades"]
    for sid in broken_files():
        assert rows[sid]["status"] == "invalid", rows[sid]
        reason = rows[sid]["reason"]
        assert "\n" not in reason and f"{sid}/{ASSIGNMENT}/{EX}.ipynb: " in reason and "not graded" in reason, reason
        assert story.first_seen["exports"][sid] == "", sid  # blank, never 0
    assert "Traceback" not in story.first.stderr
    assert float(rows["ann"][EX]) == FULL and float(rows["bob"][EX]) == WRONG  # the others are graded
    assert "not valid notebook JSON" in rows["truncated"]["reason"] and "binary" in rows["binary"]["reason"]
    assert "empty file" in rows["empty"]["reason"] and "list" in rows["jsonlist"]["reason"]


@pytest.mark.slow
def test_the_exit_code_and_last_line_say_who_needs_you(story):
    assert story.first.returncode == NEEDS_YOU, story.first.stderr
    last = story.first.stdout.strip().splitlines()[-1]
    assert last.startswith(f"graded {len(CLASS)} submission(s) in "), last
    assert "s in all (set-up " in last, last
    need = len(broken_files()) + 1  # the broken ones, and erin (flagged)
    assert f"; {need} of {len(CLASS) + need - 1} student(s) need you (flagged: erin; invalid: " in last, last
    assert "course: error" not in story.first.stderr


@pytest.mark.slow
def test_late_penalties_and_extensions_equal_serial_nbgrader(story):
    assert story.first_ours == story.first_serial
    ours = story.first_ours
    assert ours["lena"]["penalty"] == FULL and ours["lou"]["penalty"] == FULL  # late (lou: 10 min are not enough)
    assert ours["kim"]["penalty"] is None and ours["kai"]["penalty"] is None   # on time for their own due date
    assert ours["kai"]["extension"] == dt.timedelta(minutes=30) and ours["kim"]["extension"] == dt.timedelta(hours=2)
    rows = story.first_seen["grades"]
    assert rows["kim"]["due"] == "2024-03-01 14:00:00" and rows["ann"]["due"] == "2024-03-01 12:00:00"
    assert (rows["lena"]["status"], float(rows["lena"]["total"])) == ("partial", 0.0)  # not ok beside total 0
    assert story.first_seen["exports"]["lena"] == "0.0" and story.first_seen["exports"]["kim"] == str(float(FULL))


@pytest.mark.slow
def test_a_moved_due_date_and_a_time_zone_clear_the_penalty_as_serial_nbgrader_does(story):
    assert story.second_ours == story.second_serial
    assert story.second_ours["lena"]["penalty"] is None and story.second_ours["lou"]["penalty"] is None
    rows = story.second_seen["grades"]
    assert (float(rows["lena"]["late_penalty"]), float(rows["lena"]["total"]), rows["lena"]["status"]) == \
        (0.0, FULL, "ok")
    assert rows["lena"]["due"] == "2024-03-01 13:00:00" and rows["kim"]["due"] == "2024-03-01 14:00:00"
    assert story.board_late["penalty"] == FULL  # 12:30 read as UTC: late
    assert story.board_berlin["timestamp"] == dt.datetime(2024, 3, 1, 11, 30)  # 12:30 in Berlin is 11:30 UTC
    assert story.board_berlin["penalty"] is None and story.board_berlin == story.board_serial


@pytest.mark.slow
def test_a_review_of_unchanged_work_is_kept_and_exported(story):
    # the gradebook is serial nbgrader's after a --student regrade (manual score, extra credit, comment and
    # formgrader's flag kept, marked for review again) ...
    assert story.second_ours["ann"] == story.second_serial["ann"]
    assert story.second_ours["ann"]["cells"][CELL][1:3] == (1.0, 0.5)
    assert story.second_ours["ann"]["comments"][EXERCISE_ANSWER][1] == "see me about the jit"
    assert story.second_ours["ann"]["flagged"] is True
    # ... and the review counts: the reviewed score is exported, in the distribution, not pending
    reviewed = story.second_ours["ann"]["score"]
    assert reviewed == FULL - 2 + 1.0 + 0.5  # ex-donated's 2 points scored 1, plus 0.5 extra credit
    for seen in (story.second_seen, story.third_seen):
        assert seen["exports"]["ann"] == str(float(reviewed)), seen["exports"]
        assert seen["grades"]["ann"]["status"] in ("ok", "partial"), seen["grades"]["ann"]
    assert story.third_ours["ann"] == story.third_serial["ann"]  # a whole-class regrade too


@pytest.mark.slow
def test_an_accepted_flag_is_kept_for_the_same_answers_and_not_stored_as_a_manual_score(story):
    assert "accepted the automatic result of" in story.accepted.stdout
    erin = story.second_ours["erin"]
    assert all(manual is None and not needs for _auto, manual, _extra, needs in erin["cells"].values()), erin
    assert erin == story.second_serial["erin"]  # the automatic result serial nbgrader gives
    assert story.second_seen["exports"]["erin"] == str(float(FULL))
    row = story.second_seen["grades"]["erin"]
    assert row["status"] == "ok" and "flagged for the instructor" not in row["reason"], row
    assert "accepted" in row["reason"]


@pytest.mark.slow
def test_accepting_a_flagged_result_puts_the_checks_scores_back_not_as_manual_scores(story, tmp_path, env):
    """`./course feedback --accept`, one cell then the rest, on a copy of the class as its first run left
    it: erin's right answer, flagged for its `import os`, gets the checks' scores back as automatic scores."""
    from nbgrader.api import Gradebook

    course = shutil.copytree(story.after_first, tmp_path / "course")
    before = read_grades(course / ".grading" / "grades.csv")["erin"]
    assert (before["status"], float(before[EX])) == ("flagged", 0.0), before

    def cells():
        with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
            nb_ = gb.find_submission_notebook(EX, ASSIGNMENT, "erin")
            return {g.name: (g.auto_score, g.manual_score, g.needs_manual_grade, g.max_score) for g in nb_.grades}

    feedback = course / ".grading" / "feedback" / "erin.html"
    page_before = feedback.read_text(encoding="utf-8")
    one = run([ROOT / "course", "feedback", "--course", course, "--accept", "erin", "--cell", CELL], env)
    assert "accepted the automatic result of 1 flagged cell(s)" in one.stdout, one.stdout
    after_one = cells()
    # the full score the check gave, as its automatic score (not a manual one), no longer waiting
    assert after_one[CELL] == (after_one[CELL][3], None, False, after_one[CELL][3])
    assert all(needs and auto == 0 and manual is None for name, (auto, manual, needs, _) in after_one.items()
               if name != CELL)
    grades_ = read_grades(course / ".grading" / "grades.csv")["erin"]
    assert grades_["status"] == "flagged"  # cells still wait: not yet the instructor's whole decision

    run([ROOT / "course", "feedback", "--course", course, "--accept", "erin"], env)
    final = cells()
    assert all(auto == top and manual is None and not needs for auto, manual, needs, top in final.values()), final
    row = read_grades(course / ".grading" / "grades.csv")["erin"]
    assert (row["status"], float(row[EX])) == ("ok", COURSE.points[EX]), row  # the notebook's points
    assert "flagged for the instructor" not in row["reason"] and "withheld" not in row["reason"], row
    again = run([ROOT / "course", "feedback", "--course", course, "--accept", "erin"], env)
    assert f"{len(final)} cell(s) were accepted already for these same answers" in again.stdout, again.stdout
    assert feedback.read_text(encoding="utf-8") != page_before  # the learner's page made again

    refused = run([ROOT / "course", "feedback", "--course", course, "--accept", "bob"], env, check=False)
    assert refused.returncode != 0 and "--accept bob: no flagged automatic result" in refused.stderr, refused


@pytest.mark.slow
def test_changed_answers_after_a_review_wait_again_and_say_why(story):
    bob = story.third_seen["grades"]["bob"]
    assert bob["status"] == "pending" and "answers changed since your review" in bob["reason"], bob
    assert story.third_seen["exports"]["bob"] == ""  # blank: nobody has scored these answers
    assert story.third_ours["bob"] == story.third_serial["bob"]
    assert story.third.returncode == NEEDS_YOU
    assert "pending: bob" in story.third.stdout.strip().splitlines()[-1]


@pytest.mark.slow
def test_an_acceptance_never_carries_over_to_changed_answers(story):
    erin = story.third_seen["grades"]["erin"]
    assert erin["status"] == "flagged" and float(erin["total"]) == 0.0, erin
    assert "answers changed since your review" in erin["reason"], erin
    assert story.third_seen["exports"]["erin"] == ""
    assert story.third_erin["score"] == 0.0 and all(needs for *_, needs in story.third_erin["cells"].values())
    # accepted again, for these answers: serial nbgrader's score of the wrong answer, not the old 22
    assert "accepted the automatic result of" in story.reaccepted.stdout
    assert story.erin_after == story.erin_serial and story.erin_after["score"] == WRONG
    assert story.after_accept["exports"]["erin"] == str(float(WRONG))


@pytest.mark.slow
def test_feedback_all_says_what_it_did(story):
    assert "whose grades changed" not in story.everyone.stdout
    assert "feedback made again for" in story.everyone.stdout


# --- quick: no kernels ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(broken_files()))
def test_every_kind_of_broken_file_gets_one_line(tmp_path, kind):
    from donation_course.grading.lms import collect_files
    from donation_course.grading.submissions.collect import notebook_problem

    path = tmp_path / f"{kind}_{EX}.ipynb"
    path.write_bytes(broken_files()[kind])
    shutil.copy(ROOT / "notebooks" / f"{EX}.ipynb", tmp_path / f"good_{EX}.ipynb")
    found, _ = collect_files(tmp_path, COURSE.notebooks, ASSIGNMENT, source=COURSE.source, exercise=EX)
    assert sorted(found.students) == sorted([kind, "good"])  # read without raising; the run decides
    why = notebook_problem(path)
    assert why and "\n" not in why and len(why) < 300, why
    assert notebook_problem(tmp_path / f"good_{EX}.ipynb") is None


def test_extensions_file_rows_and_mistakes(tmp_path):
    from donation_course.course import Course, CourseError
    from donation_course.grading.run.deadlines import duration, read_extensions

    assert duration("2 days 6 hours") == dt.timedelta(days=2, hours=6)
    assert duration("36h") == duration("1 day, 12 h") == dt.timedelta(hours=36)
    for bad in ("soon", "2 fortnights", "3", ""):
        with pytest.raises(ValueError):
            duration(bad)
    course = tmp_path
    (course / "nbgrader_config.py").write_text("")
    c = Course(course)
    assert read_extensions(c) is None  # no file: nbgrader's own extensions are left as they are
    (course / "extensions.csv").write_text(EXTENSIONS)
    got = read_extensions(c)
    assert got[("kim", "")].due == dt.datetime(2024, 3, 1, 14) and got[("kai", "")].extra == dt.timedelta(minutes=30)
    assert got[("kim", "")].of(dt.datetime(2024, 3, 1, 12)) == dt.timedelta(hours=2)
    (course / "extensions.csv").write_text("student,due\nkim,2024-03-01 15:00:00 Europe/Berlin\n")
    assert read_extensions(c)[("kim", "")].due == dt.datetime(2024, 3, 1, 14)
    for text, said in (("name,when\nkim,tomorrow\n", "must name the columns"),
                       ("student,due,extra\nkim,2024-03-02,1 day\n", "either a new due date"),
                       ("student,extra\nkim,1 day\nkim,2 days\n", "listed again"),
                       ("student,extra\nkim,eventually\n", "line 2")):
        (course / "extensions.csv").write_text(text)
        with pytest.raises(CourseError, match=said):
            read_extensions(c)


def test_a_review_belongs_to_the_answers_it_was_made_on():
    from donation_course.grading.results.reviews import capture, counts, reviewed_cells

    def g(name, manual, needs, extra=None):
        return SimpleNamespace(name=name, manual_score=manual, needs_manual_grade=needs, extra_credit=extra)

    # a person scored a cell of answers A (formgrader: not waiting) -> a review of A
    review = capture(None, "A", [g("c1", 1.5, False), g("c2", None, False)], [])
    assert review["content"] == "A" and review["scores"] == {"c1": 1.5}
    assert reviewed_cells(review, "A", [g("c1", 1.5, True)]) == {"c1"}  # after a regrade of A: still counts
    assert reviewed_cells(review, "B", [g("c1", 1.5, True)]) == set() and not counts(review, "B")
    # seen again after a regrade (waiting now): the same review, still of A, even once B was graded
    assert capture(review, "B", [g("c1", 1.5, True)], []) == review
    # a person scores the new answers B: a review of B
    again = capture(review, "B", [g("c1", 2.0, False)], [])
    assert again["content"] == "B" and again["scores"] == {"c1": 2.0}
    assert capture(None, "A", [g("c1", None, False)], []) is None  # nothing reviewed


@pytest.mark.slow
def test_a_full_output_disk_stops_the_run_in_one_line_after_saving_what_was_graded(tmp_path, env, generated_course):
    """--out on a real 256 KiB tmpfs (bubblewrap's --size): one student's feedback fits, the next does
    not. The run stops with one line naming the folder; what was graded is in the gradebook, and
    --only-changed on a roomy disk grades the rest."""
    course = generated_course(tmp_path / "course")
    corpus.build(tmp_path / "corpus")
    subs = tmp_path / "subs"
    subs.mkdir()
    for sid in ("ann", "bob", "cem", "dan"):
        shutil.copy(tmp_path / "corpus" / f"partial_{EX}.ipynb", subs / f"{sid}_{EX}.ipynb")
    out = tmp_path / "small"
    out.mkdir()
    cmd = ["bwrap", "--dev-bind", "/", "/", "--size", str(256 * 1024), "--tmpfs", str(out), "--",
           str(ROOT / "course"), "grade", str(subs), "--course", str(course), "--out", str(out), *GRADE_LIMITS]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("course: error:")]
    assert r.returncode == 1 and len(errors) == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert f"no space left in {out} " in errors[0] and "--only-changed" in errors[0], errors
    with formgrader(course) as gb:
        saved = {s.student.id for s in gb.find_assignment(ASSIGNMENT).submissions}
    assert 1 <= len(saved) < 4, saved
    assert f"{len(saved)} student(s) graded and saved" in errors[0], errors
    again = grade(env, subs, "--course", course, "--out", tmp_path / "roomy", "--only-changed", *GRADE_LIMITS)
    rows = read_grades(tmp_path / "roomy" / "grades.csv")
    assert set(rows) == {"ann", "bob", "cem", "dan"} and all(float(r[EX]) == FULL for r in rows.values()), again.stdout


def test_reviews_through_formgrader_follow_the_answers_in_process(tmp_path, generated_course):
    """The review rules on the grader's own merge and rows, no kernel: a formgrader score of answers A
    counts after a regrade of A (exported, not pending) and waits after a regrade of B."""
    from nbgrader.server_extensions.formgrader.apihandlers import GradeHandler

    from donation_course.course import Course
    from donation_course.grading.reports.exports import lms_grade
    from donation_course.grading.reports.report import row_of, summarize
    from donation_course.grading.results.gradebook import Answers, Deadline, merge_result
    from donation_course.grading.results.result import CellGrade, NotebookResult, StudentResult
    from donation_course.grading.run.deadlines import penalty_plugin

    course = Course(generated_course(tmp_path / "course"))
    deadline = Deadline(penalty_plugin(course), None)
    cells = corpus.EXERCISE_GRADES | corpus.CAPSTONE_GRADES
    kept = {"content": {}, "reviews": {}}

    def regrade(answers: str):
        result = StudentResult.graded("ann", {EX: NotebookResult(
            grades=[CellGrade(name, points, auto_score=points) for name, points in cells.items()], graded=True)},
            "2024-03-01T10:00:00")
        said = merge_result(course, result, deadline=deadline,
                            answers=(a := Answers({EX: answers}, dict(kept["content"]), dict(kept["reviews"]))))
        kept["content"], kept["reviews"] = a.graded, a.reviews
        summary = summarize(result, course.notebooks, {EX: FULL}, {EX})
        summary.content, summary.reviews, summary.reasons = a.graded, a.reviews, summary.reasons + said
        row = row_of(course, "ann", summary)
        return row, lms_grade(row, [EX]), said

    regrade("A")
    with formgrader(course.root) as gb:
        put(GradeHandler, gb, gb.find_grade(CELL, EX, ASSIGNMENT, "ann").id, {"manual_score": 1.0})
    row, lms, said = regrade("A")  # the same answers: the review counts
    assert not said and not row["cells"][f"{EX}:{CELL}"].waiting and row["status"] == "partial", row
    assert lms.points == FULL - 1.0 and state_of(course.root, ["ann"])["ann"]["cells"][CELL][3]  # nbgrader's flag
    row, lms, said = regrade("B")  # other answers: it waits again, and says why
    assert row["status"] == "pending" and lms.points is None and "answers changed since your review" in said[0], row
    row, lms, said = regrade("A")  # back to the answers reviewed: the review is theirs again
    assert row["status"] == "partial" and lms.points == FULL - 1.0, row


def test_the_last_lines_time_is_the_processs_whole_life(tmp_path):
    """The closing line's "in all" (steps.process_seconds) counts from the process's own start, not from the
    whole second the kernel gives as its boot time: in a Python that waits 0.3 s, it is at least what that
    Python measured itself and at most what its parent measured around it (one clock tick either way)."""
    import sys
    import time

    code = ("import time\nstart = time.monotonic()\nfrom donation_course.grading.run.steps import process_seconds\n"
            "time.sleep(0.3)\nprint(time.monotonic() - start, process_seconds())\n")
    before = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    around = time.monotonic() - before
    inside, counted = map(float, out.split())
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert inside - tick <= counted <= around + tick, (inside, counted, around)
