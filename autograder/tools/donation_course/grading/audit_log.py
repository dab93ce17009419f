"""The grader's side of the runtime audit (audit.py runs in the kernel).

- `trusted_cells(course)`: the hashes ipykernel names the course's own cells
  by (every code cell of the release, every grade and locked cell of the
  source as nbgrader restores it): code in them is the course's, not the
  learner's;
- `MarkNotebookEnd` / `DropNotebookEnd`: nbgrader preprocessors around
  autograde's Execute that add (and then remove) one last cell, so the
  kernel's audit checks the hidden checks once more after the last grade
  cell, and its record proves the audit channel worked to the end;
- `read_audit(folder)`: every kernel's records, their signatures checked,
  as the flags that keep a submission from automatic points.
"""
from __future__ import annotations

import hmac
import json
from dataclasses import dataclass
from hashlib import sha256
from pathlib import Path

from nbgrader.preprocessors import NbGraderPreprocessor
from nbgrader.utils import is_grade, is_locked

from ..course import Course

END_SOURCE = "# the grader's audit: end of notebook\npass"
END_ID = "donation-lab-audit-end"
HASH_SEED = 0xC70F6907  # ipykernel.compiler.get_tmp_hash_seed(): the name of a cell's code is this hash


def cell_hash(source: str) -> str:
    from ipykernel.compiler import murmur2_x86

    return str(murmur2_x86(source, HASH_SEED))


def trusted_cells(course: Course) -> list[str]:
    import nbformat

    hashes = {cell_hash(END_SOURCE)}
    for path in sorted(course.release.glob("*.ipynb")):
        hashes |= {cell_hash(c.source) for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"}
    for path in course.source_notebooks():
        hashes |= {cell_hash(c.source) for c in nbformat.read(path, as_version=4).cells
                   if c.cell_type == "code" and (is_grade(c) or is_locked(c))}
    return sorted(hashes)


class MarkNotebookEnd(NbGraderPreprocessor):
    def preprocess(self, nb, resources):
        import nbformat

        cell = nbformat.v4.new_code_cell(END_SOURCE)
        cell.id = END_ID
        nb.cells.append(cell)
        return nb, resources


class DropNotebookEnd(NbGraderPreprocessor):
    def preprocess(self, nb, resources):
        nb.cells = [c for c in nb.cells if c.get("id") != END_ID]
        return nb, resources


@dataclass(frozen=True)
class AuditFlag:
    """One thing the audit saw, in the scan's Flag shape (result.flag reads .reason and str())."""

    notebook: str
    where: str
    reason: str

    def __str__(self) -> str:
        return f"{self.notebook}/{self.where}: {self.reason}"


def read_records(log: Path, key: bytes) -> tuple[list[dict], int]:
    """(the records whose signature holds, how many lines did not)."""
    good, bad = [], 0
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        body, _, mac = line.rpartition("\t")
        if body and hmac.compare_digest(mac, hmac.new(key, body.encode(), sha256).hexdigest()):
            good.append(json.loads(body))
        elif line.strip():
            bad += 1
    return good, bad


def kernel_flags(records: list[dict], bad: int, notebook: str, cells: dict[str, str]) -> list[AuditFlag]:
    where = lambda r: f"{cells.get(r.get('cell', ''), 'a cell')} line {r.get('line', '?')}"  # noqa: E731
    flags = [AuditFlag(notebook, where(r), f"at run time: {r['what']}") for r in records if r["kind"] == "event"]
    flags += [AuditFlag(notebook, cells.get(r["cell"], "a cell"), "replaced the grader's checks: "
                        + ", ".join(r["what"])) for r in records if r["kind"] == "tamper"]
    if bad:
        flags.append(AuditFlag(notebook, "audit", f"{bad} line(s) written into the grader's audit channel"))
    if not any(r["kind"] == "cell" and r["cell"] == cell_hash(END_SOURCE) for r in records):
        flags.append(AuditFlag(notebook, "audit", "the audit channel stopped before the notebook's end "
                                                  "(closed, redirected or the kernel died)"))
    return flags


def read_audit(folder: Path, notebooks: dict[str, Path]) -> dict[str, list[AuditFlag]]:
    """{notebook: flags} from the kernels' logs in `folder` (one kernel per
    notebook), each log matched to the autograded notebook whose cells it ran."""
    import nbformat

    cells = {}
    for name, path in notebooks.items():
        found = {}
        if path.exists():
            for i, c in enumerate(nbformat.read(path, as_version=4).cells):
                if c.cell_type == "code":
                    found.setdefault(cell_hash(c.source), f"cell {c.get('id') or i + 1}")
        cells[name] = found
    out: dict[str, list[AuditFlag]] = {}
    for log in sorted(folder.glob("audit-*.log")):
        records, bad = read_records(log, bytes.fromhex(log.with_suffix(".key").read_text()))
        ran = {r.get("cell") for r in records} - {None}
        name = max(cells, key=lambda n: len(ran & set(cells[n])), default="")
        if name and not ran & set(cells[name]) and len(cells) > 1:
            name = "a notebook"  # its kernel ran no cell: which one it was is not known
        out.setdefault(name, []).extend(kernel_flags(records, bad, name, cells.get(name, {})))
    return {name: flags for name, flags in out.items() if flags}
