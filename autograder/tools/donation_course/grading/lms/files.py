"""Which file is whose: each file of an export matched to a student and a notebook by an
LMS's naming (its `Lms`, lms/__init__.py) on nbgrader's own `FileNameCollectorPlugin`,
completed by the LMS's sidecars (receipts, timestamp.txt); the latest attempt per student
and notebook chosen.

The student id is the LMS's unique id (Canvas user id, Moodle participant id, Blackboard
username, nbgrader's id exactly as given); the display name is kept beside it, and never
replaces a name the gradebook's roster has (`roster_fields`). `--name-regex` takes any
other `named_regexp`. Two files of one notebook in one submission: where the LMS orders
them (`Lms.order`: Canvas's attachment ids, Moodle's ` (1)`), the later is graded, with a
note; otherwise neither is, with a problem line naming both. A notebook none of whose
graded cells is one of the assignment's (another course's, an old version's) is not graded.
"""
import datetime as dt
import re
from dataclasses import dataclass, field
from pathlib import Path

from nbgrader.plugins import FileNameCollectorPlugin

from ..submissions.foreign import expected_ids, foreign_cells, foreign_problem
from .base import PREFIX, SKIP, Lms
from .times import parse_timestamp


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
    order: tuple | None = None  # the LMS's order of two files of one notebook (None: it has none)


@dataclass
class Collected:
    """Per student: {notebook: File} chosen to grade; problems for the user."""
    students: dict = field(default_factory=dict)  # sid -> {notebook: File}
    names: dict = field(default_factory=dict)  # sid -> display name
    problems: list = field(default_factory=list)  # one line each, naming the files
    notes: list = field(default_factory=list)  # warnings that are not errors
    student_problems: dict = field(default_factory=dict)  # sid -> [line] (also in problems)
    lesson_files: list = field(default_factory=list)  # the course's own notebooks, named by no student

    def student_problem(self, sid: str, line: str) -> None:
        """A problem with one of `sid`'s files: reported, and listed with the student (the CSV says why)."""
        self.problems.append(line)
        self.student_problems.setdefault(sid, []).append(line)
        self.students.setdefault(sid, {})


COPY_SUFFIX = re.compile(r"(?: \(\d+\)|-Copy\d+)$")  # a browser's ` (1)`, Jupyter's `-Copy1`


def lesson_file(rel: str, notebooks: list):
    """The course notebook whose own file name `rel` bears (`03_pitfalls.ipynb`, with a copy
    suffix allowed), or None: such a file names no student."""
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


def roster_fields(gb, sid: str, name: str) -> dict:
    """nbgrader's update_or_create_student fields for an LMS display name: the name only for a student
    the roster does not know by name yet (as last_name, the only one nbgrader shows alone); never over a
    name the roster holds (formgrader's, `nbgrader db student add`'s, or an earlier export's)."""
    from nbgrader.api import MissingEntry

    if not name:
        return {}
    try:
        student = gb.find_student(sid)
    except MissingEntry:
        return {"last_name": name}
    return {} if student.first_name or student.last_name else {"last_name": name}


def valid_student_id(sid: str) -> bool:
    return bool(sid) and sid not in (".", "..") and "/" not in sid and "\\" not in sid and "\0" not in sid


class Custom(Lms):
    def order(self, gd: dict) -> tuple | None:
        return (int(gd["attempt"]),) if gd.get("attempt") else None


CUSTOM = Custom(name="custom", title="--name-regex", pattern="", layout="--name-regex", detected=False,
             neutral_ids=True)


