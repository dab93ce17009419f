"""A class put straight into a course's gradebook, as `./course grade` would leave
it, without running a kernel: for tests of what is read back from the
gradebook (the LMS import files, the class report). Each student is a
StudentResult merged by the grader's own gradebook.merge, with the Summary
the run would keep (report.summarize), and their submitted notebooks put in
nbgrader's submitted/ folder."""
import datetime as dt
import warnings
from dataclasses import dataclass, field

from donation_course.course import Course

DUE = dt.datetime(2024, 3, 1, 12, 0)  # UTC, as nbgrader keeps it


@dataclass
class Student:
    """How one student's grading went; scores are per notebook: {notebook: fraction of each cell's points}."""

    scores: dict = field(default_factory=dict)   # submitted notebooks only
    kind: str = "graded"                          # graded, flagged, error, timeout
    late_penalty: float = 0.0                     # on the last notebook
    minutes_late: int = 0
    by_hand: dict = field(default_factory=dict)   # {notebook: manual fraction}: a person scored its cells
    name: str = ""                                # the roster's last_name (nbgrader db student add)


def cells_of(course: Course) -> dict:
    """{notebook: [(grade id, points)]} of the assignment, from the gradebook."""
    from donation_course.grading.results.gradebook import open_gradebook

    with open_gradebook(course) as gb:
        return {nb.name: [(c.name, c.max_score) for c in nb.grade_cells]
                for nb in gb.find_assignment(course.assignment).notebooks}


def result_of(sid: str, spec: Student, cells: dict):
    from donation_course.grading.results.result import CellGrade, NotebookResult, Status, StudentResult

    if spec.kind == "error":
        return StudentResult.failed(sid, "the kernel died while running the notebook")
    if spec.kind == "timeout":
        return StudentResult.timed_out(sid, 300)
    notebooks = {}
    for nb, grade_cells in cells.items():
        frac = spec.scores.get(nb, 0.0)
        grades = [CellGrade(name, points, auto_score=round(points * frac, 3),
                            needs_manual_grade=spec.kind == "flagged" and nb in spec.scores)
                  for name, points in grade_cells]
        notebooks[nb] = NotebookResult(grades=grades, graded=nb in spec.scores,
                                       late_penalty=spec.late_penalty if nb == list(cells)[-1] else None)
    when = DUE + dt.timedelta(minutes=spec.minutes_late - 60)
    result = StudentResult.graded(sid, notebooks, when.isoformat())
    if spec.kind == "flagged":
        result.status = Status.FLAGGED
        result.reasons.insert(0, "flagged for manual grading, no automatic points: cell x, line 1")
    return result


def score_by_hand(gb, assignment: str, sid: str, by_hand: dict, cells: dict) -> None:
    """What formgrader does when a person scores a cell: a manual score, no longer waiting."""
    for nb, frac in by_hand.items():
        for name, points in cells[nb]:
            grade = gb.find_grade(name, nb, assignment, sid)
            grade.manual_score, grade.needs_manual_grade = round(points * frac, 3), False
    gb.db.commit()


def build_class(course_dir, students: dict) -> dict:
    """Merge `students` ({id: Student}) into the course's gradebook, with a due date; return their Summaries."""
    from donation_course.grading.reports.report import summarize
    from donation_course.grading.results.gradebook import merge, open_gradebook

    course = Course(course_dir)
    cells = cells_of(course)
    max_scores = {nb: sum(p for _, p in c) for nb, c in cells.items()}
    summaries = {}
    with open_gradebook(course) as gb, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SQLAlchemy's notes on nbgrader's relationships, as merge_result
        gb.update_or_create_assignment(course.assignment, duedate=DUE)
        for sid, spec in students.items():
            if spec.name:
                gb.update_or_create_student(sid, last_name=spec.name)
            result = result_of(sid, spec, cells)
            merge(gb, course.assignment, result)
            score_by_hand(gb, course.assignment, sid, spec.by_hand, cells)
            folder = course_dir / "submitted" / sid / course.assignment
            folder.mkdir(parents=True, exist_ok=True)
            for nb in spec.scores:
                (folder / f"{nb}.ipynb").write_text("{}")
            summaries[sid] = summarize(result, course.notebooks, max_scores, set(spec.scores))
    return summaries
