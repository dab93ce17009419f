"""The course's facts and the plumbing every instructor tool shares.

Each fact is read from one place: the course id from `nbgrader_config.py`,
the assignment from the folders under `source/` (the only one, or the one
named with `--assignment`), the notebooks from that folder's contents, and
every point and grade id from the grade cells of those source notebooks
(`Course.grades`, `points`, `total_points`, `exercise`, `part`). `COURSE` is
the course in this repository (`autograder/`); the grading command takes any
other course folder with `--course` and reads the same facts from it.

    python -m donation_course.course   # each notebook's points and grade ids, the exercise and its parts
"""
import contextlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import nbformat

# The grader's own folder in a course, and its compile cache's name there.
GRADING_DIR = ".grading"
COMPILE_CACHE = "compile-cache"

# The grade ids of the graded exercise's two answer cells. The notebook holding EXERCISE_ANSWER is the
# exercise (Course.exercise), whatever its file name; each answer's part is the grade cells that check it
# (Course.part).
EXERCISE_ANSWER = "ex-answer"   # update_with_donate
CAPSTONE_ANSWER = "cap-answer"  # the capstone's training-state update


class CourseError(Exception):
    """A problem the user can fix; its message is one line, shown as is."""


def repo_root() -> Path:
    env = os.environ.get("DONATION_LAB_ROOT")
    if env:
        return Path(env).resolve()
    return Path(__file__).resolve().parents[3]  # autograder/tools/donation_course/course.py


ROOT = repo_root()
AUTOGRADER = ROOT / "autograder"
NOTEBOOKS = ROOT / "notebooks"
SOLUTIONS = ROOT / "solutions"


def load_config(folder: Path):
    """nbgrader's configuration of a course folder, as nbgrader itself reads it."""
    from traitlets.config.loader import PyFileConfigLoader

    return PyFileConfigLoader("nbgrader_config.py", path=str(folder)).load_config()


