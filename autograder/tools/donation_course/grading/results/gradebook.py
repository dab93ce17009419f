"""nbgrader's gradebook: what a run reads from it, and one transaction per student into it.

The run process is the only writer of the course's gradebook: workers
grade into private copies, and each student's result lands here in one
transaction (merge).
"""
from __future__ import annotations

import contextlib
import datetime as dt
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

from ...course import Course
from ..lms import roster_fields
from ..run.deadlines import assign_late_penalty, extension_for
from .result import StudentResult


@dataclass(frozen=True)
class AssignmentFacts:
    duedate: dt.datetime | None
    max_scores: dict[str, float]   # notebook -> points
    submitted: frozenset[str]      # students with a submission in the gradebook


def open_gradebook(course: Course):
    from nbgrader.api import Gradebook

    return Gradebook(course.db_url, course.course_id)


def assignment_facts(course: Course) -> AssignmentFacts:
    with open_gradebook(course) as gb:
        a = gb.find_assignment(course.assignment)
        return AssignmentFacts(a.duedate, {nb.name: nb.max_score for nb in a.notebooks},
                               frozenset(s.student.id for s in a.submissions))


@contextlib.contextmanager
def one_transaction(gb) -> Iterator:
    """Run nbgrader Gradebook calls as ONE database transaction.

    Gradebook's methods commit after each call. Here `gb.db` is a session
    joined to a connection whose transaction this context owns (SQLAlchemy's
    "join a session into an external transaction" recipe, with
    join_transaction_mode="create_savepoint"): the methods' commits only
    release savepoints, and the work lands (or is rolled back) as a whole
    when the block ends. pysqlite needs its own BEGIN for savepoints to nest
    (SQLAlchemy's documented SQLite workaround)."""
    from sqlalchemy import create_engine, event
    from sqlalchemy.orm import Session

    engine = create_engine(str(gb.engine.url), future=True)

    @event.listens_for(engine, "connect")
    def _no_implicit_transactions(dbapi_connection, _record):
        dbapi_connection.isolation_level = None

    @event.listens_for(engine, "begin")
    def _begin(conn):
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    saved = gb.db
    try:
        with engine.connect() as conn:
            outer = conn.begin()
            gb.db = Session(bind=conn, join_transaction_mode="create_savepoint", autoflush=True)
            try:
                yield gb
                gb.db.flush()
                outer.commit()
            except BaseException:
                outer.rollback()
                raise
            finally:
                gb.db.close()
    finally:
        gb.db = saved
        engine.dispose()


def merge(gb, assignment: str, result: StudentResult, name: str = "", deadline: Deadline | None = None,
          answers: Answers | None = None) -> list[str]:
    """Write one student's automatic results into the gradebook, in one
    transaction that reads the gradebook as it is now, exactly as serial
    `nbgrader autograde` writes them there: what an instructor recorded in
    formgrader (manual scores and comments, extra credit, a notebook's flag)
    is kept, whenever it was entered, and a cell with a manual score, or with
    no automatic one, is marked for the instructor to look at again. The late
    penalty of each graded notebook is nbgrader's (deadlines.py), from the due
    date, the extension (`deadline`) and the submission time as they are now.

    `answers` (reviews.py) ties the reviews to the answers: the review of each
    notebook is read from the gradebook before it is rewritten, and an
    acceptance of a flag made for these same answers is applied again. Returns
    the reasons the student waits again (answers changed since a review)."""
    sid = result.student
    said: list[str] = []
    with one_transaction(gb):
        gb.update_or_create_student(sid, **roster_fields(gb, sid, name))
        ts = result.timestamp
        sub = gb.update_or_create_submission(assignment, sid,
                                             **({"timestamp": dt.datetime.fromisoformat(ts)} if ts else {}))
        if deadline is not None and deadline.extensions is not None:
            sub.extension = extension_for(deadline.extensions, sid, assignment, sub.assignment.duedate)
        for nbname, nb in result.notebooks.items():
            notebook = gb.find_submission_notebook(nbname, assignment, sid)
            if answers is not None and nbname in answers.now:
                said += review_notebook(answers, nbname, result, notebook)
            for g in nb.grades:
                grade = gb.find_grade(g.name, nbname, assignment, sid)
                grade.auto_score = g.auto_score
                grade.needs_manual_grade = (g.needs_manual_grade or grade.manual_score is not None
                                            or g.auto_score is None)
            for c in nb.comments:
                gb.find_comment(c.name, nbname, assignment, sid).auto_comment = c.auto_comment
            if deadline is not None and nb.graded and result.completed:
                gb.db.flush()
                gb.db.expire(notebook)
                gb.db.expire(sub)
                assign_late_penalty(deadline.plugin, sub, notebook)
            elif deadline is None and nb.late_penalty is not None:
                notebook.late_submission_penalty = nb.late_penalty
    return said


