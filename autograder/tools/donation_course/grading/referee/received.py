"""What the kernel handed over (hidden/handover.py), read from the autograded
notebooks as untrusted data and then removed from them, so that neither the
feedback nor the learner's page shows it.

Each hand-over output is {"answer", "check", "index", and "entry" the first
time a function was handed over}, or {"answer", "check", "failed": true} when
the check could not hand its function over; they are replayed in cell order
into one hand-over per answer, {"programs": [entry per function], "checks":
{check: index}}, which judge.judge reads.

A learner's code can display such outputs too (`display(..., raw=True)`
writes any kind). So a record is replayed only where the hidden checks write
one: in a grade cell whose check hands over that answer (combine.judged_cells,
read from the source notebook: a learner cannot move a grade cell's source),
once for each check, a function's entry once, within the size limit. Any
other record is one the checks did not make: the answer it names goes to the
referee as nothing, and the record is `suspicious`, which flags the student
(student.py) with why. The checks' own records never break these rules, so an
honest answer is never flagged. Every field is checked for its type and size
here and again by the referee. A program's donation request (`requested`, one
flag per flat argument) that is not a list of at most asks.MAX_LEAVES
booleans is replaced by None here, so the referee refuses that program as a
malformed hand-over, saying why.

The grading kernel's client (executors/fastkernel.py) has already kept the
learner's records off the checks' hand-over budget: they count against the
output cap like any output, the first one past it arrives as DROPPED, and a
check's second record in its own cell as {"answer", "check", "again": true};
both flag the student here.
"""
from __future__ import annotations

import json
import stat
from dataclasses import dataclass, field
from pathlib import Path

from .asks import ANSWERS, MAX_FUNCTIONS, MAX_HANDOVER_BYTES, MAX_LEAVES, MIME

# What the grading kernel's client (executors/fastkernel.py) leaves in place of the first hand-over record of the
# learner's that it drops past the output cap
DROPPED = {"dropped": True}

NOT_A_RECORD = "a hand-over output that is not a record the grader's checks write"


@dataclass(frozen=True)
class Suspicious:
    """A hand-over record the hidden checks did not write, where it was found and why it is not theirs."""

    notebook: str
    cell: str    # the grade cell's id, or "cell N" (1-based) for a cell that is not a grade cell
    reason: str


@dataclass(frozen=True)
class Received:
    handovers: dict                                 # answer name -> hand-over (judge.judge reads it)
    suspicious: list = field(default_factory=list)  # [Suspicious]


def take_handovers(autograded: dict, cells: dict) -> Received:
    """What the kernel handed over in these autograded notebooks ({notebook: path}), each notebook rewritten
    without its hand-over outputs. cells: {notebook: [(grade_id, answer, check)]}, the grade cells whose checks
    hand over (combine.judged_cells). A record is replayed only where the hidden checks write one: in a grade
    cell that hands over that answer for that check, once, its function's entry once. Any other record is one
    the checks did not make (a learner's cell, or a learner's function while a check ran, displayed it): it is
    left out, and it is in `suspicious` with why."""
    import nbformat

    entries, checks, size, seen, suspicious, tainted = {}, {}, {}, set(), [], set()
    for notebook, path in autograded.items():
        path = Path(path)
        if not path.is_file():
            continue
        try:
            nb = nbformat.read(path, as_version=4)
        except Exception:
            continue
        handing = {}
        for grade_id, answer, check in cells.get(notebook, []):
            handing.setdefault(grade_id, set()).add((answer, check))
        found = False
        for number, cell in enumerate(nb.cells, 1):
            grade_id = _grade_id(cell)
            kept, here = [], False
            for output in cell.get("outputs", []):
                data = output.get("data", {}) if output.get("output_type") == "display_data" else {}
                if MIME not in data:
                    kept.append(output)
                    continue
                found = here = True
                record = _record(data[MIME])
                why = _replay(record, handing.get(grade_id, set()), entries, checks, size, seen)
                if why:
                    suspicious.append(Suspicious(notebook, grade_id or f"cell {number}", why))
                    name = record.get("answer") if isinstance(record, dict) else None
                    tainted.add(name if isinstance(name, str) else None)
            if here:  # only a cell that had a record: a markdown cell has no outputs (nbformat's schema)
                cell["outputs"] = kept
        if found:
            write_back(nb, path)
    return Received({name: {"programs": [entries[name].get(i) for i in range(max(entries[name], default=-1) + 1)],
                            "checks": checks.get(name, {})} for name in entries if name not in tainted}, suspicious)


