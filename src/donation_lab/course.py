"""Build the learner notebooks and the solutions from the one nbgrader source.

`autograder/source/buffer-donation/` is the only place a lesson is written.
`notebooks/` is exactly what `nbgrader generate_assignment` releases, and
`solutions/` is what `nbgrader generate_solution` makes with the hidden tests
removed (see autograder/nbgrader_config.py). Both run real nbgrader in a
scratch copy of the course, so the instructor's gradebook is never touched.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat

from .paths import ASSIGNMENT, AUTOGRADER, NOTEBOOKS, SOLUTIONS, SOURCE


class CourseError(Exception):
    """A problem the user can fix; its message is one line, shown as is."""


def venv_env() -> dict:
    """The environment for nbgrader subprocesses: the venv's bin/ on PATH,
    because nbgrader runs `alembic` by name."""
    env = dict(os.environ)
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    return env


def nbgrader_command(*args: str) -> list:
    return [sys.executable, "-m", "nbgrader", *args]


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


def source_notebooks(source: Path = SOURCE) -> list:
    paths = sorted(source.glob("*.ipynb"))
    if not paths:
        raise CourseError(f"no notebooks in {source}")
    return paths


def check_sources(source: Path = SOURCE) -> None:
    for path in source_notebooks(source):
        read_notebook(path)


def run_nbgrader(course: Path, *args: str) -> None:
    result = subprocess.run(
        nbgrader_command(*args),
        cwd=course,
        env=venv_env(),
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        lines = [ln for ln in (result.stdout + result.stderr).splitlines() if "ERROR" in ln]
        detail = lines[-1].strip() if lines else f"exit code {result.returncode}"
        raise CourseError(f"nbgrader {args[0]} failed: {detail}")


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


def regenerate(notebooks: Path = NOTEBOOKS, solutions: Path = SOLUTIONS, source: Path = SOURCE) -> list:
    """Regenerate learner notebooks and solutions; return the notebook names."""
    check_sources(source)
    with tempfile.TemporaryDirectory(prefix="donation-lab-regen-") as tmp:
        course = Path(tmp)
        shutil.copy2(AUTOGRADER / "nbgrader_config.py", course / "nbgrader_config.py")
        shutil.copytree(source, course / "source" / ASSIGNMENT)
        run_nbgrader(course, "generate_assignment", ASSIGNMENT, "--force")
        run_nbgrader(course, "generate_solution", ASSIGNMENT, "--force")
        _replace_dir_contents(course / "release" / ASSIGNMENT, notebooks)
        _replace_dir_contents(course / "solution" / ASSIGNMENT, solutions)
    return [p.name for p in source_notebooks(source)]


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
