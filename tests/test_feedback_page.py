"""The feedback page shows what a learner wrote as text: nothing of theirs runs in a browser that opens it.

The notebook goes through the feedback preprocessors the course's nbgrader_config.py lists, then nbgrader's
own feedback exporter (the class the grading workers use), as `generate_feedback` does. Each hostile family
marks its payload with EVIL; the page must hold no EVIL inside a tag, an attribute or a script, while the
lesson's own Markdown (its text in the course's release/ copy) is still rendered as HTML."""
import copy
from html.parser import HTMLParser

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_output, new_raw_cell

from donation_course.course import ROOT, load_config

ASSIGNMENT = "buffer-donation"
NOTEBOOK = "07_update_with_donate"

# family: an output a learner's code can make (display(..., raw=True) puts any kinds there)
HOSTILE_OUTPUTS = {
    "html script": {"text/html": "<script>EVIL_html_script()</script>", "text/plain": "x"},
    "html handler": {"text/html": "<img src=x onerror=EVIL_html_handler()>"},
    "javascript": {"application/javascript": "EVIL_javascript()"},
    "svg script": {"image/svg+xml": "<svg xmlns='http://www.w3.org/2000/svg'><script>EVIL_svg()</script></svg>"},
    "markdown html": {"text/markdown": "<img src=y onerror=EVIL_markdown_output()>"},
    "latex href": {"text/latex": r"$\href{javascript:EVIL_latex()}{x}$"},
    "png breaking out": {"image/png": '" onerror="EVIL_png()'},
}
HOSTILE_CELLS = [
    new_markdown_cell("mine <script>EVIL_md_script()</script> <img src=z onerror=EVIL_md_handler()>"),
    new_markdown_cell("[click](javascript:EVIL_md_link())"),
    new_markdown_cell("```\n</code><script>EVIL_md_fence()</script>\n```"),
    new_raw_cell("<script>EVIL_raw()</script>", metadata={"raw_mimetype": "text/html"}),
]


class Tags(HTMLParser):
    """Every tag name, attribute value and script or style text of a page."""

    def __init__(self):
        super().__init__()
        self.live, self._in = [], None

    def handle_starttag(self, tag, attrs):
        self.live += [tag, *(f"{k}={v}" for k, v in attrs)]
        self._in = tag if tag in ("script", "style") else None

    def handle_endtag(self, tag):
        self._in = None

    def handle_data(self, data):
        if self._in:
            self.live.append(data)


def feedback_page(nb, exporter_class=None, **options) -> str:
    """The page, with the course's feedback preprocessors registered on the exporter as nbgrader does
    (`exporter_class`: the grader's, CachedHTMLExporter, unless another is given)."""
    from traitlets.utils.importstring import import_item

    from donation_course.grading.reports.feedback import CachedHTMLExporter

    config = load_config(ROOT / "autograder")
    config.CourseDirectory.root = str(ROOT / "autograder")
    exporter = (exporter_class or CachedHTMLExporter)(config=config, **options)
    for name in config.GenerateFeedback.preprocessors:
        if not name.endswith("GetGrades"):  # it reads the gradebook: no grades are asked about here
            exporter.register_preprocessor(import_item(name)(config=config), enabled=True)
    resources = {"nbgrader": {"assignment": ASSIGNMENT, "notebook": NOTEBOOK, "student": "s"}}
    html, _ = exporter.from_notebook_node(nb, resources)
    return html


def released():
    return nbformat.read(ROOT / "autograder" / "release" / ASSIGNMENT / f"{NOTEBOOK}.ipynb"
                         if (ROOT / "autograder" / "release").is_dir()
                         else ROOT / "notebooks" / f"{NOTEBOOK}.ipynb", as_version=4)


def test_nothing_a_learner_wrote_runs_in_the_feedback_page():
    nb = released()
    answer = new_code_cell("display(..., raw=True)")
    answer.outputs = [new_output("display_data", data=data) for data in HOSTILE_OUTPUTS.values()]
    nb.cells += [answer, *HOSTILE_CELLS]
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {"EVIL_widget": {}}}}
    page = feedback_page(nb)
    parser = Tags()
    parser.feed(page)
    live = [item for item in parser.live if "EVIL" in item]
    assert not live, live
    # each payload is still there, as text the learner can read (what was dropped says so)
    for marker in ("EVIL_md_script", "EVIL_md_link", "EVIL_raw"):
        assert marker in page, marker
    assert "not shown in feedback" in page


