"""Build the learner notebooks and the solutions from the one nbgrader source.

`autograder/source/buffer-donation/` is the only place a lesson is written.
`notebooks/` is exactly what `nbgrader generate_assignment` releases, and
`solutions/` is what `nbgrader generate_solution` makes with the hidden tests
removed (see autograder/nbgrader_config.py). Both run real nbgrader in a
scratch copy of the course, so the instructor's gradebook is never touched.
"""
import shutil
import tempfile
from pathlib import Path

from .course import COURSE, NOTEBOOKS, SOLUTIONS, CourseError, read_notebook, run_nbgrader


def check_sources(source: Path) -> list:
    paths = sorted(source.glob("*.ipynb"))
    if not paths:
        raise CourseError(f"no notebooks in {source}")
    for path in paths:
        read_notebook(path)
    return paths


def _replace_dir_contents(src: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.iterdir():
        if old.is_dir():
            shutil.rmtree(old)
        else:
            old.unlink()
    for new in sorted(src.iterdir()):
        if new.is_dir():
            shutil.copytree(new, dest / new.name)
        else:
            shutil.copy2(new, dest / new.name)


def scratch_course(dest: Path, source: Path = None) -> Path:
    """A copy of the course (config and source, no state) in `dest`."""
    source = source or COURSE.source
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(COURSE.root / "nbgrader_config.py", dest / "nbgrader_config.py")
    shutil.copytree(source, dest / "source" / COURSE.assignment)
    return dest


def generate(course_dir: Path, source: Path = None) -> Path:
    """A scratch course in `course_dir` on which nbgrader's generate_assignment
    and generate_solution have run: release/<assignment>/ holds the learner
    copies, solution/<assignment>/ the solutions (and it has a gradebook)."""
    course = scratch_course(course_dir, source)
    run_nbgrader(course, "generate_assignment", COURSE.assignment, "--force")
    run_nbgrader(course, "generate_solution", COURSE.assignment, "--force")
    return course


def regenerate(notebooks: Path = NOTEBOOKS, solutions: Path = SOLUTIONS, source: Path = None) -> list:
    """Regenerate learner notebooks and solutions; return the notebook names."""
    source = source or COURSE.source
    paths = check_sources(source)
    with tempfile.TemporaryDirectory(prefix="donation-lab-regen-") as tmp:
        course = generate(Path(tmp), source)
        _replace_dir_contents(course / "release" / COURSE.assignment, notebooks)
        _replace_dir_contents(course / "solution" / COURSE.assignment, solutions)
    return [p.name for p in paths]


def drift(committed: Path, generated: Path) -> list:
    """Names of notebooks that differ between a committed and a fresh copy
    (including ones present on one side only). Empty means no drift."""
    names = {p.name for p in committed.glob("*.ipynb")} | {p.name for p in generated.glob("*.ipynb")}
    differing = []
    for name in sorted(names):
        a, b = committed / name, generated / name
        if not (a.exists() and b.exists()) or a.read_bytes() != b.read_bytes():
            differing.append(name)
    return differing
