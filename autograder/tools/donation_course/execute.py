"""Run a notebook top to bottom in a fresh kernel and report its errors.

Used by the test suite and the benchmarks, so that "the lesson runs" means
the same thing everywhere: nbclient, a new kernel per notebook, every cell.
"""
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbgrader.utils import is_grade, is_solution


@dataclass
class CellError:
    index: int
    cell_id: str
    ename: str
    evalue: str
    tags: list
    is_solution: bool  # an nbgrader answer cell
    is_test: bool      # an nbgrader grade cell that is not an answer cell


@dataclass
class Run:
    path: Path
    notebook: nbformat.NotebookNode
    seconds: float
    errors: list = field(default_factory=list)


def run_notebook(path, timeout: int = 120, cwd=None, env=None) -> Run:
    """Execute every cell (errors do not stop the run) and collect the errors."""
    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": str(cwd or path.parent)}},
    )
    start = time.perf_counter()
    # env goes to the kernel's start: e.g. XLA_FLAGS, or NBGRADER_EXECUTION.
    client.execute(**({"env": env} if env is not None else {}))
    seconds = time.perf_counter() - start
    return Run(path=path, notebook=nb, seconds=seconds, errors=notebook_errors(nb))


def notebook_errors(nb) -> list:
    """The error outputs of an executed notebook (by nbclient here, or by
    nbgrader's autograde), one CellError each, in cell order."""
    errors = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                errors.append(CellError(
                    index=index,
                    cell_id=cell.get("id", ""),
                    ename=out.get("ename", ""),
                    evalue=out.get("evalue", ""),
                    tags=list(cell.metadata.get("tags", [])),
                    is_solution=bool(is_solution(cell)),
                    is_test=bool(is_grade(cell)) and not is_solution(cell),
                ))
    return errors


# A code cell whose output the prose beside it describes carries what its
# output must show and must not show, in the cell's metadata:
#   "donation_lab": {"shows": ["RuntimeError: Array has been deleted"], "hides": ["ValueError"]}
# A cell that catches several exception types and prints which one it got can
# then still fail a test when JAX changes which one it raises.
OUTPUT_CLAIMS = "donation_lab"


def output_text(cell) -> str:
    """Everything a code cell printed or returned, and its error as 'Name: value'."""
    parts = []
    for out in cell.get("outputs", []):
        kind = out.get("output_type")
        if kind == "stream":
            parts.append(out.get("text", ""))
        elif kind in ("execute_result", "display_data"):
            parts.append(out.get("data", {}).get("text/plain", ""))
        elif kind == "error":
            parts.append(f"{out.get('ename', '')}: {out.get('evalue', '')}")
    return "".join(part if isinstance(part, str) else "".join(part) for part in parts)


def output_claim_mismatches(nb) -> list[str]:
    """One line per output claim (see OUTPUT_CLAIMS) that an executed notebook breaks."""
    problems = []
    for cell in nb.cells:
        claims = cell.get("metadata", {}).get(OUTPUT_CLAIMS, {})
        if cell.cell_type != "code" or not claims:
            continue
        text = output_text(cell)
        problems += [f"cell {cell.get('id')!r} should show {s!r}" for s in claims.get("shows", []) if s not in text]
        problems += [f"cell {cell.get('id')!r} should not show {s!r}" for s in claims.get("hides", []) if s in text]
    return problems
