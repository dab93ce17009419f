"""`./course check [NOTEBOOK...]`: a learner grades their own work with the hidden tests.

The same steps as `./course grade` (steps.py's Run: prepare, plan, stage, grade
on the sandboxed pool, merge, the learner's page), on a private course: a
copy of the course's nbgrader_config.py and source in `.grading-self/` at the
repository root (git-ignored; `--dir` or $DONATION_LAB_CHECK_DIR put it
elsewhere). It is prepared once and reused: prepare.py generates the
assignment again, and fills the compile cache again, only when what they come
from changed. Its one student is "me"; the instructor's course keeps no trace
of a check, and no lesson is ever taken for a student.

Only the notebooks given (default: every notebook in notebooks/) that are a
course notebook, have graded cells and hold an answer are graded; each of the
others is listed with the reason, and the maximum counts only what was graded.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

from ...course import COURSE, GRADING_DIR, NOTEBOOKS, ROOT, Course, CourseError, grade_id, read_notebook
from ..lms import Collected, File, notebook_of
from ..reports.student_page import MARKS, mark_and_message
from ..results.gradebook import assignment_facts
from ..results.result import StudentResult
from .prepare import prepare
from .settings import GradingSettings
from .state import run_lock
from .steps import GradeRequest, Run, require_sandbox

ME = "me"  # the private course's one student
DIR_ENV = "DONATION_LAB_CHECK_DIR"
MARKER = ".donation-lab-check"  # in the private course: ours to rewrite
GRADER_FAILED = "the grader itself failed"  # how worker.serve's reason starts


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="./course check", description=(
        "Check your own work: grade your notebooks with the course's hidden tests, in the grading "
        "sandbox, exactly as ./course grade would, in a private course of your own (nothing reaches "
        "an instructor's gradebook). Prints each check with its message and your score per notebook "
        "out of that notebook's points, and writes a feedback page."))
    p.add_argument("notebooks", nargs="*", type=Path, metavar="NOTEBOOK",
                   help="your notebooks, or folders of them (default: every notebook in notebooks/)")
    p.add_argument("--dir", type=Path, default=None,
                   help=f"the private course the checks run in (default: ${DIR_ENV}, else .grading-self/ "
                   "at the repository root); made on first use, reused after")
    p.add_argument("--timeout", type=int, default=None, help="seconds for all your notebooks (default 300)")
    p.add_argument("--no-sandbox", action="store_true",
                   help="run without bubblewrap (where it cannot be installed)")
    return p


def private_folder(given: Path | None) -> Path:
    folder = (given or Path(os.environ.get(DIR_ENV) or ROOT / ".grading-self")).resolve()
    if folder == COURSE.root.resolve():
        raise CourseError(f"{folder}: that is the instructor's course; checks run in a private course of their own")
    if folder.exists() and any(folder.iterdir()) and not (folder / MARKER).exists():
        raise CourseError(f"{folder}: a folder that is not a private check course; give --dir an empty "
                          "or new folder")
    return folder


def copy_if_changed(src: Path, dest: Path) -> None:
    if dest.is_file() and dest.read_bytes() == src.read_bytes():
        return  # unchanged files keep their times, and prepare.py's digests see no change
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest)


def sync_course(folder: Path, origin: Course = COURSE) -> Course:
    """The private course in `folder`: the course's config and source as they are now."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MARKER).write_text("a private course of ./course check: rewritten at will\n")
    copy_if_changed(origin.root / "nbgrader_config.py", folder / "nbgrader_config.py")
    wanted = {p.relative_to(origin.source) for p in origin.source.rglob("*") if p.is_file()}
    for rel in wanted:
        copy_if_changed(origin.source / rel, folder / "source" / origin.assignment / rel)
    for path in sorted((folder / "source").rglob("*"), reverse=True):
        rel = path.relative_to(folder / "source")
        if rel.parts[0] != origin.assignment:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        elif path.is_file() and Path(*rel.parts[1:]) not in wanted:
            path.unlink()
    return Course(folder)


def given_files(paths: list[Path]) -> list[Path]:
    files = []
    for path in paths or [NOTEBOOKS]:
        if path.is_dir():
            found = sorted(path.glob("*.ipynb"))
            if not found:
                raise CourseError(f"{path}: no notebooks (.ipynb) in this folder")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise CourseError(f"{path}: no such file or folder")
    return files


def answered(book, release: Path) -> bool:
    """Some answer cell of `book` differs from the released copy's."""
    import nbformat
    from nbgrader.utils import is_solution

    released = {grade_id(c): c.source.strip() for c in nbformat.read(release, as_version=4).cells if is_solution(c)}
    return any(grade_id(c) in released and c.source.strip() != released[grade_id(c)]
               for c in book.cells if is_solution(c))


