"""The learner's feedback page (grading/reports/student_page.py): every row says with
a mark whether its check passed, whichever kind of check wrote the message."""
import re
from types import SimpleNamespace

from donation_course.grading.reports.student_page import write_page
from donation_course.grading.results.result import CellGrade, NotebookResult, StudentResult

NB = "07_update_with_donate"


def test_every_failed_row_has_a_cross_and_every_passed_row_a_tick(tmp_path):
    grades = [
        CellGrade("ex-example", 1, auto_score=1, message="\u2714 update_with_donate([1.0, 2.0], ...) gives [1.5, 2.5] "
                                                       "(public check only)."),
        # a public check's CheckFailed carries no mark of its own: the row that had none
        CellGrade("ex-donated", 2, auto_score=0, error=True,
                  message="state after update_with_donate(state, delta) is still alive, so its buffer was not "
                          "donated.\nHint: compile with jax.jit(..., donate_argnums=(0,))."),
        CellGrade("ex-values", 3, auto_score=0, error=True, message="\u2718 values: for float32, 2 elements ..."),
        CellGrade("ex-buffer-reuse", 2, auto_score=0, error=True, message="NameError: name 'f' is not defined"),
        CellGrade("ex-training-loop", 2, auto_score=0, error=True, message=""),
        CellGrade("cap-loop", 2, auto_score=2, message="\u2714 capstone training loop: over 30 steps ..."),
    ]
    result = StudentResult.graded("me", {NB: NotebookResult(grades=grades, graded=True)})
    course = SimpleNamespace(notebooks=[NB], root=tmp_path / "course", assignment="buffer-donation")
    row = {"student": "me", "total": 3, "max": 12, "status": "partial", NB: 3}
    page = write_page(row, result, course, tmp_path / "out").read_text(encoding="utf-8")

    rows = re.findall(r"<tr><td>([\w-]+)</td>.*?<td class='(pass|fail)'>\w+</td><td><pre>(.*?)</pre>", page, re.S)
    assert [name for name, _, _ in rows] == [g.name for g in grades]
    for name, verdict, message in rows:
        mark = "\u2714" if verdict == "pass" else "\u2718"
        assert message.startswith(mark + " "), (name, message)
        assert message.count("\u2714") + message.count("\u2718") == 1, (name, message)  # never two marks
    messages = {name: message for name, _, message in rows}
    assert messages["ex-donated"].startswith("\u2718 state after update_with_donate(state, delta) is still alive")
    assert messages["ex-values"] == "\u2718 values: for float32, 2 elements ..."
    assert messages["ex-training-loop"] == "\u2718 failed"
