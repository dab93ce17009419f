"""Accept the automatic result of a flagged submission, cell by cell.

A flagged notebook (scan.py, the runtime audit) keeps no automatic points in
the gradebook: each grade cell gets 0 and waits for manual grading, so that
nbgrader's own totals and exports never count a score the instructor has
not looked at. The score the checks gave is kept in the grader's state file
(Summary.withheld). Once the instructor has read the flagged code and finds
it honest, accepting enters that score as the cell's manual score, which is
exactly what typing it into formgrader does, for every flagged cell at once
or for the cells named. A cell a person already scored is left as it is.
`./course feedback --accept STUDENT` does this, then makes that student's
feedback again.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

from ..course import Course, CourseError
from .gradebook import one_transaction, open_gradebook
from .result import Status
from .state import State, save_state


@dataclass(frozen=True)
class Accepted:
    student: str
    cells: tuple[str, ...]    # notebook/cell whose automatic score became the manual score
    kept: tuple[str, ...]     # notebook/cell a person had scored already: untouched
    points: float             # the accepted cells' points

    def line(self) -> str:
        said = (f"{self.student}: accepted the automatic result of {len(self.cells)} flagged cell(s), "
                f"{self.points:g} point(s)")
        return said + (f"; kept the manual scores of {', '.join(self.kept)}" if self.kept else "")


def accept(course: Course, state: State, student: str, cells: tuple[str, ...] = ()) -> Accepted:
    """Enter the withheld automatic scores of `student` as manual scores
    (`cells`: only these, as notebook/cell or cell); CourseError when the
    student has none, or a named cell is not one of them. Once no cell of
    theirs waits, the student is no longer listed as flagged (state file)."""
    kept_by_grader = state.students.get(student)
    withheld = kept_by_grader.summary.withheld if kept_by_grader else {}
    if not withheld:
        raise CourseError(f"--accept {student}: no flagged automatic result is kept for this student "
                          "(not flagged, or graded before the grader kept them: grade again with --student)")
    wanted = {f"{nb}/{cell}": score for nb, scores in withheld.items() for cell, score in scores.items()}
    if cells:
        names = {full.split("/", 1)[1]: full for full in wanted}
        unknown = [c for c in cells if c not in wanted and c not in names]
        if unknown:
            raise CourseError(f"--accept {student}: {', '.join(unknown)} not among the flagged cells "
                              f"({', '.join(sorted(wanted))})")
        chosen = {wanted_name: wanted[wanted_name] for wanted_name in (names.get(c, c) for c in cells)}
    else:
        chosen = wanted
    done, kept, points = [], [], 0.0
    with open_gradebook(course) as gb, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SQLAlchemy's notes on nbgrader's relationships
        with one_transaction(gb):
            for full, score in sorted(chosen.items()):
                nb, cell = full.split("/", 1)
                grade = gb.find_grade(cell, nb, course.assignment, student)
                if grade.manual_score is not None:
                    kept.append(full)
                    continue
                grade.manual_score, grade.needs_manual_grade = score, False
                done.append(full)
                points += score
            waiting = any(g.needs_manual_grade for nb in gb.find_submission(course.assignment, student).notebooks
                          for g in nb.grades)
    summary = kept_by_grader.summary
    if not waiting and summary.status == Status.FLAGGED.value:
        kept_by_grader.summary = summary.unflagged(
            summary.reasons, note="flagged; the instructor read the code and accepted the automatic result")
        save_state(course.state_file, state)
    return Accepted(student, tuple(done), tuple(kept), points)
