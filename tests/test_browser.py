"""What a learner sees in JupyterLab, driven through Debian's chromium.

JupyterLab is started with the README's lab command (`./course lab`, through
conftest's `start_lab`) on a free port, serving a scratch copy of the lessons
so that running and editing them never touches notebooks/. Playwright (sync
API) drives /usr/bin/chromium; it never downloads a browser of its own.

The checks that decide whether a run was clean (`run_problems`,
`explorer_problems`) are the same functions that `test_checker_catches_*`
feed a deliberately broken copy, so a broken lesson cannot pass silently.

Screenshots go to tests/artifacts/browser/ (gitignored); two cropped ones are
refreshed in docs/images/ for the README.
"""
import json
import os
import shutil
import time
from pathlib import Path

import nbformat
import pytest

from conftest import ROOT, answered_copy, start_lab
from donation_lab.paths import NOTEBOOKS

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = ROOT / "tests" / "artifacts" / "browser"
DOCS_IMAGES = ROOT / "docs" / "images"
LESSON = "01_why_donate.ipynb"
EXERCISE = "07_update_with_donate.ipynb"
# This machine has no network: nothing in chromium may try to reach one.
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
    "--disable-default-apps", "--disable-extensions", "--metrics-recording-only",
]
RUN_TIMEOUT_MS = 240_000

CORRECT_ANSWER = (
    "@functools.partial(jax.jit, donate_argnums=(0,))\n"
    "def update_with_donate(state, delta):\n"
    "    return state + delta\n"
)
WRONG_ANSWER = CORRECT_ANSWER.replace("state + delta", "state - delta")


# --------------------------------------------------------------------------- fixtures

def require_chromium():
    if CHROMIUM.exists():
        return
    reason = (f"Debian's chromium is missing ({CHROMIUM}); install it with "
              "`apt-get install chromium` (.ci/run does)")
    if os.environ.get("CI"):
        pytest.fail(f"{reason}: CI must run the browser tests")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser():
    require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


def serve(env, tmp_path, root: Path):
    """Start the README's lab command, serving `root` instead of notebooks/.

    `./course lab` already passes --ServerApp.root_dir, and jupyter refuses a
    second value for it, so the scratch folder is given to the contents and
    kernel managers (whose root_dir otherwise defaults to the server's).
    """
    workspaces = tmp_path / "workspaces"  # never restore or write the user's own layout
    workspaces.mkdir(exist_ok=True)
    return start_lab(env, tmp_path, extra=[
        f"--FileContentsManager.root_dir={root}",
        f"--MappingKernelManager.root_dir={root}",
        f"--LabApp.workspaces_dir={workspaces}",
    ])


@pytest.fixture(scope="module")
def course_copy(tmp_path_factory):
    """The learner notebooks as served to the browser: a scratch copy, with
    lesson 01's exercise answered (as a learner who solved it saves it)."""
    root = tmp_path_factory.mktemp("served")
    for nb in NOTEBOOKS.glob("*.ipynb"):
        shutil.copy2(nb, root / nb.name)
    answered_copy(LESSON, root / LESSON)
    shutil.copy2(NOTEBOOKS / LESSON, root / ("unanswered_" + LESSON))
    return root


@pytest.fixture(scope="module")
def lab(env, course_copy, tmp_path_factory):
    server = serve(env, tmp_path_factory.mktemp("lab"), course_copy)
    try:
        yield server
    finally:
        server.stop()  # also when a test failed


@pytest.fixture
def page(browser):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(60_000)
    pg = context.new_page()
    try:
        yield pg
    finally:
        context.close()


# --------------------------------------------------------------------------- driving JupyterLab

def shot(page, name, element=None):
    target = element if element is not None else page
    path = ARTIFACTS / f"{name}.png"
    target.screenshot(path=str(path))
    return path


def open_notebook(page, server, name):
    # ?reset: start from an empty layout, so only this notebook is open.
    page.goto(f"{server.base}/lab/tree/{name}?reset&token={server.token}")
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=120_000)
    page.wait_for_function(
        "() => document.querySelectorAll('.jp-NotebookPanel').length === 1 && "
        "[...document.querySelectorAll('.jp-StatusBar-Widget')].some(w => /\\| Idle/.test(w.textContent))",
        timeout=120_000)
    wait_idle(page)
    no_thanks = page.locator(".jp-toast-button", has_text="No")
    if no_thanks.count():  # "get notified about official Jupyter news?"
        no_thanks.first.click()


