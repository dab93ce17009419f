"""The worker's side of the referee: have the worker's referee server
(server.py) judge what the kernel handed over (received.py).

The server is started once per worker process, in the sandbox when kernels
are (sandbox.bwrap_argv, the kernels' own, with empty folders of its own as
working and runtime folders), and reused for every student; its start-up (importing JAX)
overlaps the first student's kernel. A server that dies or stops answering
is the grader's failure, not the student's: `Referee.judge` raises
RefereeFailed (the worker reports the student as not graded, never zeros),
and the next student starts a new server.

It also keeps the course's compiled programs (compiled.Folder): each
request takes along those its server has not had yet, and each reply's
new ones are written there for the other workers and later runs.

Its scratch folder (TMPDIR/referee-*: the server's working and runtime
folders) names its owner, the process that made it (scratch.py: pid and
start time). The owner removes it with the server on `close`, which runs at the
owner's exit too (atexit, and the worker's own shutdown, since a forked
worker ends without atexit); a folder whose owner was killed is removed by
the next referee made in the same TMPDIR (`remove_stale`).
"""
from __future__ import annotations

import atexit
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..executors.scratch import mark_owner, remove_orphans
from .asks import ANSWERS
from .compiled import Folder
from .verdict import Verdict
from .wire import Request, line, read_ready, read_reply

PREFIX = "referee-"    # the scratch folder's name in TMPDIR
SECONDS = 20           # per answer: compile and run all its checks' programs
START_SECONDS = 120    # importing JAX in the sandbox, on a busy machine


def remove_stale(folder: Path) -> list:
    """Remove the referee scratch folders in `folder` whose owner process is gone; return them."""
    return remove_orphans(folder, PREFIX)


class RefereeFailed(RuntimeError):
    """The referee itself failed (not the program it judged)."""


@dataclass(frozen=True)
class Judged:
    verdicts: tuple[Verdict, ...]
    seconds: float    # the referee's wall time, the request's round trip


class Referee:
    """One referee server, started on first use."""

    def __init__(self, sandbox: bool, memory_mb: int, seconds: int = SECONDS, disk_bytes: int = 64 << 20,
                 programs: str = ""):
        self.sandbox, self.memory_mb, self.seconds, self.disk_bytes = sandbox, memory_mb, seconds, disk_bytes
        self.proc, self.folder, self.started = None, None, False
        self.programs = Folder(programs)  # the course's compiled programs (compiled.py), shared by its workers
        self.sent = set()                 # the keys of those this server has (sent to it, or compiled by it)
        self.owner = os.getpid()  # only this process closes it (a forked child inherits the object, not the server)
        atexit.register(self._close_at_exit)

    def _close_at_exit(self) -> None:
        if os.getpid() == self.owner:
            self.close()

    def _command(self) -> tuple[list, dict]:
        from ..integrity.sandbox import bwrap_argv, fixed_env, venv_python

        remove_stale(Path(tempfile.gettempdir()))
        if self.folder is not None:  # a server that died: its folder goes with it
            shutil.rmtree(self.folder, ignore_errors=True)
        self.folder = Path(tempfile.mkdtemp(prefix=PREFIX))
        mark_owner(self.folder)
        work, runtime = self.folder / "work", self.folder / "runtime"
        work.mkdir()
        runtime.mkdir()
        (runtime / "connection.json").write_text("{}")  # bwrap_argv binds a kernel's; the referee has none
        module = ["-P", "-m", "donation_course.grading.referee.server"]
        env = fixed_env(home=str(work))
        if not self.sandbox:
            return [sys.executable, *module], env
        cmd = bwrap_argv(str(work), str(runtime), self.disk_bytes)
        for key, value in env.items():
            cmd += ["--setenv", key, value]
        return [*cmd, "--", venv_python(), *module, "--sandboxed"], {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}

    def start(self) -> None:
        """Start the server (without waiting for it to be ready)."""
        if self.proc is not None and self.proc.poll() is None:
            return
        cmd, env = self._command()
        # It ends when its stdin closes, so it ends with this process however that ends (no preexec_fn: this
        # process may run threads, and Python code run between fork and exec could deadlock).
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=self.folder,
                                     start_new_session=True)
        self.started, self.sent = False, set()

    def _line(self, deadline: float) -> bytes:
        out, data = self.proc.stdout.fileno(), b""
        while not data.endswith(b"\n"):
            left = deadline - time.monotonic()
            ready = select.select([out], [], [], max(left, 0))[0] if left > 0 else []
            if not ready:
                self.close()
                raise RefereeFailed("the referee did not answer in time")
            chunk = os.read(out, 1 << 20)
            if not chunk:
                self.close()
                raise RefereeFailed("the referee stopped")
            data += chunk
        return data

    def _read(self, read, deadline: float):
        """The server's next line, read as one message by `read` (wire.read_*); RefereeFailed if it is not one."""
        text = self._line(deadline)
        try:
            return read(text)
        except (ValueError, TypeError):
            self.close()
            raise RefereeFailed(f"the referee answered something else: {text[:200]!r}") from None

    def judge(self, answers: dict) -> Judged:
        """The verdicts of `answers` ({answer name: its hand-over or None})."""
        start = time.monotonic()
        self.start()
        if not self.started:
            self._read(read_ready, time.monotonic() + START_SECONDS)
            self.started = True
        memo = self.programs.unsent(self.sent)
        request = Request({k: v for k, v in answers.items() if k in ANSWERS}, self.seconds, self.memory_mb, memo)
        try:
            self.proc.stdin.write(line(request))
            self.proc.stdin.flush()
        except OSError:
            self.close()
            raise RefereeFailed("the referee stopped") from None
        reply = self._read(read_reply, time.monotonic() + self.seconds * (len(request.answers) + 1) + 30)
        self.programs.save(reply.compiled)
        self.sent |= set(memo) | {c.key for c in reply.compiled}
        return Judged(reply.verdicts, time.monotonic() - start)

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            for f in (self.proc.stdin, self.proc.stdout):
                if f:
                    f.close()
            self.proc = None
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None
