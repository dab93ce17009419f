"""What grading one student gives: a typed result, built by its constructors.

A worker returns a `StudentResult` (nbgrader's grades per cell, with the
learner message each check printed or raised), or the pool makes one for a
student whose grading failed or ran out of time. The run (run/steps.py) merges it
into the gradebook and keeps its `Summary` (status, reasons, files) in the
state file; every row of grades.csv comes from the gradebook plus that
summary (report.py).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum

FLAG_REASON = "flagged for manual grading"  # how a flagged student's first reason begins
WITHHELD_NOTE = "withheld until the instructor reviews the flag"  # the reason line of a flagged notebook's points


class Status(StrEnum):
    OK = "ok"              # every submitted notebook scored full marks
    PARTIAL = "partial"    # graded; some points lost
    FLAGGED = "flagged"    # the scan found code outside the policy: the instructor grades it
    ERROR = "error"        # nbgrader or the grading process could not finish it
    TIMEOUT = "timeout"    # past the whole-submission time limit
    INVALID = "invalid"    # a submitted file could not be read as a notebook (the others were graded)
    PENDING = "pending"    # graded; cells wait for the instructor (a review of earlier answers no longer counts)


# The statuses of a student who needs the instructor (cli.py's exit code NEEDS_YOU, the run's last line)
NEEDS_YOU = (Status.FLAGGED, Status.ERROR, Status.TIMEOUT, Status.INVALID, Status.PENDING)


@dataclass
class CellGrade:
    name: str
    max_score: float
    auto_score: float | None = None
    manual_score: float | None = None
    needs_manual_grade: bool = False
    message: str = ""      # the learner message the cell's check printed or raised
    error: bool = False    # the cell raised
    withheld: float | None = None  # a flagged cell: the automatic score, kept for the instructor (accept.py)
    withheld_message: str = ""     # a flagged cell: the message its check gave, shown once it is accepted

    @property
    def score(self) -> float:
        return self.manual_score if self.manual_score is not None else (self.auto_score or 0.0)

    @property
    def passed(self) -> bool:
        return self.score >= (self.max_score or 0)


@dataclass
class Comment:
    name: str
    auto_comment: str | None = None
    manual_comment: str | None = None


@dataclass
class NotebookResult:
    grades: list[CellGrade] = field(default_factory=list)
    comments: list[Comment] = field(default_factory=list)
    graded: bool = False                                            # an autograded copy exists
    solution_errors: dict[str, str] = field(default_factory=dict)  # answer cell -> what it raised
    late_penalty: float | None = None

    @property
    def score(self) -> float:
        return sum(g.score for g in self.grades)


@dataclass
class StudentResult:
    student: str
    status: Status | None = None   # None: OK or PARTIAL, decided from the scores (report.py)
    notebooks: dict[str, NotebookResult] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)  # for the instructor's CSV and the learner's page
    timestamp: str | None = None   # nbgrader's submission time, ISO format
    log: str = ""                  # nbgrader's log when something failed: the instructor's only
    seconds: float = 0.0           # grading wall time
    infrastructure: bool = False   # failed for a reason of the grader's, not the submission's

    @property
    def completed(self) -> bool:
        """nbgrader graded it (whatever the score)."""
        return self.status not in (Status.ERROR, Status.TIMEOUT, Status.INVALID)

    # --- constructors
    @classmethod
    def graded(cls, student: str, notebooks: dict[str, NotebookResult], timestamp: str | None = None,
               reasons: list[str] | None = None) -> StudentResult:
        return cls(student, None, notebooks, list(reasons or []), timestamp)

    @classmethod
    def failed(cls, student: str, reason: str, log: str = "", notebooks: dict[str, NotebookResult] | None = None,
               infrastructure: bool = False) -> StudentResult:
        return cls(student, Status.ERROR, dict(notebooks or {}), [reason] if reason else [], log=log,
                   infrastructure=infrastructure)

    @classmethod
    def timed_out(cls, student: str, limit: int) -> StudentResult:
        return cls(student, Status.TIMEOUT, reasons=[
            f"grading took longer than {limit} s (whole-submission time limit); no score could be recorded"])

    @classmethod
    def invalid(cls, student: str) -> StudentResult:
        return cls(student, Status.INVALID)

    def flag(self, flags: dict[str, list]) -> None:
        """A flagged notebook (scan.py): every grade cell waits for the instructor
        (needs_manual_grade) with no automatic points; the reason names cell, line and rule."""
        if not flags:
            return
        for name, found in flags.items():
            for g in self.notebooks.get(name, NotebookResult()).grades:
                g.withheld, g.auto_score, g.needs_manual_grade = g.auto_score, 0.0, True
                g.withheld_message = g.message
                g.message = "flagged for the instructor (manual grading): " + found[0].reason
        self.status = Status.FLAGGED
        listed = "; ".join(str(f) for found in flags.values() for f in found[:5])
        self.reasons.insert(0, f"{FLAG_REASON}, no automatic points: " + listed)

    def accept(self, nb: str, cells: set, note: str) -> None:
        """The instructor accepted the automatic result of these flagged cells of
        `nb` for these very answers (reviews.py): each gets back the score and
        message its check gave; once no cell is flagged, neither is the student."""
        for g in self.notebooks.get(nb, NotebookResult()).grades:
            if g.name in cells and g.withheld is not None:
                g.auto_score, g.needs_manual_grade = g.withheld, False
                g.message, g.withheld, g.withheld_message = g.withheld_message, None, ""
        if self.status == Status.FLAGGED and not any(g.withheld is not None for data in self.notebooks.values()
                                                     for g in data.grades):
            self.status = None
            self.reasons = [note, *(r for r in self.reasons if not r.startswith(FLAG_REASON))]


@dataclass
class Summary:
    """What grades.csv says of a student besides the gradebook's numbers; kept in the state file."""

    status: str = ""
    reasons: list[str] = field(default_factory=list)
    files: str = ""
    name: str = ""
    withheld: dict[str, dict[str, float]] = field(default_factory=dict)  # flagged: notebook -> cell -> score
    submitted: list[str] = field(default_factory=list)  # the notebooks the student handed in
    # flagged: notebook/cell -> the reason line its check gave (lost points), shown once it is accepted
    withheld_reasons: dict[str, str] = field(default_factory=dict)
    content: dict[str, str] = field(default_factory=dict)  # notebook -> digest of the answers graded (reviews.py)
    reviews: dict[str, dict] = field(default_factory=dict)  # notebook -> the review of a person (reviews.py)

    def to_dict(self) -> dict:
        return asdict(self)

    def unflagged(self, reasons: list[str], note: str = "") -> Summary:
        """This summary once no cell waits for the instructor any more: no flagged
        status (ok or partial then follow from the gradebook's scores), `reasons`
        without the flag's own lines (the flag, what was withheld), `note` first,
        then what the accepted checks said of lost points."""
        kept = [r for r in reasons if not r.startswith(FLAG_REASON) and WITHHELD_NOTE not in r]
        kept += [line for line in self.withheld_reasons.values() if line not in kept]
        return replace(self, status="", reasons=[note, *kept] if note else kept, withheld={}, withheld_reasons={})

    @classmethod
    def from_dict(cls, data: dict) -> Summary:
        return cls(**{k: data[k] for k in ("status", "reasons", "files", "name", "withheld", "submitted",
                                           "withheld_reasons", "content", "reviews") if k in data})
