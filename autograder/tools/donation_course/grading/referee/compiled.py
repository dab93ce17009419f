"""The referee server's memo of compiled programs: honest answers lower to
the same programs, so each is compiled once per server (per grading
worker), not once per student.

The server holds the memo: {key: serialized executable}, keyed by the
program's text with its module's name left out (`module @jit_f` and
`module @jit_g` name the same program; the name is not part of what it
computes). A child that compiles a program the memo lacks sends it back
(`offer`), and the server keeps it only under a key of a text it sent that
child itself (`keys_of`), up to a fixed size; later children, forked with
the memo, load it instead of compiling (`install`). A loaded executable
keeps its donation (its input-output aliases and memory statistics), so
every check judges it as it would the freshly compiled one.

What this trusts: XLA's compiler on a screened program. A child is judging
hostile programs, but no learner code runs in it; an executable it sends
back is what XLA compiled from the text under that key. (A program that
could take over the compiler would own its child's verdicts already.)

Like programs.py, this uses JAX's private APIs (serializing and loading an
executable, as JAX's own persistent compilation cache does); each is guarded
by tests/test_upstream_private_apis.py.
"""
from __future__ import annotations

import base64
import hashlib
import re

from .wire import Compiled

MAX_BYTES = 64 << 20  # the memo's size in a server: executables of honest answers are tens of KiB
_NAME = re.compile(r'\Amodule @(?:"(?:[^"\\]|\\.)*"|[\w$.\-]+)')


def key(text: str) -> str:
    """The memo's key for a program's text: its hash with the module's name left out."""
    return hashlib.sha256(_NAME.sub("module @_", text, count=1).encode("utf-8", "surrogatepass")).hexdigest()


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
        child) and it fits."""
        name, blob = compiled.key, compiled.blob
        if not (name in allowed and name not in self.blobs):
            return False
        try:
            data = base64.b64decode(blob, validate=True)
        except ValueError:
            return False
        if self.size + len(data) > self.max_bytes:
            return False
        self.blobs[name], self.size = data, self.size + len(data)
        return True


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

    def compile_or_load(text: str):
        name = key(text)
        data = blobs.get(name)
        if data is not None:
            try:
                return load(data)
            except Exception:
                pass  # compiled again below
        executable = compile_program(text)
        try:
            send(Compiled(name, base64.b64encode(serialize(executable)).decode()))
        except Exception:
            pass  # not kept: the next student's child compiles it again
        return executable

    programs.compile_program = compile_or_load
