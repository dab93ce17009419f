"""Undo the cell edits that make nbgrader fail, or lose points unfairly, as
nbgrader preprocessors run when a submission is staged (collect.stage):

- nbgrader's own `DeduplicateIds` (as `DropDuplicateIds`): a grade_id used
  twice keeps one cell (nbgrader's choice: the last), the others become
  ordinary cells;
- `RestoreDeletedCells`: a grade or locked cell the learner deleted is put
  back from the release, after the nearest earlier release cell still
  there (nbgrader then puts its instructor source back when it autogrades).

`repair(nb, release)` runs both and returns one note per change, for the report.
"""
from __future__ import annotations

from nbgrader.preprocessors import DeduplicateIds, NbGraderPreprocessor
from nbgrader.utils import is_grade, is_locked
from traitlets import Any

from ...course import grade_id


class DropDuplicateIds(DeduplicateIds):
    """nbgrader's DeduplicateIds, leaving no empty nbgrader metadata behind: it
    empties a duplicate's, which nbgrader's own validation (run before its
    sanitizing) would reject as a schema-0 cell, so the key goes."""

    def preprocess_cell(self, cell, resources, index):
        cell, resources = super().preprocess_cell(cell, resources, index)
        if "nbgrader" in cell.metadata and not cell.metadata["nbgrader"]:
            del cell.metadata["nbgrader"]
        return cell, resources


class RestoreDeletedCells(NbGraderPreprocessor):
    """Put back, from `release`, every grade or locked cell missing from the notebook."""

    release = Any(None, help="The released notebook the submission started from.")

    def preprocess(self, nb, resources):
        self.restored = []
        present = {grade_id(c) for c in nb.cells} - {None}
        ids = [c.get("id") for c in nb.cells]
        release_cells = self.release.cells if self.release is not None else []
        for i, cell in enumerate(release_cells):
            gid = grade_id(cell)
            if gid is None or gid in present or not (is_grade(cell) or is_locked(cell)):
                continue
            pos = 0  # after the nearest earlier release cell that is still there
            for prev in reversed(release_cells[:i]):
                if prev.get("id") in ids:
                    pos = ids.index(prev.get("id")) + 1
                    break
            nb.cells.insert(pos, cell)
            ids.insert(pos, cell.get("id"))
            present.add(gid)
            self.restored.append(gid)
        return nb, resources


def repair(nb, release) -> list[str]:
    """Deduplicate grade ids, restore deleted cells; return notes of what changed."""
    before = [grade_id(c) for c in nb.cells]
    nb, _ = DropDuplicateIds().preprocess(nb, {})
    after = [grade_id(c) for c in nb.cells]
    notes = [f"duplicated cell {gid} ignored" for gid, kept in zip(before, after, strict=True)
             if gid is not None and kept is None]
    if release is not None:
        restore = RestoreDeletedCells(release=release)
        restore.preprocess(nb, {})
        notes += [f"deleted cell {gid} restored" for gid in restore.restored]
    return notes
