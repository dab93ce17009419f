"""Run one notebook's code cells in this process, in IPython's shell, for the compile cache's fill
(compile_cache.py): `python -P -m donation_course.grading.run.fill_cells NOTEBOOK`, in the grading kernels'
fixed environment, its working folder a scratch one.

The fill ran each notebook in a Jupyter kernel, as grading runs it: one Python for the kernel client (nbclient)
and one for the kernel (ipykernel), talking over ZeroMQ. What the fill keeps is only what JAX compiles, and the
programs are the cells' own: IPython's shell in a fresh Python compiles the same ones, under the same cache keys
(tests/test_grading.py compares the two), in a little more than half the time (2.4 s -> 1.4 s for lesson 7's
fill on the reference machine), and the fill is what a fresh course's first student waits for.

The cells run in order in one shell, as in a kernel; a cell that raises is shown and the next one runs (nbclient's
allow_errors, as the fill ran before). A cell that ends the process ends the fill: compile_cache.Filling reports it.
"""
from __future__ import annotations

import sys


def run_cells(path: str) -> None:
    import nbformat
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.enabled = False  # no history database in the scratch home
    config.InteractiveShell.xmode = "Plain"
    shell = InteractiveShell.instance(config=config)
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type == "code":
            shell.run_cell(cell.source, store_history=True)


def wait_for_notebook(parent: int) -> None:
    """`fill_cells --wait PARENT`: a fill started before the run knew whether it fills (compile_cache.EarlyFill).
    Import what the cells will, then run the notebook that comes on stdin (one JSON line: its path, and what to
    add to the environment first); nothing, if stdin closes first. Dies with the run's process."""
    import json
    import os

    from ..integrity.lifetime import die_with

    die_with(parent)
    import jax  # noqa: F401  (what every fill's cells import first, and IPython's shell)
    import jax.numpy  # noqa: F401
    import nbformat  # noqa: F401
    from IPython.core.interactiveshell import InteractiveShell  # noqa: F401

    line = sys.stdin.readline()
    if line.strip():
        job = json.loads(line)
        os.environ.update(job["env"])
        run_cells(job["notebook"])


if __name__ == "__main__":
    if sys.argv[1] == "--wait":
        wait_for_notebook(int(sys.argv[2]))
    else:
        run_cells(sys.argv[1])
