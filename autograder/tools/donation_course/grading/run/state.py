"""The grader's state file and the run lock, beside the gradebook in COURSE/.grading/.

The state file records what the assignment was generated from (`source`)
and, per student, the digest of what was graded (`hash`: --only-changed
skips a student whose files are unchanged) and the `summary` grades.csv
shows besides the gradebook's numbers (result.Summary). The run process
is its only writer; every write is atomic.
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


@dataclass
class State:
    source: str = ""  # digest of the source the assignment was generated from
    students: dict[str, StudentState] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({"source": self.source,
                           "students": {sid: {"hash": s.hash, "summary": s.summary.to_dict()}
                                        for sid, s in sorted(self.students.items())}}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> State:
        data = json.loads(text)
        if not isinstance(data, dict) or not isinstance(data.get("students", {}), dict):
            raise ValueError("not a JSON object of the expected shape")
        students = {sid: StudentState(hash=str(s.get("hash", "")), summary=Summary.from_dict(s.get("summary", {})))
                    for sid, s in data.get("students", {}).items()}
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


def load_state(path: Path, say: Callable[[str], None]) -> State:
    if not path.exists():
        return State()
    try:
        return State.from_json(path.read_text(encoding="utf-8"))
    except (ValueError, TypeError, AttributeError, OSError, UnicodeDecodeError) as exc:
        say(f"warning: {path} is unreadable ({str(exc).splitlines()[0][:120]}); rebuilding it from the "
            "gradebook (every student is graded again)")
        return State()


def save_state(path: Path, state: State) -> None:
    write_atomic(path, state.to_json())


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
