"""Every point and grade id comes from the source notebooks' grade cells
(donation_course.course: Course.grades, points, total_points, exercise,
part): a scratch course's own numbers, the exercise found by its answer cell
wherever it sorts, and the course's numbers as nbgrader itself reads them."""
import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from donation_course.course import CAPSTONE_ANSWER, COURSE, EXERCISE_ANSWER, Course, CourseError


def cell(grade_id, points=None, answer=False, markdown=False):
    c = (new_markdown_cell if markdown else new_code_cell)("pass" if not markdown else "YOUR ANSWER HERE")
    c.id = grade_id
    c.metadata["nbgrader"] = dict(grade=points is not None, solution=answer, locked=not answer, grade_id=grade_id,
                                  schema_version=3, **({"points": points} if points is not None else {}))
    return c


def scratch(tmp_path, notebooks: dict) -> Course:
    (tmp_path / "nbgrader_config.py").write_text("c = get_config()\n")
    src = tmp_path / "source" / "a1"
    src.mkdir(parents=True)
    for name, cells in notebooks.items():
        nbformat.write(new_notebook(cells=[new_markdown_cell("# text"), *cells]), src / f"{name}.ipynb")
    return Course(tmp_path)


def test_points_grade_ids_exercise_and_parts_come_from_the_grade_cells(tmp_path):
    course = scratch(tmp_path, {
        # the exercise sorts first here: it is found by its answer cell, not by its place or name
        "00_graded": [cell("setup"), cell(EXERCISE_ANSWER, answer=True), cell("ex-a", 1), cell("ex-b", 3),
                      cell(CAPSTONE_ANSWER, answer=True), cell("cap-a", 2),
                      cell("cap-essay", 4, answer=True, markdown=True), cell("cap-b", 0.5)],
        "01_lesson": [cell("l1-q1", answer=True), cell("l1-q1-check", 2), cell("l1-note"), cell("l1-q2-check", 1)],
        "02_reading": [cell("l2-setup")],
    })
    assert course.grades == {"00_graded": {"ex-a": 1, "ex-b": 3, "cap-a": 2, "cap-essay": 4, "cap-b": 0.5},
                             "01_lesson": {"l1-q1-check": 2, "l1-q2-check": 1}, "02_reading": {}}
    assert course.grade_ids["00_graded"] == ["ex-a", "ex-b", "cap-a", "cap-essay", "cap-b"]
    assert course.points == {"00_graded": 10.5, "01_lesson": 3, "02_reading": 0}
    assert course.total_points == 13.5
    assert course.exercise == "00_graded"
    assert course.part(EXERCISE_ANSWER) == {"ex-a": 1, "ex-b": 3}
    assert course.part(CAPSTONE_ANSWER) == {"cap-a": 2}  # a graded answer cell starts a part of its own
    assert course.part("cap-essay") == {"cap-essay": 4, "cap-b": 0.5}
    assert course.part("l1-q1") == {"l1-q1-check": 2, "l1-q2-check": 1}
    with pytest.raises(CourseError, match="no answer cell 'l9-q1'"):
        course.part("l9-q1")


def test_a_course_without_the_exercise_answer_cell_has_no_exercise(tmp_path):
    course = scratch(tmp_path, {"01_only": [cell("q1", answer=True), cell("q1-check", 5)]})
    assert course.exercise is None and course.points == {"01_only": 5}


def test_the_course_s_points_are_nbgrader_s(tmp_path):
    """The course's numbers against nbgrader's own reading of each source
    notebook's grade cells (nbgrader.utils.determine_grade's max score)."""
    from nbgrader.utils import determine_grade, is_grade

    for path in COURSE.source_notebooks():
        graded = [c for c in nbformat.read(path, as_version=4).cells if is_grade(c)]
        assert COURSE.grade_ids[path.stem] == [c.metadata["nbgrader"]["grade_id"] for c in graded], path.name
        assert COURSE.points[path.stem] == sum(determine_grade(c)[1] for c in graded), path.name
    assert COURSE.total_points == sum(COURSE.points.values()) > 0
    assert COURSE.exercise in COURSE.notebooks
    exercise, capstone = COURSE.part(EXERCISE_ANSWER), COURSE.part(CAPSTONE_ANSWER)
    assert exercise and capstone and not set(exercise) & set(capstone)
    assert set(exercise) | set(capstone) <= set(COURSE.grade_ids[COURSE.exercise])