def test_the_lessons_own_markdown_and_a_learners_text_and_images_still_show():
    nb = released()
    own = [c.source for c in nb.cells if c.cell_type == "markdown" and "<details>" in c.source]
    assert own, "lesson 7 has a hint in <details> (the case on the trusted side)"
    answer = new_code_cell("print(1)")
    answer.outputs = [new_output("stream", name="stdout", text="mine: 1\n"),
                      new_output("display_data", data={"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"})]
    nb.cells += [answer, new_markdown_cell("my **own** note")]
    parser = Tags()
    page = feedback_page(nb)
    parser.feed(page)
    assert "details" in parser.live and "summary" in parser.live  # the lesson's hint, rendered
    assert "mine: 1" in page and "data:image/png;base64,iVBORw0KGgo=" in page
    assert "my **own** note" in page  # the learner's Markdown, as written


@pytest.mark.parametrize("family", sorted(HOSTILE_OUTPUTS))
def test_each_hostile_output_kind_alone_leaves_nothing_live(family):
    nb = released()
    cell = new_code_cell("x")
    cell.outputs = [new_output("execute_result", data=HOSTILE_OUTPUTS[family], execution_count=1)]
    nb.cells.append(cell)
    parser = Tags()
    parser.feed(feedback_page(nb))
    assert not [item for item in parser.live if "EVIL" in item], family


def test_the_grader_makes_feedback_with_its_own_preprocessors_whatever_an_old_course_config_lists():
    from traitlets.config import Config

    from donation_course.grading.reports.feedback import (
        CachedHTMLExporter,
        LearnerContentAsText,
        StripHiddenTests,
        use_grader_feedback,
    )

    cfg = Config()
    cfg.GenerateFeedback.preprocessors = ["nbgrader.preprocessors.GetGrades",
                                          "donation_course.grading.feedback.StripHiddenTests"]  # moved since
    use_grader_feedback(cfg)
    assert StripHiddenTests in cfg.GenerateFeedback.preprocessors
    assert LearnerContentAsText in cfg.GenerateFeedback.preprocessors
    assert not [p for p in cfg.GenerateFeedback.preprocessors if isinstance(p, str)]
    assert cfg.GenerateFeedback.exporter_class is CachedHTMLExporter


def with_image(nb):
    cell = new_code_cell("plot()")
    cell.outputs = [new_output("display_data", data={"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"})]
    nb.cells.append(cell)
    return nb


def test_the_graders_page_is_nbconverts_own_and_skips_only_a_pass_with_nothing_to_change():
    """The grader's exporter leaves out HTMLExporter's closing BeautifulSoup pass (alt text for images, a tabindex
    for JupyterLab-styled cells) only on a page where it changes nothing: read and written out by that pass, the
    page is HTMLExporter's. Shown on nbconvert's classic template, which nbgrader's feedback template extends;
    with an image, or on nbconvert's JupyterLab template, the page is HTMLExporter's."""
    from bs4 import BeautifulSoup
    from nbconvert.exporters import HTMLExporter

    from donation_course.grading.reports.feedback import accessibility_work

    ours = feedback_page(released(), template_name="classic")
    theirs = feedback_page(released(), HTMLExporter, template_name="classic")
    assert not accessibility_work(ours)  # the case where the pass is left out
    assert str(BeautifulSoup(ours, features="html.parser")) == theirs
    assert "<img" not in theirs and 'tabindex="0"' not in theirs  # the pass had nothing to change there

    drawn = with_image(released())
    ours = feedback_page(copy.deepcopy(drawn), template_name="classic")
    theirs = feedback_page(copy.deepcopy(drawn), HTMLExporter, template_name="classic")
    assert ours == theirs and 'alt="No description has been provided for this image"' in ours

    ours, theirs = feedback_page(released(), template_name="lab"), feedback_page(released(), HTMLExporter)
    assert ours == theirs and 'tabindex="0"' in ours


@pytest.mark.parametrize("page, work", [
    ('<p>no image</p><style>.jp-Notebook img {}</style><script>"<img>"</script>', False),
    ("<p>&lt;img src=x&gt; is text</p><!-- <img src=y> -->", False),
    ('<IMG SRC="x" alt="drawn">', True),
    ("<img/src=x>", True),
    ('<div class="cell jp-notebook"><div class="jp-Cell-inputWrapper"></div></div>', True),
])
def test_what_the_pass_could_change_is_read_as_its_parser_reads_the_page(page, work):
    from bs4 import BeautifulSoup

    from donation_course.grading.reports.feedback import accessibility_work

    assert accessibility_work(page) is work
    soup = BeautifulSoup(page, features="html.parser")
    assert bool(soup.find_all("img") or soup.select("[class*=jp-notebook i]")) is work