@dataclass(frozen=True)
class Course:
    """An nbgrader course folder: nbgrader_config.py and source/<assignment>/
    (one or several; `name` picks one, and may be left out when there is one)."""

    root: Path
    name: str | None = None

    @cached_property
    def config(self):
        if not (self.root / "nbgrader_config.py").is_file():
            raise CourseError(f"{self.root}: not an nbgrader course (no nbgrader_config.py)")
        return load_config(self.root)

    @property
    def course_id(self) -> str:
        return self.config.CourseDirectory.get("course_id", "default_course")

    @cached_property
    def assignments(self) -> list:
        """The assignment folders under source/, sorted."""
        folders = sorted(p.name for p in (self.root / "source").glob("*") if p.is_dir())
        if not (self.root / "nbgrader_config.py").is_file() or not folders:
            raise CourseError(f"{self.root}: not an nbgrader course (needs nbgrader_config.py and "
                              "source/<assignment>/)")
        return folders

    @cached_property
    def assignment(self) -> str:
        if self.name is not None:
            if self.name not in self.assignments:
                raise CourseError(f"--assignment {self.name}: no such assignment in {self.root / 'source'} "
                                  f"(it has {', '.join(self.assignments)})")
            return self.name
        if len(self.assignments) != 1:
            raise CourseError(f"{self.root / 'source'} holds several assignments ({', '.join(self.assignments)}): "
                              "name one with --assignment")
        return self.assignments[0]

    @property
    def several(self) -> bool:
        """True when source/ holds more than one assignment."""
        return len(self.assignments) > 1

    @property
    def grading_dir(self) -> Path:
        """The grader's own files for this assignment (state, logs, exports):
        COURSE/.grading/, or COURSE/.grading/<assignment>/ in a course with
        several. The run lock stays in COURSE/.grading/: one gradebook."""
        top = self.root / GRADING_DIR
        if not self.several:
            return top
        if (top / "state.json").exists():  # graded while source/ held one assignment
            self.move_single_assignment_files(top)
        return top / self.assignment

    def move_single_assignment_files(self, top: Path) -> None:
        """Move the grader's files of a run made while the course had one assignment from `top` into
        top/<that assignment>/: the one assignment of source/ with submissions in the gradebook. CourseError
        in one line when the gradebook does not tell which it was."""
        import sqlite3

        owners = []
        if self.gradebook.is_file():
            with contextlib.closing(sqlite3.connect(f"file:{self.gradebook}?mode=ro", uri=True)) as db:
                owners = [n for (n,) in db.execute("SELECT DISTINCT assignment.name FROM assignment JOIN "
                                                   "submitted_assignment ON submitted_assignment.assignment_id = "
                                                   "assignment.id") if n in self.assignments]
        dest = top / owners[0] if len(owners) == 1 else None
        if dest is None or (dest / "state.json").exists():
            why = (f"{dest} has its own" if dest is not None else
                   f"the gradebook has submissions of {', '.join(owners) or 'none'} of them")
            raise CourseError(f"{top} holds the grader's files of a run made when the course had one assignment, "
                              f"and which one cannot be told ({why}): move them into {top}/<that assignment>/ "
                              "(state.json and state.json.journal, compile-cache, logs, the CSV files), then grade "
                              "again")
        dest.mkdir(exist_ok=True)
        moved = []
        for entry in sorted(top.iterdir()):
            if entry.name != "lock" and entry.name not in self.assignments:
                os.replace(entry, dest / entry.name)
                moved.append(entry.name)
        print(f"note: the course now has several assignments: moved the grader's files of {owners[0]} "
              f"({', '.join(moved)}) from {top} into {dest}", file=sys.stderr, flush=True)

    @property
    def lock_dir(self) -> Path:
        return self.root / GRADING_DIR

    @property
    def state_file(self) -> Path:
        return self.grading_dir / "state.json"

    @property
    def compile_cache(self) -> Path:
        """The grading kernels' JAX compile cache (grading/run/compile_cache.py)."""
        return self.grading_dir / COMPILE_CACHE

    @property
    def source(self) -> Path:
        return self.root / "source" / self.assignment

    @property
    def release(self) -> Path:
        return self.root / "release" / self.assignment

    @property
    def gradebook(self) -> Path:
        return self.root / "gradebook.db"

    @property
    def db_url(self) -> str:
        return f"sqlite:///{self.gradebook}"

    def source_notebooks(self) -> list:
        paths = sorted(self.source.glob("*.ipynb"))
        if not paths:
            raise CourseError(f"no notebooks in {self.source}")
        return paths

    @property
    def notebooks(self) -> list:
        """Notebook names (no .ipynb), in order."""
        return [p.stem for p in self.source_notebooks()]

    @cached_property
    def cells(self) -> dict:
        """{notebook: [Cell, ...]}: each source notebook's answer (solution) and grade cells, in order."""
        from nbgrader.utils import is_grade, is_solution

        out = {}
        for path in self.source_notebooks():
            out[path.stem] = [Cell(grade_id(c), is_solution(c), float(c.metadata["nbgrader"].get("points") or 0)
                                   if is_grade(c) else None)
                              for c in read_notebook(path).cells if is_grade(c) or is_solution(c)]
        return out

    @property
    def grades(self) -> dict:
        """{notebook: {grade_id: points}}: every grade cell of each source notebook, in order, with its points
        as nbgrader reads them (a notebook with no grade cell maps to {})."""
        return {nb: {c.grade_id: c.points for c in cells if c.graded} for nb, cells in self.cells.items()}

    @property
    def grade_ids(self) -> dict:
        """{notebook: [grade_id, ...]}: each notebook's grade cells, in order."""
        return {nb: list(grades) for nb, grades in self.grades.items()}

    @property
    def points(self) -> dict:
        """{notebook: its points}: the sum of its grade cells' points (nbgrader's max_score for it)."""
        return {nb: sum(grades.values()) for nb, grades in self.grades.items()}

    @property
    def total_points(self) -> float:
        """The assignment's points: every notebook's, summed."""
        return sum(self.points.values())

    @property
    def exercise(self) -> str | None:
        """The graded exercise: the notebook holding the answer cell EXERCISE_ANSWER, or None when no
        notebook does (another course)."""
        return next((nb for nb, cells in self.cells.items() if any(c.grade_id == EXERCISE_ANSWER for c in cells)),
                    None)

    def part(self, answer: str) -> dict:
        """{grade_id: points} of the grade cells that check the answer cell `answer` (a grade id): those
        after it up to the next answer cell (the answer's own points too, if it is graded)."""
        for cells in self.cells.values():
            ids = [c.grade_id for c in cells]
            if answer in ids:
                start = ids.index(answer)
                stop = next((i for i in range(start + 1, len(cells)) if cells[i].answer), len(cells))
                return {c.grade_id: c.points for c in cells[start:stop] if c.graded}
        raise CourseError(f"no answer cell {answer!r} in {self.source}")

    def cell_timeout(self) -> int:
        return int(self.config.Execute.get("timeout", 30))


