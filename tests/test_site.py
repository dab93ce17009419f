"""The course's static site (`./course site`): what its pages show and what they never show.

Everyday tier (no kernel): the search for answers (leaks.py) finds a planted
solution line, hidden-test line, delimiter or answer-giving hint and passes
the learner's own code; the cleaning of outputs (scrub.py); a page made from
a small notebook (pages.py: answer, check, raising cells); a widget's static
picture (widgets.py); the docs' links.

Slow: `./course site` builds the real site once per session (in the folder
pytest-xdist's processes share, under a lock), then
- a search of every built file against the source finds no solution line,
  hidden test or nbgrader delimiter, and a planted line in a copy of a built
  page is found (so the same search can fail);
- the lesson pages show no path, home, date or log time of the machine;
- Debian's chromium opens every page (browser): it renders with its
  navigation and its figures, no request leaves the site, hints are
  collapsed, checks show their note and no error box, and every internal link
  (and its #fragment) resolves. Screenshots go to tests/artifacts/site/; the
  README's in docs/images/ are rewritten with DONATION_LAB_REFRESH_IMAGES=1
  (or when missing).
"""
import functools
import html
import http.server
import os
import re
import shutil
import threading
from pathlib import Path
from urllib.parse import urljoin, urlparse

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from donation_course.course import COURSE, NOTEBOOKS
from donation_course.site import build, leaks
from donation_course.site.pages import CHECK_NOTE, PageError, make_page, run_links
from donation_course.site.scrub import Scrubber
from donation_course.site.widgets import WIDGET_STATE, WIDGET_VIEW, static_outputs, widget_state
from helpers import COURSE_CMD, ROOT, built_once, run

ARTIFACTS = ROOT / "tests" / "artifacts" / "site"
LEARNER = sorted(NOTEBOOKS.glob("*.ipynb"))
# The lessons that show the memory explorer (a widget): their page shows its measured picture instead.
EXPLORER_LESSONS = {p.stem for p in LEARNER if "memory_explorer(" in p.read_text()}


@functools.cache
def forbidden():
    return leaks.forbidden_texts(COURSE.source_notebooks(), LEARNER)


def solution_lines():
    return [f for f in forbidden() if "(solution)" in f.origin and " " in f.text]


def highlighted(code: str) -> str:
    """Code as Pygments writes it into a page: every token in its own span."""
    tokens = re.findall(r"\w+|\s+|[^\w\s]", code)
    return "".join(t if t.isspace() else f'<span class="n">{html.escape(t)}</span>' for t in tokens)


def page_with(body: str) -> str:
    return f"<!DOCTYPE html><html><body><main><pre>{body}</pre></main></body></html>"


# --------------------------------------------------------------------------- the search (no kernel)

def test_every_answer_and_hidden_test_of_the_source_is_searched_for():
    origins = {f.origin for f in forbidden()}
    for path in COURSE.source_notebooks():
        for cell in nbformat.read(path, as_version=4).cells:
            for kind in ("solution", "hidden test"):
                if leaks.delimited_blocks(cell.source, *leaks.delimiters()[kind]):
                    assert f"{path.name}, cell {cell.id} ({kind})" in origins, (path.name, cell.id, kind)
    assert {"BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"} <= {
        f.text for f in forbidden()}


def test_the_learners_own_code_is_not_forbidden(tmp_path):
    """A page holding exactly the learner copies' code (answer stubs, checks, their hint strings) is clean."""
    (tmp_path / "lessons").mkdir()
    for path in LEARNER:
        code = "\n\n".join(highlighted(c.source) for c in nbformat.read(path, as_version=4).cells
                           if c.cell_type == "code")
        (tmp_path / "lessons" / f"{path.stem}.html").write_text(page_with(code))
    assert leaks.search_site(tmp_path, forbidden()) == []


def test_an_answer_line_the_exercise_gives_is_allowed_and_one_a_hint_gives_is_not(tmp_path):
    given, hinted = "y_in = jnp.array([1.0, 2.0])", "y_out = scale_twice(y_in)"
    solution = f"### BEGIN SOLUTION\n{given}\n{hinted}\n### END SOLUTION"
    statement = (f"Store `scale_twice(y_in)` in `y_out`, with `{given}`.\n\n"
                 f"<details><summary>Hint 2</summary>\n\nWrite `{hinted}`.\n\n</details>")
    source, learner = tmp_path / "source.ipynb", tmp_path / "learner.ipynb"
    nbformat.write(new_notebook(cells=[new_markdown_cell(statement), new_code_cell(solution)]), source)
    nbformat.write(new_notebook(cells=[new_markdown_cell(statement), new_code_cell("# YOUR CODE HERE")]), learner)
    texts = {f.text for f in leaks.forbidden_texts([source], [learner])}
    assert hinted in texts and given not in texts


