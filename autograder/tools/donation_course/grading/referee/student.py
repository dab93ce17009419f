"""The referee's step in grading one student (worker.grade_one calls it between
nbgrader's autograde and its feedback): take what the kernel handed over
from the autograded notebooks (received.py), have the worker's referee
judge it, and combine the verdicts with the kernel's scores (combine.apply).

The worker holds one referee (client.Referee) for all its students, started
with the kernel's own caps and sandbox (settings.KernelSettings, which the
worker has in its environment).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from .client import Referee
from .combine import RefereeFlag, apply, judged_cells
from .received import take_handovers

_REFEREE: list = []  # this worker process's referee, made on first use


def referee() -> Referee:
    if _REFEREE and _REFEREE[0].owner != os.getpid():  # a forked child's copy of its parent's: not this one's
        _REFEREE.clear()
    if not _REFEREE:
        from ..run.settings import KERNEL_SETTINGS_ENV, KernelSettings

        settings = KernelSettings.from_json(os.environ[KERNEL_SETTINGS_ENV]) \
            if KERNEL_SETTINGS_ENV in os.environ else None
        _REFEREE.append(Referee(sandbox=settings.sandbox if settings else False,
                                memory_mb=settings.memory_mb if settings else 3072,
                                programs=settings.referee_programs if settings else ""))
    return _REFEREE[0]


def close() -> None:
    """This process's referee stopped and its scratch folder removed (the worker's shutdown; atexit does it too,
    but a forked worker ends without atexit)."""
    if _REFEREE and _REFEREE[0].owner == os.getpid():
        _REFEREE.pop().close()


def prepare() -> None:
    """Before the student's kernels start: the worker's referee starting, if it is not running (JAX's import
    in it overlaps the first notebook's kernel)."""
    referee().start()


@dataclass
class Refereed:
    flags: dict = field(default_factory=dict)  # notebook -> [RefereeFlag]: passes the kernel claimed, refuted
    seconds: float = 0.0                       # the referee's wall time for this student (0: not needed)


def referee_student(course: Path, assignment: str, student: str, db_url: str, course_id: str) -> Refereed:
    """Judge the student's hand-over, and write the combined scores into the worker's gradebook and the
    autograded notebooks. Raises client.RefereeFailed when the referee itself fails."""
    from nbgrader.api import Gradebook

    submitted = sorted((course / "submitted" / student / assignment).glob("*.ipynb"))
    cells = {p.stem: judged_cells(course / "source" / assignment / p.name) for p in submitted}
    cells = {nb: found for nb, found in cells.items() if found}
    if not cells:
        return Refereed()
    autograded = {nb: course / "autograded" / student / assignment / f"{nb}.ipynb" for nb in cells}
    got = take_handovers(autograded, cells)  # read, and removed from the notebooks
    handovers = got.handovers
    # a hand-over record the hidden checks did not write was displayed by the learner's code: the student is
    # flagged for it, whatever the verdicts (the answer it names reached the referee as nothing)
    tampered = {}
    for odd in got.suspicious:
        why = f"a hand-over to the grader that its checks did not make: {odd.reason}"
        tampered.setdefault(odd.notebook, []).append(RefereeFlag(odd.notebook, odd.cell, why))
    with Gradebook(db_url, course_id) as gb:
        # only answers with a cell the kernel passed need the referee: a point the kernel failed is lost anyway
        wanted = set()
        for nb, found in cells.items():
            for grade_id, answer, _check in found:
                try:
                    grade = gb.find_grade(grade_id, nb, assignment, student)
                except Exception:
                    continue
                if grade.max_score and (grade.auto_score or 0) >= grade.max_score:
                    wanted.add(answer)
        if not wanted:
            return Refereed(tampered)
        judged = referee().judge({name: handovers.get(name) for name in sorted(wanted)})
        flags = apply(judged.verdicts, cells, gb, autograded, assignment, student)
    print(f"referee: {student}: {judged.seconds:.3f} s", flush=True)  # the worker's log (docs/performance.md)
    found = tampered
    for flag in flags:
        found.setdefault(flag.notebook, []).append(flag)
    return Refereed(found, judged.seconds)
