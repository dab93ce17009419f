"""What the kernel handed over, read from the autograded notebooks (grading/referee/received.py): only the
records the hidden checks write, where they write them, reach the referee; any other hand-over record is one a
learner's code displayed, and flags the student.

The families (a red-team pass, each earning full marks before): a forged record displayed from a learner's cell,
padded past the size limit so that the checks' own record is dropped; a learner's function that displays a forged
record while a check calls it; a record that names a function never handed over; a malformed record that made the
grader itself fail. Each has its honest side: the records the checks write, in their cells, pass unflagged."""
import json
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from donation_course.grading.referee import asks
from donation_course.grading.referee.received import take_handovers

ENTRY = {"programs": {"float32[2]": {"text": "module {}", "kept": [0, 1], "requested": [True, False]}}}
FORGED = {"programs": {"float32[2]": {"text": "module { forged }", "kept": [0, 1], "requested": [True, False]}}}
# (grade_id, answer, check) of the grade cells whose checks hand over (combine.judged_cells)
CELLS = {"07": [("ex-example", "exercise", "worked example"), ("ex-values", "exercise", "values")]}


def shown(record):
    return new_output("display_data", data={asks.MIME: record})


def grade_cell(grade_id, *outputs):
    cell = new_code_cell(f"# {grade_id}", outputs=list(outputs))
    cell.metadata["nbgrader"] = {"grade": True, "grade_id": grade_id, "points": 1, "locked": True}
    return cell


def honest_cells():
    return [grade_cell("ex-example", shown({"answer": "exercise", "check": "worked example", "index": 0,
                                            "entry": ENTRY}),
                       new_output("stream", name="stdout", text="\u2714 worked example: ok\n")),
            new_markdown_cell("## Check your work"),  # a cell after one with a record: its outputs stay as they were
            grade_cell("ex-values", shown({"answer": "exercise", "check": "values", "index": 0}))]


def received(tmp_path, cells):
    path = tmp_path / "07.ipynb"
    nbformat.write(new_notebook(cells=cells), path)
    got = take_handovers({"07": path, "absent": tmp_path / "absent.ipynb"}, CELLS)
    assert asks.MIME not in path.read_text()  # every hand-over output is taken out, genuine or not
    nbformat.validate(nbformat.read(path, as_version=4))  # and the notebook it writes back is a valid one
    return got


def test_the_checks_own_records_in_their_cells_are_replayed_unflagged(tmp_path):
    got = received(tmp_path, honest_cells())
    assert got.handovers == {"exercise": {"programs": [ENTRY], "checks": {"worked example": 0, "values": 0}}}
    assert got.suspicious == []
    nb = nbformat.read(tmp_path / "07.ipynb", as_version=4)
    assert [len(c.get("outputs", ())) for c in nb.cells] == [1, 0, 0]  # the checks' own lines stay
    assert "outputs" not in nb.cells[1]


def test_a_check_that_could_not_hand_over_says_so_unflagged(tmp_path):
    cells = [grade_cell("ex-example", shown({"answer": "exercise", "check": "worked example", "failed": True}))]
    got = received(tmp_path, cells)
    assert got.handovers == {} and got.suspicious == []


