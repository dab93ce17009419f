"""Driving JupyterLab in Debian's chromium for tests/test_browser.py: the
fixtures (a browser, the README's lab command serving a scratch copy of the
lessons, a page), opening, editing, running and saving notebooks, pressing
Validate, screenshots, and running `./course check` as a learner does."""
import os
import re
import shutil
from pathlib import Path

import pytest

from donation_course.course import COURSE, NOTEBOOKS
from helpers import COURSE_CMD, ROOT, answered_copy, run, start_lab

CHROMIUM = Path(os.environ.get("DONATION_LAB_CHROMIUM", "/usr/bin/chromium"))  # Debian's
ARTIFACTS = ROOT / "tests" / "artifacts" / "browser"
DOCS_IMAGES = ROOT / "docs" / "images"
# This machine has no network: nothing in chromium may try to reach one.
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
    "--disable-default-apps", "--disable-extensions", "--metrics-recording-only",
]
RUN_TIMEOUT_MS = 240_000
LESSON = "01_why_donate.ipynb"
EXERCISE = f"{COURSE.exercise}.ipynb"  # the graded exercise, found by its answer cell


def require_chromium():
    if CHROMIUM.exists():
        return
    reason = (f"Debian's chromium is missing ({CHROMIUM}); install it with "
              "`apt-get install chromium` (.ci/run does)")
    if os.environ.get("CI"):
        pytest.fail(f"{reason}: CI must run the browser tests")
    pytest.skip(reason)


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


# --------------------------------------------------------------------------- fixtures

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
    try:
        yield context.new_page()
    finally:
        context.close()


# --------------------------------------------------------------------------- driving JupyterLab

def shot(page, name, element=None, also: Path = None, **options):
    """A screenshot in ARTIFACTS (and in the folder `also`, when given)."""
    path = ARTIFACTS / f"{name}.png"
    (element if element is not None else page).screenshot(path=str(path), **options)
    if also is not None:
        also.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, also / path.name)
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
    """Save, and wait for the server's answer: a notebook that was not modified
    is saved too, and a second save racing this one would find the file
    changed on disk (JupyterLab's "File Changed" dialog)."""
    written = lambda r: r.request.method == "PUT" and "/api/contents/" in r.url  # noqa: E731
    with page.expect_response(written):
        page.keyboard.press("Control+s")
    page.wait_for_function(
        "() => !document.querySelector('.jp-NotebookPanel .jp-mod-dirty') && "
        "!document.querySelector('.lm-TabBar-tab.jp-mod-current.jp-mod-dirty')")


SCROLLER = ("(document.querySelector('.jp-NotebookPanel .jp-WindowedPanel-outer') "
            "|| document.querySelector('.jp-NotebookPanel .jp-Notebook'))")  # the notebook's scrolling element


def scroll_to_top(page):
    """Back to the first cell (JupyterLab draws the editors near the view only: code_cell finds those)."""
    page.evaluate(f"() => {{ {SCROLLER}.scrollTop = 0; }}")
    page.wait_for_timeout(500)


def code_cell(page, containing):
    """The code cell whose source contains `containing`, pinned by position
    (so it stays the same cell after its source is replaced)."""
    cells = page.locator(".jp-NotebookPanel .jp-CodeCell")
    cells.first.wait_for()
    for i in range(cells.count()):
        if containing in cells.nth(i).locator(".cm-content").first.inner_text():
            return cells.nth(i)
    raise AssertionError(f"no code cell contains {containing!r}")


def find_code_cell(page, containing, pages=60):
    """code_cell, scrolling down from the top until the cell is drawn
    (JupyterLab draws the editors of the cells near the view only)."""
    scroll_to_top(page)
    for _ in range(pages):
        try:
            return code_cell(page, containing)
        except AssertionError:
            page.evaluate(f"() => {{ const o = {SCROLLER}; o.scrollTop += 0.8 * o.clientHeight; }}")
            page.wait_for_timeout(300)
    return code_cell(page, containing)


def set_cell_source(page, cell, text):
    editor = cell.locator(".cm-content").first
    editor.click()
    page.keyboard.press("Control+a")
    page.keyboard.press("Delete")
    # insert_text sends one input event: no auto-indent, no auto-closed brackets.
    page.keyboard.insert_text(text)
    got = editor.inner_text().replace("\u00a0", " ")
    lines = lambda t: [ln.rstrip() for ln in t.splitlines() if ln.strip()]  # noqa: E731  (blank lines render doubled)
    assert lines(got) == lines(text), f"the editor holds:\n{got}"


def run_cell(page, cell):
    cell.locator(".cm-content").first.click()
    before = page.evaluate(f"() => {PROMPTS_JS}")
    page.keyboard.press("Control+Enter")
    wait_until_run(page, before)


def output_text(cell):
    return cell.locator(".jp-OutputArea").inner_text()


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


def check_my_work(env, notebook: Path, private: Path, page, name, folder, docs_image=None):
    """`./course check NOTEBOOK --dir PRIVATE` as a learner runs it; its
    feedback page is opened in a new tab of the browser (the lab's stays as
    it is) and screenshot as `name` (and as `docs_image` in docs/images, with
    DONATION_LAB_REFRESH_IMAGES=1). Returns what the command printed."""
    r = run([str(COURSE_CMD), "check", str(notebook), "--dir", str(private)], env, check=False, timeout=900)
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}"
    (folder / f"{name}.txt").write_text(r.stdout)
    feedback = page.context.new_page()
    try:
        feedback.goto(Path(re.search(r"^feedback: (.+)$", r.stdout, re.M)[1]).as_uri())
        feedback.set_viewport_size({"width": 1024, "height": 800})
        # every message wraps inside the page: nothing wider than the body, nothing scrolls sideways
        widths = feedback.evaluate("() => ({body: document.body.getBoundingClientRect().right, "
                                   "widest: Math.max(...[...document.querySelectorAll('table, pre')].map("
                                   "e => e.getBoundingClientRect().right)), "
                                   "scroll: document.documentElement.scrollWidth, view: window.innerWidth})")
        assert widths["widest"] <= widths["body"] + 1 and widths["scroll"] <= widths["view"], widths
        shot(feedback, name, also=folder, full_page=True)
        if docs_image and os.environ.get("DONATION_LAB_REFRESH_IMAGES") == "1":
            feedback.screenshot(path=str(DOCS_IMAGES / docs_image), full_page=True)
    finally:
        feedback.close()
    return r.stdout


def shut_down_kernels(server):
    """End every session the lab holds (each open notebook's kernel)."""
    import urllib.request

    for session in server.api("/api/sessions")[1]:
        url = f"{server.base}/api/sessions/{session['id']}?token={server.token}"
        urllib.request.urlopen(urllib.request.Request(url, method="DELETE"), timeout=30).close()
    assert server.api("/api/sessions")[1] == []
