"""How long a lesson's main path is: words of prose, cells, long sentences.

A lesson's main path is its notebook up to its first markdown heading that
begins "Going deeper" (the whole notebook if it has none). What comes after
is the lesson's reference part, which a learner opens on purpose.

    python -m donation_course.lesson_size            # a table for the source lessons

Study time is estimated from the measured size at stated rates (READING_WPM,
CODE_CELL_MINUTES, EXERCISE_MINUTES): prose read at a technical reading pace,
each code cell read, run and its output looked at, each exercise tried and
checked. The README's times come from this table.

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

# Rates for the study-time estimate: 150 words a minute is a careful pace for
# technical prose (adults read plain non-fiction at about 240); a code cell is
# read, run and its output read in about a minute; an exercise (answer cell)
# takes about 5 minutes with its check and a second try.
READING_WPM = 150
CODE_CELL_MINUTES = 1.0
EXERCISE_MINUTES = 5.0

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


def reference_start(nb) -> int | None:
    """The index of the first cell of the notebook's reference part, or None when it has none or when that part
    holds a grade or answer cell (nbgrader's metadata, read here without importing nbgrader: the compile cache's
    fill cuts the source with this, and nbgrader's import takes half a second)."""
    start = len(main_path(nb))
    rest = [c.metadata.get("nbgrader", {}) for c in nb.cells[start:]]
    if not rest or any(meta.get("grade") or meta.get("solution") for meta in rest):
        return None
    return start


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
    code_cells: int = 0
    exercises: int = 0
    reference_code_cells: int = 0
    reference_exercises: int = 0

    @property
    def minutes(self) -> float:
        """Estimated study time of the main path."""
        return study_minutes(self.words, self.code_cells, self.exercises)

    @property
    def reference_minutes(self) -> float:
        return study_minutes(self.reference_words, self.reference_code_cells, self.reference_exercises)


def study_minutes(words: int, code_cells: int, exercises: int) -> float:
    return words / READING_WPM + (code_cells - exercises) * CODE_CELL_MINUTES + exercises * EXERCISE_MINUTES


def is_exercise(cell) -> bool:
    """An answer cell: graded (nbgrader's solution cells) or a practice question tagged `practice`."""
    return cell.cell_type == "code" and (bool(cell.metadata.get("nbgrader", {}).get("solution"))
                                         or "practice" in cell.metadata.get("tags", []))


def measure(path: Path) -> LessonSize:
    nb = nbformat.read(path, as_version=4)
    path_cells = main_path(nb)
    markdown = [prose(c.source) for c in path_cells if c.cell_type == "markdown"]
    rest_cells = nb.cells[len(path_cells):]
    rest = [prose(c.source) for c in rest_cells if c.cell_type == "markdown"]
    long_ones = [s for text in markdown for s in sentences(text) if len(words(s)) > MAX_SENTENCE_WORDS]
    return LessonSize(
        name=Path(path).stem,
        cells=len(path_cells),
        words=sum(len(words(text)) for text in markdown),
        long_sentences=long_ones,
        reference_cells=len(nb.cells) - len(path_cells),
        reference_words=sum(len(words(text)) for text in rest),
        code_cells=sum(c.cell_type == "code" for c in path_cells),
        exercises=sum(map(is_exercise, path_cells)),
        reference_code_cells=sum(c.cell_type == "code" for c in rest_cells),
        reference_exercises=sum(map(is_exercise, rest_cells)),
    )


def main(argv=None) -> int:
    from donation_course.course import COURSE

    paths = [Path(p) for p in (argv or [])] or sorted(COURSE.source.glob("*.ipynb"))
    sizes = [measure(p) for p in paths]
    print(f"{'lesson':24s} {'cells':>5s} {'words':>6s} {'long':>5s} {'min':>5s}   reference: cells  words   min")
    for s in sizes:
        print(f"{s.name:24s} {s.cells:5d} {s.words:6d} {len(s.long_sentences):5d} {s.minutes:5.0f}   "
              f"{s.reference_cells:16d} {s.reference_words:6d} {s.reference_minutes:5.0f}")
    print(f"{'in all':24s} {sum(s.cells for s in sizes):5d} {sum(s.words for s in sizes):6d} "
          f"{sum(len(s.long_sentences) for s in sizes):5d} {sum(s.minutes for s in sizes):5.0f}   "
          f"{sum(s.reference_cells for s in sizes):16d} {sum(s.reference_words for s in sizes):6d} "
          f"{sum(s.reference_minutes for s in sizes):5.0f}")
    print(f"study time (min): words / {READING_WPM} + {CODE_CELL_MINUTES:g} per code cell + "
          f"{EXERCISE_MINUTES:g} per exercise")
    print(f"limits: {MAX_WORDS_PER_LESSON} words a lesson, {MAX_WORDS_IN_ALL} words and {MAX_CELLS_IN_ALL} cells "
          f"in all, no sentence over {MAX_SENTENCE_WORDS} words")
    for s in sizes:
        for sentence in s.long_sentences:
            print(f"  {s.name}: {len(words(sentence))} words: {sentence[:100]}...")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
