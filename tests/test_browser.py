"""What a learner sees in JupyterLab, driven through Debian's chromium.

JupyterLab is started with the README's lab command (`./course lab`, through
helpers' `start_lab`) on a free port, serving a scratch copy of the lessons
so that running and editing them never touches notebooks/. Playwright (sync
API) drives /usr/bin/chromium; it never downloads a browser of its own.

The checks that decide whether a run was clean (`run_problems`,
`explorer_problems`) are the same functions that `test_checker_catches_*`
feed a deliberately broken copy, so a broken lesson cannot pass silently.

Screenshots go to tests/artifacts/browser/ (gitignored); two cropped ones are
kept in docs/images/ for the README (rewritten when missing or with
DONATION_LAB_REFRESH_IMAGES=1).
"""
import json
import os
import shutil
import sys
from pathlib import Path

import nbformat
import pytest

from donation_course.course import NOTEBOOKS
from helpers import ROOT, answered_copy, free_port, start_lab, start_server

pytestmark = pytest.mark.browser

CHROMIUM = Path(os.environ.get("DONATION_LAB_CHROMIUM", "/usr/bin/chromium"))  # Debian's
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

    First as the README would have it: `./course lab --ServerApp.root_dir=ROOT`
    (unknown options go to jupyter). Today the lab command passes its own
    --ServerApp.root_dir too and jupyter refuses a second value, so then the
    folder goes to the contents and kernel managers instead (whose root_dir
    otherwise follows the server's). Then `server.root_served` is False: the
    notebooks and kernels use `root`, but nbgrader's validate handler still
    reads the server's root_dir (notebooks/)."""
    workspaces = tmp_path / "workspaces"  # never restore or write the user's own layout
    workspaces.mkdir(exist_ok=True)
    common = [f"--LabApp.workspaces_dir={workspaces}"]
    try:
        server = start_lab(env, tmp_path, extra=[f"--ServerApp.root_dir={root}", *common])
        server.root_served = True
        return server
    except AssertionError as exc:
        if "root_dir only accepts one value" not in str(exc):
            raise
    server = start_lab(env, tmp_path, extra=[
        f"--FileContentsManager.root_dir={root}",
        f"--MappingKernelManager.root_dir={root}",
        *common,
    ])
    server.root_served = False
    return server


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


PROMPTS_JS = "[...document.querySelectorAll('.jp-NotebookPanel .jp-InputPrompt')].map(p => p.textContent).join('|')"


def wait_until_run(page, before: str):
    """After asking for cells to run: wait until JupyterLab has taken the
    request (a prompt shows [*] or a new execution count: queued cells are
    marked at once), then until the kernel is idle with nothing queued."""
    page.wait_for_function(
        f"before => {PROMPTS_JS} !== before || {PROMPTS_JS}.includes('*')", arg=before, timeout=30_000)
    wait_idle(page)


def run_all(page):
    before = page.evaluate(f"() => {PROMPTS_JS}")
    menu(page, "Run", "Run All Cells")
    wait_until_run(page, before)


def save(page):
    page.keyboard.press("Control+s")
    page.wait_for_function(
        "() => !document.querySelector('.jp-NotebookPanel .jp-mod-dirty') && "
        "!document.querySelector('.lm-TabBar-tab.jp-mod-current.jp-mod-dirty')")


def code_cell(page, containing):
    """The code cell whose source contains `containing`, pinned by position
    (so it stays the same cell after its source is replaced)."""
    cells = page.locator(".jp-NotebookPanel .jp-CodeCell")
    cells.first.wait_for()
    for i in range(cells.count()):
        if containing in cells.nth(i).locator(".cm-content").first.inner_text():
            return cells.nth(i)
    raise AssertionError(f"no code cell contains {containing!r}")


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
    before = page.evaluate(f"() => {PROMPTS_JS}")
    page.keyboard.press("Control+Enter")
    wait_until_run(page, before)


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
    if refresh_docs_image("memory-explorer.png"):
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
    errors = [i for i in code if any(o.output_type == "error" for o in nb.cells[i].outputs)
              and "raises-exception" not in nb.cells[i].metadata.get("tags", [])]
    assert errors, "the unanswered exercise raised nothing"
    assert set(errors) <= exercise, f"errors outside the exercise cells: {sorted(set(errors) - exercise)}"
    first = errors[0]
    assert "NotImplementedError" in json.dumps(nb.cells[first].outputs)
    assert [i for i in code if i < first and nb.cells[i].execution_count is None] == []
    # JupyterLab 4.6: Run All stops at the first error (the kernel aborts the
    # queued cells) unless that cell is tagged raises-exception.
    assert [i for i in code if i > first and nb.cells[i].execution_count is not None] == []


def test_exercise_feedback_and_validate(lab, course_copy, page):
    open_notebook(page, lab, EXERCISE)
    setup = page.locator(".jp-NotebookPanel .jp-CodeCell").first
    run_cell(page, setup)
    answer = code_cell(page, "# YOUR CODE HERE")
    example = code_cell(page, "update_with_donate([1.0, 2.0], [0.5, 0.5])")

    # A wrong answer: the public check names what it expected and what came back.
    set_cell_source(page, answer, WRONG_ANSWER)
    run_cell(page, answer)
    run_cell(page, example)
    wrong = output_text(example)
    assert "CheckFailed" in wrong, wrong
    assert "update_with_donate([1.0, 2.0], [0.5, 0.5]): expected [1.5, 2.5], got [0.5, 1.5]" in wrong, wrong
    example.scroll_into_view_if_needed()
    shot(page, "05-exercise-wrong-answer")

    # The right answer: one line starting with the tick, saying it was the public check only.
    set_cell_source(page, answer, CORRECT_ANSWER)
    run_cell(page, answer)
    run_cell(page, example)
    right = output_text(example)
    ticks = [ln for ln in right.splitlines() if ln.startswith("\u2714")]
    assert ticks and all("public check only" in ln for ln in ticks), right
    assert "Error" not in right, right
    shot(page, "06-exercise-right-answer")
    if refresh_docs_image("exercise-feedback.png"):
        crop_cells(page, [answer, example], DOCS_IMAGES / "exercise-feedback.png")

    # nbgrader's Validate button (validate-assignment plugin) is on the toolbar.
    validate = page.locator(".jp-NotebookPanel-toolbar .jp-ToolbarButtonComponent", has_text="Validate")
    assert validate.count() == 1, "no Validate button in the notebook toolbar"
    if lab.root_served:
        # Validate runs every public check of the notebook: update_with_donate's
        # pass, and the capstone below it, not answered here, is what it names.
        text = press_validate(page, "07-validate-dialog")
        assert "The following cell failed" in text and "init_opt_state" in text, text
        assert "update_with_donate" not in text, text
    # Otherwise the server's root is notebooks/ and Validate would check the
    # shipped copy, not this one: test_validate_button_as_on_binder presses it.


def press_validate(page, shot_name):
    """Press nbgrader's Validate toolbar button; return the result dialog's text."""
    validate = page.locator(".jp-NotebookPanel-toolbar .jp-ToolbarButtonComponent", has_text="Validate")
    save(page)
    page.evaluate("() => { window.__dlDialogText = null; }")
    validate.first.click()
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for(timeout=RUN_TIMEOUT_MS)
    # The result is in when the heading no longer says "Validating" and the
    # text has stopped changing (the same on two polls, 250 ms apart).
    page.wait_for_function(
        "() => { const d = document.querySelector('.jp-Dialog'); if (!d) return false; "
        "const t = d.innerText, same = window.__dlDialogText === t; window.__dlDialogText = t; "
        "return same && !/Validating/i.test(t.split('\\n')[0] || '') && t.length > 20; }",
        timeout=RUN_TIMEOUT_MS, polling=250)
    text = dialog.inner_text()
    shot(page, shot_name)
    dialog.locator("button").last.click()
    return text


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


def test_checker_catches_a_broken_lesson(env, browser, tmp_path):
    """The checks used above report a failing cell and a widget that does not
    render, served from a scratch folder through the same lab command."""
    root = tmp_path / "broken"
    root.mkdir()
    path = broken_notebook(root / "broken.ipynb")
    server = serve(env, tmp_path, root)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        page = context.new_page()
        page.set_default_timeout(60_000)
        open_notebook(page, server, path.name)
        run_all(page)
        save(page)
        shot(page, "08-broken-lesson-caught")
        problems = run_problems(path)
        assert any("cell 3" in p and "ZeroDivisionError" in p for p in problems), problems
        assert any("cell 4" in p and "was not run" in p for p in problems), problems
        # raises-exception: the error is shown, not reported, and Run All goes on past it.
        assert not any("cell 1" in p or "cell 2" in p for p in problems), problems
        widget = explorer_problems(page)
        assert any("no memory explorer" in p for p in widget), widget
        assert any("Error displaying widget" in p for p in widget), widget
    finally:
        context.close()
        server.stop()


def test_validate_button_as_on_binder(env, browser, tmp_path):
    """Binder runs plain `jupyter lab` in notebooks/ (binder/start), with the
    learner's nbgrader extensions: the Validate button passes a solved
    exercise and does not pass an unanswered one."""
    root = tmp_path / "notebooks"
    root.mkdir()
    answered_copy(EXERCISE, root / EXERCISE)
    shutil.copy2(NOTEBOOKS / EXERCISE, root / ("unanswered_" + EXERCISE))
    port, token = free_port(), "test-token-" + os.urandom(6).hex()
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--ServerApp.root_dir={root}",
           "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
           f"--IdentityProvider.token={token}", f"--LabApp.workspaces_dir={tmp_path}"]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    server = start_server(cmd, port=port, token=token, env=env, cwd=root, log=tmp_path / "lab.log")
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        page = context.new_page()
        page.set_default_timeout(60_000)
        open_notebook(page, server, EXERCISE)
        text = press_validate(page, "09-validate-solved")
        assert "Success! Your notebook passes all the tests." in text, text
        open_notebook(page, server, "unanswered_" + EXERCISE)
        text = press_validate(page, "10-validate-unanswered")
        # nbgrader names the first graded cell that failed (the answer cell's
        # NotImplementedError is not listed; the checks that need it are).
        assert "Success!" not in text and "The following cell failed" in text, text
        assert "update_with_donate" in text, text
    finally:
        context.close()
        server.stop()
