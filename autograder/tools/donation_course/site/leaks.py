"""What the published site must never hold, read from the source, and the
search of a built site for it.

Forbidden:

- every line of every solution (between nbgrader's solution delimiters in
  the source notebooks) and of every hidden test (between its hidden-test
  delimiters) that the learner's copy does not already show. What the copy
  shows anyway reveals nothing: its code (an `import`, a `def` line outside
  the solution region, a check's hint string) and its text outside hints
  (an exercise that gives its input). Hints (`<details>` blocks) do not
  count as shown, so a hint that gives an answer line is found. A line
  under MIN_LINE characters (`try:`, `return None`) is too common to mean an
  answer;
- each whole solution or hidden-test block, as one text;
- nbgrader's delimiters themselves (the ones nbgrader's preprocessors and
  the course's configuration use).

Text is compared with its whitespace normalised (every run of whitespace is
one space), after HTML is reduced to its text and attribute values, so a
line split over syntax-highlighting spans is still found.
"""
import html
import re
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import nbformat

# Lines shorter than this (after normalising) are not searched for on their own.
MIN_LINE = 12
# Files of the built site that are read as text (everything a browser loads as text).
TEXT_SUFFIXES = {".html", ".js", ".css", ".txt", ".json", ".svg", ".xml", ".md", ".ipynb", ".py"}


@dataclass(frozen=True)
class Forbidden:
    text: str    # normalised
    origin: str  # where it comes from, e.g. "07_update_with_donate.ipynb, cell ex-answer (solution)"


@dataclass(frozen=True)
class Finding:
    path: str    # relative to the site's root
    forbidden: Forbidden


def normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def delimiters() -> dict:
    """{kind: (begin, end)} as nbgrader strips them, with the course's own configuration applied."""
    from nbgrader.preprocessors import ClearHiddenTests, ClearMarkScheme, ClearSolutions

    from ..course import COURSE

    config = COURSE.config
    pairs = {
        "solution": (ClearSolutions, "begin_solution_delimeter", "end_solution_delimeter"),
        "hidden test": (ClearHiddenTests, "begin_test_delimeter", "end_test_delimeter"),
        "mark scheme": (ClearMarkScheme, "begin_mark_scheme_delimeter", "end_mark_scheme_delimeter"),
    }
    return {kind: tuple(config[cls.__name__].get(name, cls.class_traits()[name].default_value)
                        for name in (begin, end))
            for kind, (cls, begin, end) in pairs.items()}


def delimited_blocks(source: str, begin: str, end: str) -> list[str]:
    """The text between each `### BEGIN ...` line and its `### END ...` line (nbgrader's own rule:
    the delimiter is found anywhere in a line, and the line holding it goes with it)."""
    blocks, inside, current = [], False, []
    for line in source.splitlines():
        if not inside and begin in line:
            inside, current = True, []
        elif inside and end in line:
            inside = False
            blocks.append("\n".join(current))
        elif inside:
            current.append(line)
    return blocks


HINT = re.compile(r"<details\b.*?</details>", re.S | re.I)


def learner_visible(learner_notebooks) -> str:
    """What the learner's copies show outside their hints: each cell normalised, separated by a character
    no text holds."""
    return "\0".join(normalise(cell.source if cell.cell_type == "code" else HINT.sub("\0", cell.source))
                      for path in learner_notebooks for cell in nbformat.read(path, as_version=4).cells)


def forbidden_texts(source_notebooks, learner_notebooks) -> list[Forbidden]:
    """What no page may hold: see the module's docstring."""
    marks = delimiters()
    visible = learner_visible(learner_notebooks)
    found = {}
    for kind, (begin, end) in marks.items():
        for mark in (begin, end):
            found.setdefault(mark, Forbidden(mark, f"nbgrader's {kind} delimiter"))
    for path in source_notebooks:
        for cell in nbformat.read(path, as_version=4).cells:
            for kind in ("solution", "hidden test"):
                for block in delimited_blocks(cell.source, *marks[kind]):
                    origin = f"{Path(path).name}, cell {cell.get('id')} ({kind})"
                    whole = normalise(block)
                    if whole and whole not in visible:
                        found.setdefault(whole, Forbidden(whole, origin))
                    for line in block.splitlines():
                        text = normalise(line)
                        if len(text) >= MIN_LINE and text not in visible:
                            found.setdefault(text, Forbidden(text, origin))
    return list(found.values())


class _TextOf(HTMLParser):
    """A page's text, in document order, and its attribute values (a link, a title, a data- value)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts, self.attributes = [], []

    def handle_starttag(self, tag, attrs):
        self.attributes.extend(value for _, value in attrs if value)

    def handle_data(self, data):
        self.parts.append(data)


def searchable_text(path: Path) -> str:
    raw = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".html":
        parser = _TextOf()
        parser.feed(raw)
        parser.close()
        # Highlighting splits a line into spans: joined with nothing between them, as the browser shows it.
        raw = "".join(parser.parts) + "\0" + "\0".join(parser.attributes)
    return normalise(html.unescape(raw))


def search_site(site: Path, forbidden: list[Forbidden]) -> list[Finding]:
    """Every forbidden text found in any text file of the built site."""
    findings = []
    for path in sorted(site.rglob("*")):
        if not path.is_file() or path.suffix not in TEXT_SUFFIXES:
            continue
        text = searchable_text(path)
        findings += [Finding(str(path.relative_to(site)), item) for item in forbidden if item.text in text]
    return findings


def describe(findings: list[Finding]) -> str:
    return "\n".join(f"{f.path}: {f.forbidden.text!r} (from {f.forbidden.origin})" for f in findings)
