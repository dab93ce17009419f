"""The referee's messages, one frozen dataclass per kind, and the JSON lines they travel as.

They cross the sandbox's boundary, so they stay data: JSON text, never pickles (reading a pickle runs
code). The hand-overs they carry come from a learner's kernel, and the server's child runs programs from
there: a child taken over by such a program could write anything into its pipe. So every line is read as
JSON and checked field by field into one of these types; a line that is none of them is dropped (from a
child) or is the referee's failure (from the server). This is why they live here and not with the
executors' messages (executors/protocol.py), which are pickled between the grader's own processes.

The worker's client (client.py) and its server (server.py), on the server's stdin and stdout:
    server -> client:  Ready() once it has imported JAX; a Reply(verdicts, seconds, compiled) per Request, with
                       the programs its memo kept while judging it (compiled.py: the worker keeps them on disk)
    client -> server:  Request(answers, seconds, memory_mb, memo): one student's hand-overs, by answer name, and
                       the compiled programs on disk the server has not been sent yet
The server's child -> the server, on a pipe (server.py):
    a Verdict (verdict.py) per check; AnswerDone(index) after each answer; Compiled(key, blob) per program it
    compiled that the server's memo may keep (compiled.py)
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from .verdict import Verdict

DEFAULT_SECONDS, DEFAULT_MEMORY_MB = 20, 3072  # a request that does not say


@dataclass(frozen=True)
class Ready:
    """The server has imported JAX: it takes requests now."""


@dataclass(frozen=True, eq=False)
class Request:
    """Judge these answers ({answer name: its hand-over, JSON data, or None}), each within `seconds` and the
    child within `memory_mb`."""
    answers: dict
    seconds: int = DEFAULT_SECONDS
    memory_mb: int = DEFAULT_MEMORY_MB
    memo: dict = field(default_factory=dict)  # {key: executable, base64}: for the server's memo (compiled.py)


@dataclass(frozen=True)
class Reply:
    """The verdicts of one request, the server's wall time for it, and the programs its memo kept meanwhile."""
    verdicts: tuple[Verdict, ...]
    seconds: float
    compiled: tuple = ()  # (Compiled, ...)


@dataclass(frozen=True)
class AnswerDone:
    """The child has given every verdict of the request's answer number `index` (its next answer's time
    starts now)."""
    index: int


@dataclass(frozen=True)
class Compiled:
    """A program the child compiled: its key (compiled.key of its text) and the executable, base64. A program
    made static for a length from one compiled for every length (programs.refine) names that program's key
    (`base`) and the length: its key is then compiled.refined_key(base, length)."""
    key: str
    blob: str
    base: str = ""
    length: int = 0


def line(message: Ready | Request | Reply | AnswerDone | Compiled | Verdict) -> bytes:
    """One message as one JSON line."""
    match message:
        case Ready():
            data = {"ready": True}
        case Request(answers=answers, seconds=seconds, memory_mb=memory_mb, memo=memo):
            data = {"answers": answers, "seconds": seconds, "memory_mb": memory_mb, "memo": memo}
        case Reply(verdicts=verdicts, seconds=seconds, compiled=compiled):
            data = {"verdicts": [v.to_dict() for v in verdicts], "seconds": seconds,
                    "compiled": [_compiled_data(c) for c in compiled]}
        case AnswerDone(index=index):
            data = {"done": index}
        case Compiled():
            data = _compiled_data(message)
        case Verdict():
            data = message.to_dict()
        case _:
            raise TypeError(f"not a referee message: {message!r}")
    return (json.dumps(data) + "\n").encode()


def _compiled_data(compiled: Compiled) -> dict:
    data = {"compiled": compiled.key, "blob": compiled.blob}
    if compiled.base or compiled.length:
        data |= {"base": compiled.base, "length": compiled.length}
    return data


def _compiled(data) -> Compiled | None:
    """A Compiled read back from its JSON object; None for an object that is not one."""
    match data:
        case {"compiled": str(key), "blob": str(blob)} if len(data) == 2:
            return Compiled(key, blob)
        case {"compiled": str(key), "blob": str(blob), "base": str(base), "length": int(length)} \
                if len(data) == 4 and not isinstance(length, bool):
            return Compiled(key, blob, base, length)
    return None


def _object(text: bytes | str) -> dict:
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    return data


def _verdict(data) -> Verdict:
    if not (isinstance(data, dict) and {"check", "outcome", "message"} <= set(data)):
        raise ValueError(f"not a verdict: {str(data)[:200]}")
    return Verdict.from_dict(data)


def read_ready(text: bytes) -> Ready:
    if _object(text) != {"ready": True}:
        raise ValueError(f"not the referee's ready line: {text[:200]!r}")
    return Ready()


def read_request(text: bytes | str) -> Request:
    """A request; ValueError if the line is not one. Missing limits take their defaults."""
    data = _object(text)
    answers, memo = data.get("answers") or {}, data.get("memo") or {}
    if not isinstance(answers, dict):
        raise ValueError("answers: not an object")
    if not (isinstance(memo, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in memo.items())):
        raise ValueError("memo: not an object of strings")
    return Request(answers, int(data.get("seconds", DEFAULT_SECONDS)), int(data.get("memory_mb", DEFAULT_MEMORY_MB)),
                   memo)


def read_reply(text: bytes) -> Reply:
    """A reply; ValueError if the line is not one."""
    data = _object(text)
    verdicts, seconds, compiled = data.get("verdicts"), data.get("seconds"), data.get("compiled", [])
    if not isinstance(verdicts, list) or not isinstance(seconds, int | float) or isinstance(seconds, bool):
        raise ValueError(f"not a referee reply: {text[:200]!r}")
    kept = [_compiled(c) for c in compiled] if isinstance(compiled, list) else [None]
    if any(c is None or c.base or c.length for c in kept):  # (a reply carries no program made static)
        raise ValueError(f"not a referee reply's compiled programs: {text[:200]!r}")
    return Reply(tuple(_verdict(v) for v in verdicts), float(seconds), tuple(kept))


def from_child(text: bytes) -> Verdict | AnswerDone | Compiled | None:
    """One line of a child's pipe as its message; None for a line that is none (cut by a kill, or written by
    a program that took the child over)."""
    try:
        data = _object(text.decode(errors="replace"))
    except ValueError:
        return None
    match data:
        case {"done": int(index)} if len(data) == 1 and not isinstance(index, bool):
            return AnswerDone(index)
    compiled = _compiled(data)
    if compiled is not None:
        return compiled
    try:
        return _verdict(data)
    except ValueError:
        return None
