"""One lesson page: the learner's copy, with the outputs of the solved copy's run.

The solved copy (`solutions/`, made by `./course regenerate`) runs on the
pinned JAX, so every cell after an exercise has the state it needs and
shows its real output. The page, though, shows every cell's source as the
learner's copy (`notebooks/`) has it. Cells are matched by their ids, and
what a cell is comes from nbgrader's metadata (`nbgrader.utils`):

- an answer cell (solution) shows the learner's starting code and no output;
- a check cell (grade, not solution) shows its code and, for an output, a
  note that the check runs in JupyterLab (never an error box);
- every other code cell keeps its real output, cleaned (scrub.py), with a
  widget replaced by its static picture (widgets.py);
- markdown cells are the learner's, hints (`<details>`) stay collapsed.

A cell that is neither an answer, a check nor tagged `raises-exception` and
raised anyway stops the build: the page would show a broken lesson.
"""
import copy
import html
from dataclasses import dataclass

import nbformat
from nbformat.v4 import new_markdown_cell, new_output
from nbgrader.utils import is_grade, is_solution

from .widgets import is_widget_view, static_outputs, widget_state

RAISES = "raises-exception"
CHECK_NOTE = ("This check runs when you run the lesson in JupyterLab: "
              "it tells you whether your answer above is right.")
ANSWER_TAG, CHECK_TAG = "site-answer", "site-check"  # classes on the page's cells (myst-nb: tag_<name>)


class PageError(Exception):
    """The executed lesson cannot become a page; the message says which cell and why."""


@dataclass(frozen=True)
class RunLinks:
    binder: str      # Binder, opening this lesson
    jupyterlab: str  # a local `./course lab`, opening this lesson


def run_links(name: str, repository: str, branch: str, port: int) -> RunLinks:
    """Binder serves notebooks/ (binder/start), as `./course lab` does: a lesson's path is its file name."""
    return RunLinks(
        binder=f"https://mybinder.org/v2/gh/{repository}/{branch}?urlpath=lab/tree/{name}",
        jupyterlab=f"http://127.0.0.1:{port}/lab/tree/{name}",
    )


def links_cell(links: RunLinks):
    body = (f'<div class="run-live">Run this lesson live: '
            f'<a class="run-binder" href="{html.escape(links.binder)}">on Binder</a>, or '
            f'<a class="run-jupyterlab" href="{html.escape(links.jupyterlab)}">open it in JupyterLab</a> '
            f'in your checkout after <code>./course lab</code>.</div>')
    return new_markdown_cell(body, metadata={"tags": ["site-run-links"]})


def check_note_output():
    return new_output("display_data", data={
        "text/html": f'<p class="site-check-note">{html.escape(CHECK_NOTE)}</p>',
        "text/plain": CHECK_NOTE,
    })


def _tag(cell, tag):
    cell.metadata["tags"] = [*cell.metadata.get("tags", []), tag]


def make_page(learner, executed, links: RunLinks, scrub) -> nbformat.NotebookNode:
    """The page notebook for one lesson (see the module's docstring)."""
    ran = {cell.get("id"): cell for cell in executed.cells}
    state = widget_state(executed)
    page = nbformat.v4.new_notebook(metadata={k: copy.deepcopy(v) for k, v in learner.metadata.items()
                                              if k in ("kernelspec", "language_info")})
    for index, cell in enumerate(learner.cells):
        cell = copy.deepcopy(cell)
        if cell.cell_type == "code":
            answer, check = is_solution(cell), is_grade(cell) and not is_solution(cell)
            cell.execution_count = None
            if answer:
                cell.outputs = []
                _tag(cell, ANSWER_TAG)
            elif check:
                cell.outputs = [check_note_output()]
                _tag(cell, CHECK_TAG)
            else:
                if cell.get("id") not in ran:
                    raise PageError(f"cell {cell.get('id')!r} of the learner's copy is not in the solved copy's run")
                cell.outputs = _real_outputs(ran[cell.id], state, scrub)
        cell.metadata = {k: v for k, v in cell.metadata.items() if k == "tags"}
        page.cells.append(cell)
        if index == 0:
            page.cells.append(links_cell(links))
    return page


def _real_outputs(cell, state, scrub) -> list:
    outputs = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error" and RAISES not in cell.metadata.get("tags", []):
            raise PageError(f"cell {cell.get('id')!r} raised {out.get('ename')}: {out.get('evalue', '')[:200]} "
                            f"(only answer cells, checks and cells tagged {RAISES!r} may)")
        if is_widget_view(out):
            outputs += [_scrubbed(o, scrub) for o in static_outputs(out, state)]
        else:
            outputs.append(_scrubbed(out, scrub))
    return outputs


def _scrubbed(out, scrub):
    out = copy.deepcopy(out)
    if out.get("output_type") == "execute_result":
        out["execution_count"] = None
    out["metadata"] = {}
    if "text" in out:
        out["text"] = scrub(_joined(out["text"]))
    if "evalue" in out:
        out["evalue"] = scrub(out["evalue"])
    if "traceback" in out:
        out["traceback"] = [scrub(line) for line in out["traceback"]]
    for kind, value in out.get("data", {}).items():
        if kind.startswith("text/") or kind == "image/svg+xml":
            out["data"][kind] = scrub(_joined(value))
    return out


def _joined(value) -> str:
    return value if isinstance(value, str) else "".join(value)
