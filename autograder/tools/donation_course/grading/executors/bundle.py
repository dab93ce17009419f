"""The course bundle: what a cluster worker needs of the course, as one tar named by its digest.

`./course grade --scheduler` assumes no shared file system. The client
packs, deterministically (sorted names, no times or owners), what grading
reads of the course: nbgrader_config.py, source/ and release/ of the
assignment, the gradebook as generate_assignment made it (the assignment,
its notebooks and cells, its due date; no student: `gradebook_sql`) and,
when kernels read it, the JAX compile cache. The digest is the sha256 of
that tar; the hidden checks come with the installed donation_course
package, which `fingerprint` covers.

A worker fetches the bundle once per digest: it keeps the verified tar
beside the dask workers' own folders (`install`), and unpacks it into its
own folder (`unpack`) as the course it grades in.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import os
import platform
import sqlite3
import tarfile
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

from ...course import COMPILE_CACHE, GRADING_DIR, Course

# nbgrader's tables that hold students and what they submitted: left out of the bundle
STUDENT_TABLES = frozenset({"student", "submitted_assignment", "submitted_notebook", "grade", "comment"})
GRADEBOOK_SQL = "gradebook.sql"
READY = ".bundle-unpacked"  # in an unpacked course: written last
# what must be the same on the client and every worker (with the code of the two local packages)
PACKAGES = ("jax", "jaxlib", "nbgrader", "donation-course", "donation-lab", "dask", "distributed")


@dataclass(frozen=True)
class Bundle:
    digest: str   # sha256 of the tar
    data: bytes   # the tar, gzip'd for the wire

    @property
    def name(self) -> str:
        return f"{self.digest[:16]}"


def gradebook_sql(db: Path) -> str:
    """The gradebook without its students, as SQL: the same text for the
    same assignment however many students have been graded into it since."""
    src = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    mem = sqlite3.connect(":memory:")
    try:
        objects = src.execute("SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL "
                              "AND name NOT LIKE 'sqlite_%' ORDER BY type != 'table', name").fetchall()
        for kind, name, sql in objects:
            mem.execute(sql)
            if kind == "table" and name not in STUDENT_TABLES:
                rows = src.execute(f'SELECT * FROM "{name}" ORDER BY rowid').fetchall()
                if rows:
                    mem.executemany(f'INSERT INTO "{name}" VALUES ({",".join("?" * len(rows[0]))})', rows)
        mem.commit()
        return "\n".join(mem.iterdump())
    finally:
        src.close()
        mem.close()


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    tar.addfile(info, io.BytesIO(data))


def build(course: Course, compile_cache: bool) -> Bundle:
    """The bundle of `course` as this run grades it (with its compile cache or not)."""
    files = {"nbgrader_config.py": (course.root / "nbgrader_config.py").read_bytes(),
             GRADEBOOK_SQL: gradebook_sql(course.gradebook).encode()}
    # the bundle holds this assignment alone, so the cache goes where a one-assignment course keeps it
    folders = {course.source: course.source.relative_to(course.root),
               course.release: course.release.relative_to(course.root)}
    if compile_cache:
        folders[course.compile_cache] = Path(GRADING_DIR, COMPILE_CACHE)
    for folder, name in folders.items():
        for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
            if path.is_file() and "__pycache__" not in path.parts:
                files[(name / path.relative_to(folder)).as_posix()] = path.read_bytes()
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(files):
            _add(tar, name, files[name])
    tar_bytes = raw.getvalue()
    return Bundle(hashlib.sha256(tar_bytes).hexdigest(), gzip.compress(tar_bytes, mtime=0))


def install(base: Path, digest: str, data: bytes) -> Path:
    """Keep a bundle that arrived (gzip'd) as base/<digest>.tar, once verified; ValueError if it is not `digest`."""
    tar_bytes = gzip.decompress(data)
    if hashlib.sha256(tar_bytes).hexdigest() != digest:
        raise ValueError(f"the course bundle arrived damaged (its digest is not {digest[:16]})")
    base.mkdir(parents=True, exist_ok=True)
    dest = base / f"{digest}.tar"
    part = base / f"{digest}.tar.{os.getpid()}.part"
    part.write_bytes(tar_bytes)
    os.replace(part, dest)  # whole or absent, also with another worker of this machine writing it
    return dest


def cached(base: Path, digest: str) -> Path | None:
    """base/<digest>.tar when it is there and still has that digest."""
    path = base / f"{digest}.tar"
    try:
        return path if hashlib.sha256(path.read_bytes()).hexdigest() == digest else None
    except OSError:
        return None


def unpack(tar_path: Path, dest: Path) -> Path:
    """The course folder `dest` made from a bundle: its files, gradebook.db
    from the SQL, the compile cache readable by the sandbox's uid."""
    if (dest / READY).exists():
        return dest
    with tarfile.open(tar_path) as tar:
        tar.extractall(dest, filter="data")
    db = sqlite3.connect(dest / "gradebook.db")
    try:
        db.executescript((dest / GRADEBOOK_SQL).read_text())
    finally:
        db.close()
    for path in [dest, *dest.rglob("*")]:
        path.chmod(path.stat().st_mode | (0o555 if path.is_dir() else 0o444))
    (dest / READY).write_text(tar_path.stem)
    return dest


def fingerprint() -> dict[str, str]:
    """Python's version, the versions of PACKAGES, and a digest of the two local packages' code
    (the hidden checks, the grader): a worker must match the client in every one."""
    import donation_course
    import donation_lab

    found = {"python": platform.python_version()}
    for package in PACKAGES:
        found[package] = version(package)
    h = hashlib.sha256()
    for package in (donation_course, donation_lab):
        root = Path(package.__file__).parent
        for path in sorted(root.rglob("*.py")):
            h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    found["code"] = h.hexdigest()[:16]
    return found


def differences(client: dict[str, str], worker: dict[str, str]) -> str:
    """'' when they match, else one line saying how the worker differs from the client."""
    lines = [f"{name} {worker.get(name, 'missing')} there, {value} here"
             for name, value in client.items() if name != "code" and worker.get(name) != value]
    if client.get("code") != worker.get("code"):
        lines.append("its donation_course/donation_lab code (hidden checks, grader) differs from this "
                     "machine's: another checkout?")
    return "; ".join(lines)
