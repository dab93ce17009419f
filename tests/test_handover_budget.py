"""The hand-over budget of the grading kernel's IOPub (grading/executors/fastkernel.py): only the hidden checks'
own hand-over records, in the grade cells whose checks hand over, once for each check and within the size limit,
may use it; every other hand-over record is the learner's output and counts against the 1 MiB output cap.

A red-team pass had learner code display 80 MB of hand-over records: about 75 MB of it landed in autograded/.
The family: records from an answer cell, from a cell that is not graded, from inside a check's cell (a learner's
function the check calls displays them), many small ones, one huge one. Its honest side: the checks' own records
pass as they are, in every cell that hands over, however much the learner printed before."""
import json
import shutil

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from donation_course.course import COURSE, EXERCISE_ANSWER
from donation_course.grading.executors import fastkernel
from donation_course.grading.executors.fastkernel import OutputBudget, handing_over, note_cell
from donation_course.grading.referee import asks
from donation_course.grading.referee.asks import MAX_HANDOVER_BYTES, MIME
from donation_course.grading.referee.received import DROPPED, take_handovers
from helpers import GRADE_LIMITS, grade, read_grades

LIMIT = 1 << 20
EXAMPLE, VALUES = ("exercise", "worked example"), ("exercise", "values")
ENTRY = {"programs": {"float32[2]": {"text": "module {}", "kept": [0, 1], "requested": [True, False]}}}
CHECK_CELL = "import donation_course.hidden.exercise as _dl_hidden\n_dl_hidden.check_{}(update_with_donate)\n"


def channel():
    ch = OutputBudget(LIMIT)
    ch.handing = {"check-cell": frozenset({EXAMPLE, VALUES}), "other-cell": frozenset()}
    return ch


def record(pair, **fields):
    return {"answer": pair[0], "check": pair[1], **fields}


def message(parent, data, kind="display_data"):
    return {"msg_type": kind, "parent_header": {"msg_id": parent}, "content": {"data": data, "metadata": {}}}


def shown(parent, rec):
    return message(parent, {MIME: rec})


def passed(ch, msgs) -> list:
    """The contents that reach the kernel client, in order."""
    return [m["content"] for m in msgs if ch.keep(m)]


def sent_bytes(contents) -> int:
    return sum(len(json.dumps(c)) for c in contents)


# ---- the checks' own records (honest side) -------------------------------------------------------------------

def test_the_checks_own_records_pass_as_they_are_after_the_learner_printed_past_the_cap():
    ch = channel()
    flood = [message("other-cell", {"text/plain": "x" * 100_000}) for _ in range(20)]
    own = [record(EXAMPLE, index=0, entry=ENTRY), record(VALUES, index=0)]
    got = passed(ch, flood + [shown("check-cell", dict(r)) for r in own])
    assert [c["data"] for c in got[-2:]] == [{MIME: r} for r in own]
    assert sum(1 for c in got if "output capped by the grader" in c["data"].get("text/plain", "")) == 1


def test_a_check_that_could_not_hand_over_passes_its_failed_record():
    ch = channel()
    own = record(EXAMPLE, failed=True)
    assert passed(ch, [shown("check-cell", dict(own))]) == [{"data": {MIME: own}, "metadata": {}}]


def test_an_entry_as_large_as_received_py_accepts_is_on_the_checks_budget():
    ch = channel()
    entry = {"pad": "x" * (MAX_HANDOVER_BYTES - 20)}
    assert len(json.dumps(entry)) <= MAX_HANDOVER_BYTES
    assert passed(ch, [shown("check-cell", record(EXAMPLE, index=0, entry=entry))])[0]["data"][MIME]["entry"] == entry
    assert ch.printed == 0


def test_learner_output_below_the_cap_is_untouched():
    ch = channel()
    msgs = [message("other-cell", {"text/plain": "y" * 1000}),
            message("check-cell", {"image/png": "AAAA"}, "execute_result")]
    assert passed(ch, msgs) == [m["content"] for m in msgs]