@pytest.mark.parametrize("kind", ["solution line", "hidden test line", "delimiter", "hint giving an answer"])
def test_a_planted_answer_is_found(tmp_path, kind):
    line = {"solution line": solution_lines()[0].text,
            "hidden test line": next(f.text for f in forbidden() if "(hidden test)" in f.origin),
            "delimiter": "### BEGIN SOLUTION",
            "hint giving an answer": solution_lines()[-1].text}[kind]
    body = (f"<details><summary>Hint 2</summary><p><code>{html.escape(line)}</code></p></details>"
            if kind.startswith("hint") else highlighted("x = 1\n" + line.replace(" ", "  ") + "\n"))
    (tmp_path / "page.html").write_text(page_with(body))
    found = leaks.search_site(tmp_path, forbidden())
    assert found and found[0].path == "page.html", f"the search missed a planted {kind}: {line!r}"


# --------------------------------------------------------------------------- cleaning outputs (no kernel)

MACHINE = Scrubber(root=Path("/srv/checkout"), home=Path("/home/alice"), user="alice", host="buildbox-7")


@pytest.mark.parametrize("dirty, clean", [
    ("File /srv/checkout/.venv/instructor/lib/python3.12/site-packages/jax/_src/api.py:12",
     "File site-packages/jax/_src/api.py:12"),
    ("/usr/local/lib/python3.12/concurrent/futures/_base.py", "python3.12/concurrent/futures/_base.py"),
    ("File /srv/checkout/src/donation_lab/memory.py, line 3", "File src/donation_lab/memory.py, line 3"),
    ("E1127 02:34:12.478609   30180 common_pjrt_client.cc:3073] ExecutePrepare failed",
     "E common_pjrt_client.cc:3073] ExecutePrepare failed"),
    ("measured 2026-11-27 02:34:12 on buildbox-7 by alice", "measured <date> on <host> by <user>"),
    ("cache in /home/alice/.cache/jax", "cache in ~/.cache/jax"),
    ("wrote /tmp/tmpab12cd/step.py", "wrote <tmp>/step.py"),
    ("same buffer? True | 64.0 MiB | float32[4]", "same buffer? True | 64.0 MiB | float32[4]"),
])
def test_outputs_are_cleaned_of_the_machine(dirty, clean):
    assert MACHINE(dirty) == clean
    assert MACHINE.leftovers(MACHINE(dirty)) == []


def test_leftovers_name_what_is_still_there():
    assert MACHINE.leftovers("at /srv/checkout/x on 2026-11-27") == ["the repository's path", "a date (2026-11-27)"]


# --------------------------------------------------------------------------- a page (no kernel)

def _lesson():
    grade = {"grade": True, "grade_id": "q-check", "locked": True, "points": 1, "schema_version": 3,
             "solution": False}
    answer = {"grade": False, "grade_id": "q", "locked": False, "schema_version": 3, "solution": True}
    learner = new_notebook(cells=[
        new_markdown_cell("# A lesson", id="intro"),
        new_code_cell("print('hi')", id="demo"),
        new_markdown_cell("<details><summary>Hint 1</summary>\n\nLook up.\n\n</details>", id="hint"),
        new_code_cell("# YOUR CODE HERE\nraise NotImplementedError()", id="q", metadata={"nbgrader": answer}),
        new_code_cell("checks.expect(answer)", id="q-check", metadata={"nbgrader": grade}),
        new_code_cell("a.read()", id="fails", metadata={"tags": ["raises-exception"]}),
    ])
    executed = new_notebook(cells=[
        new_markdown_cell("# A lesson", id="intro"),
        new_code_cell("print('hi')", id="demo", outputs=[new_output("stream", text="hi from /srv/checkout/x\n")]),
        new_markdown_cell("hint", id="hint"),
        new_code_cell("answer = 42", id="q", metadata={"nbgrader": answer},
                      outputs=[new_output("stream", text="the answer is 42\n")]),
        new_code_cell("checks.expect(answer)", id="q-check", metadata={"nbgrader": grade},
                      outputs=[new_output("stream", text="✔ answer (public check only)\n")]),
        new_code_cell("a.read()", id="fails", metadata={"tags": ["raises-exception"]},
                      outputs=[new_output("error", ename="RuntimeError", evalue="deleted",
                                          traceback=["File /srv/checkout/src/m.py", "RuntimeError: deleted"])]),
    ])
    return learner, executed


