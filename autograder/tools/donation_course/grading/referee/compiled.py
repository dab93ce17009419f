"""The referee's memo of compiled programs: honest answers lower to the
same programs, so each is compiled once for the course, not once per
student.

The server holds the memo: {key: serialized executable}, keyed by the
program's text with its module's name left out (`module @jit_f` and
`module @jit_g` name the same program; the name is not part of what it
computes). A child that compiles a program the memo lacks sends it back
(`offer`), and the server keeps it only under a key of a text it sent that
child itself (`keys_of`), up to a fixed size; later children, forked with
the memo, load it instead of compiling (`install`). A loaded executable
keeps its donation (its input-output aliases and memory statistics), so
every check judges it as it would the freshly compiled one.

The worker keeps on disk what its server's memo kept (`Folder`), in the
course's grading folder, one folder per JAX and jaxlib version: each reply
brings the programs kept while judging it, and each request takes along
those on disk that the server has not been sent (`Memo.preload`). So the
workers of a run share what any of them compiled, and a regrade compiles
only programs that no earlier run met. Only the worker writes that folder,
outside every sandbox; no kernel sees it.

What this trusts: XLA's compiler on a screened program. A child is judging
hostile programs, but no learner code runs in it; an executable it sends
back is what XLA compiled from the text under that key. (A program that
could take over the compiler would own its child's verdicts already; what it
sent back is kept for later students as before, and now for later runs.)

Like programs.py, this uses JAX's private APIs (serializing and loading an
executable, as JAX's own persistent compilation cache does); each is guarded
by tests/test_upstream_private_apis.py.
"""
from __future__ import annotations

import base64
import hashlib
import os
import re
import tempfile
from pathlib import Path

from .wire import Compiled

MAX_BYTES = 64 << 20  # the memo's size in a server, and on disk: executables of honest answers are tens of KiB
_KEY = re.compile(r"\A[0-9a-f]{64}\Z")  # a key: sha256, hex
_NAME = re.compile(r'\Amodule @(?:"(?:[^"\\]|\\.)*"|[\w$.\-]+)')


def key(text: str) -> str:
    """The memo's key for a program's text: its hash with the module's name left out."""
    return hashlib.sha256(_NAME.sub("module @_", text, count=1).encode("utf-8", "surrogatepass")).hexdigest()


def refined_key(base: str, length: int) -> str:
    """The memo's key for the program of key `base`, made for every length, made static for `length`
    (programs.refine): derived by the server itself from the two, so that a child can only fill it for a
    program the server sent that child."""
    return hashlib.sha256(f"{base}:{int(length)}".encode()).hexdigest()


def keys_of(handover, depth: int = 0) -> set:
    """The keys of every program text in a hand-over (any "text" string inside it)."""
    found = set()
    if depth > 8:
        return found
    if isinstance(handover, dict):
        for name, value in handover.items():
            if name == "text" and isinstance(value, str):
                found.add(key(value))
            else:
                found |= keys_of(value, depth + 1)
    elif isinstance(handover, list):
        for value in handover:
            found |= keys_of(value, depth + 1)
    return found


class Memo:
    """The server's memo: executables by key, within MAX_BYTES."""

    def __init__(self, max_bytes: int = MAX_BYTES):
        self.blobs: dict[str, bytes] = {}
        self.size, self.max_bytes = 0, max_bytes

    def offer(self, compiled: Compiled, allowed: set) -> bool:
        """Keep a child's program (wire.Compiled) if its key is one of `allowed` (texts the server sent that
        child), or is refined_key of one of them and a length, and it fits."""
        if compiled.base:
            return compiled.base in allowed and compiled.key == refined_key(compiled.base, compiled.length) \
                and self._keep(compiled.key, compiled.blob)
        return compiled.key in allowed and self._keep(compiled.key, compiled.blob)

    def preload(self, entries: dict) -> None:
        """Keep the programs the worker sent ({key: executable, base64}: what this course's referees compiled
        before, Folder), as far as they fit."""
        for name, blob in entries.items():
            self._keep(name, blob)

    def _keep(self, name: str, blob: str) -> bool:
        if not (isinstance(name, str) and _KEY.match(name) and name not in self.blobs):
            return False
        try:
            data = base64.b64decode(blob, validate=True)
        except ValueError:
            return False
        if self.size + len(data) > self.max_bytes:
            return False
        self.blobs[name], self.size = data, self.size + len(data)
        return True