def write_back(nb, path: Path) -> None:
    """Write `nb` over the autograded notebook at `path`, which nbgrader left read-only (its converters' default
    permissions, 444): writable for the write, then its mode as it was. (Root writes a read-only file anyway; an
    instructor's own account cannot, and every student failed with PermissionError.)"""
    import nbformat

    path = Path(path)
    mode = stat.S_IMODE(path.stat().st_mode)
    path.chmod(mode | stat.S_IWUSR)
    try:
        nbformat.write(nb, str(path))
    finally:
        path.chmod(mode)


def _grade_id(cell) -> str | None:
    """The cell's grade id if it is a grade cell (its metadata is the learner's to write in other cells: any
    shape)."""
    meta = cell.get("metadata")
    meta = meta.get("nbgrader") if isinstance(meta, dict) else None
    if not isinstance(meta, dict) or meta.get("grade") is not True or not isinstance(meta.get("grade_id"), str):
        return None
    return meta["grade_id"]


def _record(data):
    """A hand-over output's record (a JSON mime bundle may arrive as text); None if it is no JSON."""
    if isinstance(data, str):
        try:
            return json.loads(data)
        except ValueError:
            return None
    return data


def _replay(record, expected: set, entries: dict, checks: dict, size: dict, seen: set) -> str:
    """Replay one hand-over record into entries and checks; '' if it is one the hidden checks write where they
    write it, else why it is not (and it is not replayed)."""
    if not isinstance(record, dict):
        return NOT_A_RECORD
    if record == DROPPED:
        return "hand-over records displayed by the learner's code, dropped past the output cap"
    name, check, index = record.get("answer"), record.get("check"), record.get("index")
    if not isinstance(name, str) or name not in ANSWERS or not isinstance(check, str):
        return "a hand-over record for no answer the grader asks for"
    if (name, check) not in expected:
        return f"a hand-over record of {name!r} for {check!r} in a cell whose checks hand over no such answer"
    if (name, check) in seen:
        return f"{name!r} handed over twice for {check!r}"
    seen.add((name, check))
    if record.get("failed") is True and set(record) == {"answer", "check", "failed"}:
        return ""  # the check could not hand the function over: the referee says it received nothing
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < MAX_FUNCTIONS:
        return f"a hand-over record of {name!r} with no valid function number"
    answer_entries = entries.setdefault(name, {})
    if "entry" in record:
        if index in answer_entries:
            return f"a second function #{index} handed over for {name!r}"
        size[name] = size.get(name, 0) + len(json.dumps(record["entry"]))
        if size[name] > MAX_HANDOVER_BYTES:
            return f"hand-overs of {name!r} past the grader's size limit"
        answer_entries[index] = _bounded(record["entry"])
    elif index not in answer_entries:
        return f"a hand-over record of {name!r} naming function #{index}, never handed over"
    checks.setdefault(name, {})[check] = index
    return ""


def _is_request(flags) -> bool:
    return isinstance(flags, list) and len(flags) <= MAX_LEAVES and all(f is True or f is False for f in flags)


def _bounded(entry):
    """The entry, each of its programs' donation requests a list of at most MAX_LEAVES booleans or None."""
    programs = entry.get("programs") if isinstance(entry, dict) else None
    if isinstance(programs, dict):
        for one in programs.values():
            if isinstance(one, dict) and "requested" in one and not _is_request(one["requested"]):
                one["requested"] = None
    return entry
