"""notebooks/ and solutions/ are exactly what the source generates."""
import shutil

import nbformat

from donation_course.authoring import drift
from donation_course.course import COURSE, NOTEBOOKS, SOLUTIONS


def test_committed_copies_match_the_source(released_course):
    fresh_nb = released_course / "release" / COURSE.assignment
    fresh_sol = released_course / "solution" / COURSE.assignment
    assert drift(NOTEBOOKS, fresh_nb) == [], "notebooks/ drifted from the source: run ./course regenerate"
    assert drift(SOLUTIONS, fresh_sol) == [], "solutions/ drifted from the source: run ./course regenerate"


def test_a_hand_edit_to_a_learner_notebook_is_caught(tmp_path):
    committed = tmp_path / "committed"
    shutil.copytree(NOTEBOOKS, committed)
    victim = sorted(committed.glob("*.ipynb"))[0]
    nb = nbformat.read(victim, as_version=4)
    nb.cells[0].source += "\n\nA sentence someone typed into the learner copy."
    nbformat.write(nb, victim)
    assert drift(committed, NOTEBOOKS) == [victim.name]


def test_a_missing_or_extra_notebook_is_caught(tmp_path):
    committed = tmp_path / "committed"
    shutil.copytree(NOTEBOOKS, committed)
    removed = sorted(committed.glob("*.ipynb"))[-1]
    removed.unlink()
    (committed / "99_extra.ipynb").write_text("{}")
    assert drift(committed, NOTEBOOKS) == sorted([removed.name, "99_extra.ipynb"])