def test_which_cells_hand_over_is_read_from_locked_grade_cells_only():
    def cell(source, **meta):
        c = new_code_cell(source)
        c.metadata["nbgrader"] = {"grade_id": "ex-example", "points": 1, **meta}
        return c

    source = CHECK_CELL.format("example")
    assert handing_over(cell(source, grade=True, locked=True, solution=False)) == {EXAMPLE}
    # a learner writes the source of an unlocked cell: answer cells, and cells that are no grade cells
    assert handing_over(cell(source, grade=True, locked=False, solution=True)) == frozenset()
    assert handing_over(cell(source, grade=False, locked=True)) == frozenset()
    assert handing_over(new_code_cell(source)) == frozenset()
    assert handing_over(cell("print(1)", grade=True, locked=True)) == frozenset()
    note_cell(cell=cell(source, grade=True, locked=True), cell_index=3)
    assert fastkernel._next_cell == {EXAMPLE}
    note_cell(cell=new_code_cell(source), cell_index=4)
    assert fastkernel._next_cell == frozenset()


# ---- the learner's records (each family) ------------------------------------------------------------------------

JUNK = record(EXAMPLE, index=0, entry={"pad": "x" * (8 << 20)})  # 8 MiB, as a red team sent ten of them


@pytest.mark.parametrize("family", ["answer cell", "not graded", "many small", "one huge"])
def test_records_from_cells_whose_checks_hand_over_nothing_count_against_the_cap(family):
    ch = channel()
    parent = "other-cell" if family != "not graded" else "never-noted"
    records = {"answer cell": [JUNK] * 10, "not graded": [JUNK] * 10,
               "many small": [record(EXAMPLE, index=0, entry=ENTRY)] * 100_000,
               "one huge": [record(EXAMPLE, index=0, entry={"pad": "x" * (80 << 20)})]}[family]
    got = passed(ch, [shown(parent, r) for r in records])
    assert sent_bytes(got) <= LIMIT + 1000, family
    assert ch.handed == set()
    # the first record past the cap is left as DROPPED (received.py flags it), with the cap's note; no more
    assert [c["data"].get(MIME) for c in got].count(DROPPED) == 1
    assert [c for c in got if "output capped" in c["data"].get("text/plain", "")][0]["data"][MIME] == DROPPED
    # the checks' own records still pass afterwards, on their budget
    own = record(EXAMPLE, index=0, entry=ENTRY)
    assert passed(ch, [shown("check-cell", dict(own))]) == [{"data": {MIME: own}, "metadata": {}}]


def test_a_learners_function_displaying_records_while_a_check_runs():
    """First the learner's forged record (it takes the check's place), then the check's own: that one reaches the
    notebook as a small record of its own, so received.py sees the check handed over twice (the student flagged,
    the answer nothing); every further record is the learner's output, capped."""
    ch = channel()
    forged = record(EXAMPLE, index=0, entry={"programs": {"forged": True}})
    own = record(EXAMPLE, index=0, entry=ENTRY)
    msgs = [shown("check-cell", dict(forged)), shown("check-cell", dict(own))]
    msgs += [shown("check-cell", dict(JUNK)) for _ in range(10)]
    msgs += [shown("check-cell", record(VALUES, index=0, entry={"pad": "x" * (MAX_HANDOVER_BYTES + 10)}))]
    got = passed(ch, msgs)
    assert got[0]["data"][MIME] == forged
    assert got[1]["data"][MIME] == {"answer": "exercise", "check": "worked example", "again": True}
    assert sent_bytes(got) <= LIMIT + 2000
    assert ch.handed == {EXAMPLE}  # the oversized record of `values` is not on the budget: it is the learner's


def test_the_checks_own_record_first_then_a_learners_is_kept_small():
    ch = channel()
    own = record(EXAMPLE, index=0, entry=ENTRY)
    got = passed(ch, [shown("check-cell", dict(own)), shown("check-cell", dict(JUNK)), shown("check-cell", dict(JUNK))])
    assert got[0]["data"][MIME] == own
    assert got[1]["data"][MIME] == {"answer": "exercise", "check": "worked example", "again": True}
    assert sent_bytes(got) <= LIMIT + 2000


