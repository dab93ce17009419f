"""Blackboard Learn: its assignment download, its Grade Center download, and its upload.

Import (Grade Center > Work Offline > Upload): the columns of the Grade Center's offline
download, every value quoted: `Last Name, First Name, Username, Student ID, Last Access,
Availability`, the column `Title [Total Pts: N Score] |column id` (without the id,
Blackboard adds a new column), and the note in `Grading Notes` (the instructor's only).
Blackboard matches a row on `Username`: a Blackboard export's username, or an nbgrader or
flat id (the school's login); with the Grade Center download (`--blackboard-column
gc_....xls`), each row is Blackboard's own row for that student.

Whose file is which in a Blackboard export, where usernames may hold `_`.

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

from .base import PREFIX, SKIP, Column, Lms, LmsExport, LmsGrade, Sidecars, csv_text, number

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


FIELDS = ["Last Name", "First Name", "Username", "Student ID", "Last Access", "Availability"]
NOTES = ["Grading Notes", "Notes Format"]
KEYS = ("Username", "Student ID")


class BoardColumn(Column):
    def default(self, title: str, top: float) -> str:
        return f"{title} [Total Pts: {top:g} Score]"


COLUMN = BoardColumn(flag="--blackboard-column", trait="blackboard_column",
                     pattern=re.compile(r"^(?P<title>.+?) \[Total Pts: [^\]]*\] \|(?P<id>\d+)$"),
                     example="Buffer Donation [Total Pts: 22 Score] |123456", keys=KEYS)


class BlackboardExport(LmsExport):
    """blackboard-import.csv: the Grade Center upload."""

    filename = "blackboard-import.csv"

    def write(self, grades: list[LmsGrade]) -> str:
        header = self.column or COLUMN.default(self.assignment[0], grades[0].max_points if grades else 0.0)
        out = []
        for g in grades:
            row = self.key(g)
            if row is not None:
                out.append({**row, header: number(g.points), "Grading Notes": g.note,
                            "Notes Format": "SMART_TEXT" if g.note else ""})
        return csv_text([*FIELDS, header, *NOTES], out, quote_all=True)

    def key(self, g: LmsGrade) -> dict | None:
        if self.download is not None:
            row = self.match(g, KEYS)
            if row is None:
                self.leave_out(g, f"no row of {self.download.path.name} has username {g.student!r}")
                return None
            return {k: row.get(k, "") for k in ("Last Name", "First Name", "Username", "Student ID")}
        if g.origin not in ("blackboard", "nbgrader", "flat", ""):
            self.leave_out(g, f"a {g.origin} id, which Blackboard does not know")
            return None
        first, last = g.names()
        return {"Last Name": last, "First Name": first, "Username": g.student}


@dataclass
class BoardSidecars(Sidecars):
    """The receipts' usernames and names, and the split of every `<Assignment>_<username>` stem."""

    found: dict = field(default_factory=dict)
    split: Split = field(default_factory=Split)

    def apply(self, gd: dict, path: Path) -> dict | None:
        stem = f"{gd['assignment']}_{gd['student_id']}"
        if stem not in self.split.usernames:
            return None  # in the split's one problem line
        gd["student_id"] = self.split.usernames[stem]
        gd["name"] = self.found.get(f"{stem}_attempt_{gd['timestamp']}", ("", gd.get("name")))[1]
        return gd


class Blackboard(Lms):
    def sidecars(self, files: list[Path], rels: list[str], collector, assignment: str) -> Sidecars:
        found = receipts(files, rels)
        stems = {}
        for rel in rels:
            gd = rel.endswith(".ipynb") and not SKIP.search(rel) and collector.match(rel)
            if gd and gd.get("student_id"):
                stems.setdefault(f"{gd['assignment']}_{gd['student_id']}", []).append(rel)
        known = {key.rsplit("_attempt_", 1)[0]: user for key, (user, _name) in found.items()}
        split = split_stems(stems, known, assignment)
        return BoardSidecars(problem=split.problem, found=found, split=split)

    def skips(self, rel: str) -> bool:
        return rel.endswith(".txt")  # the receipts


BLACKBOARD = Blackboard(
    name="blackboard", title="Blackboard",
    pattern=PREFIX + r"(?P<assignment>[^/]*)_(?P<student_id>[^/_]+)_attempt_"
                     r"(?P<timestamp>\d{4}-\d\d-\d\d-\d\d-\d\d-\d\d)_(?P<file_id>[^/]+)$",
    layout="<Assignment Name>_<username>_attempt_<YYYY-MM-DD-HH-MM-SS>_<original>.ipynb (+ a .txt receipt; "
           "the username is the last `_`-free word before `_attempt_` unless the receipt names it)",
    column=COLUMN, exporters=(BlackboardExport,),
    signature=r"_{student}_attempt_\d{4}-")

LMSES = (BLACKBOARD,)  # registered by lms/__init__.py
