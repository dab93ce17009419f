"""The grader's side of the runtime audit (audit.py runs in the kernel).

- `trusted_cells(course)`: the hashes ipykernel names the course's own cells
  by (every code cell of the release, every grade and locked cell of the
  source as nbgrader restores it): code in them is the course's, not the
  learner's;
- `MarkNotebookEnd` / `DropNotebookEnd`: nbgrader preprocessors around
  autograde's Execute that add (and then remove) one last cell, so the
  kernel's audit checks the hidden checks once more after the last grade
  cell, and its `end` record proves the audit channel worked to the end.
  The cell's text holds a random token made for this notebook's kernel
  (audit.end_source), which the learner cannot know in advance;
- `read_audit(folder)`: every kernel's records, their signatures checked,
  read from the log file itself (outside the sandbox), as the flags that keep
  a submission from automatic points; with the scan's results, every cell
  that ran must be one the scan read or the course's own.
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

from ...course import Course, load_config
from .audit import END_ENV, end_source

END_ID = "donation-lab-audit-end"
END_TOKEN = "donation_lab_audit_end"  # the resources key MarkNotebookEnd leaves the notebook's token under
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

    sources = set(exec_lines(course))
    for path in sorted(course.release.glob("*.ipynb")):
        sources |= {c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"}
    for path in course.source_notebooks():
        sources |= {c.source for c in nbformat.read(path, as_version=4).cells
                    if c.cell_type == "code" and (is_grade(c) or is_locked(c))}
    return sorted(set().union(*(parsed_digests(s) for s in sources)))


def exec_lines(course: Course) -> list[str]:
    """The lines the course's kernels run at start (IPKernelApp.exec_lines: the hidden checks' imports): run as
    cells, before any of the notebook's."""
    args = load_config(course.root).Execute.get("extra_arguments", [])
    return [a.split("=", 1)[1] for a in args if a.startswith("--IPKernelApp.exec_lines=")]


class MarkNotebookEnd(NbGraderPreprocessor):
    def preprocess(self, nb, resources):
        import os
        import secrets

        import nbformat

        token = secrets.token_hex(16)
        os.environ[END_ENV] = resources[END_TOKEN] = token  # kernel.py gives the audit its digests, not the token
        cell = nbformat.v4.new_code_cell(end_source(token))
        cell.id = END_ID
        nb.cells.append(cell)
        return nb, resources


class DropNotebookEnd(NbGraderPreprocessor):
    def preprocess(self, nb, resources):
        nb.cells = [c for c in nb.cells if c.get("id") != END_ID]
        return nb, resources


