"""The repository is laid out as the README says, and the pins agree."""
import re

from donation_course.course import COURSE, ROOT

SOURCE = COURSE.source


def test_top_level_layout():
    for name in ["notebooks", "autograder", "solutions", "binder", "requirements.txt", "README.md",
                 "requirements-instructor.txt", "requirements-test.txt",
                 "pyproject.toml", "src/donation_lab", "tests", "benchmarks", ".ci/run", ".gitignore",
                 "course", "autograder/nbgrader_config.py", "autograder/tools/pyproject.toml",
                 "autograder/tools/donation_course"]:
        assert (ROOT / name).exists(), f"missing {name}"


def test_lessons_are_numbered_and_the_exercise_is_last():
    names = sorted(p.name for p in SOURCE.glob("*.ipynb"))
    assert names, "no source notebooks"
    numbers = [int(n[:2]) for n in names]
    assert all(re.match(r"^\d\d_[a-z0-9_]+\.ipynb$", n) for n in names), names
    assert numbers == list(range(1, len(names) + 1)), f"lessons not numbered 01..N in order: {names}"
    assert names[-1] == f"{COURSE.exercise}.ipynb", names  # the notebook holding the exercise's answer cell


def _pins(path):
    """Exact pins of a requirements file, following its `-r` includes."""
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-r "):
            pins.update(_pins(path.parent / line[3:].strip()))
        elif line and not line.startswith("-"):
            assert "==" in line, f"{path.name}: not an exact pin: {line!r}"
            name, version = line.split("==")
            pins[name.lower()] = version
    return pins


def test_requirements_are_exact_pins_of_the_stack():
    pins = _pins(ROOT / "requirements.txt")
    assert pins["jax"] == "0.12.0.1" and pins["jaxlib"] == "0.12.0.1"
    assert pins["nbgrader"] == "0.9.6"
    assert pins["jupyterlab"].startswith("4.6.")
    assert pins["ipywidgets"].startswith("8.1.")
    for name in ["matplotlib", "nbclient", "psutil"]:
        assert name in pins, f"{name} is not pinned"
    # pytest is a learner pin: lesson 03 runs it to show warnings as failures.
    assert "pytest" in pins
    # The instructor's tools add to the learner's pins and change none of them.
    instructor = _pins(ROOT / "requirements-instructor.txt")
    assert "tqdm" in instructor and "tqdm" not in pins
    assert {k: instructor[k] for k in pins} == pins
    test_pins = _pins(ROOT / "requirements-test.txt")
    assert "playwright" in test_pins and "playwright" not in instructor
    assert {k: test_pins[k] for k in instructor} == instructor


def test_binder_uses_the_learners_pins():
    # binder/requirements.txt includes requirements.txt: one list of pins, no copy to keep equal.
    assert _pins(ROOT / "binder" / "requirements.txt") == _pins(ROOT / "requirements.txt")
    assert "-r ../requirements.txt" in (ROOT / "binder" / "requirements.txt").read_text()
    assert (ROOT / "binder" / "runtime.txt").read_text().strip() == "python-3.12"
    post_build = (ROOT / "binder" / "postBuild").read_text().splitlines()
    first_command = next(ln for ln in post_build if ln.strip() and not ln.startswith("#"))
    assert re.fullmatch(r"set -[a-z]*e[a-z]*( .*)?", first_command.strip()), \
        f"postBuild must begin with set -e (errexit), not {first_command!r}"
