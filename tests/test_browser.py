"""What a learner sees in JupyterLab, driven through Debian's chromium.

JupyterLab is started with the README's lab command (`./course lab`, through
helpers' `start_lab`) on a free port, serving a scratch copy of the lessons
so that running and editing them never touches notebooks/. Playwright (sync
API) drives /usr/bin/chromium; it never downloads a browser of its own. The
driving and the checkers are in browser_driver.py.

The checks that decide whether a run was clean (`run_problems`,
`explorer_problems`) are the same functions that `test_checker_catches_*`
feed a deliberately broken copy, so a broken lesson cannot pass silently.

Screenshots go to tests/artifacts/browser/ (gitignored; the self-paced path's
to its tmp_path too); the cropped ones in docs/images/ are rewritten with
DONATION_LAB_REFRESH_IMAGES=1 (the README's two also when missing).
"""
import json
import os
import re
import shutil
import sys

import nbformat
import pytest

# The driver is this module's plugin (its fixtures) and its asserts explain
# themselves as a test's do: rewritten, so registered before the imports.
pytest.register_assert_rewrite("browser_driver", "browser_checkers")

from browser_checkers import (  # noqa: E402
    EXPLORER_SELECTOR,
    broken_notebook,
    change_explorer_control,
    crop_cells,
    exercise_cells,
    explorer_problems,
    refresh_docs_image,
    run_problems,
)
from browser_driver import (  # noqa: E402
    DOCS_IMAGES,
    EXERCISE,
    LESSON,
    check_my_work,
    code_cell,
    find_code_cell,
    open_notebook,
    output_text,
    press_validate,
    run_all,
    run_cell,
    save,
    scroll_to_top,
    serve,
    set_cell_source,
    shot,
    shut_down_kernels,
)
from donation_course.course import CAPSTONE_ANSWER, COURSE, EXERCISE_ANSWER, NOTEBOOKS, SOLUTIONS, grade_id  # noqa: E402
from helpers import answered_copy, free_port, start_server  # noqa: E402

pytestmark = pytest.mark.browser
pytest_plugins = ("browser_driver",)  # its fixtures: browser, course_copy, lab, page

CORRECT_ANSWER = (
    "@functools.partial(jax.jit, donate_argnums=(0,))\n"
    "def update_with_donate(state, delta):\n"
    "    return state + delta\n"
)
WRONG_ANSWER = CORRECT_ANSWER.replace("state + delta", "state - delta")
NOT_DONATING = "update_with_donate = jax.jit(lambda state, delta: state + delta)\n"


# --------------------------------------------------------------------------- the tests

def test_lesson_01_runs_clean_and_the_explorer_responds(lab, course_copy, page):
    open_notebook(page, lab, LESSON)
    run_all(page)
    shot(page, "01-lesson-run-all")
    save(page)
    assert run_problems(course_copy / LESSON) == []
    assert explorer_problems(page) == []
    for n, containing in enumerate(("draw_buffers(right", "draw_peaks(results)")):  # the lesson's figures
        figure = find_code_cell(page, containing)
        figure.scroll_into_view_if_needed()
        shot(page, f"01{'ab'[n]}-lesson-figure", figure)
    explorer = page.locator(EXPLORER_SELECTOR).first
    explorer.scroll_into_view_if_needed()
    shot(page, "02-memory-explorer", explorer)
    change_explorer_control(page, explorer)
    shot(page, "03-memory-explorer-changed", explorer)
    if refresh_docs_image("memory-explorer.png"):
        explorer.screenshot(path=str(DOCS_IMAGES / "memory-explorer.png"))