@functools.cache
def hidden_checks() -> dict[tuple[str, str], str]:
    """{(module, function name): check name} of every hidden check, read from the `@check("name", ...)`
    decorators of hidden/*.py. Read, not imported: the grader process that reads the
    audit never imports the hidden modules (they fill safe.NAMES only in the
    grading kernel), and an empty set would let a forged ✔ line pass unseen."""
    from donation_course import hidden

    found = {}
    for path in sorted(Path(hidden.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            for deco in getattr(node, "decorator_list", []):
                if (isinstance(deco, ast.Call) and getattr(deco.func, "id", None) == "check" and deco.args
                        and isinstance(deco.args[0], ast.Constant) and isinstance(deco.args[0].value, str)):
                    found[f"donation_course.hidden.{path.stem}", node.name] = deco.args[0].value
    return found


def hidden_check_names() -> frozenset[str]:
    """Every hidden check's name (hidden_checks)."""
    return frozenset(hidden_checks().values())


def checks_called(source: str) -> set[str]:
    """The hidden checks (by check name) a grade cell's source calls, as `alias.function(...)` with the
    alias bound by the cell's `import donation_course.hidden.MODULE as alias`."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    table = hidden_checks()
    modules = {a.asname or a.name: a.name for node in ast.walk(tree) if isinstance(node, ast.Import)
               for a in node.names}
    return {table[key] for node in ast.walk(tree) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
            if (key := (modules.get(node.func.value.id, ""), node.func.attr)) in table}


class ScoreFromSignedPasses(NbGraderPreprocessor):
    """After Execute, before nbgrader scores the grade cells (which it does by their FIRST output: an error gives 0,
    an execute_result its value or, if not a number, full marks, nothing full marks). A learner's function called by
    a check can put outputs into the grade cell, so the order of outputs must not decide a point:

    - every execute_result in a grade cell is dropped (the course's grade cells end in calls that return None: an
      execute_result there was made by the learner's code, through the display hook);
    - a grade cell that calls hidden checks keeps its points only if each of them signed a pass in that cell (the
      audit's `check` records of this notebook's kernel, found by the end token); else an error output saying so
      comes first, and the cell scores 0.

    With the audit off (no log at all), only the first rule applies; with no log that holds this notebook's end
    record (the channel was cut: the audit flags that too), no check signed a pass."""

    def preprocess(self, nb, resources):
        import os

        from nbgrader.utils import is_solution

        from ..run.kernel_settings import STUDENT_DIR_ENV
        from .audit import end_digests

        folder, token = os.environ.get(STUDENT_DIR_ENV), resources.get(END_TOKEN)
        signed = None
        if folder and token and any(Path(folder).glob("audit-*.log")):
            signed = _signed_passes(Path(folder), set(end_digests(token))) or {}
        for cell in nb.cells:
            if cell.cell_type != "code" or not is_grade(cell) or is_solution(cell):
                continue
            cell.outputs = [o for o in cell.outputs if o.get("output_type") != "execute_result"]
            if signed is None or any(o.get("output_type") == "error" for o in cell.outputs):
                continue
            missing = sorted(checks_called(cell.source) - signed.get(cell_hash(cell.source), set()))
            if missing:
                from nbformat.v4 import new_output

                text = "\n".join(f"\u2718 {name}: the grader saw no pass of this check." for name in missing)
                cell.outputs.insert(0, new_output("error", ename="HiddenCheckFailed", evalue=text, traceback=[text]))
        return nb, resources


def _signed_passes(folder: Path, ends: set[str]) -> dict[str, set[str]] | None:
    """{cell hash: names of the checks that signed a pass there}, from the log (in `folder`) of the kernel whose
    end record carries one of `ends`; None if no log does."""
    for log in sorted(folder.glob("audit-*.log")):
        try:
            records, _ = read_records(log, bytes.fromhex(log.with_suffix(".key").read_text()))
        except (OSError, ValueError):
            continue
        if any(r["kind"] == "end" and r.get("sha") in ends for r in records):
            signed: dict[str, set[str]] = {}
            for r in records:
                if r["kind"] == "check":
                    signed.setdefault(r.get("cell", ""), set()).add(r.get("name", ""))
            return signed
    return None


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
                 passes: Counter | None = None, scanned=None) -> list[AuditFlag]:
    """The flags one kernel's records give; `passes`: how many ✔ lines of each hidden check its
    notebook's grade cells show (each must be a pass the check itself signed); `scanned`: the scan's
    ScanResult of the notebook (scan.read_notebook): a cell that ran must be one it read."""
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
    if scanned is not None:
        for r in records:
            if r["kind"] == "run" and r.get("sha") not in scanned.read:
                known = scanned.unread.get(r.get("sha"))
                flags.append(AuditFlag(notebook, known.cell if known else cells.get(r.get("cell", ""), "a cell"),
                                       known.reason if known else "a cell the static scan never read ran (not in "
                                       "the notebook as submitted: sent to the kernel by other code)"))
    seqs = sorted(r.get("seq", 0) for r in records)
    if seqs != list(range(1, len(seqs) + 1)):  # the hook numbers every record it makes, written or not
        flags.append(AuditFlag(notebook, "audit", f"{(seqs[-1] if seqs else 0) - len(seqs)} record(s) missing from "
                                                  "the audit's log (its channel was redirected or closed)"))
    ends = [i for i, r in enumerate(records) if r["kind"] == "end"]
    if not ends:
        flags.append(AuditFlag(notebook, "audit", "the audit channel stopped before the notebook's end "
                                                  "(closed, redirected or the kernel died)"))
    elif any(r["kind"] in ("cell", "run") for r in records[ends[0] + 1:]):
        flags.append(AuditFlag(notebook, "audit", "cells ran after the grader's last cell"))
    return flags


def _scanned(scans: dict | None, name: str):
    """The scan's result for notebook `name`; for a log matched to no notebook, every notebook's cells together."""
    from .scan import ScanResult

    if scans is None:
        return None
    if name in scans:
        return scans[name]
    return ScanResult([], frozenset().union(*(s.read for s in scans.values())),
                      {k: v for s in scans.values() for k, v in s.unread.items()})


def read_audit(folder: Path, notebooks: dict[str, Path], scans: dict | None = None) -> dict[str, list[AuditFlag]]:
    """{notebook: flags} from the kernels' logs in `folder` (one kernel per
    notebook), each log matched to the autograded notebook whose cells it ran;
    `scans`: {notebook: scan.ScanResult}, the cells the scan read."""
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
                                                     passes.get(name), _scanned(scans, name)))
    return {name: flags for name, flags in out.items() if flags}
