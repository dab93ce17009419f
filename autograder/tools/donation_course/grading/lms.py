"""Which file is whose: each file of an export matched to a student and a
notebook by an LMS preset (presets.py) on nbgrader's own
`FileNameCollectorPlugin`; the latest attempt per student and notebook chosen.

The student id is the LMS's unique id (Canvas user id, Moodle participant id,
Blackboard username, nbgrader's id exactly as given); the display name is kept
beside it. `--name-regex` takes any other `named_regexp`.
"""
import datetime as dt
import re
from dataclasses import dataclass, field
from pathlib import Path

from nbgrader.plugins import FileNameCollectorPlugin

from .presets import PREFIX, PRESETS, detect

TIMESTAMP_FORMATS = ("%Y-%m-%d-%H-%M-%S", "%Y-%m-%d %H:%M:%S.%f %Z", "%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S")
SKIP = re.compile(r"(^|/)(__MACOSX|\.[^/]*)(/|$)")  # macOS zip debris, hidden files


class Collector(FileNameCollectorPlugin):
    """nbgrader's file-name collector, matched on the path relative to the
    export rather than the absolute path (the user's folder names must not
    be able to match a preset)."""

    def match(self, relpath: str):
        return self.collect(relpath)


@dataclass
class File:
    path: Path
    rel: str
    student: str
    notebook: str
    name: str = ""
    timestamp: dt.datetime = None
    late: bool = False
    attempt: int = 0


@dataclass
class Collected:
    """Per student: {notebook: File} chosen to grade; problems for the user."""
    students: dict = field(default_factory=dict)  # sid -> {notebook: File}
    names: dict = field(default_factory=dict)  # sid -> display name
    problems: list = field(default_factory=list)  # one line each, naming the files
    notes: list = field(default_factory=list)  # warnings that are not errors
    student_problems: dict = field(default_factory=dict)  # sid -> [line] (also in problems)
    lesson_files: list = field(default_factory=list)  # the course's own notebooks, named by no student


def parse_timestamp(text: str):
    text = text.strip()
    for fmt in TIMESTAMP_FORMATS:
        try:
            return dt.datetime.strptime(text, fmt)
        except ValueError:
            pass
    from nbgrader.utils import parse_utc

    return parse_utc(text).replace(tzinfo=None)


COPY_SUFFIX = re.compile(r"(?: \(\d+\)|-Copy\d+)$")  # a browser's ` (1)`, Jupyter's `-Copy1`


def lesson_file(rel: str, notebooks: list):
    """The course notebook whose own file name `rel` bears (`07_update_with_donate.ipynb`,
    with a copy suffix allowed), or None: such a file names no student."""
    stem = COPY_SUFFIX.sub("", Path(rel).stem) if rel.endswith(".ipynb") else None
    return stem if stem in notebooks else None


def lesson_problem(rel: str, nb: str) -> str:
    return (f"{rel}: the course's own {nb}.ipynb, whose name holds no student id; not graded "
            f"(to check your own work, run `./course check` on it; to grade it as a student's, "
            f"name it <student>_{nb}.ipynb)")


def notebook_of(file_id: str, notebooks: list):
    """The assignment notebook a submitted file name is, or None: the name
    itself (`03_pitfalls.ipynb`), or a name ending in it after `_`, `-` or a
    space (`jdoe_03_pitfalls.ipynb`), with a browser's ` (1)` or Jupyter's
    `-Copy1` copy suffix allowed."""
    stem = COPY_SUFFIX.sub("", Path(file_id).stem) if file_id.endswith(".ipynb") else None
    if stem is None:
        return None
    for nb in sorted(notebooks, key=len, reverse=True):
        if stem == nb or re.search(r"[_\- ]" + re.escape(nb) + "$", stem):
            return nb
    return None


RECEIPT = re.compile(r"(?:.*/)?(?P<key>[^/]*_attempt_\d{4}-\d\d-\d\d-\d\d-\d\d-\d\d)\.txt$")
RECEIPT_NAME = re.compile(r"^Name:\s*(?P<name>.*?)\s*\((?P<username>[^()]+)\)\s*$", re.M)


def blackboard_receipts(files: list, rels: list) -> dict:
    """{'<Assignment>_<username>_attempt_<time>': (username, name)} from Blackboard's
    receipts ("Name: Jane Doe (jane_doe)"): they settle usernames holding `_`."""
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


def valid_student_id(sid: str) -> bool:
    return bool(sid) and sid not in (".", "..") and "/" not in sid and "\\" not in sid and "\0" not in sid


