"""Feedback preprocessors, registered in autograder/nbgrader_config.py through
`c.GenerateFeedback.preprocessors`.

StripHiddenTests: hidden-test source and tracebacks never reach the learner's
HTML. In every grade cell, the `### BEGIN HIDDEN TESTS` ... `### END HIDDEN
TESTS` block is replaced by a one-line note, and every error output is
reduced to the exception's message (the learner message the check raised),
without the traceback that would quote the hidden source.

LearnerContentAsText: nothing a learner wrote runs in a browser that opens
the feedback page (theirs, or the instructor's). nbconvert writes a
`text/html`, `text/markdown`, `image/svg+xml` or `application/javascript`
output into the page as it is, and renders a Markdown cell's raw HTML; its
own `sanitize_html` option escapes every Markdown cell, the lessons' too.
So outputs keep only the kinds nbconvert escapes or draws from data (text,
PNG, JPEG, GIF), a Markdown or raw cell whose text is in none of the
course's own copies of that notebook (release/, source/) is shown as its
text, and the notebook's widget state, which loads widget code from the
web, is dropped.
"""
import re
from functools import lru_cache
from html.parser import HTMLParser
from pathlib import Path

import jinja2
from nbconvert.exporters import HTMLExporter, TemplateExporter
from nbconvert.filters.highlight import Highlight2HTML
from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter
from nbgrader.preprocessors import NbGraderPreprocessor
from nbgrader.utils import is_grade

HIDDEN = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS.*?^[ \t]*### END HIDDEN TESTS[^\n]*\n?", re.S | re.M)
NOTE = "# (graded checks run here; their results are shown below)\n"


# an absolute path of two or more parts (the server's folders), in any output
PATH = re.compile(r"(?<![\w.:/])/(?:[\w.@+-]+/)+[\w.@+-]*")
CHECK_LINE = ("\u2714", "\u2718", "Hint:", "[output capped")
PRINTED = "(what the code printed while the checks ran is not shown)\n"


def no_paths(text: str) -> str:
    return PATH.sub("<path>", text)


def check_lines(text: str) -> str:
    """Keep the checks' own lines of a grade cell's stream output; the rest
    (what the learner's function printed while the hidden checks called it,
    which could show their inputs) becomes one note."""
    lines = text.splitlines(keepends=True)
    kept = [ln for ln in lines if ln.lstrip().startswith(CHECK_LINE)]
    return "".join(kept) + (PRINTED if len(kept) < len(lines) else "")


def strip_hidden(source: str) -> str:
    return HIDDEN.sub(NOTE, source).rstrip("\n")


def learner_message(output) -> str:
    ename, evalue = output.get("ename", "Error"), str(output.get("evalue", ""))
    if ename in ("HiddenCheckFailed", "CheckFailed", "AssertionError"):
        return evalue or "a check failed"
    return f"{ename}: {evalue}" if evalue else ename


class StripHiddenTests(NbGraderPreprocessor):
    """Remove hidden-test source and tracebacks from grade cells."""

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        grade = is_grade(cell)
        if grade:
            cell.source = strip_hidden(cell.source)
        for output in cell.get("outputs", []):
            kind = output.get("output_type")
            if kind == "error":
                if grade:
                    output["traceback"] = [learner_message(output)]
                output["evalue"] = no_paths(str(output.get("evalue", "")))
                output["traceback"] = [no_paths(line) for line in output.get("traceback", [])]
            elif kind == "stream":
                text = check_lines(output.get("text", "")) if grade else output.get("text", "")
                output["text"] = no_paths(text)
            elif kind in ("execute_result", "display_data"):
                data = output.get("data", {})
                for key in ("text/plain", "text/html", "text/markdown"):
                    if isinstance(data.get(key), str):
                        data[key] = no_paths(data[key])
        return cell, resources


# output kinds nbconvert's templates escape (text) or draw from base64 data it escapes (images)
SHOWN_KINDS = ("text/plain", "image/png", "image/jpeg", "image/gif")  # images: only if their data is base64
NOT_SHOWN = "[{kinds} output: not shown in feedback, which shows text and images only]"