def folder_for(grading_dir) -> str:
    """The course's folder of compiled programs (Folder) for the JAX and jaxlib installed; '' without them."""
    from importlib import metadata

    try:
        versions = f"jax-{metadata.version('jax')}-jaxlib-{metadata.version('jaxlib')}"
    except metadata.PackageNotFoundError:
        return ""
    return str(Path(grading_dir) / f"referee-programs-{versions}")


class Folder:
    """The worker's side of the memo: the programs its referee kept, one file each (named by its key, holding
    the executable in base64), in the folder folder_for names; off where that folder's parent is not there (a
    cluster's worker on another machine)."""

    def __init__(self, path: str):
        self.path = Path(path) if path and Path(path).parent.is_dir() else None

    def unsent(self, sent: set) -> dict:
        """{key: executable, base64} of each program on disk whose key is not in `sent`, within MAX_BYTES."""
        found, size = {}, 0
        if self.path is None or not self.path.is_dir():
            return found
        for entry in sorted(self.path.iterdir(), key=lambda p: p.name):
            if entry.name in sent or not _KEY.match(entry.name):
                continue
            try:
                blob = entry.read_text(encoding="ascii")
            except (OSError, ValueError):
                continue
            size += len(blob)
            if size > MAX_BYTES:
                break
            found[entry.name] = blob
        return found

    def save(self, compiled) -> None:
        """Write each wire.Compiled not on disk yet, atomically (a worker beside this one reads all of a file or
        none of it), while the folder holds less than MAX_BYTES. A program not saved is only compiled again."""
        if self.path is None:
            return
        try:
            self.path.mkdir(exist_ok=True)
            held = sum(p.stat().st_size for p in self.path.iterdir())
            for c in compiled:
                target = self.path / c.key
                if not _KEY.match(c.key) or target.exists() or held + len(c.blob) > MAX_BYTES:
                    continue
                fd, tmp = tempfile.mkstemp(dir=self.path, prefix=".new-")
                with os.fdopen(fd, "w", encoding="ascii") as fh:
                    fh.write(c.blob)
                os.replace(tmp, target)
                held += len(c.blob)
        except OSError:
            pass


def _backend():
    from jax._src import xla_bridge  # private: guarded by the canary

    return xla_bridge.get_backend("cpu")


def serialize(executable) -> bytes:
    return _backend().serialize_executable(executable)


def load(data: bytes):
    """An executable serialized by `serialize`, loaded on the first CPU device as programs.compile_program
    compiles one."""
    from jax._src import compiler  # private: guarded by the canary
    from jax._src.lib import xla_client  # private: guarded by the canary

    backend = _backend()
    return backend.deserialize_executable(data, xla_client.DeviceList((backend.devices()[0],)),
                                          compiler.get_compile_options(num_replicas=1, num_partitions=1))


def install(blobs: dict, send) -> None:
    """In a referee child: programs.compile_program loads what the memo has, and compiles and `send`s (a
    wire.Compiled) what it lacks."""
    from . import programs

    compile_program = programs.compile_program

    def compile_or_load(text: str, refined_from: tuple | None = None):
        """refined_from: (the key of the program made for every length, the length) when `text` is it made
        static (judge.Programs): memoized under refined_key, for this server's later children only."""
        name = key(text) if refined_from is None else refined_key(*refined_from)
        data = blobs.get(name)
        if data is not None:
            try:
                return load(data)
            except Exception:
                pass  # compiled again below
        executable = compile_program(text)
        try:
            blob = base64.b64encode(serialize(executable)).decode()
            send(Compiled(name, blob) if refined_from is None else Compiled(name, blob, *refined_from))
        except Exception:
            pass  # not kept: the next student's child compiles it again
        return executable

    programs.compile_program = compile_or_load
