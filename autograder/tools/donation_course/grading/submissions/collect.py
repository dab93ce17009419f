"""Turn a class's submissions into nbgrader's `submitted/<student>/<assignment>/` layout.

SUBMISSIONS is a folder or a `.zip` of an LMS export (Canvas, Blackboard,
Moodle, a flat folder) or an nbgrader `submitted/` tree; which file is whose
is decided by the presets in presets.py, on nbgrader's `FileNameCollectorPlugin`.
A zip is extracted into a folder the caller owns (a TemporaryDirectory of the
run), entry by entry: an entry with `..` or an absolute path is refused and
reported, never written.
"""
import shutil
import zipfile
from pathlib import Path, PurePosixPath

from ...course import CourseError, read_notebook
from ..lms import collect_files
from .repair import repair


def extract(archive: Path, dest: Path) -> list:
    """Extract the zip's regular files into dest; return problems (one line each)."""
    problems = []
    try:
        zf = zipfile.ZipFile(archive)
    except zipfile.BadZipFile as exc:
        raise CourseError(f"{archive}: not a readable .zip ({exc})") from None
    with zf:
        for info in zf.infolist():
            if info.is_dir():
                continue
            name = info.filename.replace("\\", "/")
            parts = PurePosixPath(name).parts
            if name.startswith("/") or (parts and ":" in parts[0]) or ".." in parts:
                problems.append(f"{archive.name}: entry {info.filename!r} points outside the export "
                                "(absolute path or '..'); not extracted")
                continue
            if (info.external_attr >> 16) & 0o170000 == 0o120000:
                problems.append(f"{archive.name}: entry {info.filename!r} is a symbolic link; not extracted")
                continue
            target = dest.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out)
    return problems


def collect(src: Path, notebooks: list, assignment: str, workdir: Path, lms: str = None, regex: str = None,
            **options):
    """(Collected, preset) for SUBMISSIONS, or CourseError; a zip, or a single
    notebook file, goes to workdir. Nobody to grade is a CourseError in one line.
    `options` go to lms.collect_files (timezone, source, exercise)."""
    if not src.exists():
        raise CourseError(f"{src}: no such file or folder")
    problems = []
    if src.is_file():
        root = workdir / "export"
        root.mkdir(parents=True)
        if src.name.endswith(".ipynb"):  # one file: named as a file of a flat export
            shutil.copyfile(src, root / src.name)
        elif zipfile.is_zipfile(src):
            problems = extract(src, root)
        else:
            raise CourseError(f"{src}: not a folder and not a .zip or .ipynb file")
    else:
        root = src
    found, preset = collect_files(root, notebooks, assignment, lms=lms, regex=regex, **options)
    found.problems[:0] = problems
    if not found.students:
        raise CourseError(nobody_to_grade(src, found, assignment))
    return found, preset


def nobody_to_grade(src: Path, found, assignment: str) -> str:
    """The one line for SUBMISSIONS in which no file is any student's."""
    if found.lesson_files and len(found.lesson_files) == len(found.problems):
        if len(found.problems) == 1:
            return found.problems[0].replace(found.lesson_files[0], str(src), 1)
        return (f"{src}: nobody graded: its {len(found.lesson_files)} notebooks are the course's own lesson "
                f"files ({', '.join(found.lesson_files)}), whose names hold no student id (to check your own "
                "work, run `./course check` on them; to grade a student's, name it <student>_<notebook>.ipynb)")
    if found.problems:
        more = f" (and {len(found.problems) - 3} more)" if len(found.problems) > 3 else ""
        return f"{src}: nobody graded: " + "; ".join(found.problems[:3]) + more
    return (f"{src}: no .ipynb submissions found (expected an LMS export, <student>/{assignment}/"
            "*.ipynb, or a flat folder or .zip of <student>_<notebook>.ipynb files)")


def stage(files: dict, submitted: Path, assignment: str, timestamp=None, release_dir=None) -> list:
    """Copy one student's chosen files ({notebook: lms.File}) into
    submitted/<student>/<assignment>/, repaired (see repair). Only those
    notebooks are replaced: whatever else is there (nbgrader's own
    collected notebooks, timestamp.txt) stays. `timestamp` (naive UTC) is
    written as nbgrader's timestamp.txt. Returns notes for the report."""
    import nbformat

    notes = []
    for nb, f in files.items():
        dest = submitted / f.student / assignment
        target = dest / f"{nb}.ipynb"
        if target.exists() and target.resolve() == f.path.resolve():
            continue  # already in place (SUBMISSIONS is the course's own submitted/)
        dest.mkdir(parents=True, exist_ok=True)
        try:
            book = nbformat.read(f.path, as_version=4)
            rel = release_dir / f"{nb}.ipynb" if release_dir else None
            fixed = repair(book, nbformat.read(rel, as_version=4) if rel and rel.exists() else None)
        except Exception:
            shutil.copyfile(f.path, target)
            continue
        if fixed:
            notes.append(f"{nb}: " + ", ".join(fixed))
            nbformat.write(book, target)
        else:
            shutil.copyfile(f.path, target)
    if files:
        write_timestamp(files, submitted / next(iter(files.values())).student / assignment, timestamp)
    return notes


def write_timestamp(files: dict, dest: Path, timestamp) -> None:
    """nbgrader's timestamp.txt for dest: an nbgrader submission's own file is
    kept byte for byte (copied if it came from another submitted/ tree);
    an LMS time (naive UTC) is written in nbgrader's format."""
    ts = dest / "timestamp.txt"
    sources = [f.path.parent / "timestamp.txt" for f in files.values()]
    if any(f.path.parent.resolve() == dest.resolve() for f in files.values()):
        return  # graded in place: nbgrader's own file stays as it is
    own = [p for p in sources if p.is_file()]
    if own:
        text = own[0].read_text()
    elif timestamp is not None:
        text = timestamp.strftime("%Y-%m-%d %H:%M:%S.%f UTC")
    else:
        return
    if ts.is_file() and ts.read_text() == text:
        return
    tmp = ts.with_name(".timestamp.txt.tmp")
    tmp.write_text(text)
    tmp.replace(ts)


def notebook_problem(path: Path) -> str | None:
    """Why a submitted file cannot be graded as a notebook, in one line for the instructor and the
    student (None: nbformat reads and validates it). Any file: empty, binary, truncated, JSON that is
    no notebook, or a notebook nbformat's schema refuses."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if not data.strip():
        return "an empty file, not a notebook"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "not a notebook: binary data, or text that is not UTF-8"
    import json

    try:
        value = json.loads(text)
    except ValueError as exc:
        cut = " (cut off: the upload or the save did not finish?)" if "Unterminated" in str(exc) or \
            getattr(exc, "pos", 0) >= len(text.rstrip()) else ""
        return f"not valid notebook JSON (broken at line {getattr(exc, 'lineno', '?')}){cut}"
    if not isinstance(value, dict):
        return f"not a notebook: its JSON is a {type(value).__name__}, not an object"
    if "nbformat" not in value:
        return "not a notebook: a JSON object with no nbformat version"
    try:
        read_notebook(path)
    except CourseError as exc:
        return " ".join(str(exc).split(": ", 1)[-1].split())[:300]
    return None