def test_a_learners_function_cannot_clear_the_records_that_flag_it_and_show_a_forged_one():
    """A forged record, the check's own (kept small), then clear_output and a second forged record: the clearing is
    dropped in a cell that hands over, so every record stays for received.py to flag. Elsewhere it passes."""
    ch = channel()
    forged = record(EXAMPLE, index=0, entry={"programs": {"forged": True}})
    clear = {"msg_type": "clear_output", "parent_header": {"msg_id": "check-cell"}, "content": {"wait": False}}
    msgs = [shown("check-cell", dict(forged)), shown("check-cell", record(EXAMPLE, index=0, entry=ENTRY)), clear,
            shown("check-cell", dict(forged))]
    got = passed(ch, msgs)
    assert clear["content"] not in got and len(got) == 3
    assert got[1]["data"][MIME] == {"answer": "exercise", "check": "worked example", "again": True}
    assert ch.keep({**clear, "parent_header": {"msg_id": "other-cell"}})


def test_forged_headers_and_fields_of_any_json_shape_are_the_learners_and_never_stop_the_grader():
    ch = channel()
    odd = [{"msg_type": "display_data", "parent_header": {"msg_id": ["check-cell"]},
            "content": {"data": {MIME: record(EXAMPLE, index=0)}, "metadata": {}}},
           {"msg_type": "display_data", "parent_header": None, "content": {"data": {MIME: {}}, "metadata": {}}},
           shown("check-cell", {"answer": ["exercise"], "check": {"x": 1}, "index": 0}),
           shown("check-cell", {"answer": "exercise", "check": "values", "index": 0, "entry": [[[]]]})]
    got = passed(ch, odd[:3])
    assert len(got) == 3 and ch.handed == set()
    assert passed(ch, odd[3:]) and ch.handed == {VALUES}  # a JSON entry of any shape is received.py's to read


def test_records_for_a_check_the_cell_does_not_run_or_not_a_record_are_the_learners():
    ch = channel()
    ch.handing["check-cell"] = frozenset({EXAMPLE})
    got = passed(ch, [shown("check-cell", record(VALUES, index=0, entry={"pad": "x" * (2 << 20)})),
                      shown("check-cell", "x" * (2 << 20)),
                      message("check-cell", {MIME: record(EXAMPLE, index=0), "text/plain": "x" * (2 << 20)})])
    assert ch.handed == set() and sent_bytes(got) <= LIMIT + 1000


# ---- a real kernel (nbclient, the grading client, the worker's hook) ---------------------------------------------

HONEST = ("import functools\nimport jax\n\n@functools.partial(jax.jit, donate_argnums=(0,))\n"
          "def update_with_donate(state, delta):\n    return state + delta\n")
JUNK_CELL = ("from IPython.display import display\n"
             "for _ in range(10):\n"
             f"    display({{{MIME!r}: {{'answer': 'exercise', 'check': 'worked example', 'index': 0,"
             " 'entry': {'pad': 'x' * (8 << 20)}}}, raw=True)\n")
# the learner's function, traced by the check's hand-over, displays a forged record first and 80 MB of junk
INSIDE = ("import functools\nimport jax\nfrom IPython.display import display\n\n"
          "_honest = jax.jit(lambda state, delta: state + delta, donate_argnums=(0,))\n\n"
          "@functools.partial(jax.jit, donate_argnums=(0,))\n"
          "def update_with_donate(state, delta):\n"
          f"    display({{{MIME!r}: {{'answer': 'exercise', 'check': 'worked example', 'index': 0,"
          " 'entry': {'programs': {}}}}, raw=True)\n"
          "    for _ in range(10):\n"
          f"        display({{{MIME!r}: {{'answer': 'exercise', 'check': 'worked example', 'index': 0,"
          " 'entry': {'pad': 'x' * (8 << 20)}}}, raw=True)\n"
          "    return state + delta\n")


