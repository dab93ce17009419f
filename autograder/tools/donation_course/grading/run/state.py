"""The grader's state file and the run lock, beside the gradebook in COURSE/.grading/.

The state file records what the assignment was generated from (`source`)
and, per student, the digest of what was graded (`hash`: --only-changed
skips a student whose files are unchanged) and the `summary` grades.csv
shows besides the gradebook's numbers (result.Summary). The run process
is its only writer; every write is atomic.

During a run each graded student is one line appended to the state's
journal (`state.json.journal`, on disk before the next student is taken
in), not the whole file written again: a class of 10,000 would otherwise
write the file 10,000 times, about 6 MB and 0.26 s each at the end. A
whole write (save_state, at the start and the end of a run) takes the
journal in, under a new epoch, and removes it; load_state reads the file,
then the journal lines of the file's epoch over it, so a run killed halfway
loses no student already graded, and a journal left by a kill between a
whole write and its removal is not read over the newer file. A last line
without its newline is a write cut short by the kill, and is left out.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ...course import CourseError
from ..results.result import Summary


@dataclass
class StudentState:
    hash: str = ""
    summary: Summary = field(default_factory=Summary)

    def to_dict(self) -> dict:
        return {"hash": self.hash, "summary": self.summary.to_dict()}

    @classmethod
    def from_dict(cls, data: dict) -> StudentState:
        return cls(hash=str(data.get("hash", "")), summary=Summary.from_dict(data.get("summary", {})))


@dataclass
class State:
    source: str = ""  # digest of the source the assignment was generated from
    students: dict[str, StudentState] = field(default_factory=dict)
    epoch: str = ""   # a token new with each whole write (save_state): the journal lines made after it carry it

    def to_json(self) -> str:
        return json.dumps({"source": self.source, "epoch": self.epoch,
                           "students": {sid: s.to_dict() for sid, s in sorted(self.students.items())}}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> State:
        data = json.loads(text)
        if not isinstance(data, dict) or not isinstance(data.get("students", {}), dict):
            raise ValueError("not a JSON object of the expected shape")
        students = {sid: StudentState.from_dict(s) for sid, s in data.get("students", {}).items()}
        return cls(source=str(data.get("source", "")), students=students, epoch=str(data.get("epoch", "")))


@contextlib.contextmanager
def naming(path: Path) -> Iterator[None]:
    """An OSError from a write or fsync names no file: raised again naming `path` (a full disk names its
    folder)."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise


def write_atomic(path: Path, text: str) -> None:
    """Write a file so that a reader (or a crash) sees the old or the new content, never half."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with naming(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "w", encoding="utf-8", newline="") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            if tmp.exists():
                tmp.unlink()


def journal_of(path: Path) -> Path:
    """The journal beside the state file `path`: one line per student graded since the last whole write."""
    return path.with_name(path.name + ".journal")


UNREADABLE = (ValueError, TypeError, AttributeError, KeyError, OSError, UnicodeDecodeError)


def load_state(path: Path, say: Callable[[str], None]) -> State:
    """The state file with the journal lines made since its last whole write read over it. A damaged file:
    State() (every student graded again); a damaged journal line: the students from it on graded again.
    Either is said in one line."""
    try:
        state = State.from_json(path.read_text(encoding="utf-8")) if path.exists() else State()
    except UNREADABLE as exc:
        say(f"warning: {path} is unreadable ({str(exc).splitlines()[0][:120]}); rebuilding it from the "
            "gradebook (every student is graded again)")
        return State()
    journal = journal_of(path)
    try:
        lines = journal.read_text(encoding="utf-8").splitlines(keepends=True) if journal.exists() else []
    except UNREADABLE as exc:
        say(f"warning: {journal} is unreadable ({str(exc).splitlines()[0][:120]}); the students recorded in it "
            "are graded again")
        return state
    for number, line in enumerate(lines, 1):
        if not line.endswith("\n"):
            break  # a write cut short: that student was not recorded
        try:
            entry = json.loads(line)
            if entry.get("epoch", "") == state.epoch:  # else made before the file's last whole write
                state.students[str(entry["student"])] = StudentState.from_dict(entry)
        except UNREADABLE as exc:
            say(f"warning: line {number} of {journal} is unreadable ({str(exc).splitlines()[0][:120]}); the "
                "students recorded from there on are graded again")
            break
    return state


def save_state(path: Path, state: State) -> None:
    """The whole state, atomically, under a new epoch; the journal, now in the file, removed (should that
    fail, its lines are of an older epoch, which load_state leaves out)."""
    state.epoch = secrets.token_hex(8)
    write_atomic(path, state.to_json())
    with contextlib.suppress(FileNotFoundError):
        journal_of(path).unlink()


def record_student(path: Path, state: State, student: str) -> None:
    """The student's state in `state`, appended to the journal of the state file `path` (with the epoch of
    the file's last whole write) and on disk when this returns."""
    line = json.dumps({"student": student, "epoch": state.epoch, **state.students[student].to_dict()}) + "\n"
    journal = journal_of(path)
    with naming(journal), open(journal, "a", encoding="utf-8", newline="") as fh:
        fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())


_HELD: list[int] = []  # fds of the locks this process holds: its forked workers close them


def held_locks() -> tuple[int, ...]:
    return tuple(_HELD)


def pid_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def run_lock(state_dir: Path, say: Callable[[str], None] = lambda _line: None) -> Iterator[None]:
    """One `./course grade` (or check) per course at a time. The lock is the
    kernel's (flock), so it ends with the processes that hold it; the file
    records the holder's pid, to name it, or to say that a lock left by a
    process no longer running was taken over."""
    state_dir.mkdir(parents=True, exist_ok=True)
    with open(state_dir / "lock", "a+") as lock:
        lock.seek(0)
        before = lock.read().strip()
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = f" (pid {before})" if before.isdigit() else ""
            raise CourseError(f"another ./course grade or check is running on {state_dir.parent}{holder}; "
                              "wait for it to finish") from None
        if before.isdigit() and int(before) != os.getpid() and not pid_running(int(before)):
            say(f"note: took over the lock left by pid {before}, which is no longer running")
        lock.seek(0)
        lock.truncate()
        lock.write(str(os.getpid()))
        lock.flush()
        _HELD.append(lock.fileno())
        try:
            yield
        finally:
            _HELD.remove(lock.fileno())
            lock.seek(0)
            lock.truncate()