FORGERIES = {
    # a forged record displayed from the learner's answer cell (a cell with no check), padded or not
    "from an answer cell": lambda: [new_code_cell("display(..., raw=True)", outputs=[
        shown({"answer": "exercise", "check": "worked example", "index": 0, "entry": FORGED})]), *honest_cells()],
    "padded past the limit, first": lambda: [new_code_cell("pad", outputs=[
        shown({"answer": "exercise", "check": "values", "index": 0,
               "entry": {**FORGED, "pad": "x" * (asks.MAX_HANDOVER_BYTES - 200)}})]), *honest_cells()],
    # the learner's function, called by a check, displays a forged record before the check's own
    "while a check runs": lambda: [grade_cell("ex-example",
                                              shown({"answer": "exercise", "check": "worked example", "index": 0,
                                                     "entry": FORGED}),
                                              shown({"answer": "exercise", "check": "worked example", "index": 0,
                                                     "entry": ENTRY}))],
    # ... and then makes the check's own hand-over fail, so that only the forged record would remain
    "then the check's fails": lambda: [grade_cell("ex-example",
                                                  shown({"answer": "exercise", "check": "worked example",
                                                         "index": 0, "entry": FORGED}),
                                                  shown({"answer": "exercise", "check": "worked example",
                                                         "failed": True}))],
    # a record for a check that this cell does not run, re-pointing it
    "another check's name": lambda: [grade_cell("ex-example",
                                                shown({"answer": "exercise", "check": "worked example", "index": 0,
                                                       "entry": ENTRY}),
                                                shown({"answer": "exercise", "check": "values", "index": 3}))],
    # as the grading client (executors/fastkernel.py) leaves them: a check's second record in its own cell (after
    # the learner's forged one had taken its place), and the first of the learner's records dropped past the cap
    "a check's second record, kept small": lambda: [grade_cell("ex-example",
                                                               shown({"answer": "exercise", "check": "worked example",
                                                                      "index": 0, "entry": FORGED}),
                                                               shown({"answer": "exercise", "check": "worked example",
                                                                      "again": True}))],
    "dropped past the output cap": lambda: [new_code_cell("x", outputs=[shown({"dropped": True})]),
                                            *honest_cells()],
    "a function never handed over": lambda: [grade_cell("ex-values",
                                                        shown({"answer": "exercise", "check": "values",
                                                               "index": 5}))],
    "a second entry for one function": lambda: [
        grade_cell("ex-example", shown({"answer": "exercise", "check": "worked example", "index": 0, "entry": ENTRY})),
        grade_cell("ex-values", shown({"answer": "exercise", "check": "values", "index": 0, "entry": FORGED}))],
    # malformed: made the grader itself fail (a list is not a name)
    "an answer that is a list": lambda: [new_code_cell("x", outputs=[shown({"answer": ["exercise"], "check": "x",
                                                                            "index": 0})]), *honest_cells()],
    "not a record": lambda: [new_code_cell("x", outputs=[shown("not a record"), shown(json.dumps([1]))]),
                             *honest_cells()],
    "an answer the grader does not ask for": lambda: [grade_cell("ex-values", shown({"answer": "nobody", "check": "x",
                                                                                     "index": 0}))],
    "a negative index": lambda: [grade_cell("ex-values", shown({"answer": "exercise", "check": "values",
                                                                "index": -1}))],
    "an index that is true": lambda: [grade_cell("ex-example", shown({"answer": "exercise", "check": "worked example",
                                                                      "index": True, "entry": FORGED}))],
}


@pytest.mark.parametrize("family", sorted(FORGERIES))
def test_a_record_the_checks_did_not_write_is_left_out_and_flags_the_student(tmp_path, family):
    got = received(tmp_path, FORGERIES[family]())
    assert got.suspicious, family
    for suspicious in got.suspicious:
        assert suspicious.notebook == "07" and suspicious.reason
    programs = got.handovers.get("exercise", {}).get("programs", [])
    assert FORGED not in programs and not [p for p in programs if p and "pad" in p], programs


NOBODY = 65534


@pytest.mark.skipif(os.getuid() != 0, reason="as any other user this file's own run is the case (see below)")
def test_hand_overs_are_taken_out_of_the_read_only_notebook_nbgrader_leaves_as_an_instructors_own_user():
    """nbgrader leaves autograded notebooks read-only (444). Root writes them anyway, so this runs the reading in a
    child that has given up root: as an instructor's own account, every student failed with PermissionError."""
    folder = Path(tempfile.mkdtemp(prefix="received-", dir="/tmp"))
    try:
        path = folder / "07.ipynb"
        nbformat.write(new_notebook(cells=honest_cells()), path)
        path.chmod(0o444)
        os.chown(folder, NOBODY, NOBODY)
        os.chown(path, NOBODY, NOBODY)
        pid = os.fork()
        if pid == 0:  # the child: only this call, then out (no pytest teardown in it)
            code = 1
            try:
                os.setgid(NOBODY)
                os.setuid(NOBODY)
                got = take_handovers({"07": path}, CELLS)
                code = 0 if got.handovers and not got.suspicious else 3
            except BaseException:
                code = 2
            finally:
                os._exit(code)
        deadline = time.monotonic() + 60
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        if done[0] == 0:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            raise AssertionError("the child did not finish in 60 s")
        assert os.waitstatus_to_exitcode(done[1]) == 0
        assert stat.S_IMODE(path.stat().st_mode) == 0o444  # as nbgrader left it
        assert asks.MIME not in path.read_text()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
