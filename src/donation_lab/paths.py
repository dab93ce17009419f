"""Where the course lives on disk.

The repository root is found from DONATION_LAB_ROOT (set by ./course) or from
this file's location in an editable install (src/donation_lab/paths.py).
"""
import os
from pathlib import Path

ASSIGNMENT = "buffer-donation"


def repo_root() -> Path:
    env = os.environ.get("DONATION_LAB_ROOT")
    if env:
        return Path(env).resolve()
    return Path(__file__).resolve().parents[2]


ROOT = repo_root()
AUTOGRADER = ROOT / "autograder"
SOURCE = AUTOGRADER / "source" / ASSIGNMENT
NOTEBOOKS = ROOT / "notebooks"
SOLUTIONS = ROOT / "solutions"