def is_base64(value) -> bool:
    return isinstance(value, str) and re.fullmatch(r"[A-Za-z0-9+/=\s]*", value) is not None


def safe_output(output) -> None:
    """Keep only SHOWN_KINDS of a display or result output; if none is left, a line saying what was there."""
    data = output.get("data", {})
    dropped = sorted(kind for kind, value in data.items()
                     if kind not in SHOWN_KINDS or (kind != "text/plain" and not is_base64(value)))
    for kind in dropped:
        del data[kind]
    if dropped and not data:
        data["text/plain"] = NOT_SHOWN.format(kinds=", ".join(dropped))
    output["metadata"] = {kind: {k: v for k, v in meta.items() if k in ("width", "height")}
                          for kind, meta in output.get("metadata", {}).items()
                          if kind in data and isinstance(meta, dict)}


def as_text(source: str) -> str:
    """Markdown that shows `source` as it is written: a fenced block longer than any run of backticks in it."""
    longest = max((len(run) for run in re.findall(r"`+", source)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{source}\n{fence}"


def instructor_text(root: Path, assignment: str, notebook: str) -> frozenset:
    """The Markdown and raw cells' text of the course's own copies of a notebook (release/ and source/)."""
    texts = set()
    for folder in ("release", "source"):
        path = root / folder / assignment / f"{notebook}.ipynb"
        try:
            texts |= _cell_texts(str(path), path.stat().st_mtime)
        except (OSError, ValueError):
            continue
    return frozenset(texts)


@lru_cache(maxsize=32)
def _cell_texts(path: str, mtime: float) -> frozenset:
    """One notebook's Markdown and raw cells' text, read once per version of the file (`mtime`): a worker
    writes every student's feedback from the same few notebooks."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    return frozenset(cell.source for cell in nb.cells if cell.cell_type in ("markdown", "raw"))


class LearnerContentAsText(NbGraderPreprocessor):
    """Show what a learner wrote as text in the feedback page, never as HTML or script (module docstring)."""

    def preprocess(self, nb, resources):
        from nbgrader.coursedir import CourseDirectory

        info = resources.get("nbgrader", {})
        root = Path(CourseDirectory(config=self.config).root)
        trusted = instructor_text(root, info.get("assignment", ""), info.get("notebook", ""))
        nb.metadata.pop("widgets", None)
        for cell in nb.cells:
            if cell.cell_type in ("markdown", "raw") and cell.source not in trusted:
                cell.cell_type, cell.source = "markdown", as_text(cell.source)
                cell.pop("attachments", None)
                cell.metadata.pop("raw_mimetype", None)
                cell.metadata.pop("format", None)
            for output in cell.get("outputs", []):
                if output.get("output_type") in ("display_data", "execute_result"):
                    safe_output(output)
        return nb, resources


def use_grader_feedback(cfg) -> None:
    """Feedback pages in `cfg` (an nbgrader config) made by the grader's exporter and preprocessors, whatever the
    course's config lists (one written for an older layout of this package names modules that moved): hidden
    tests never reach a page, and nothing a learner wrote runs in one. The course's nbgrader_config.py lists the
    same for a plain `nbgrader generate_feedback`."""
    from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
    from nbgrader.preprocessors import GetGrades

    cfg.GenerateFeedback.exporter_class = CachedHTMLExporter
    cfg.GenerateFeedback.preprocessors = [GetGrades, StripHiddenTests, LearnerContentAsText, CSSHTMLHeaderPreprocessor]


class MemoryBytecodeCache(jinja2.BytecodeCache):
    """jinja2's bytecode-cache hook, with the compiled code kept in a dict."""

    def __init__(self):
        self.store = {}

    def load_bytecode(self, bucket):
        code = self.store.get(bucket.key)
        if code is not None:
            bucket.bytecode_from_string(code)

    def dump_bytecode(self, bucket):
        self.store[bucket.key] = bucket.bytecode_to_string()


_BYTECODE = MemoryBytecodeCache()


class _AccessibilityWork(HTMLParser):
    """Whether HTMLExporter's closing pass could change a page: it gives an <img> without alt text an alt, and a
    cell inside a `jp-Notebook` element (nbconvert's JupyterLab templates) a tabindex. Read with the parser that
    pass reads the page with (BeautifulSoup's html.parser builder), so an element it would find has a start tag
    here; any <img> and any class naming jp-Notebook, in any case, count."""

    def __init__(self):
        super().__init__(convert_charrefs=False)
        self.found = False

    def handle_starttag(self, tag, attrs):
        if tag == "img" or any(name == "class" and value and "jp-notebook" in value.lower() for name, value in attrs):
            self.found = True

    handle_startendtag = handle_starttag


def accessibility_work(html: str) -> bool:
    reader = _AccessibilityWork()
    reader.feed(html)
    reader.close()
    return reader.found


class CachedHTMLExporter(HTMLExporter):
    """nbconvert's HTMLExporter whose jinja templates compile once per process, and which parses a page again
    only when that pass has something to change. Used by the grading workers (worker.py).

    - nbgrader builds a new exporter, and so a new jinja environment, for every `generate_feedback` call.
      Compiling nbgrader's feedback template and the nbconvert templates it extends, again for every student,
      was the largest CPU cost of a grading worker (measured with cProfile). jinja's bytecode cache is keyed by
      template name and checks the source checksum, so an edited template is still recompiled.
    - HTMLExporter (nbconvert 7.17.2) ends by parsing the whole page with BeautifulSoup, to give each image
      without alt text an alt and each cell of a JupyterLab-styled page a tabindex, and writing the page out
      again: about 0.05 s of a worker's CPU per feedback page, a third of its cost. A feedback page (nbgrader's
      template, on nbconvert's classic one) with no image has nothing for it to change: reading the page for
      what it would change (`accessibility_work`) takes about 0.007 s, and a page with nothing is returned as
      rendered; any other page takes the same pass as HTMLExporter's. Either way the page is
      HTMLExporter's, up to how BeautifulSoup writes out a page it has read (tests/test_feedback_page.py).
    """

    def _create_environment(self):
        environment = super()._create_environment()
        environment.bytecode_cache = _BYTECODE
        return environment

    def from_notebook_node(self, nb, resources=None, **kw):
        # HTMLExporter.from_notebook_node's steps before its pass, as nbconvert 7.17.2 takes them
        langinfo = nb.metadata.get("language_info", {})
        lexer = langinfo.get("pygments_lexer", langinfo.get("name", None))
        highlight_code = self.filters.get("highlight_code", Highlight2HTML(pygments_lexer=lexer, parent=self))
        resources = self._init_resources(resources)
        filter_data_type = WidgetsDataTypeFilter(notebook_metadata=self._nb_metadata, parent=self,
                                                 resources=resources)
        self.register_filter("highlight_code", highlight_code)
        self.register_filter("filter_data_type", filter_data_type)
        html, resources = TemplateExporter.from_notebook_node(self, nb, resources, **kw)
        if not accessibility_work(html):
            return html, resources
        return accessible(html, self.log), resources


def accessible(html: str, log) -> str:
    """HTMLExporter.from_notebook_node's closing pass (nbconvert 7.17.2), as it is written there."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html, features="html.parser")
    missing_alt = 0
    for elem in soup.select("img:not([alt])"):
        elem.attrs["alt"] = "No description has been provided for this image"
        missing_alt += 1
    if missing_alt:
        log.warning("Alternative text is missing on %s image(s).", missing_alt)
    for elem in soup.select(".jp-Notebook div.jp-Cell-inputWrapper"):
        elem.attrs["tabindex"] = "0"
    for elem in soup.select(".jp-Notebook div.jp-OutputArea-output"):
        elem.attrs["tabindex"] = "0"
    return str(soup)
