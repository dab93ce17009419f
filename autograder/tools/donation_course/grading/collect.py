"""Turn a class's submissions into nbgrader's `submitted/<student>/<assignment>/` layout.

Accepted inputs (SUBMISSIONS):
  1. an nbgrader folder: `SUBMISSIONS/<student>/<assignment>/*.ipynb`
     (SUBMISSIONS may be a course's `submitted/` folder);
  2. a flat folder of `.ipynb` files, as an LMS exports them;
  3. a `.zip` of such files (folders inside the zip are ignored; only the
     file names count).

Naming rules for flat and zip inputs (file name without `.ipynb`):
  - `<student>_<notebook>` where <notebook> is the name of an assignment
    notebook (e.g. `alice_07_update_with_donate`): that notebook of <student>;
  - anything else, `<student>` or `<student>_<whatever>`: the graded exercise
    (07_update_with_donate) of <student>.
  <student> is the text before the first `_` (LMS exports put the login
  first), lower-cased, with characters other than letters, digits, `.` and
  `-` dropped. Two files for the same student and notebook: the one whose
  name sorts last wins, and a warning is printed.
"""
import re
import shutil
import tempfile
import zipfile
from pathlib import Path

from ..course import CourseError


def student_id(raw: str) -> str:
    sid = re.sub(r"[^a-z0-9.-]", "", raw.lower()).strip(".")
    return sid


def parse_name(stem: str, notebooks: list, exercise: str):
    for nb in sorted(notebooks, key=len, reverse=True):
        for sep in ("_", "-"):
            if stem.endswith(sep + nb) and len(stem) > len(nb) + 1:
                return student_id(stem[: -len(nb) - 1].split("_")[0]), nb
    return student_id(stem.split("_")[0]), exercise


def collect(src: Path, notebooks: list, exercise: str, assignment: str, warn=print) -> dict:
    """{student: {notebook_name: path}} for SUBMISSIONS, or CourseError."""
    if not src.exists():
        raise CourseError(f"{src}: no such file or folder")
    tmp = None
    if src.is_file():
        if not zipfile.is_zipfile(src):
            raise CourseError(f"{src}: not a folder and not a .zip file")
        tmp = Path(tempfile.mkdtemp(prefix="donation-lab-zip-"))
        with zipfile.ZipFile(src) as zf:
            for info in zf.infolist():
                name = Path(info.filename).name
                if info.is_dir() or not name.endswith(".ipynb") or "__MACOSX" in info.filename or name.startswith("."):
                    continue
                (tmp / name).write_bytes(zf.read(info))
        src = tmp
    found = {}
    nested = sorted(src.glob(f"*/{assignment}/*.ipynb"))
    if nested:
        for path in nested:
            sid = student_id(path.parent.parent.name)
            if sid:
                found.setdefault(sid, {})[path.stem] = path
    else:
        for path in sorted(src.glob("*.ipynb")):
            sid, nb = parse_name(path.stem, notebooks, exercise)
            if not sid:
                warn(f"warning: {path.name}: no student name in the file name; skipped")
                continue
            if nb in found.get(sid, {}):
                warn(f"warning: {path.name} and {found[sid][nb].name} are both {sid}'s {nb}; using {path.name}")
            found.setdefault(sid, {})[nb] = path
    if not found:
        raise CourseError(f"{src}: no .ipynb submissions found (expected <student>/{assignment}/*.ipynb, "
                          "or a flat folder or .zip of <student>_<notebook>.ipynb files)")
    return found


def _gid(cell):
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def repair(nb, release) -> list:
    """Undo the cell edits that make nbgrader fail or lose points unfairly:
    a grade cell the learner deleted is put back (nbgrader then restores its
    instructor source), and a repeated grade_id keeps only its first cell
    (later copies become ordinary cells). Returns notes for the report."""
    notes, seen = [], set()
    for cell in nb.cells:
        gid = _gid(cell)
        if gid is None:
            continue
        if gid in seen:
            del cell.metadata["nbgrader"]
            notes.append(f"duplicated cell {gid} ignored")
        seen.add(gid)
    if release is None:
        return notes
    ids = [c.get("id") for c in nb.cells]
    for i, cell in enumerate(release.cells):
        gid = _gid(cell)
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if gid is None or gid in seen or not (meta.get("grade") or meta.get("locked")):
            continue
        pos = 0  # after the nearest earlier release cell that is still there
        for prev in reversed(release.cells[:i]):
            if prev.get("id") in ids:
                pos = ids.index(prev.get("id")) + 1
                break
        nb.cells.insert(pos, cell)
        ids.insert(pos, cell.get("id"))
        seen.add(gid)
        notes.append(f"deleted cell {gid} restored")
    return notes


def stage(found: dict, submitted: Path, assignment: str, students=None, release_dir=None) -> dict:
    """Copy each student's files into submitted/<student>/<assignment>/
    (replacing what was there), repaired (see repair); return notes per student."""
    import nbformat

    notes = {}
    for sid, files in found.items():
        if students is not None and sid not in students:
            continue
        dest = submitted / sid / assignment
        if all(p.resolve().parent == dest.resolve() for p in files.values()):
            continue  # already in place (SUBMISSIONS is the course's own submitted/)
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        for nb, path in files.items():
            try:
                book = nbformat.read(path, as_version=4)
                rel = release_dir / f"{nb}.ipynb" if release_dir else None
                fixed = repair(book, nbformat.read(rel, as_version=4) if rel and rel.exists() else None)
            except Exception:
                shutil.copyfile(path, dest / f"{nb}.ipynb")
                continue
            if fixed:
                notes.setdefault(sid, []).append(f"{nb}: " + ", ".join(fixed))
                nbformat.write(book, dest / f"{nb}.ipynb")
            else:
                shutil.copyfile(path, dest / f"{nb}.ipynb")
    return notes