@dataclass(frozen=True)
class Cell:
    """An answer or grade cell of a source notebook."""

    grade_id: str
    answer: bool          # a solution cell: the learner writes here
    points: float | None  # a grade cell's points; None: not a grade cell

    @property
    def graded(self) -> bool:
        return self.points is not None


COURSE = Course(AUTOGRADER)


def venv_env() -> dict:
    """The environment for nbgrader subprocesses: the venv's bin/ on PATH,
    because nbgrader runs `alembic` by name."""
    env = dict(os.environ)
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    return env


def nbgrader_command(*args: str) -> list:
    return [sys.executable, "-m", "nbgrader", *args]


def run_nbgrader(course: Path, *args: str, log: Path = None) -> subprocess.CompletedProcess:
    """Run one nbgrader command in a course folder, or raise CourseError with
    nbgrader's last ERROR line (its whole output goes to `log` when given)."""
    result = subprocess.run(nbgrader_command(*args), cwd=course, env=venv_env(),
                            capture_output=True, text=True)
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(f"$ nbgrader {' '.join(args)}\n{result.stdout}{result.stderr}", encoding="utf-8")
    if result.returncode != 0:
        lines = [ln for ln in (result.stdout + result.stderr).splitlines() if "ERROR" in ln]
        detail = lines[-1].strip() if lines else f"exit code {result.returncode}"
        raise CourseError(f"nbgrader {args[0]} failed: {detail}" + (f" (full log: {log})" if log else ""))
    return result


def grade_id(cell) -> str | None:
    """The grade_id of a cell nbgrader tracks (a grade, solution or locked
    cell), else None: the one hand-written read of nbgrader's cell metadata;
    everything else asks nbgrader.utils (is_grade, is_solution, is_locked)."""
    from nbgrader.utils import is_grade, is_locked, is_solution

    if is_grade(cell) or is_solution(cell) or is_locked(cell):
        return cell.metadata["nbgrader"].get("grade_id")
    return None


def read_notebook(path: Path) -> nbformat.NotebookNode:
    """Read and validate one notebook, or raise CourseError in one line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CourseError(f"{path.name}: cannot be read ({exc})") from None
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        raise CourseError(f"{path.name}: not valid notebook JSON ({exc})") from None
    try:
        nb = nbformat.reads(text, as_version=nbformat.NO_CONVERT)
        nbformat.validate(nb)
    except Exception as exc:  # nbformat raises several types; all mean "invalid"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CourseError(f"{path.name}: not a valid notebook ({first})") from None
    return nb


def main(course: Course = COURSE) -> None:
    """Print each notebook's points and grade ids, the course's total, and the exercise's parts."""
    for nb, grades in course.grades.items():
        cells = ", ".join(f"{g} {p:g}" for g, p in grades.items()) or "no grade cells"
        print(f"{nb}: {course.points[nb]:g} points ({cells})")
    print(f"total: {course.total_points:g} points; the graded exercise: {course.exercise}")
    for answer in (EXERCISE_ANSWER, CAPSTONE_ANSWER):
        try:
            part = course.part(answer)
        except CourseError as exc:
            print(exc)
            continue
        print(f"{answer}: {sum(part.values()):g} points ({', '.join(part)})")


if __name__ == "__main__":
    main()