def test_a_page_shows_the_learner_code_real_outputs_and_checks_as_a_note():
    learner, executed = _lesson()
    page = make_page(learner, executed, run_links("01_a.ipynb", "o/r", "HEAD", 8888), MACHINE)
    cells = {c.get("id"): c for c in page.cells}
    assert cells["demo"].outputs[0]["text"] == "hi from x\n"
    assert cells["q"].source.startswith("# YOUR CODE HERE") and cells["q"].outputs == []
    assert [o["data"]["text/plain"] for o in cells["q-check"].outputs] == [CHECK_NOTE]
    assert cells["fails"].outputs[0]["traceback"][0] == "File src/m.py"
    assert "<details>" in cells["hint"].source
    assert all("nbgrader" not in c.metadata for c in page.cells)
    links = page.cells[1].source
    assert "https://mybinder.org/v2/gh/o/r/HEAD?urlpath=lab/tree/01_a.ipynb" in links
    assert "http://127.0.0.1:8888/lab/tree/01_a.ipynb" in links
    # the solved answer and its output are nowhere in the page; cell ids are random hex, which may hold "42"
    assert [line for line in nbformat.writes(page).splitlines()
            if "42" in line and not re.fullmatch(r'\s*"id": "[0-9a-f]+",?', line)] == []


def test_a_cell_that_should_not_raise_stops_the_page():
    learner, executed = _lesson()
    executed.cells[1].outputs = [new_output("error", ename="NameError", evalue="x", traceback=[])]
    with pytest.raises(PageError, match="'demo' raised NameError"):
        make_page(learner, executed, run_links("01_a.ipynb", "o/r", "HEAD", 8888), MACHINE)


def test_a_widget_becomes_its_static_picture():
    state = {"state": {
        "box": {"model_name": "VBoxModel", "state": {"children": ["IPY_MODEL_text", "IPY_MODEL_size",
                                                                  "IPY_MODEL_go", "IPY_MODEL_chart"]}},
        "text": {"model_name": "HTMLModel", "state": {"value": "<b>Explorer</b>"}},
        "size": {"model_name": "IntSliderModel", "state": {"description": "Size", "value": 64}},
        "go": {"model_name": "ButtonModel", "state": {"description": "Measure"}},
        "chart": {"model_name": "OutputModel", "state": {"outputs": [
            {"output_type": "display_data", "data": {"image/png": "iVBORw0KGgo=", "text/plain": "<Image>"},
             "metadata": {}}]}},
    }}
    nb = new_notebook(metadata={"widgets": {WIDGET_STATE: state}})
    view = new_output("execute_result", data={WIDGET_VIEW: {"model_id": "box"}, "text/plain": "VBox()"})
    outputs = static_outputs(view, widget_state(nb))
    assert [sorted(o["data"]) for o in outputs] == [["text/html", "text/plain"], ["image/png", "text/plain"]]
    shown = outputs[0]["data"]["text/html"]
    assert "<b>Explorer</b>" in shown and "Size: <b>64</b>" in shown and "Measure" not in shown
    assert outputs[1]["data"]["image/png"] == "iVBORw0KGgo="


def test_doc_links_stay_on_the_site_or_go_to_the_repository():
    published = set(build.INSTRUCTOR_DOCS)
    text = ("[a](sandbox.md#the-caps) [b](design.md#settings) [c](../README.md) ![d](images/x.png) "
            "[e](https://nbgrader.readthedocs.io) [f](#here)")
    assert build.rewrite_links(text, published, "o/r", "main") == (
        "[a](sandbox.md#the-caps) [b](https://github.com/o/r/blob/main/docs/design.md#settings) "
        "[c](https://github.com/o/r/blob/main/README.md) ![d](images/x.png) "
        "[e](https://nbgrader.readthedocs.io) [f](#here)")


def test_a_link_to_a_missing_page_or_heading_is_a_problem(tmp_path):
    (tmp_path / "a.html").write_text("<h1 id='top'>A</h1>")
    served = "http://127.0.0.1:1/"
    ids = {"a.html": {"top"}}
    good = {("x.html", served + "a.html#top"), ("x.html", served + "a.html")}
    assert link_problems(tmp_path, served, good, ids) == []
    bad = {("x.html", served + "b.html"), ("x.html", served + "a.html#gone")}
    assert link_problems(tmp_path, served, bad, ids) == [
        f"x.html: link to {served}a.html#gone: no #gone there", f"x.html: link to {served}b.html goes nowhere"]


