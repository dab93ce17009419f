"""Whose file is which in a Blackboard export, where usernames may hold `_`.

Blackboard names each file of an assignment's download
`<Assignment Name>_<username>_attempt_<YYYY-MM-DD-HH-MM-SS>_<original name>`,
beside a `.txt` receipt per attempt ("Name: Jane Doe (jane_doe)"). The
assignment name and the usernames may both hold `_`, so the `<Assignment
Name>_<username>` part (a "stem") is split, in order, by:

1. the attempt's receipt, which names the username;
2. an assignment name known from another receipt (its stem less its username),
   or the course's own assignment name;
3. the prefix every stem of the export shares, which is the assignment name,
   when that prefix holds exactly one `_` (`Assignment_`: `jane_doe`,
   `john_doe` and `kim_lee_2` stay whole).

Otherwise the split is ambiguous (one student only, every username sharing a
`_`-prefix, or an assignment name holding `_`): one problem line names the
files, and none of them is graded. Two students are never merged into one,
and no student gets a truncated id.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

RECEIPT = re.compile(r"(?:.*/)?(?P<key>[^/]*_attempt_\d{4}-\d\d-\d\d-\d\d-\d\d-\d\d)\.txt$")
RECEIPT_NAME = re.compile(r"^Name:\s*(?P<name>.*?)\s*\((?P<username>[^()]+)\)\s*$", re.M)


def receipts(files: list[Path], rels: list[str]) -> dict[str, tuple[str, str]]:
    """{'<Assignment>_<username>_attempt_<time>': (username, name)} from the export's receipts."""
    out = {}
    for path, rel in zip(files, rels, strict=True):
        m = RECEIPT.match(rel)
        if not m:
            continue
        try:
            found = RECEIPT_NAME.search(path.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue
        if found and m["key"].rsplit("_attempt_", 1)[0].endswith("_" + found["username"]):
            out[m["key"]] = (found["username"], found["name"])
    return out


@dataclass
class Split:
    """stem -> username, and the problem line for the stems no rule settles ('' when none)."""

    usernames: dict[str, str] = field(default_factory=dict)
    problem: str = ""


def split_stems(stems: dict[str, list[str]], known: dict[str, str], assignment: str) -> Split:
    """Split every `<Assignment>_<username>` stem ({stem: [file]}); `known` holds the receipts' {stem: username}."""
    out = Split()
    names = {stem[:-len(user) - 1] for stem, user in known.items()} | {assignment}
    rest = []
    for stem in stems:
        if stem in known:
            out.usernames[stem] = known[stem]
            continue
        prefix = next((a for a in sorted(names, key=len, reverse=True) if stem.startswith(a + "_")), None)
        if prefix is not None and len(stem) > len(prefix) + 1:
            out.usernames[stem] = stem[len(prefix) + 1:]
        else:
            rest.append(stem)
    if not rest:
        return out
    common = os.path.commonprefix(list(stems))
    cut = common[:common.rfind("_") + 1]
    if cut.count("_") == 1 and all(len(stem) > len(cut) for stem in rest):
        out.usernames.update({stem: stem[len(cut):] for stem in rest})
        return out
    files = sorted(f for stem in rest for f in stems[stem])
    shown = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
    why = (f"the names all begin '{cut}', which holds more than one '_'" if cut.count("_") > 1
           else "the files share no assignment name")
    out.problem = (f"{shown}: Blackboard files whose username cannot be told from the assignment name ({why}; "
                   "no .txt receipt names them); not graded, rather than guess an id: add the export's receipts, "
                   "or give --name-regex")
    return out