def test_lessons_open_unmodified(lab, course_copy, page):
    """A lesson just opened shows no modified marker once its kernel is idle.
    (JupyterLab writes the kernel's language_info into the notebook and marks
    it modified when that changes it: the lessons carry it whole.)"""
    for name in sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")):
        before = (course_copy / name).read_bytes()
        open_notebook(page, lab, name)
        page.wait_for_timeout(1500)  # the kernel's info is in: its language_info was set
        dirty = page.locator(".lm-TabBar-tab.jp-mod-current.jp-mod-dirty, .jp-NotebookPanel.jp-mod-dirty")
        if dirty.count():
            shot(page, f"00-opened-modified-{name[:2]}")
        assert dirty.count() == 0, f"{name} opens marked as modified"
        assert (course_copy / name).read_bytes() == before, f"opening {name} wrote to it"
    shot(page, "00-opened-unmodified")
    shut_down_kernels(lab)  # seven idle kernels: the later tests need the CPU more


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
    # The message alone: no traceback, nothing of checks.py (CheckFailed._render_traceback_).
    assert wrong.strip() == "update_with_donate([1.0, 2.0], [0.5, 0.5]): expected [1.5, 2.5], got [0.5, 1.5].", wrong
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


def test_self_paced_path_answer_07_in_the_lab_then_check_it(env, lab, course_copy, page, tmp_path):
    """The self-paced learner: `./course lab`, answer lesson 7 in the browser
    (the solution's answers typed into the answer cells), Run All, save; then
    `./course check` on a copy of the saved notebook gives full marks and names
    the notebooks not checked. An answer that does not donate, typed and
    saved the same way, gets less, with the failing checks' messages."""
    name = f"selfpaced/{EXERCISE}"
    (course_copy / "selfpaced").mkdir(exist_ok=True)
    shutil.copy2(NOTEBOOKS / EXERCISE, course_copy / name)
    solution = {grade_id(c): "\n".join(ln for ln in c.source.splitlines() if "### " not in ln)  # no markers
                for c in nbformat.read(SOLUTIONS / EXERCISE, as_version=4).cells}
    open_notebook(page, lab, name)
    answer = code_cell(page, "# YOUR CODE HERE")
    set_cell_source(page, answer, solution[EXERCISE_ANSWER])
    set_cell_source(page, code_cell(page, "# YOUR CODE HERE"), solution[CAPSTONE_ANSWER])
    run_all(page)
    save(page)
    assert run_problems(course_copy / name) == []
    shot(page, "11-selfpaced-run-all-capstone", also=tmp_path)
    scroll_to_top(page)
    example = code_cell(page, "update_with_donate([1.0, 2.0], [0.5, 0.5])")
    example.scroll_into_view_if_needed()
    shot(page, "11-selfpaced-answered", also=tmp_path)

    mine, private = tmp_path / "mine" / EXERCISE, tmp_path / "private"
    mine.parent.mkdir()
    shutil.copy2(course_copy / name, mine)
    out = check_my_work(env, mine, private, page, "12-selfpaced-check-solved", tmp_path,
                        docs_image="self-check-feedback.png")
    ex, full = COURSE.exercise, COURSE.points[COURSE.exercise]  # the notebook's points, from its grade cells
    assert f"{ex}: {full:g} of {full:g}" in out and "\u2718" not in out, out
    assert "not checked:" in out and f"{COURSE.notebooks[0]}: not given" in out, out

    # An answer that does not donate: the public check in the lab says why, alone.
    answer = code_cell(page, "def update_with_donate(state, delta)")
    set_cell_source(page, answer, NOT_DONATING)
    run_cell(page, answer)
    donated = code_cell(page, "checks.expect_deleted('state after update_with_donate")
    run_cell(page, donated)
    message = output_text(donated).strip()
    assert message.startswith("state after update_with_donate(state, delta) is still alive"), message
    assert "Traceback" not in message and "checks.py" not in message, message
    donated.scroll_into_view_if_needed()
    shot(page, "13-selfpaced-not-donating", also=tmp_path)
    save(page)
    shutil.copy2(course_copy / name, mine)
    out = check_my_work(env, mine, private, page, "14-selfpaced-check-not-donating", tmp_path)
    score = float(re.search(rf"^{ex}: ([\d.]+) of {full:g}$", out, re.M)[1])
    assert score < full, out
    failed = [line for line in out.splitlines() if line.lstrip().startswith("\u2718")]
    assert len(failed) >= 2 and any("is still alive" in line for line in failed), out
    assert "Traceback" not in out, out