def pick(files: list[Path], course: Course, max_scores: dict) -> tuple[dict, dict]:
    """({notebook: file} to grade, {notebook or file: why it is not checked}), in the course's order."""
    chosen, skipped = {}, {}
    for path in files:
        nb = notebook_of(path.name, course.notebooks)
        if nb is None:
            skipped[path.name] = "not a notebook of this course (its name ends in none of theirs)"
        elif nb in chosen:
            skipped[str(path)] = f"another copy of {nb}, {chosen[nb]}, is checked"
        else:
            try:
                book = read_notebook(path)
            except CourseError as exc:
                skipped[nb] = str(exc)
                continue
            if not max_scores.get(nb):
                skipped[nb] = "it has no graded cells"
            elif not answered(book, course.release / f"{nb}.ipynb"):
                skipped[nb] = f"unanswered: every answer cell of {path.name} is as released"
            else:
                chosen[nb] = path
    for nb in course.notebooks:
        if nb not in chosen and nb not in skipped:
            skipped[nb] = "not given"
    order = {nb: i for i, nb in enumerate(course.notebooks)}
    return ({nb: chosen[nb] for nb in sorted(chosen, key=order.get)},
            dict(sorted(skipped.items(), key=lambda kv: order.get(kv[0], len(order)))))


class SelfCheck(Run):
    """A Run of one student, "me", with the files `pick` chose, in the private course."""

    def __init__(self, course: Course, settings: GradingSettings, chosen: dict):
        super().__init__(course, settings, GradeRequest(submissions=course.root))
        self.chosen, self.result, self.page = chosen, None, None

    def collect(self, workdir: Path = None) -> None:
        files = {nb: File(path=path, rel=path.name, student=ME, notebook=nb) for nb, path in self.chosen.items()}
        self.found = Collected(students={ME: files})

    def stage(self) -> None:
        """Only what is checked now: nothing of an earlier check is graded again or shown."""
        for folder in ("submitted", "autograded", "feedback"):
            shutil.rmtree(self.course.root / folder / ME, ignore_errors=True)
        shutil.rmtree(self.out / "feedback", ignore_errors=True)
        super().stage()

    def write_page(self, result: StudentResult, row: dict) -> Path:
        """The page's total and maximum: the notebooks checked, never the whole assignment."""
        row = dict(row, total=sum(row.get(nb, 0.0) for nb in self.chosen),
                   max=sum(self.facts.max_scores[nb] for nb in self.chosen))
        self.result, self.page = result, super().write_page(result, row)
        return self.page


def check_line(g) -> str:
    mark, message = mark_and_message(g)
    first, *rest = message.splitlines()
    text = f"  {mark} {g.name} ({g.score:g}/{g.max_score:g}): {first}"
    return "\n".join([text, *(f"      {line}" for line in rest)])


def report(check: SelfCheck, skipped: dict, seconds: float) -> None:
    result, max_scores = check.result, check.facts.max_scores
    total = 0.0
    for nb in check.chosen:
        data = result.notebooks.get(nb) if result else None
        score = data.score if data and data.graded else 0.0
        total += score
        print(f"{nb}: {score:g} of {max_scores[nb]:g}")
        for cell, msg in (data.solution_errors.items() if data else ()):
            print(f"  {MARKS[1]} your answer cell {cell} raised {(msg or 'an error').splitlines()[0]}")
        for g in (data.grades if data and data.graded else ()):
            print(check_line(g))
    for reason in (result.reasons if result else ["no result came back from the grader"]):
        print(f"  ! {reason}")
    if result and result.log:
        print(f"  ! the grader's log: {check.out / 'logs' / 'students' / f'{ME}.log'}")
    if len(check.chosen) > 1:
        print(f"total: {total:g} of {sum(max_scores[nb] for nb in check.chosen):g} "
              f"(the {len(check.chosen)} notebooks checked)")
    print_skipped(skipped)
    if check.page:
        print(f"feedback: {check.page}")
    print(f"checked {len(check.chosen)} notebook(s) in {seconds:.1f}s")


def print_skipped(skipped: dict) -> None:
    if skipped:
        print("not checked:")
        for name, why in skipped.items():
            print(f"  {name}: {why}")


def main(argv: list[str]) -> int:
    start = time.monotonic()
    args = parser().parse_args(argv)
    files = given_files(args.notebooks)
    course = sync_course(private_folder(args.dir))
    settings = GradingSettings(config=course.config)
    settings.progress, settings.workers = False, 1
    settings.out = str(course.root / GRADING_DIR)  # never where the course's config sends the class's reports
    settings.sandbox = not args.no_sandbox
    if args.timeout is not None:
        settings.timeout = args.timeout
    try:
        settings.validate()
    except ValueError as exc:
        raise CourseError(str(exc)) from None
    require_sandbox(settings)
    say = lambda line: print(line, file=sys.stderr, flush=True)
    out = settings.output_folder(course)
    with run_lock(course.lock_dir):
        if not course.state_file.exists():
            say(f"first check: preparing your private grading course in {course.root} (once)")
        prepare(course, out, say, compile_cache=False)  # the release, to tell an answer from a stub
        chosen, skipped = pick(files, course, assignment_facts(course).max_scores)
        if not chosen:
            print("nothing to check: no notebook given holds an answer to grade")
            print_skipped(skipped)
            return 0
        check = SelfCheck(course, settings, chosen)
        check.collect()
        check.prepare()  # fills the compile cache, the first time something is graded
        check.plan()
        check.stage()
        check.out.mkdir(parents=True, exist_ok=True)
        check.grade()
    report(check, skipped, time.monotonic() - start)
    # Whatever the score, 0; 1 only when the grader itself failed (a worker's own exception: worker.serve).
    failed = check.result is None or any(r.startswith(GRADER_FAILED) for r in check.result.reasons)
    return 1 if failed else 0
