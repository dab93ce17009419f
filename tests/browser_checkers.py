"""The checkers of tests/test_browser.py: whether a Run All was clean
(`run_problems`), whether the memory explorer rendered (`explorer_problems`)
and responds (`change_explorer_control`), and a deliberately broken notebook
they must catch (`broken_notebook`); and the README's pictures in docs/images
(`refresh_docs_image`, `crop_cells`)."""
import os
from pathlib import Path

import nbformat

from browser_driver import DOCS_IMAGES, RUN_TIMEOUT_MS


def run_problems(nb_path: Path, allowed=()):
    """What is wrong with a Run All, read from the notebook as saved.

    A code cell that was not run (Run All stopped before it) or that shows an
    error is a problem, unless it is tagged raises-exception or its index is in
    `allowed`. Returns readable lines; [] means a clean run."""
    nb = nbformat.read(nb_path, as_version=4)
    problems = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or not cell.source.strip():
            continue
        tags = cell.metadata.get("tags", [])
        first = cell.source.strip().splitlines()[0][:60]
        errors = [o for o in cell.outputs if o.output_type == "error"]
        if errors and "raises-exception" not in tags and index not in allowed:
            e = errors[0]
            problems.append(f"cell {index} ({first!r}) raised {e.ename}: {e.evalue}")
        if cell.execution_count is None and index not in allowed:
            problems.append(f"cell {index} ({first!r}) was not run")
    return problems


EXPLORER_SELECTOR = ".donation-explorer"


def explorer_problems(page):
    """Did the memory explorer render? Returns readable lines; [] means yes."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    panel = page.locator(".jp-NotebookPanel")
    problems = []
    try:  # a widget view shows "Loading widget..." until it renders or fails
        page.wait_for_function(
            "() => !document.querySelector('.jp-NotebookPanel').innerText.includes('Loading widget...')",
            timeout=30_000)
    except PlaywrightTimeout:
        pass  # still loading after 30 s: reported below
    if panel.locator(EXPLORER_SELECTOR).count() == 0:
        problems.append(f"no memory explorer ({EXPLORER_SELECTOR}) in the notebook")
    elif not panel.locator(EXPLORER_SELECTOR).first.is_visible():
        problems.append("the memory explorer is in the page but not visible")
    text = panel.inner_text()
    for bad in ("Error displaying widget", "Loading widget...", "Failed to load model class"):
        if bad in text:
            problems.append(f"the page says {bad!r}")
    return problems


def exercise_cells(nb_path: Path):
    """Indices of unanswered answer cells and the graded checks after them."""
    nb = nbformat.read(nb_path, as_version=4)
    out, seen_answer = set(), False
    for i, cell in enumerate(nb.cells):
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and "NotImplementedError" in cell.source:
            out.add(i)
            seen_answer = True
        elif meta.get("grade") and seen_answer:
            out.add(i)
    return out


def change_explorer_control(page, explorer, timeout_ms=RUN_TIMEOUT_MS):
    """Move the Steps slider one notch; the explorer measures again, so the
    figures and the chart must both change. Returns (before, after) text."""
    figures = explorer.locator(".explorer-figures")
    chart = explorer.locator(".explorer-chart img")
    figures.locator("[data-runs]").wait_for()
    chart.first.wait_for()
    before_text, before_png = figures.inner_text(), chart.first.get_attribute("src")
    runs = int(figures.locator("[data-runs]").get_attribute("data-runs"))
    handle = explorer.locator(".explorer-steps .noUi-handle").first
    handle.focus()
    page.keyboard.press("ArrowRight")
    explorer.locator(f".explorer-figures [data-runs='{runs + 1}']").wait_for(timeout=timeout_ms)
    page.wait_for_function(
        "([el, old]) => el.querySelector('.explorer-chart img') && "
        "el.querySelector('.explorer-chart img').getAttribute('src') !== old",
        arg=[explorer.element_handle(), before_png], timeout=timeout_ms)
    after_text = figures.inner_text()
    assert after_text != before_text, "the figures did not change"
    return before_text, after_text


def broken_notebook(path: Path):
    """A lesson gone wrong: a widget whose model does not exist, a cell tagged
    raises-exception (allowed), a cell that errors, and one after it."""
    cells = [
        nbformat.v4.new_code_cell(
            "from IPython.display import display\n"
            "display({'application/vnd.jupyter.widget-view+json':\n"
            "         {'model_id': 'no-such-model', 'version_major': 2, 'version_minor': 0}}, raw=True)"),
        nbformat.v4.new_code_cell("raise ValueError('shown on purpose')",
                                  metadata={"tags": ["raises-exception"]}),
        nbformat.v4.new_code_cell("after_tagged = 1"),
        nbformat.v4.new_code_cell("1 / 0"),
        nbformat.v4.new_code_cell("after_error = 2"),
    ]
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                 "language": "python"}
    nbformat.write(nb, path)
    return path


def refresh_docs_image(name):
    """README pictures are committed: write one only when it is missing or
    when DONATION_LAB_REFRESH_IMAGES=1, so a test run leaves the tree clean."""
    DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
    return not (DOCS_IMAGES / name).exists() or os.environ.get("DONATION_LAB_REFRESH_IMAGES") == "1"


def crop_cells(page, cells, dest):
    """One small picture spanning the given cells (README figure)."""
    boxes = [c.bounding_box() for c in cells]
    x = min(b["x"] for b in boxes)
    y = min(b["y"] for b in boxes)
    right = max(b["x"] + b["width"] for b in boxes)
    bottom = max(b["y"] + b["height"] for b in boxes)
    page.screenshot(path=str(dest), clip={"x": x, "y": y, "width": right - x, "height": bottom - y})
