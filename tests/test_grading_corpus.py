"""`./course grade` end to end on the exercise's corpus
(donation_course/corpus/exercise.py), graded once per session as a flat LMS
folder in a copy of the course template (conftest.graded_corpus;
xdist_units.SHARED_FIXTURE_UNITS keeps these tests on one xdist worker):
every case's score and reason, the gradebook, the feedback pages,
--only-changed (in a copy), and serial nbgrader's scores on the same files."""
import json
import shutil

import nbformat
import pytest

from donation_course.corpus import exercise as corpus
from donation_course.course import COURSE, EXERCISE_ANSWER
from donation_course.grading.run.state import journal_of
from helpers import GRADE_LIMITS, grade, gradebook_scores, nbgrader, read_grades

ASSIGNMENT = COURSE.assignment
EX = corpus.EXERCISE
LIMITS = GRADE_LIMITS
read_csv = read_grades  # also fails on a student listed twice


@pytest.fixture(scope="module")
def graded(graded_corpus):
    """The corpus graded once (conftest.graded_corpus): (course, files, the
    command's result, the gradebook's scores as this run left them)."""
    g = graded_corpus(corpus)
    return g.course, g.files, g, g.scores


# --- the corpus, end to end ---------------------------------------------------

@pytest.mark.parametrize("student", sorted(corpus.CASES))
def test_each_submission_gets_its_expected_score_and_reason(graded, student):
    course, *_ = graded
    rows = read_csv(course / ".grading" / "grades.csv")
    _, score, status, reason = corpus.CASES[student]
    row = rows[student]
    assert float(row[EX]) == score, row
    assert row["status"] == status, row
    assert reason in row["reason"], row
    if score < corpus.MAX:
        assert row["reason"], f"{student} lost points but the CSV says not why"
    assert (course / ".grading" / "feedback" / f"{student}.html").exists()


def test_gradebook_holds_every_student_with_the_csv_scores(graded):
    course, *_ = graded
    rows = read_csv(course / ".grading" / "grades.csv")
    scores = gradebook_scores(course)
    assert set(scores) == set(corpus.CASES)
    for student, nbs in scores.items():
        assert nbs[EX] == float(rows[student][EX]), student
    assert list(course.glob("gradebook.db.bak-*")), "no backup was made before writing"
    # each student went into the state's journal as graded; the run's end wrote the whole file and removed it
    state = course / ".grading" / "state.json"
    assert not journal_of(state).exists()
    assert set(json.loads(state.read_text())["students"]) == set(corpus.CASES)


def test_every_autograded_notebook_is_a_valid_notebook(graded):
    """What the grader writes back into nbgrader's autograded/ (the referee's hand-overs taken out, its notes put
    in) passes nbformat's schema, as nbgrader's own does: formgrader and the feedback read it."""
    course, *_ = graded
    notebooks = sorted((course / "autograded").rglob("*.ipynb"))
    assert len(notebooks) >= len(corpus.CASES) - 5  # a few cases hand in no notebook at all
    for path in notebooks:
        nbformat.validate(nbformat.read(path, as_version=4))


def test_the_course_keeps_one_font_list_for_every_kernel(graded):
    """matplotlib's font list is built once for the course (sandbox.course_font_list), for the matplotlib
    installed, and every grading kernel reads that one."""
    course, *_ = graded
    lists = list((course / ".grading").glob("fonts-matplotlib-*/fontlist-*.json"))
    assert len(lists) == 1 and lists[0].stat().st_size > 1000, lists