def test_the_build_replaces_only_a_folder_it_built(tmp_path):
    build.check_replaceable(tmp_path / "new")
    (tmp_path / "empty").mkdir()
    build.check_replaceable(tmp_path / "empty")
    (tmp_path / "old").mkdir()
    for name in ("index.html", ".nojekyll"):
        (tmp_path / "old" / name).touch()
    build.check_replaceable(tmp_path / "old")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "index.html").touch()
    for folder in (tmp_path / "mine", ROOT, ROOT.parent):
        with pytest.raises(build.SiteError):
            build.check_replaceable(folder)


def test_the_site_binder_links_name_the_readmes_repository():
    readme = (ROOT / "README.md").read_text()
    assert f"https://mybinder.org/v2/gh/{build.REPOSITORY}/{build.BRANCH}?urlpath=lab/tree/" in readme


# --------------------------------------------------------------------------- the built site (slow)

@pytest.fixture(scope="session")
def site(tmp_path_factory):
    """`./course site` once per session, in the folder pytest-xdist's processes share, under a lock."""
    def build(folder: Path) -> None:
        run([str(COURSE_CMD), "site", "--out", str(folder), "--work", str(folder.parent / "site-work")],
            env=dict(os.environ), timeout=900)

    return built_once(tmp_path_factory, "site", build)


def pages_of(site: Path) -> list[Path]:
    """The site's pages (not the theme's own template leftovers in _static/)."""
    return sorted(p for p in site.rglob("*.html") if p.name not in ("search.html", "genindex.html")
                  and p.relative_to(site).parts[0] != "_static")


@pytest.mark.slow
def test_the_built_site_holds_no_answer_and_a_planted_one_is_found(site, tmp_path):
    assert sorted(p.stem for p in (site / "lessons").glob("*.html")) == [p.stem for p in LEARNER]
    assert leaks.search_site(site, forbidden()) == [], "the built site shows what no page may"
    assert not list(site.rglob("*.ipynb")), "a notebook is downloadable"
    assert not [p for p in site.glob("_sources/**/*") if p.is_file()], "a page's source is downloadable"
    copy = tmp_path / "site"
    shutil.copytree(site, copy)
    page = copy / "lessons" / LEARNER[-1].with_suffix(".html").name
    line = solution_lines()[0]
    text = page.read_text()
    page.write_text(text.replace("</main>", f"<pre>{highlighted(line.text)}</pre></main>", 1))
    found = leaks.search_site(copy, forbidden())
    assert line in [f.forbidden for f in found] and {f.path for f in found} == {f"lessons/{page.name}"}


@pytest.mark.slow
def test_lesson_pages_show_nothing_of_the_build_machine(site):
    machine = Scrubber(ROOT)
    for page in sorted((site / "lessons").glob("*.html")):
        text = page.read_text()
        assert machine.leftovers(text) == [], page.name
        assert "/tmp/" not in text and str(Path.home()) + "/" not in text, page.name


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def served(site):
    handler = functools.partial(QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


@pytest.mark.browser
def test_every_page_renders_with_navigation_figures_and_working_links(site, served):
    from playwright.sync_api import sync_playwright

    from browser_driver import CHROMIUM, CHROMIUM_ARGS, require_chromium

    require_chromium()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    pages = [p.relative_to(site).as_posix() for p in pages_of(site)]
    lessons = [p for p in pages if p.startswith("lessons/")]
    instructors = [p for p in pages if p.startswith("instructors/")]
    assert len(lessons) == len(LEARNER) and len(instructors) == len(build.INSTRUCTOR_DOCS)
    outside, problems, ids, figures = [], [], {}, 0
    links = set()  # (from page, absolute URL) of every link inside the site
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(served)
                   else (outside.append(route.request.url), route.abort()))
        for path in pages:
            response = page.goto(served + path, wait_until="load")
            assert response.ok, path
            if not page.locator("main h1").count():
                problems.append(f"{path}: no heading")
            nav = page.locator("nav.bd-docs-nav a.reference.internal")
            if nav.count() < len(lessons) + len(instructors):
                problems.append(f"{path}: the navigation lists {nav.count()} pages")
            broken = page.evaluate("[...document.images].filter(i => !(i.complete && i.naturalWidth > 0))"
                                   ".map(i => i.getAttribute('src'))")
            problems += [f"{path}: image {src} does not load" for src in broken]
            ids[path] = set(page.evaluate("[...document.querySelectorAll('[id]')].map(e => e.id)"))
            for href in page.evaluate("[...document.querySelectorAll('a[href]')].map(a => a.href)"):
                if href.startswith(served):
                    links.add((path, href))
            if path in lessons:
                problems += lesson_problems(page, path)
                if Path(path).stem in EXPLORER_LESSONS and "with donation" not in " ".join(
                        page.locator(".widget-static").all_inner_texts()):
                    problems.append(f"{path}: the memory explorer shows no measured picture")
                figures += page.locator("main img").count()
        problems += link_problems(site, served, links, ids)
        screenshots(page, served, lessons)
        browser.close()
    assert not outside, f"pages asked for something outside the site (a CDN?): {sorted(set(outside))[:5]}"
    assert not problems, "\n".join(problems)
    assert len(links) > len(pages), "the pages link to each other"
    assert figures, "no lesson page has a figure"
    assert EXPLORER_LESSONS, "no lesson shows the memory explorer: this test looks for it by name"


