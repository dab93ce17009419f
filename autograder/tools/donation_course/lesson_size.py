"""How long a lesson's main path is: words of prose, cells, long sentences.

A lesson's main path is its notebook up to its first markdown heading that
begins "Going deeper" (the whole notebook if it has none). What comes after
is the lesson's reference part, which a learner opens on purpose.

    python -m donation_course.lesson_size            # a table for the source lessons

tests/test_lesson_size.py holds the course to its limits with this module.
"""
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

GOING_DEEPER = re.compile(r"^\s{0,3}#{1,6}\s+Going deeper", re.MULTILINE)
FENCED_CODE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
HTML_TAG = re.compile(r"<[^>]+>")
WORD = re.compile(r"\S*[A-Za-z0-9]\S*")
# A block (paragraph, list item, heading, table row) starts at a blank line or
# at a line that begins with a list marker, a heading's # or a table's |;
# within a block a sentence ends at . ! or ? followed by white space.
BLOCK_START = re.compile(r"\n\s*\n|\n(?=\s*(?:[-*+]\s|\d+[.)]\s|#|\|))")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")

# The limits issue #28 sets for the main path.
MAX_WORDS_PER_LESSON = 1200
MAX_WORDS_IN_ALL = 5000
MAX_CELLS_IN_ALL = 150
MAX_SENTENCE_WORDS = 40


def is_going_deeper(cell) -> bool:
    return cell.cell_type == "markdown" and bool(GOING_DEEPER.search(cell.source))


def main_path(nb) -> list:
    """The cells before the first "Going deeper" heading."""
    cells = []
    for cell in nb.cells:
        if is_going_deeper(cell):
            break
        cells.append(cell)
    return cells


def prose(markdown: str) -> str:
    """A markdown cell's prose: fenced code and HTML tags left out."""
    return HTML_TAG.sub(" ", FENCED_CODE.sub(" ", markdown))


def words(text: str) -> list[str]:
    return WORD.findall(text)


def sentences(text: str) -> list[str]:
    blocks = (" ".join(block.split()) for block in BLOCK_START.split(text))
    return [s.strip() for block in blocks for s in SENTENCE_END.split(block) if s.strip()]


@dataclass
class LessonSize:
    name: str
    cells: int
    words: int
    long_sentences: list[str] = field(default_factory=list)
    reference_cells: int = 0
    reference_words: int = 0


def measure(path: Path) -> LessonSize:
    nb = nbformat.read(path, as_version=4)
    path_cells = main_path(nb)
    markdown = [prose(c.source) for c in path_cells if c.cell_type == "markdown"]
    rest = [prose(c.source) for c in nb.cells[len(path_cells):] if c.cell_type == "markdown"]
    long_ones = [s for text in markdown for s in sentences(text) if len(words(s)) > MAX_SENTENCE_WORDS]
    return LessonSize(
        name=Path(path).stem,
        cells=len(path_cells),
        words=sum(len(words(text)) for text in markdown),
        long_sentences=long_ones,
        reference_cells=len(nb.cells) - len(path_cells),
        reference_words=sum(len(words(text)) for text in rest),
    )


def main(argv=None) -> int:
    from donation_course.course import COURSE

    paths = [Path(p) for p in (argv or [])] or sorted(COURSE.source.glob("*.ipynb"))
    sizes = [measure(p) for p in paths]
    print(f"{'lesson':28s} {'cells':>5s} {'words':>6s} {'long':>5s}   reference: cells  words")
    for s in sizes:
        print(f"{s.name:28s} {s.cells:5d} {s.words:6d} {len(s.long_sentences):5d}   {s.reference_cells:16d} "
              f"{s.reference_words:6d}")
    print(f"{'main path in all':28s} {sum(s.cells for s in sizes):5d} {sum(s.words for s in sizes):6d} "
          f"{sum(len(s.long_sentences) for s in sizes):5d}")
    print(f"limits: {MAX_WORDS_PER_LESSON} words a lesson, {MAX_WORDS_IN_ALL} words and {MAX_CELLS_IN_ALL} cells "
          f"in all, no sentence over {MAX_SENTENCE_WORDS} words")
    for s in sizes:
        for sentence in s.long_sentences:
            print(f"  {s.name}: {len(words(sentence))} words: {sentence[:100]}...")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