def graded_notebook(tmp_path, *learner_cells):
    """Run a notebook of the learner's cells and two grade cells of the exercise's checks as the worker runs it
    (nbclient, GradingKernelClient, fastkernel.note_cell), write it as nbgrader writes autograded/; its path."""
    from jupyter_client.manager import AsyncKernelManager
    from nbclient import NotebookClient

    cells = [new_code_cell(source) for source in learner_cells]
    for grade_id, check in (("ex-example", "example"), ("ex-values", "values")):
        cell = new_code_cell(CHECK_CELL.format(check))
        cell.metadata["nbgrader"] = {"grade": True, "grade_id": grade_id, "locked": True, "solution": False,
                                     "points": 1}
        cells.append(cell)
    nb = new_notebook(cells=cells)
    km = AsyncKernelManager(kernel_name="python3",
                            client_class="donation_course.grading.executors.fastkernel.GradingKernelClient")
    NotebookClient(nb, km=km, timeout=300, allow_errors=True, on_cell_execute=note_cell,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    path = tmp_path / "07.ipynb"
    nbformat.write(nb, path)
    return path


CELLS = {"07": [("ex-example", *EXAMPLE), ("ex-values", *VALUES)]}


def handed(path) -> list:
    return [o["data"][MIME] for c in nbformat.read(path, as_version=4).cells for o in c.get("outputs", [])
            if MIME in o.get("data", {})]


def test_an_honest_notebook_hands_over_through_a_real_kernel_as_the_checks_make_it(tmp_path):
    path = graded_notebook(tmp_path, HONEST)
    records = handed(path)
    assert [(r["answer"], r["check"], r["index"], "entry" in r) for r in records] == \
        [(*EXAMPLE, 0, True), (*VALUES, 0, False)]
    programs = records[0]["entry"]["programs"]
    assert sorted(programs) == sorted({asks.signature_key(asks.EXERCISE, s) for s in asks.EXERCISE.signatures})
    assert all("text" in program for program in programs.values()), programs
    got = take_handovers({"07": path}, CELLS)
    assert got.suspicious == [] and got.handovers["exercise"]["checks"] == {"worked example": 0, "values": 0}


@pytest.mark.slow  # 80 MB through a kernel, twice (the honest real-kernel test above stays everyday)
@pytest.mark.parametrize("where", ["answer cell", "inside the check"])
def test_80_mb_of_learner_records_through_a_real_kernel_leave_a_small_flagged_notebook(tmp_path, where):
    cells = [HONEST, JUNK_CELL] if where == "answer cell" else [INSIDE]
    path = graded_notebook(tmp_path, *cells)
    assert path.stat().st_size < 2 * LIMIT  # 80 MB displayed: the learner's cap, and the checks' small records
    text = path.read_text()
    got = take_handovers({"07": path}, CELLS)
    reasons = [odd.reason for odd in got.suspicious]
    if where == "inside the check":
        # the forged record took the check's place, the check's own came second: flagged, the answer nothing
        assert "'exercise' handed over twice for 'worked example'" in reasons and "exercise" not in got.handovers
    else:
        # the first junk record became the cap's note and DROPPED (flagged); the checks' own passed, on their budget
        assert "output capped by the grader" in text
        assert reasons == ["hand-over records displayed by the learner's code, dropped past the output cap"]
        assert got.handovers["exercise"]["checks"] == {"worked example": 0, "values": 0}


# ---- ./course grade: the worker's hook wired through nbgrader, the sandboxed kernel --------------------------------

@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_a_graded_class_keeps_learner_records_off_the_hand_over_budget(tmp_path, env, generated_course):
    """`./course grade` of a class with an honest student and one whose answer cell displays 80 MB of hand-over
    records: the honest one hands over as ever (full marks, unflagged), the other's autograded notebook stays near
    the cap, and that student is flagged for the dropped records."""
    from donation_course.corpus import exercise as corpus

    files = tmp_path / "files"
    corpus.build(files)
    notebook = corpus.EXERCISE
    for f in files.iterdir():
        if f.name.split("_")[0] != "partial":
            f.unlink()
    nb = nbformat.read(files / f"partial_{notebook}.ipynb", as_version=4)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == EXERCISE_ANSWER:
            cell.source = corpus.PARTIAL + "\n" + JUNK_CELL
    nbformat.write(nb, files / f"junk_{notebook}.ipynb")
    course = generated_course(tmp_path / "course")
    grade(env, files, "--course", course, *GRADE_LIMITS)
    rows = read_grades(course / ".grading" / "grades.csv")
    assert (float(rows["partial"][notebook]), rows["partial"]["status"]) == (corpus.MAX, "ok"), rows["partial"]
    assert rows["junk"]["status"] == "flagged", rows["junk"]
    assert "dropped past the output cap" in rows["junk"]["reason"], rows["junk"]
    autograded = course / "autograded" / "junk" / COURSE.assignment / f"{notebook}.ipynb"
    assert autograded.stat().st_size < 2 * LIMIT, autograded.stat().st_size