def link_problems(site: Path, served: str, links, ids: dict) -> list[str]:
    """Each internal link (page, absolute URL) whose file is not in the site, or whose #fragment is no id on
    that page (`ids`: each page's ids, as the browser found them)."""
    problems = []
    for source, href in sorted(links):
        target = urlparse(href)
        file = target.path.removeprefix(urlparse(served).path)
        file = file + "index.html" if file.endswith("/") or not file else file
        if not (site / file).is_file():
            problems.append(f"{source}: link to {href} goes nowhere")
        elif target.fragment and target.fragment not in ids.get(file, set()):
            problems.append(f"{source}: link to {href}: no #{target.fragment} there")
    return problems


def lesson_problems(page, path) -> list[str]:
    problems = []
    for widget in page.locator(".widget-static").all():  # the memory explorer: its measured chart below it
        if not widget.locator("xpath=ancestor::div[contains(@class, 'cell_output')]//img").count():
            problems.append(f"{path}: a widget's static picture has no chart")
    for hint in page.locator("details").all():
        if hint.get_attribute("open") is not None or hint.locator("p").first.is_visible():
            problems.append(f"{path}: a hint is open: {hint.locator('summary').inner_text()!r}")
    checks = page.locator(".tag_site-check")
    if checks.count() != page.locator(".tag_site-check .site-check-note").count():
        problems.append(f"{path}: a check cell has no note")
    if page.locator(".tag_site-check .output.traceback, .tag_site-check .output.error").count():
        problems.append(f"{path}: a check cell shows an error")
    for answer in page.locator(".tag_site-answer").all():
        if answer.locator(".cell_output").count() and answer.locator(".cell_output").inner_text().strip():
            problems.append(f"{path}: an answer cell has an output")
    run_links = page.locator(".run-live a")
    if [a.inner_text() for a in run_links.all()] != ["on Binder", "open it in JupyterLab"]:
        problems.append(f"{path}: no run links")
    return problems


def screenshots(page, served, lessons):
    """A lesson (its first screen), a reference part and the memory explorer: tests/artifacts/site/, and the
    README's copies in docs/images/ when missing or asked for (DONATION_LAB_REFRESH_IMAGES=1)."""
    from browser_checkers import refresh_docs_image
    from browser_driver import DOCS_IMAGES

    first = lessons[0]
    page.set_viewport_size({"width": 1280, "height": 800})
    shots = {"site-lesson.png": (first, None)}
    page.goto(urljoin(served, first))
    reference = page.locator("section[id^='going-deeper']").first.get_attribute("id")
    shots["site-reference.png"] = (first, f"#{reference}")
    shots["site-memory-explorer.png"] = (first, ".widget-static")
    for name, (path, where) in shots.items():
        page.goto(urljoin(served, path))
        if where and where.startswith("#"):  # scrolled to, not targeted (a target is highlighted)
            page.evaluate(f"document.getElementById({where[1:]!r}).scrollIntoView()")
        dest = ARTIFACTS / name
        if where and not where.startswith("#"):
            cell = page.locator(where).first.locator("xpath=ancestor::div[contains(@class, 'cell_output')]")
            cell.scroll_into_view_if_needed()
            cell.screenshot(path=str(dest))
        else:
            page.screenshot(path=str(dest))
        if refresh_docs_image(name):
            shutil.copy(dest, DOCS_IMAGES / name)
