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
journal in and removes it; load_state reads the file, then the journal
over it, so a run killed halfway loses no student already graded. A last
line without its newline is a write cut short by the kill, and is left
out.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
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

    def to_json(self) -> str:
        return json.dumps({"source": self.source,
                           "students": {sid: s.to_dict() for sid, s in sorted(self.students.items())}}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> State:
        data = json.loads(text)
        if not isinstance(data, dict) or not isinstance(data.get("students", {}), dict):
            raise ValueError("not a JSON object of the expected shape")
        students = {sid: StudentState.from_dict(s) for sid, s in data.get("students", {}).items()}
        return cls(source=str(data.get("source", "")), students=students)


def write_atomic(path: Path, text: str) -> None:
    """Write a file so that a reader (or a crash) sees the old or the new content, never half."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        if exc.filename is None:  # a write or fsync: say which file (a full disk names its folder)
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise
    finally:
        with contextlib.suppress(OSError):
            if tmp.exists():
                tmp.unlink()


def journal_of(path: Path) -> Path:
    """The journal beside the state file `path`: one line per student graded since the last whole write."""
    return path.with_name(path.name + ".journal")


def load_state(path: Path, say: Callable[[str], None]) -> State:
    """The state file with its journal read over it; State() (every student graded again) when either is
    damaged, said in one line."""
    journal = journal_of(path)
    where = path
    try:
        state = State.from_json(path.read_text(encoding="utf-8")) if path.exists() else State()
        where = journal
        text = journal.read_text(encoding="utf-8") if journal.exists() else ""
        for line in text.splitlines(keepends=True):
            if not line.endswith("\n"):
                break  # a write cut short: that student was not recorded
            entry = json.loads(line)
            state.students[str(entry["student"])] = StudentState.from_dict(entry)
        return state
    except (ValueError, TypeError, AttributeError, KeyError, OSError, UnicodeDecodeError) as exc:
        say(f"warning: {where} is unreadable ({str(exc).splitlines()[0][:120]}); rebuilding it from the "
            "gradebook (every student is graded again)")
        return State()


def save_state(path: Path, state: State) -> None:
    """The whole state, atomically; the journal, now in the file, removed."""
    write_atomic(path, state.to_json())
    with contextlib.suppress(FileNotFoundError):
        journal_of(path).unlink()


def record_student(path: Path, student: str, entry: StudentState) -> None:
    """One student's state, appended to the journal of the state file `path` and on disk when this returns."""
    line = json.dumps({"student": student, **entry.to_dict()}) + "\n"
    try:
        with open(journal_of(path), "a", encoding="utf-8", newline="") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        if exc.filename is None:  # a write or fsync: say which file (a full disk names its folder)
            raise OSError(exc.errno, exc.strerror, str(journal_of(path))) from None
        raise


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
