"""Accept the automatic result of a flagged submission, cell by cell.

A flagged notebook (scan.py, the runtime audit) keeps no automatic points in
the gradebook: each grade cell gets 0 and waits for manual grading, so that
nbgrader's own totals and exports never count a score the instructor has
not looked at. The score the checks gave is kept in the grader's state file
(Summary.withheld). Once the instructor has read the flagged code and finds
it honest, accepting puts that score back into the gradebook as the cell's
automatic score, no longer waiting: what serial nbgrader gives that code,
for every flagged cell at once or for the cells named. It is not a manual
score: the acceptance is recorded with the digest of the answers it was made
for (reviews.py), a regrade of the same answers accepts them again, and
changed answers are flagged, and wait, as any others. A cell a person
already scored is left as it is. `./course feedback --accept STUDENT` does
this, then makes that student's feedback again.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, replace

from ...course import Course, CourseError
from ..run.state import State, save_state
from .gradebook import one_transaction, open_gradebook
from .result import Status
from .reviews import answer_digest, now, reviewed_cells


@dataclass(frozen=True)
class Accepted:
    student: str
    cells: tuple[str, ...]    # notebook/cell whose withheld automatic score went back into the gradebook
    kept: tuple[str, ...]     # notebook/cell a person had scored already: untouched
    points: float             # the accepted cells' points
    already: tuple[str, ...] = ()  # notebook/cell accepted before, for these same answers

    def line(self) -> str:
        said = (f"{self.student}: accepted the automatic result of {len(self.cells)} flagged cell(s), "
                f"{self.points:g} point(s)")
        if self.already:
            said += f"; {len(self.already)} cell(s) were accepted already for these same answers"
        return said + (f"; kept the manual scores of {', '.join(self.kept)}" if self.kept else "")


def accept(course: Course, state: State, student: str, cells: tuple[str, ...] = ()) -> Accepted:
    """Put the withheld automatic scores of `student` back into the gradebook
    (`cells`: only these, as notebook/cell or cell); CourseError when the
    student has none, or a named cell is not one of them. Once no cell of
    theirs waits, the student is no longer listed as flagged (state file)."""
    kept_by_grader = state.students.get(student)
    summary = kept_by_grader.summary if kept_by_grader else None
    withheld = summary.withheld if summary else {}
    accepted = {f"{nb}/{cell}": score for nb, review in (summary.reviews.items() if summary else ())
                for cell, score in review.get("accepted", {}).items()
                if review.get("content") and review.get("content") == summary.content.get(nb)}
    if not withheld and not accepted:
        raise CourseError(f"--accept {student}: no flagged automatic result is kept for this student "
                          "(not flagged, or graded before the grader kept them: grade again with --student)")
    wanted = {f"{nb}/{cell}": score for nb, scores in withheld.items() for cell, score in scores.items()}
    if cells:
        names = {full.split("/", 1)[1]: full for full in {**accepted, **wanted}}
        unknown = [c for c in cells if c not in wanted and c not in accepted and c not in names]
        if unknown:
            raise CourseError(f"--accept {student}: {', '.join(unknown)} not among the flagged cells "
                              f"({', '.join(sorted({**accepted, **wanted}))})")
        chosen = {n: wanted[n] for n in (names.get(c, c) for c in cells) if n in wanted}
        already = tuple(sorted(n for n in (names.get(c, c) for c in cells) if n in accepted and n not in wanted))
    else:
        chosen, already = wanted, tuple(sorted(n for n in accepted if n not in wanted))
    done, kept, points = [], [], 0.0
    submitted = course.root / "submitted" / student / course.assignment
    reviews, content = dict(summary.reviews), dict(summary.content)
    with open_gradebook(course) as gb, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SQLAlchemy's notes on nbgrader's relationships
        with one_transaction(gb):
            for full, score in sorted(chosen.items()):
                nb, cell = full.split("/", 1)
                grade = gb.find_grade(cell, nb, course.assignment, student)
                if grade.manual_score is not None:
                    kept.append(full)
                    continue
                grade.auto_score, grade.needs_manual_grade = score, False
                done.append(full)
                points += score
                digest = content.get(nb) or answer_digest(submitted / f"{nb}.ipynb")
                content[nb] = digest
                review = dict(reviews.get(nb) or {})
                if review.get("content") != digest:
                    review = {"content": digest, "when": now(), "scores": {}, "accepted": {}, "comments": {},
                              "extra": {}}
                review["accepted"] = {**review.get("accepted", {}), cell: score}
                reviews[nb] = review
            waiting = any(g.needs_manual_grade and g.name not in reviewed_cells(reviews.get(nb.name),
                                                                                content.get(nb.name, ""), nb.grades)
                          for nb in gb.find_submission(course.assignment, student).notebooks for g in nb.grades)
    left = {nb: {c: v for c, v in scores.items() if f"{nb}/{c}" not in done} for nb, scores in withheld.items()}
    summary = replace(summary, reviews=reviews, content=content, withheld={nb: c for nb, c in left.items() if c})
    if not waiting and summary.status == Status.FLAGGED.value:
        summary = summary.unflagged(
            summary.reasons, note="flagged; the instructor read the code and accepted the automatic result")
    kept_by_grader.summary = summary
    save_state(course.state_file, state)
    return Accepted(student, tuple(done), tuple(kept), points, already)
