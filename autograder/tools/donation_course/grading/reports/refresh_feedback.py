"""`./course feedback`: feedback made again for the students whose grades changed
since theirs was made (a manual score, a comment or extra credit entered in
formgrader), with nbgrader's own `generate_feedback` (forced for them only:
without --force nbgrader skips everyone who already has feedback) and the
learner's page (student_page.py); then grades.csv, the LMS import files and
the class report are written again from the gradebook (report.py).
With `--accept STUDENT`, a flagged student's automatic result is first
entered as the instructor's manual scores (accept.py).

What a student's feedback was made from is kept as a digest of their
gradebook entry (every cell's scores, extra credit and needs-manual-grade
flag, every comment, the time and late penalty) in the course's grading
folder (feedback.json), beside a fingerprint of their nbgrader feedback files. When
the files changed since (`./course grade` made them again) or no digest is
kept, the feedback was made by grading: from the automatic scores alone, so
a student differs from it exactly when a person entered something.
A student whose cells still wait for manual grading is left for later.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from ...course import AUTOGRADER, Course, CourseError, load_config
from ..results.accept import accept
from ..results.gradebook import Deadline, apply_deadlines, open_gradebook
from ..results.result import Status, StudentResult, Summary
from ..run.deadlines import penalty_plugin, read_extensions
from ..run.settings import GradingSettings
from ..run.state import load_state, run_lock, write_atomic
from .report import row_of, write_reports

DIGESTS = "feedback.json"  # in Course.grading_dir


@dataclass(frozen=True)
class Change:
    student: str
    waiting: int  # cells still waiting for manual grading


def digest(sub, manual: bool = True) -> str:
    """What feedback shows of one SubmittedAssignment; manual=False: as grading left it (no person's input)."""
    parts = [str(sub.timestamp), f"{sub.late_submission_penalty or 0:g}"]
    for nb in sorted(sub.notebooks, key=lambda n: n.name):
        for g in sorted(nb.grades, key=lambda g: g.name):
            parts.append(f"{nb.name}:{g.name}:{g.auto_score}:{g.needs_manual_grade}:"
                         + (f"{g.manual_score}:{g.extra_credit}" if manual else "None:None"))
        for c in sorted(nb.comments, key=lambda c: c.name):
            parts.append(f"{nb.name}:{c.name}:{c.auto_comment}:" + (f"{c.manual_comment}" if manual else "None"))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def fingerprint(course: Course, sid: str) -> str:
    """nbgrader's feedback files of a student, by name, size and modification time ('' when none)."""
    folder = course.root / "feedback" / sid / course.assignment
    files = sorted(folder.glob("*.html")) if folder.is_dir() else []
    return ";".join(f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in files)


def load_digests(course: Course) -> dict:
    try:
        data = json.loads((course.grading_dir / DIGESTS).read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def changed_students(course: Course, only: tuple = (), everyone: bool = False,
                     summaries: dict | None = None) -> list[Change]:
    """The students whose gradebook entry differs from what their feedback was made from; `waiting`
    counts the cells that wait for a person (report.student_row's: a review of these answers does not)."""
    from ..results.reviews import reviewed_cells

    kept, out, summaries = load_digests(course), [], summaries or {}
    with open_gradebook(course) as gb:
        for sub in sorted(gb.find_assignment(course.assignment).submissions, key=lambda s: s.student.id):
            sid = sub.student.id
            if only and sid not in only:
                continue
            record = kept.get(sid, {})
            made_from = record.get("digest") if record.get("files") == fingerprint(course, sid) else None
            if everyone or digest(sub) != (made_from or digest(sub, manual=False)):
                summary = summaries.get(sid, Summary())
                out.append(Change(sid, sum(g.needs_manual_grade and g.name not in reviewed_cells(
                    summary.reviews.get(nb.name), summary.content.get(nb.name, ""), nb.grades)
                    for nb in sub.notebooks for g in nb.grades)))
    return out


def make_api(course: Course):
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    from .feedback import use_grader_feedback

    cfg = load_config(course.root)
    cfg.CourseDirectory.root = str(course.root)
    use_grader_feedback(cfg)
    return NbGraderAPI(coursedir=CourseDirectory(config=cfg), config=cfg)


def page_input(api, course: Course, sid: str, summary: Summary) -> tuple[StudentResult, Summary]:
    """The learner page's result and summary from the gradebook as it is now: a cell a person scored says
    so (with their comment) instead of the check's automatic message, and no reason about it is kept."""
    from ..executors.worker import notebook_results

    notebooks, timestamp = notebook_results(api, course.root, sid, course.assignment) or ({}, None)
    by_hand, said = set(), []
    for name, nb in notebooks.items():
        comments = {c.name: c.manual_comment for c in nb.comments if c.manual_comment}
        for g in nb.grades:
            if g.manual_score is not None:
                by_hand.add(f"{name}/{g.name}")
                g.message = "graded by your instructor" + (f": {comments[g.name]}" if g.name in comments else "")
        graded = {g.name for g in nb.grades}
        said += [f"{name}/{cell}, your instructor: {text}" for cell, text in comments.items() if cell not in graded]
    waiting = any(g.needs_manual_grade for nb in notebooks.values() for g in nb.grades)
    reasons = [r for r in summary.reasons if not any(r.startswith(f"{cell} ") or r.startswith(f"{cell}:")
                                                     for cell in by_hand)] + said
    summary = replace(summary, reasons=reasons)
    if summary.status == Status.FLAGGED.value and not waiting:
        summary = summary.unflagged(reasons)
    return StudentResult.graded(sid, notebooks, timestamp, summary.reasons), summary


def regenerate(course: Course, out: Path, changes: list[Change]) -> tuple[list[str], list[str]]:
    """nbgrader's feedback and the learner's page for each change; (done, failed with why)."""
    from .messages import diagnose
    from .student_page import write_page

    api, state = make_api(course), load_state(course.state_file, lambda line: print(line, file=sys.stderr))
    kept, done, failed = load_digests(course), [], []
    for change in changes:
        sid = change.student
        res = api.generate_feedback(course.assignment, sid, force=True)
        if not res.get("success"):
            failed.append(f"{sid} ({diagnose(res.get('log', ''), res.get('error', ''))})")
            continue
        summary = state.students[sid].summary if sid in state.students else Summary()
        result, shown = page_input(api, course, sid, summary)
        write_page(row_of(course, sid, shown), result, course, out)
        with open_gradebook(course) as gb:
            kept[sid] = {"digest": digest(gb.find_submission(course.assignment, sid)),
                         "files": fingerprint(course, sid)}
        write_atomic(course.grading_dir / DIGESTS, json.dumps(kept, indent=1, sort_keys=True))
        done.append(sid)
    return done, failed


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="./course feedback", description=(
        "After manual grading in formgrader: make nbgrader's feedback and the learner's page again for the "
        "students whose grades or comments changed since their feedback was made (nbgrader's generate_feedback "
        "skips everyone who has feedback unless forced). Release it after: nbgrader release_feedback."))
    p.add_argument("--course", type=Path, default=AUTOGRADER, help="nbgrader course folder (default: autograder/)")
    p.add_argument("--assignment", default=None, metavar="NAME",
                   help="which assignment of the course (a folder under source/); needed when it has several")
    p.add_argument("--out", type=Path, default=None, help="where the learner pages go (default: as ./course grade)")
    p.add_argument("--student", action="append", default=None, metavar="ID", help="only this student (repeatable)")
    p.add_argument("--all", action="store_true", help="every student, changed or not")
    p.add_argument("--include-waiting", action="store_true",
                   help="also students whose cells still wait for manual grading")
    p.add_argument("--dry-run", action="store_true", help="only list the students whose feedback is out of date")
    p.add_argument("--accept", action="append", default=None, metavar="ID",
                   help="a flagged student whose code you read and found honest: their flagged cells get the "
                   "automatic score the checks gave as manual score, as if typed into formgrader (repeatable)")
    p.add_argument("--cell", action="append", default=None, metavar="NOTEBOOK/CELL",
                   help="with one --accept: only these flagged cells (repeatable; default every flagged cell)")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    course = Course(args.course.resolve(), args.assignment)
    settings = GradingSettings(config=course.config)
    out = args.out.resolve() if args.out else settings.output_folder(course)
    if args.cell and len(args.accept or ()) != 1:
        raise CourseError("--cell goes with exactly one --accept")
    with run_lock(course.lock_dir):
        state = load_state(course.state_file, lambda line: print(line, file=sys.stderr))
        if args.accept and not args.dry_run:
            for sid in args.accept:
                print(accept(course, state, sid, tuple(args.cell or ())).line())
        if not args.dry_run:  # extensions.csv and the due date as they are now (deadlines.py)
            deadline = Deadline(penalty_plugin(course), read_extensions(course))
            for line in apply_deadlines(course, deadline):
                print(f"note: {line}", file=sys.stderr)
        summaries = {sid: s.summary for sid, s in state.students.items()}
        changes = changed_students(course, tuple(args.student or ()), args.all, summaries)
        if args.accept and not args.dry_run:  # an accepted score is an automatic one: no manual entry shows it
            seen = {c.student for c in changes}
            changes += [c for c in changed_students(course, tuple(args.accept), True, summaries)
                        if c.student not in seen]
        unknown = sorted(set(args.student or ()) - {c.student for c in changed_students(course, everyone=True)})
        if unknown:
            raise CourseError(f"--student {', '.join(unknown)}: not in the gradebook of {course.root}")
        # nothing nbgrader could make feedback from: no notebook of theirs was autograded (invalid files)
        ungraded = [c.student for c in changes if not (course.root / "autograded" / c.student / course.assignment
                                                       ).is_dir()]
        changes = [c for c in changes if c.student not in ungraded]
        ready = [c for c in changes if args.include_waiting or not c.waiting]
        waiting = [f"{c.student} ({c.waiting} cell(s))" for c in changes if c not in ready]
        if args.dry_run:
            print(f"out of date: {', '.join(c.student for c in ready) or 'nobody'}"
                  + (f"; still waiting for manual grading: {', '.join(waiting)}" if waiting else ""))
            return 0
        done, failed = regenerate(course, out, ready)
        state = load_state(course.state_file, lambda line: print(line, file=sys.stderr))
        write_reports(course, {sid: s.summary for sid, s in state.students.items()}, out, settings=settings)
    which = "" if args.all else " whose grades changed"
    print(f"feedback made again for {len(done)} student(s){which}: {', '.join(done) or 'nobody'}"
          + (f"; still waiting for manual grading, left for later: {', '.join(waiting)}" if waiting else "")
          + (f"; nothing autograded to make feedback from: {', '.join(ungraded)}" if ungraded else "")
          + f"; pages: {out / 'feedback'}; to students: nbgrader release_feedback {course.assignment}; "
          f"grades and LMS import files written again: {out}")
    if failed:
        print(f"course: error: feedback could not be made for {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0
