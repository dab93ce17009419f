"""The lessons' main paths stay short (issue #28's limits), and the measure
itself counts what it says it counts."""
import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from donation_course import lesson_size
from donation_course.course import COURSE
from donation_course.execute import output_claim_mismatches

LESSONS = sorted(COURSE.source.glob("*.ipynb"))


@pytest.fixture(scope="module")
def sizes():
    return [lesson_size.measure(path) for path in LESSONS]


def test_each_main_path_is_at_most_1200_words(sizes):
    over = {s.name: s.words for s in sizes if s.words > lesson_size.MAX_WORDS_PER_LESSON}
    assert not over, f"main paths over {lesson_size.MAX_WORDS_PER_LESSON} words: {over}"


def test_the_main_paths_together_are_at_most_5000_words_in_150_cells(sizes):
    words, cells = sum(s.words for s in sizes), sum(s.cells for s in sizes)
    assert words <= lesson_size.MAX_WORDS_IN_ALL and cells <= lesson_size.MAX_CELLS_IN_ALL, (words, cells)


def test_no_main_path_sentence_is_over_40_words(sizes):
    long_ones = [f"{s.name}: {x[:80]}" for s in sizes for x in s.long_sentences]
    assert not long_ones, "\n".join(long_ones)


def test_the_main_path_ends_at_the_first_going_deeper_heading():
    nb = new_notebook(cells=[
        new_markdown_cell("# Lesson\n\nOne idea. Another idea."),
        new_code_cell("x = 1"),
        new_markdown_cell("## Going deeper: the rare cases\n\nThese words are not counted."),
        new_markdown_cell("## Takeaways after it are not counted either"),
    ])
    assert len(lesson_size.main_path(nb)) == 2
    assert lesson_size.main_path(new_notebook(cells=nb.cells[:2])) == nb.cells[:2]
    # A heading that only mentions it further on does not end the path.
    assert not lesson_size.is_going_deeper(new_markdown_cell("## Before going deeper"))


def test_words_leave_out_code_and_tags_and_sentences_join_wrapped_lines():
    text = "Two words.\n\n```python\nx = not counted at all\n```\n<details><summary>Hint</summary></details>"
    assert lesson_size.words(lesson_size.prose(text)) == ["Two", "words.", "Hint"]
    wrapped = "This sentence is\nwrapped over lines. A second one.\n- an item\n- another"
    assert lesson_size.sentences(wrapped) == ["This sentence is wrapped over lines.", "A second one.",
                                              "- an item", "- another"]
    too_long = " ".join(["word"] * 41) + "."
    assert lesson_size.sentences(too_long + " Short.") == [too_long, "Short."]
    assert len(lesson_size.words(too_long)) > lesson_size.MAX_SENTENCE_WORDS


def test_an_output_claim_fails_when_the_cell_shows_the_other_error():
    cell = new_code_cell("try: read()\nexcept (RuntimeError, ValueError) as e: print(type(e).__name__)")
    cell.id = "l2-read"
    cell.metadata["donation_lab"] = {"shows": ["RuntimeError"], "hides": ["ValueError"]}
    nb = new_notebook(cells=[cell])
    cell.outputs = [new_output("stream", name="stdout", text="RuntimeError\n")]
    assert output_claim_mismatches(nb) == []
    cell.outputs = [new_output("stream", name="stdout", text="ValueError\n")]
    assert output_claim_mismatches(nb) == ["cell 'l2-read' should show 'RuntimeError'",
                                          "cell 'l2-read' should not show 'ValueError'"]
    cell.outputs = [new_output("error", ename="RuntimeError", evalue="Array has been deleted", traceback=[])]
    assert output_claim_mismatches(nb) == []
    nbformat.validate(nb)


def test_study_time_counts_prose_code_cells_and_exercises_at_the_stated_rates(tmp_path):
    nb = new_notebook(cells=[
        new_markdown_cell(" ".join(["word"] * lesson_size.READING_WPM)),
        new_code_cell("x = 1"),
        new_code_cell("### BEGIN SOLUTION\nanswer = 2\n### END SOLUTION"),
        new_markdown_cell("## Going deeper: more"),
        new_code_cell("y = 2"),
    ])
    nb.cells[2].metadata["nbgrader"] = {"solution": True, "grade": False, "grade_id": "q", "locked": False}
    path = tmp_path / "lesson.ipynb"
    nbformat.write(nb, path)
    size = lesson_size.measure(path)
    assert (size.code_cells, size.exercises, size.reference_code_cells) == (2, 1, 1)
    assert size.minutes == 1 + lesson_size.CODE_CELL_MINUTES + lesson_size.EXERCISE_MINUTES
    assert size.reference_minutes == lesson_size.CODE_CELL_MINUTES + 3 / lesson_size.READING_WPM  # "Going deeper: more"


@pytest.mark.parametrize("kind", ["grade", "solution", None])
def test_a_reference_part_is_set_aside_only_when_it_earns_nothing(kind):
    """reference_start (grading and the compile cache's fill run a lesson's main path only) reads nbgrader's
    metadata itself, as nbgrader's is_grade and is_solution do: a grade or answer cell in the reference part
    keeps the notebook whole."""
    from nbgrader.utils import is_grade, is_solution

    cell = new_code_cell("x = 1")
    if kind:
        cell.metadata["nbgrader"] = {"grade": kind == "grade", "solution": kind == "solution",
                                     "grade_id": "g", "locked": False, "schema_version": 3, "points": 1}
    nb = new_notebook(cells=[new_code_cell("a = 1"), new_markdown_cell("## Going deeper\n\nMore."), cell])
    assert (is_grade(cell) or is_solution(cell)) == (kind is not None)
    assert lesson_size.reference_start(nb) == (None if kind else 1)
    assert lesson_size.reference_start(new_notebook(cells=nb.cells[:1])) is None  # no reference part


def test_each_lessons_reference_part_starts_where_its_main_path_ends():
    for path in LESSONS:
        nb = nbformat.read(path, as_version=4)
        assert lesson_size.reference_start(nb) == len(lesson_size.main_path(nb)), path.name