def collect_files(root: Path, notebooks: list, assignment: str, lms: str = None, regex: str = None,
                  timezone: str = "", source: Path = None, exercise: str = None) -> tuple:
    """(Collected, LMS name) for every file under `root`; file-name times read in `timezone`; with
    the assignment's `source` folder, a notebook that is not the assignment's is a problem, not graded.
    In a flat export, a file that names a student but no notebook (`<student>.ipynb`) is the graded
    `exercise` (Course.exercise; None: such a file matches no notebook)."""
    from . import REGISTRY, detect

    files = sorted(p for p in root.rglob("*") if p.is_file() or p.is_symlink())
    rels = [p.relative_to(root).as_posix() for p in files]
    if regex:
        system, pattern = CUSTOM, regex
    else:
        system = REGISTRY[lms or detect(rels, assignment)]
        pattern = system.regexp(assignment)
    collector = Collector(named_regexp=pattern, valid_ext=[".ipynb"])
    named = None
    if system.name == "flat":  # `<student>_<notebook>.ipynb` first, so that ids may hold `_`
        alternatives = "|".join(re.escape(nb) for nb in sorted(notebooks, key=len, reverse=True))
        named = Collector(named_regexp=PREFIX + rf"(?P<student_id>[^/]+?)_(?P<file_id>{alternatives})\.ipynb$",
                          valid_ext=[".ipynb"])
    out, candidates = Collected(), {}
    sidecars = system.sidecars(files, rels, collector, assignment)
    if sidecars.problem:
        out.problems.append(sidecars.problem)
    for path, rel in zip(files, rels, strict=True):
        if SKIP.search(rel):
            continue
        if path.is_symlink():
            out.problems.append(f"{rel}: a symbolic link; not graded")
            continue
        if not rel.endswith(".ipynb"):
            if not system.skips(rel) and Path(rel).name != "timestamp.txt":
                out.notes.append(f"{rel}: not a notebook; not graded")
            continue
        lesson = lesson_file(rel, notebooks) if system.name == "flat" else None
        if lesson:  # never a student called "07": the learner's own copy of a lesson
            out.problems.append(lesson_problem(rel, lesson))
            out.lesson_files.append(rel)
            continue
        gd = (named and named.match(rel)) or collector.match(rel)
        if not gd or not gd.get("student_id"):
            out.problems.append(f"{rel}: does not match the {system.name} file naming; not graded")
            continue
        gd = sidecars.apply(dict(gd), path)
        if gd is None:
            continue  # in the sidecars' one problem line
        sid = gd["student_id"]
        if not valid_student_id(sid):
            out.problems.append(f"{rel}: student id {sid!r} cannot be a folder name; not graded")
            continue
        file_id = gd.get("file_id")
        if system.name == "flat" and not file_id:
            nb = exercise  # <student>.ipynb: the graded exercise
        else:
            fname = (file_id or "") + (gd.get("ext") or "")
            nb = notebook_of(fname if fname.endswith(".ipynb") else fname + ".ipynb", notebooks)
            if nb is None and system.name == "flat":
                nb = exercise  # <student>_<anything>.ipynb: the graded exercise
        if nb is None:
            out.student_problem(sid, f"{rel}: matches none of the assignment's notebooks "
                                     f"({', '.join(notebooks)}); not graded")
            continue
        f = File(path=path, rel=rel, student=sid, notebook=nb, name=(gd.get("name") or "").strip(),
                 late=bool(gd.get("late")), attempt=int(gd.get("attempt") or 0), order=system.order(gd))
        if gd.get("timestamp"):
            try:
                f.timestamp = parse_timestamp(gd["timestamp"], "" if gd.get("utc") else timezone)
            except ValueError:
                out.problems.append(f"{rel}: timestamp {gd['timestamp']!r} not understood; not graded")
                continue
        candidates.setdefault((sid, nb), []).append(f)
        if f.name:
            out.names.setdefault(sid, f.name)
    expected = expected_ids(source, notebooks) if source is not None else {}
    for (sid, nb), fs in sorted(candidates.items()):
        chosen = latest(fs, sid, nb, system, out)
        if chosen is None:
            continue
        ids = foreign_cells(chosen.path, expected[nb]) if nb in expected else None
        if ids:
            out.student_problem(sid, foreign_problem(chosen.rel, nb, ids, expected[nb]))
            continue
        out.students.setdefault(sid, {})[nb] = chosen
    return out, system.name


def latest(fs: list, sid: str, nb: str, system: Lms, out: Collected):
    """The file of `sid`'s `nb` to grade among `fs`: the latest attempt (the LMS's time), and within one
    attempt the one the LMS orders last; None, with a problem line, when nothing orders the last ones."""
    def when(f):
        return f.timestamp or dt.datetime.min

    fs.sort(key=when)
    last = [f for f in fs if when(f) == when(fs[-1])]
    if len(last) > 1:
        if any(f.order is None for f in last) or len({f.order for f in last}) < len(last):
            tied = [f.rel for f in last]
            out.student_problem(sid, f"{' and '.join(tied)}: all are {sid}'s {nb} with no time or order from "
                                     f"{system.title} to tell which came last; that notebook is not graded")
            return None
        last.sort(key=lambda f: f.order)
        out.notes.append(f"{sid}'s {nb}: {len(last)} files in one submission; grading the one {system.title} "
                         f"took last, {last[-1].rel} (not {', '.join(f.rel for f in last[:-1])})")
        return last[-1]
    if len(fs) > 1:
        out.notes.append(f"{sid}'s {nb}: {len(fs)} attempts; grading the latest, {fs[-1].rel}")
    return fs[-1]