def collect_files(root: Path, notebooks: list, assignment: str, lms: str = None, regex: str = None) -> tuple:
    """(Collected, preset name) for every file under `root`."""
    files = sorted(p for p in root.rglob("*") if p.is_file() or p.is_symlink())
    rels = [p.relative_to(root).as_posix() for p in files]
    if regex:
        lms = "custom"
        pattern = regex
    else:
        lms = lms or detect(rels, assignment)
        pattern = PRESETS[lms].regexp(assignment)
    collector = Collector(named_regexp=pattern, valid_ext=[".ipynb"])
    named = None
    if lms == "flat":  # `<student>_<notebook>.ipynb` first, so that ids may hold `_`
        alternatives = "|".join(re.escape(nb) for nb in sorted(notebooks, key=len, reverse=True))
        named = Collector(named_regexp=PREFIX + rf"(?P<student_id>[^/]+?)_(?P<file_id>{alternatives})\.ipynb$",
                          valid_ext=[".ipynb"])
    out, candidates = Collected(), {}
    receipts = blackboard_receipts(files, rels) if lms == "blackboard" else {}
    for path, rel in zip(files, rels, strict=True):
        if SKIP.search(rel):
            continue
        if path.is_symlink():
            out.problems.append(f"{rel}: a symbolic link; not graded")
            continue
        if not rel.endswith(".ipynb"):
            if not (lms == "blackboard" and rel.endswith(".txt")) and Path(rel).name != "timestamp.txt":
                out.notes.append(f"{rel}: not a notebook; not graded")
            continue
        lesson = lesson_file(rel, notebooks) if lms == "flat" else None
        if lesson:  # never a student called "07": the learner's own copy of a lesson
            out.problems.append(lesson_problem(rel, lesson))
            out.lesson_files.append(rel)
            continue
        gd = (named and named.match(rel)) or collector.match(rel)
        if not gd or not gd.get("student_id"):
            out.problems.append(f"{rel}: does not match the {lms} file naming; not graded")
            continue
        if receipts:
            key = f"{gd['assignment']}_{gd['student_id']}_attempt_{gd['timestamp']}"
            if key in receipts:
                gd["student_id"], gd["name"] = receipts[key]
        sid = gd["student_id"]
        if not valid_student_id(sid):
            out.problems.append(f"{rel}: student id {sid!r} cannot be a folder name; not graded")
            continue
        file_id = gd.get("file_id")
        if lms == "flat" and not file_id:
            nb = notebooks[-1]  # <student>.ipynb: the graded exercise
        else:
            fname = (file_id or "") + (gd.get("ext") or "")
            nb = notebook_of(fname if fname.endswith(".ipynb") else fname + ".ipynb", notebooks)
            if nb is None and lms == "flat":
                nb = notebooks[-1]  # <student>_<anything>.ipynb: the graded exercise
        if nb is None:
            line = f"{rel}: matches none of the assignment's notebooks ({', '.join(notebooks)}); not graded"
            out.problems.append(line)
            out.student_problems.setdefault(sid, []).append(line)
            out.students.setdefault(sid, {})
            continue
        f = File(path=path, rel=rel, student=sid, notebook=nb, name=(gd.get("name") or "").strip(),
                 late=bool(gd.get("late")), attempt=int(gd.get("attempt") or 0))
        if gd.get("timestamp"):
            try:
                f.timestamp = parse_timestamp(gd["timestamp"])
            except ValueError:
                out.problems.append(f"{rel}: timestamp {gd['timestamp']!r} not understood; not graded")
                continue
        elif lms == "nbgrader":
            ts = path.parent / "timestamp.txt"
            if ts.is_file() and ts.read_text().strip():
                try:
                    f.timestamp = parse_timestamp(ts.read_text())
                except ValueError:
                    out.problems.append(f"{ts.relative_to(root)}: not a timestamp; {rel} not graded")
                    continue
        candidates.setdefault((sid, nb), []).append(f)
        if f.name:
            out.names.setdefault(sid, f.name)
    for (sid, nb), fs in sorted(candidates.items()):
        key = lambda f: (f.timestamp or dt.datetime.min, f.attempt)  # noqa: E731
        fs.sort(key=key)
        if len(fs) > 1 and key(fs[-1]) == key(fs[-2]):
            tied = [f.rel for f in fs if key(f) == key(fs[-1])]
            line = (f"{' and '.join(tied)}: all are {sid}'s {nb} with no time or attempt number to order "
                    "them; that notebook is not graded")
            out.problems.append(line)
            out.student_problems.setdefault(sid, []).append(line)
            out.students.setdefault(sid, {})
            continue
        out.students.setdefault(sid, {})[nb] = fs[-1]
        if len(fs) > 1:
            out.notes.append(f"{sid}'s {nb}: {len(fs)} attempts; grading the latest, {fs[-1].rel}")
    return out, lms
