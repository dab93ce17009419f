"""What the kernel handed over (hidden/handover.py), read from the autograded
notebooks as untrusted data and then removed from them, so that neither the
feedback nor the learner's page shows it.

Each hand-over output is {"answer", "check", "index", and "entry" the first
time a function was handed over}; they are replayed in cell order into one
hand-over per answer, {"programs": [entry per function], "checks": {check:
index}}, which judge.judge reads. A learner's code can emit such outputs
too: that is only another answer, and every field is checked for its type
and size here and again by the referee. A program's donation request
(`requested`, one flag per flat argument) that is not a list of at most
asks.MAX_LEAVES booleans is replaced by None here, so the referee refuses
that program as a malformed hand-over, saying why.
"""
from __future__ import annotations

import json
from pathlib import Path

from .asks import ANSWERS, MAX_FUNCTIONS, MAX_HANDOVER_BYTES, MAX_LEAVES, MIME


def take_handovers(notebooks: list) -> dict:
    """{answer name: hand-over} from these autograded notebooks (the answers none of them names are absent),
    each notebook rewritten without its hand-over outputs."""
    import nbformat

    entries, checks, size = {}, {}, {}
    for path in notebooks:
        path = Path(path)
        if not path.is_file():
            continue
        try:
            nb = nbformat.read(path, as_version=4)
        except Exception:
            continue
        found = False
        for cell in nb.cells:
            kept = []
            for output in cell.get("outputs", []):
                data = output.get("data", {}) if output.get("output_type") == "display_data" else {}
                if MIME not in data:
                    kept.append(output)
                    continue
                found = True
                _replay(data[MIME], entries, checks, size)
            if found:
                cell["outputs"] = kept
        if found:
            nbformat.write(nb, path)
    return {name: {"programs": [entries[name].get(i) for i in range(max(entries[name], default=-1) + 1)],
                   "checks": checks.get(name, {})} for name in entries}


def _replay(record, entries: dict, checks: dict, size: dict) -> None:
    if isinstance(record, str):  # a JSON mime bundle may arrive as text
        try:
            record = json.loads(record)
        except ValueError:
            return
    if not isinstance(record, dict):
        return
    name, check, index = record.get("answer"), record.get("check"), record.get("index")
    if name not in ANSWERS or not isinstance(check, str) or not isinstance(index, int) or \
            not 0 <= index < MAX_FUNCTIONS:
        return
    answer_entries = entries.setdefault(name, {})
    if "entry" in record:
        size[name] = size.get(name, 0) + len(json.dumps(record["entry"]))
        if size[name] > MAX_HANDOVER_BYTES:
            return
        answer_entries[index] = _bounded(record["entry"])
    checks.setdefault(name, {})[check] = index


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