def wait_idle(page, timeout_ms=RUN_TIMEOUT_MS):
    """Wait until the kernel is idle and no cell shows the busy prompt [*]."""
    page.wait_for_function(
        """() => {
            const ind = document.querySelector('.jp-NotebookPanel .jp-Notebook-ExecutionIndicator');
            const busy = [...document.querySelectorAll('.jp-NotebookPanel .jp-InputPrompt')]
                .some(p => p.textContent.includes('*'));
            return ind && ind.getAttribute('data-status') === 'idle' && !busy;
        }""",
        timeout=timeout_ms,
    )


def menu(page, top, item):
    page.locator(".lm-MenuBar-item", has_text=top).first.click()
    page.locator(".lm-Menu-item:visible", has_text=item).first.click()


def run_all(page):
    menu(page, "Run", "Run All Cells")
    page.wait_for_timeout(1000)  # let the first cells go busy
    wait_idle(page)
    page.wait_for_timeout(500)
    wait_idle(page)


def save(page):
    page.keyboard.press("Control+s")
    page.wait_for_function(
        "() => !document.querySelector('.jp-NotebookPanel .jp-mod-dirty') && "
        "!document.querySelector('.lm-TabBar-tab.jp-mod-current.jp-mod-dirty')")
    page.wait_for_timeout(500)


def code_cell(page, containing):
    return page.locator(".jp-NotebookPanel .jp-CodeCell",
                        has=page.locator(".cm-content", has_text=containing)).first


def set_cell_source(page, cell, text):
    editor = cell.locator(".cm-content").first
    editor.click()
    page.keyboard.press("Control+a")
    page.keyboard.press("Delete")
    # insert_text sends one input event: no auto-indent, no auto-closed brackets.
    page.keyboard.insert_text(text)
    got = editor.inner_text().replace("\u00a0", " ")
    assert got.strip() == text.strip(), f"the editor holds:\n{got}"


def run_cell(page, cell):
    cell.locator(".cm-content").first.click()
    page.keyboard.press("Control+Enter")
    page.wait_for_timeout(500)
    wait_idle(page)


def output_text(cell):
    return cell.locator(".jp-OutputArea").inner_text()


# --------------------------------------------------------------------------- the checkers

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
    panel = page.locator(".jp-NotebookPanel")
    problems = []
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


# --------------------------------------------------------------------------- the tests

def test_lesson_01_runs_clean_and_the_explorer_responds(lab, course_copy, page):
    open_notebook(page, lab, LESSON)
    run_all(page)
    shot(page, "01-lesson-run-all")
    save(page)
    assert run_problems(course_copy / LESSON) == []
    assert explorer_problems(page) == []
    explorer = page.locator(EXPLORER_SELECTOR).first
    explorer.scroll_into_view_if_needed()
    shot(page, "02-memory-explorer", explorer)
    change_explorer_control(page, explorer)
    shot(page, "03-memory-explorer-changed", explorer)
    DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
    explorer.screenshot(path=str(DOCS_IMAGES / "memory-explorer.png"))


def test_unanswered_lesson_stops_only_at_the_exercise(lab, course_copy, page):
    """The learner's copy as shipped: Run All reaches the first exercise cell,
    which raises NotImplementedError; every error is in an exercise cell."""
    name = "unanswered_" + LESSON
    open_notebook(page, lab, name)
    run_all(page)
    save(page)
    shot(page, "04-unanswered-lesson")
    path = course_copy / name
    exercise = exercise_cells(path)
    assert exercise, "lesson 01 has no exercise cells any more: update this test"
    nb = nbformat.read(path, as_version=4)
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.source.strip()]
    errors = [i for i in code if any(o.output_type == "error" for o in nb.cells[i].outputs)]
    assert errors, "the unanswered exercise raised nothing"
    assert set(errors) <= exercise, f"errors outside the exercise cells: {sorted(set(errors) - exercise)}"
    first = errors[0]
    assert "NotImplementedError" in json.dumps(nb.cells[first].outputs)
    assert [i for i in code if i < first and nb.cells[i].execution_count is None] == []
    # JupyterLab 4.6: Run All stops at the first error (the kernel aborts the
    # queued cells) unless that cell is tagged raises-exception.
    assert [i for i in code if i > first and nb.cells[i].execution_count is not None] == []