def test_feedback_never_shows_hidden_test_source_or_tracebacks(graded):
    course, *_ = graded
    pages = list((course / "feedback").rglob("*.html")) + list((course / ".grading" / "feedback").rglob("*.html"))
    assert len(pages) > len(corpus.CASES)
    for page in pages:
        text = page.read_text(encoding="utf-8")
        # the student's pages: feedback/<student>/..., .grading/feedback/<student>/... and <student>.html there
        base = course / "feedback" if page.is_relative_to(course / "feedback") else course / ".grading" / "feedback"
        parts = page.relative_to(base).parts
        student = parts[0] if len(parts) > 1 else page.stem
        own = "".join(p.read_text(encoding="utf-8", errors="replace")  # none for a file that was no notebook
                      for p in (course / "submitted" / student).rglob("*.ipynb"))
        for secret in ("BEGIN HIDDEN TESTS", "_dl_hidden.check", "check_values", "check_real_donation",
                       "restore_helpers", "grading/hidden.py", "HiddenCheckFailed"):
            # a forgery that names a check in its own cells sees its own code, not the grader's
            assert secret not in text or secret in own, f"{page} shows {secret!r}"
    nodonate = (course / "feedback" / "nodonate" / ASSIGNMENT / f"{EX}.html").read_text(encoding="utf-8")
    assert "still alive" in nodonate and "values:" in nodonate  # the learner messages stay
    summary = (course / ".grading" / "feedback" / "nodonate.html").read_text(encoding="utf-8")
    for grade_id in corpus.EXERCISE_GRADES:  # every check of the exercise, as the source names them
        assert grade_id in summary
    assert "fail" in summary and "pass" in summary


def test_rerun_with_only_changed_grades_only_the_changed_submission(graded, env, tmp_path):
    # a copy of the graded course and its files: the shared run stays as the other tests read it
    course, files = (shutil.copytree(folder, tmp_path / folder.name) for folder in graded[:2])
    before = read_csv(course / ".grading" / "grades.csv")
    r = grade(env, files, "--course", course, "--only-changed", *LIMITS)
    assert "graded 0 submission(s)" in r.stdout, r.stdout
    assert read_csv(course / ".grading" / "grades.csv") == before
    # nodonate fixes the answer and submits again
    path = files / f"nodonate_{EX}.ipynb"
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == EXERCISE_ANSWER:
            cell.source = corpus.PARTIAL
    nbformat.write(nb, path)
    r = grade(env, files, "--course", course, "--only-changed", *LIMITS)
    assert "graded 1 submission(s)" in r.stdout, r.stdout
    after = read_csv(course / ".grading" / "grades.csv")
    assert float(after["nodonate"][EX]) == corpus.MAX
    assert {s: row for s, row in after.items() if s != "nodonate"} == \
        {s: row for s, row in before.items() if s != "nodonate"}
    assert gradebook_scores(course)["nodonate"][EX] == corpus.MAX


# --- parallel == serial nbgrader ------------------------------------------------

# (not "tamperer": ./course grade's scan flags it for manual grading, with no automatic
# points; serial nbgrader has no scan and scores what its checks let through)
SERIAL = ["partial", "lambda", "nodonate", "wrongvalue", "wrongarg", "syntax", "edited"]


def test_parallel_grading_gives_the_same_scores_as_serial_nbgrader_autograde(graded, tmp_path, env, generated_course):
    """Serial `nbgrader autograde` on the corpus's files, in nbgrader's own
    layout, gives what the parallel, sandboxed run of the corpus gave."""
    files = graded[1]  # the files the shared run graded
    serial = generated_course(tmp_path / "serial")  # generated by nbgrader's generate_assignment
    for student in SERIAL:
        dest = serial / "submitted" / student / ASSIGNMENT
        dest.mkdir(parents=True)
        shutil.copy(files / f"{student}_{EX}.ipynb", dest / f"{EX}.ipynb")
    nbgrader(serial, "autograde", ASSIGNMENT, "--force", env=env)
    ours = {s: scores for s, scores in graded[3].items() if s in SERIAL}
    theirs = gradebook_scores(serial)
    diff = {s: (ours.get(s), theirs.get(s)) for s in set(ours) | set(theirs) if ours.get(s) != theirs.get(s)}
    assert not diff, f"parallel vs serial: {diff}"
