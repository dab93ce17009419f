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

import ast
import functools
import hmac
import json
from collections import Counter
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
    """The name ipykernel gives a cell's code (a 32-bit hash of its source): to find a cell, not to trust it."""
    from ipykernel.compiler import murmur2_x86

    return str(murmur2_x86(source, HASH_SEED))


def parsed_digests(source: str) -> set[str]:
    """SHA-256 of the text IPython parses for a cell (after its input transformation; a one-line
    cell passes IPython's prefilter, which may end it with one more newline)."""
    from IPython.core.inputtransformer2 import TransformerManager

    text = TransformerManager().transform_cell(source)
    return {sha256(t.encode()).hexdigest() for t in (text, text.rstrip("\n") + "\n", text + "\n")}


def trusted_cells(course: Course) -> list[str]:
    """The course's own cells, as the audit recognises them (audit.py: by the exact text parsed)."""
    import nbformat

    sources = {END_SOURCE}
    for path in sorted(course.release.glob("*.ipynb")):
        sources |= {c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"}
    for path in course.source_notebooks():
        sources |= {c.source for c in nbformat.read(path, as_version=4).cells
                    if c.cell_type == "code" and (is_grade(c) or is_locked(c))}
    return sorted(set().union(*(parsed_digests(s) for s in sources)))


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


@functools.cache
def hidden_check_names() -> frozenset[str]:
    """Every hidden check's name, read from the `@check("name", ...)` decorators
    of hidden/*.py. Read, not imported: the grader process that reads the
    audit never imports the hidden modules (they fill safe.NAMES only in the
    grading kernel), and an empty set would let a forged ✔ line pass unseen."""
    from donation_course import hidden

    names = set()
    for path in sorted(Path(hidden.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            for deco in getattr(node, "decorator_list", []):
                if (isinstance(deco, ast.Call) and getattr(deco.func, "id", None) == "check" and deco.args
                        and isinstance(deco.args[0], ast.Constant) and isinstance(deco.args[0].value, str)):
                    names.add(deco.args[0].value)
    return frozenset(names)


def pass_lines(cell) -> Counter:
    """{hidden check name: ✔ lines} in a grade cell's printed output."""
    names = hidden_check_names()
    found = Counter()
    for out in cell.get("outputs", []):
        for line in out.get("text", "").splitlines() if out.get("output_type") == "stream" else []:
            name = line[2:].split(": ", 1)[0] if line.startswith("\u2714 ") else None
            if name in names:
                found[name] += 1
    return found


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


def kernel_flags(records: list[dict], bad: int, notebook: str, cells: dict[str, str],
                 passes: Counter | None = None) -> list[AuditFlag]:
    """The flags one kernel's records give; `passes`: how many ✔ lines of each hidden check its
    notebook's grade cells show (each must be a pass the check itself signed)."""
    passes = passes or Counter()
    where = lambda r: f"{cells.get(r.get('cell', ''), 'a cell')} line {r.get('line', '?')}"  # noqa: E731
    flags = [AuditFlag(notebook, where(r), f"at run time: {r['what']}") for r in records if r["kind"] == "event"]
    flags += [AuditFlag(notebook, cells.get(r["cell"], "a cell"), "replaced the grader's checks: "
                        + ", ".join(r["what"])) for r in records if r["kind"] == "tamper"]
    if bad:
        flags.append(AuditFlag(notebook, "audit", f"{bad} line(s) written into the grader's audit channel"))
    signed = Counter(r.get("name") for r in records if r["kind"] == "check")
    for name, count in sorted(passes.items()):
        if count > signed.get(name, 0):
            flags.append(AuditFlag(notebook, "audit", f"the pass line of check {name!r} was printed "
                                                      f"{count} time(s), {signed.get(name, 0)} by the check"))
    if not any(r["kind"] == "cell" and r["cell"] == cell_hash(END_SOURCE) for r in records):
        flags.append(AuditFlag(notebook, "audit", "the audit channel stopped before the notebook's end "
                                                  "(closed, redirected or the kernel died)"))
    return flags


def read_audit(folder: Path, notebooks: dict[str, Path]) -> dict[str, list[AuditFlag]]:
    """{notebook: flags} from the kernels' logs in `folder` (one kernel per
    notebook), each log matched to the autograded notebook whose cells it ran."""
    import nbformat

    cells, passes = {}, {}
    for name, path in notebooks.items():
        found, passes[name] = {}, Counter()
        if path.exists():
            for i, c in enumerate(nbformat.read(path, as_version=4).cells):
                if c.cell_type == "code":
                    found.setdefault(cell_hash(c.source), f"cell {c.get('id') or i + 1}")
                if c.cell_type == "code" and is_grade(c):
                    passes[name] += pass_lines(c)
        cells[name] = found
    out: dict[str, list[AuditFlag]] = {}
    for log in sorted(folder.glob("audit-*.log")):
        records, bad = read_records(log, bytes.fromhex(log.with_suffix(".key").read_text()))
        ran = {r.get("cell") for r in records} - {None}
        name = max(cells, key=lambda n: len(ran & set(cells[n])), default="")
        if name and not ran & set(cells[name]) and len(cells) > 1:
            name = "a notebook"  # its kernel ran no cell: which one it was is not known
        out.setdefault(name, []).extend(kernel_flags(records, bad, name, cells.get(name, {}),
                                                     passes.get(name)))
    return {name: flags for name, flags in out.items() if flags}
