"""nbgrader's own layouts: the exchange's `submitted/` folder, and a flat folder of notebooks.

Their ids are the school's logins (JupyterHub's user names, or what the instructor typed):
no LMS's own numbers, so any LMS's import file can key them (Canvas's `SIS Login ID`,
Moodle's `Username` or the roster's e-mail, Blackboard's `Username`).

- `nbgrader`: `<student>/<assignment>/<notebook>.ipynb`, and nbgrader's `timestamp.txt`
  beside them (its sidecar), read as UTC as nbgrader writes it.
- `flat` (the fallback, never detected): `<student>_<notebook>.ipynb`, or `<student>.ipynb`
  for the graded exercise; nothing orders two files of one notebook.
"""
from __future__ import annotations

from pathlib import Path

from .base import PREFIX, Lms, Sidecars


class TimestampFiles(Sidecars):
    def apply(self, gd: dict, path: Path) -> dict | None:
        ts = path.parent / "timestamp.txt"
        if not gd.get("timestamp") and ts.is_file() and ts.read_text().strip():
            gd["timestamp"], gd["utc"] = ts.read_text().strip(), True
        return gd


class Exchange(Lms):
    def sidecars(self, files, rels, collector, assignment) -> Sidecars:
        return TimestampFiles()

    def skips(self, rel: str) -> bool:
        return Path(rel).name == "timestamp.txt"


EXCHANGE = Exchange(
    name="nbgrader", title="nbgrader", neutral_ids=True,
    pattern=PREFIX + r"(?P<student_id>[^/]+)/{assignment}/(?P<file_id>[^/]+)$",
    layout="<student>/<assignment>/<notebook>.ipynb (+ timestamp.txt)",
    signature=r"(?:^|[/ ]){student}/{assignment}/")

FLAT = Lms(
    name="flat", title="a flat folder", neutral_ids=True, detected=False,
    pattern=PREFIX + r"(?P<student_id>[^/_]+)(?:_(?P<file_id>[^/]+?))?\.ipynb$",
    layout="<student>_<notebook>.ipynb (the id may hold `_`), or <student>[_anything].ipynb for the exercise")

LMSES = (EXCHANGE, FLAT)  # registered by lms/__init__.py
