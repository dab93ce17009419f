"""Kernel zygotes started as a local run's first act, before the run imports nbgrader.

Each grading worker forks its kernels from a kernel zygote (integrity/kernel_zygote.py), a Python that has
imported ipykernel and JAX: about half a second of a core. A worker used to start its own once it was forked,
and the run forks its workers only after it has imported nbgrader, nbconvert and SQLAlchemy (about a second on
one core, the other idle). So `./course grade` now starts the zygotes first (run/early.py, from the command
line alone), and they import JAX on the idle core while the run imports and prepares.

A worker adopts its zygote when it is forked (pool.py, `take`): the zygote was started for the compile cache
the run's kernels read, and serves the same unix socket protocol. What the command line cannot tell (a course
whose nbgrader_config.py turns the sandbox, forking or the cache off, a cluster run, fewer students than
zygotes) is known once the run has read its settings: a zygote no worker can take is ended then (`end_unused`),
and the worker starts its own as before. The zygotes die with the run's process (lifetime.py), and `close` ends
what is left and removes their folder however the run ends.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..integrity.kernel_zygote import Zygote
from .scratch import mark_owner, remove_orphans

PREFIX = "dlz-"  # /tmp/dlz-*: the zygotes' sockets, one folder per run


@dataclass(frozen=True)
class Handoff:
    """A started zygote, as its worker adopts it: where it listens, its pid, the pipe it says ready on."""

    path: str
    pid: int
    ready_fd: int


class EarlyZygotes:
    """`count` zygotes for kernels reading `compile_cache` ("" for none), started now by this process."""

    def __init__(self, compile_cache: str, count: int):
        self.compile_cache = compile_cache
        remove_orphans(Path("/tmp"), PREFIX)  # a killed run's (its zygotes died with it)
        self.folder = tempfile.mkdtemp(prefix=PREFIX, dir="/tmp")  # a socket's path has at most 107 bytes
        mark_owner(Path(self.folder))
        self.zygotes: list[Zygote | None] = []
        for i in range(count):
            zygote = Zygote(os.path.join(self.folder, f"w{i}"), compile_cache)
            os.mkdir(os.path.join(self.folder, f"w{i}"), 0o700)
            zygote.spawn()
            self.zygotes.append(zygote if zygote.proc is not None else None)
        self.taken: set[int] = set()

    def take(self, i: int, sandbox: bool, fork: bool, compile_cache: str) -> Handoff | None:
        """Worker i's zygote, if one was started for kernels with these settings (and not taken yet)."""
        if not (sandbox and fork) or compile_cache != self.compile_cache or i >= len(self.zygotes):
            return None
        zygote = self.zygotes[i]
        if zygote is None or i in self.taken or zygote.proc.poll() is not None:
            return None
        self.taken.add(i)
        return Handoff(zygote.path, zygote.proc.pid, zygote.proc.stdout.fileno())

    def _stop(self, i: int) -> None:
        zygote, self.zygotes[i] = self.zygotes[i], None
        if zygote is not None:
            zygote.proc.kill()
            zygote.proc.wait()
            zygote.proc.stdout.close()

    def end(self, handoff: Handoff) -> None:
        """End a taken zygote (its worker was killed: the next worker starts its own)."""
        for i, zygote in enumerate(self.zygotes):
            if zygote is not None and zygote.proc.pid == handoff.pid:
                self._stop(i)

    def end_unused(self) -> None:
        """End every zygote no worker took (the run's workers have all been started, or it starts none)."""
        for i in range(len(self.zygotes)):
            if i not in self.taken:
                self._stop(i)

    def close(self) -> None:
        """End every zygote (their workers have ended) and remove their folder."""
        for i in range(len(self.zygotes)):
            self._stop(i)
        shutil.rmtree(self.folder, ignore_errors=True)
