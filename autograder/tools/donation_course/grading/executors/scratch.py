"""Scratch folders that name their owner: a grading process's (grader_process, /tmp/dlc-*) and a referee
server's (referee/client, TMPDIR/referee-*). The process that makes one writes its mark (`mark_owner`); a
folder whose owner was killed, so that nothing of it ran to remove the folder, is removed by the next maker
(`remove_orphans`), never a living owner's. The mark is the owner's pid and its start time, since a pid can be
reused by another process."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

OWNER = "owner"  # in a scratch folder: "<pid> <start time>" of the process that made it


def started(pid: int) -> str:
    """A process's start time (field 22 of /proc/PID/stat, in clock ticks since boot), "" if it is gone: with
    the pid, it names one process."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def mark_owner(folder: Path, pid: int | None = None) -> None:
    """Write `pid`'s mark (this process's by default) into `folder`."""
    pid = os.getpid() if pid is None else pid
    (folder / OWNER).write_text(f"{pid} {started(pid)}")


def remove_orphans(parent: Path, prefix: str) -> list:
    """Remove the folders `parent/prefix*` whose owner process is gone; return them. A folder with no mark
    (not made this way, or not yet marked) is kept."""
    removed = []
    for found in parent.glob(f"{prefix}*"):
        try:
            pid, start = (found / OWNER).read_text().split()
            alive = started(int(pid)) == start
        except (OSError, ValueError):
            continue
        if not alive:
            shutil.rmtree(found, ignore_errors=True)
            removed.append(found)
    return removed
