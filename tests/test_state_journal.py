"""The grader's state file and its journal (grading/run/state.py): a run
appends one line per graded student instead of writing the whole file again,
and every reader sees the file with the journal read over it."""
import json
import os
import subprocess
import sys
import textwrap

from donation_course.grading.results.result import Summary
from donation_course.grading.run.state import (
    State,
    StudentState,
    journal_of,
    load_state,
    record_student,
    save_state,
    write_atomic,
)


def entry(status: str, digest: str = "d") -> StudentState:
    return StudentState(hash=digest, summary=Summary(status=status, reasons=[f"{status} reason"], files="a.ipynb",
                                                     content={"nb": digest}))


def said():
    lines = []
    return lines, lines.append


def record(path, state: State, student: str, entry_: StudentState) -> None:
    """What a run does with a graded student: into its state in memory, then onto the journal."""
    state.students[student] = entry_
    record_student(path, state, student)


def test_a_student_recorded_is_read_back_over_the_file_and_a_whole_write_takes_the_journal_in(tmp_path):
    path = tmp_path / "state.json"
    run = State(source="src", students={"ann": entry("ok", "a1"), "bob": entry("partial", "b1")})
    save_state(path, run)
    record(path, run, "bob", entry("ok", "b2"))      # bob regraded: the journal's line wins
    record(path, run, "cy", entry("flagged", "c1"))  # a student the file has not seen
    assert json.loads(path.read_text())["students"]["bob"]["hash"] == "b1"  # the file itself is untouched
    lines, say = said()
    state = load_state(path, say)
    assert lines == []
    assert state.source == "src" and sorted(state.students) == ["ann", "bob", "cy"]
    assert state.students["bob"] == entry("ok", "b2") and state.students["cy"] == entry("flagged", "c1")
    assert state.students["ann"] == entry("ok", "a1")
    save_state(path, state)
    assert not journal_of(path).exists()
    assert load_state(path, say) == state and lines == []


def test_journal_lines_from_before_the_files_last_whole_write_are_not_read_over_it(tmp_path):
    """A process killed between a whole write and the journal's removal (say `feedback --accept` after a
    killed run) leaves lines older than the file: read over it, they would undo what the file says."""
    path = tmp_path / "state.json"
    run = State(source="src", students={"ann": entry("ok", "a1")})
    save_state(path, run)
    record(path, run, "bob", entry("flagged", "b1"))  # a killed run's last student
    later = load_state(path, print)
    later.students["bob"] = entry("ok", "b1-accepted")
    later.epoch = "after"  # what save_state's whole write does, without the removal that would follow
    write_atomic(path, later.to_json())
    lines, say = said()
    state = load_state(path, say)
    assert state.students["bob"] == entry("ok", "b1-accepted") and lines == []
    record(path, later, "cy", entry("ok", "c1"))  # a line made after that whole write is read over it
    assert load_state(path, say).students["cy"] == entry("ok", "c1") and lines == []


def test_a_line_cut_short_is_left_out_and_a_damaged_line_is_said_and_read_up_to(tmp_path):
    path = tmp_path / "state.json"
    run = State(source="src", students={"ann": entry("ok")})
    save_state(path, run)
    record(path, run, "bob", entry("ok"))
    with open(journal_of(path), "a", encoding="utf-8") as fh:
        fh.write('{"student": "cy", "hash": "c1", "summ')  # killed mid-write: no newline
    lines, say = said()
    state = load_state(path, say)
    assert sorted(state.students) == ["ann", "bob"] and lines == []
    # a whole line that is not a student's record: said once; the file and the lines before it are kept
    good = journal_of(path).read_text(encoding="utf-8").splitlines(keepends=True)[0]
    journal_of(path).write_text(good + "not json\n" + good.replace('"bob"', '"dee"'), encoding="utf-8")
    state = load_state(path, say)
    assert sorted(state.students) == ["ann", "bob"] and len(lines) == 1
    assert f"line 2 of {journal_of(path)}" in lines[0] and "graded again" in lines[0]
    # a journal that cannot be read at all: said once; the file is kept
    journal_of(path).write_bytes(b"\xff\xfe not text\n")
    state = load_state(path, say)
    assert sorted(state.students) == ["ann"] and len(lines) == 2
    assert str(journal_of(path)) in lines[1] and "graded again" in lines[1]


def test_without_a_journal_or_a_file_the_state_reads_as_before(tmp_path):
    path = tmp_path / "state.json"
    lines, say = said()
    assert load_state(path, say) == State() and lines == []
    record(path, State(), "ann", entry("ok"))  # a journal without its file: read over an empty state
    assert load_state(path, say) == State(students={"ann": entry("ok")}) and lines == []
    path.write_text("{", encoding="utf-8")  # a damaged file, journal or not: every student graded again
    assert load_state(path, say) == State() and len(lines) == 1 and str(path) in lines[0]
    assert "rebuilding it from the gradebook" in lines[0]


def test_a_recorded_student_survives_a_kill_right_after_the_call(tmp_path):
    """record_student returns once the line is on disk: a process killed (SIGKILL) right after keeps it."""
    path = tmp_path / "state.json"
    script = textwrap.dedent(f"""
        import os, signal
        from donation_course.grading.results.result import Summary
        from donation_course.grading.run.state import State, StudentState, record_student, save_state
        path = __import__("pathlib").Path({str(path)!r})
        state = State(source="src")
        save_state(path, state)
        for sid in ("ann", "bob"):
            state.students[sid] = StudentState(hash=sid, summary=Summary(status="ok"))
            record_student(path, state, sid)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == -9, r.stderr
    lines, say = said()
    state = load_state(path, say)
    assert sorted(state.students) == ["ann", "bob"] and lines == []
    assert state.students["bob"].hash == "bob" and state.students["bob"].summary.status == "ok"


def test_a_full_disk_names_the_journal(tmp_path, monkeypatch):
    import errno

    path = tmp_path / "state.json"

    def no_room(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", no_room)
    try:
        record(path, State(), "ann", entry("ok"))
    except OSError as exc:
        assert exc.errno == errno.ENOSPC and exc.filename == str(journal_of(path))
    else:
        raise AssertionError("a full disk went unnoticed")