@dataclass
class Deadline:
    """What the late penalty is computed with: the course's plugin and extensions.csv (None: no file)."""

    plugin: object
    extensions: dict | None = None


@dataclass
class Answers:
    """One student's answers and reviews for merge: the digest of each notebook's answers now, the digest
    graded last time, and the reviews kept (result.Summary.content / .reviews); merge updates the last two."""

    now: dict
    graded: dict
    reviews: dict


def review_notebook(answers: Answers, nbname: str, result: StudentResult, notebook) -> list[str]:
    """Read the review of one notebook before the regrade rewrites it; apply an acceptance made for these
    answers again (result.accept); say so when the answers changed since a review."""
    from .reviews import capture, counts, empty, stale_line

    review = capture(answers.reviews.get(nbname), answers.graded.get(nbname, ""), notebook.grades,
                     notebook.comments)
    now = answers.now[nbname]
    said = []
    if review is not None and not empty(review):
        if counts(review, now):
            if review.get("accepted"):
                result.accept(nbname, set(review["accepted"]),
                              note=f"flagged; the instructor accepted the automatic result of these same "
                                   f"answers ({review.get('when', '')})")
        else:
            said.append(stale_line(nbname, review))
        answers.reviews[nbname] = review
    answers.graded[nbname] = now
    return said


def merge_result(course: Course, result: StudentResult, name: str = "", deadline: Deadline | None = None,
                 answers: Answers | None = None) -> list[str]:
    with open_gradebook(course) as gb, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SQLAlchemy's notes on nbgrader's relationships
        return merge(gb, course.assignment, result, name=name, deadline=deadline, answers=answers)


def apply_deadlines(course: Course, deadline: Deadline, skip: frozenset = frozenset()) -> list[str]:
    """Every submission of the assignment but `skip` (they are graded now, and merge does it): the
    extension extensions.csv gives (when the file exists) and nbgrader's late penalty of each notebook the
    student handed in, from the due date as it is now. Returns notes (one line each)."""
    from ..run.deadlines import unknown_students

    submitted = course.root / "submitted"
    with open_gradebook(course) as gb, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with one_transaction(gb):
            a = gb.find_assignment(course.assignment)
            known = {s.student.id for s in a.submissions}
            for sub in a.submissions:
                sid = sub.student.id
                if deadline.extensions is not None:
                    sub.extension = extension_for(deadline.extensions, sid, course.assignment, a.duedate)
                if sid in skip:
                    continue
                gb.db.flush()
                for notebook in sub.notebooks:
                    if (submitted / sid / course.assignment / f"{notebook.name}.ipynb").is_file():
                        gb.db.expire(notebook)
                        assign_late_penalty(deadline.plugin, sub, notebook)
            duedate = a.duedate
    notes = []
    unknown = unknown_students(deadline.extensions, known | set(skip), course.assignment)
    if unknown:
        notes.append(f"extensions.csv names {', '.join(unknown)}, who has no submission of {course.assignment}")
    if deadline.extensions and duedate is None:
        notes.append(f"extensions.csv: {course.assignment} has no due date in the gradebook, so no extension "
                     "changes anything (set one: nbgrader db assignment add NAME --duedate ...)")
    return notes
