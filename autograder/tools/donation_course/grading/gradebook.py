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

from ..course import Course
from .lms import roster_fields
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


def merge(gb, assignment: str, result: StudentResult, name: str = "") -> None:
    """Write one student's automatic results into the gradebook, in one
    transaction that reads the gradebook as it is now. What an instructor
    recorded in formgrader (manual scores and comments, extra credit, a
    notebook's flag) is theirs: it is kept, whenever it was entered. As
    nbgrader's own autograde does, a cell with a manual score, or with no
    automatic one, is marked for the instructor to look at again."""
    sid = result.student
    with one_transaction(gb):
        gb.update_or_create_student(sid, **roster_fields(gb, sid, name))
        ts = result.timestamp
        gb.update_or_create_submission(assignment, sid, **({"timestamp": dt.datetime.fromisoformat(ts)} if ts else {}))
        for nbname, nb in result.notebooks.items():
            for g in nb.grades:
                grade = gb.find_grade(g.name, nbname, assignment, sid)
                grade.auto_score = g.auto_score
                grade.needs_manual_grade = (g.needs_manual_grade or grade.manual_score is not None
                                            or g.auto_score is None)
            for c in nb.comments:
                gb.find_comment(c.name, nbname, assignment, sid).auto_comment = c.auto_comment
            if nb.late_penalty is not None:
                gb.find_submission_notebook(nbname, assignment, sid).late_submission_penalty = nb.late_penalty


def merge_result(course: Course, result: StudentResult, name: str = "") -> None:
    with open_gradebook(course) as gb, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SQLAlchemy's notes on nbgrader's relationships
        merge(gb, course.assignment, result, name=name)
