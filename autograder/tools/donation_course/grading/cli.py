"""`./course grade SUBMISSIONS [options]`: grade a whole class with nbgrader,
in parallel, with a time and memory limit per submission.

Design: the main process generates the assignment once into the course's
gradebook, stages the submissions into `submitted/`, and starts N long-lived
worker processes (worker.py). Each worker owns an in-process NbGraderAPI and a
private copy of the gradebook, and runs `autograde` + `generate_feedback` for
one student at a time in a memory-capped kernel (kernel.py). The main process
is the only writer of the real gradebook: it backs it up, then merges each
student's result in one transaction. It kills and replaces a worker (and its
kernel) whose student runs past --timeout.
"""
import argparse
import contextlib
import csv
import datetime as dt
import hashlib
import html
import io
import json
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

from ..course import AUTOGRADER, Course, CourseError, read_notebook, run_nbgrader
from .collect import collect, stage
from .compile_cache import FOLDER as CACHE
from .compile_cache import fill, filled_from, notebooks_with_hidden_tests
from .lms import PRESETS
from .pool import run_pool

STATE = ".grading/state.json"  # beside the gradebook; .grading/ is git-ignored


def parse(argv):
    p = argparse.ArgumentParser(prog="./course grade", description=(
        "Grade a class: SUBMISSIONS is an nbgrader submitted/ folder (<student>/<assignment>/*.ipynb), "
        "or a Canvas, Blackboard or Moodle export (folder or .zip), or a flat folder or .zip of "
        "<student>_<notebook>.ipynb / <student>.ipynb files."))
    p.add_argument("submissions", type=Path)
    p.add_argument("--course", type=Path, default=AUTOGRADER, help="nbgrader course folder (default: autograder/)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="parallel workers (default: cores)")
    p.add_argument("--timeout", type=int, default=300, help="seconds per whole submission (default 300)")
    p.add_argument("--cell-timeout", type=int, default=None,
                   help="seconds per cell (default: the course's Execute.timeout, at most --timeout)")
    p.add_argument("--memory-mb", type=int, default=3072, help="address-space limit of each kernel (default 3072)")
    p.add_argument("--out", type=Path, default=None, help="where grades.csv and feedback/ go (default COURSE/.grading)")
    p.add_argument("--only-changed", action="store_true", help="grade only new or changed submissions")
    p.add_argument("--lms", choices=sorted(PRESETS), default=None,
                   help="the export's file naming (default: detected from the file names)")
    p.add_argument("--name-regex", default=None, metavar="REGEX",
                   help="any other naming: an nbgrader FileNameCollectorPlugin.named_regexp with groups "
                   "student_id and file_id (optional: timestamp, name), matched on each file's path in the export")
    p.add_argument("--student", action="append", default=None, metavar="ID",
                   help="grade only this student (repeatable); grades.csv still lists the whole gradebook")
    p.add_argument("--canvas-column", default=None, metavar="HEADER",
                   help="assignment column of canvas-import.csv, as Canvas names it, e.g. 'Buffer Donation (123)'")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--no-compile-cache", action="store_true",
                   help="compile every submission's JAX code afresh (default: the grading kernels read, "
                   "never write, a JAX compilation cache of what the course's own solution compiled)")
    p.add_argument("--no-sandbox", action="store_true",
                   help="run the grading kernels without bubblewrap (every CSV row then says 'sandbox off')")
    return p.parse_args(argv)


def digest_files(paths) -> str:
    h = hashlib.sha256()
    for path in sorted(paths, key=lambda p: p.name):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def source_digest(course: Course) -> str:
    """What the assignment is generated from: the source notebooks and the nbgrader config."""
    return digest_files(course.source_notebooks() + [course.root / "nbgrader_config.py"])


def cache_digest(course: Course) -> str:
    """What the compile cache is filled from: the notebooks with hidden tests, run with this JAX."""
    from importlib.metadata import version

    return digest_files(notebooks_with_hidden_tests(course)) + f"-jax-{version('jax')}-jaxlib-{version('jaxlib')}"


def ensure_assignment(course: Course, state: dict, log: Path) -> None:
    """Generate the assignment (release/ and the gradebook's entries) unless
    the state says it was generated from the source as it is now."""
    source_hash = source_digest(course)
    fresh = (state.get("source") == source_hash and course.gradebook.exists() and course.release.is_dir())
    if fresh:
        return
    run_nbgrader(course.root, "generate_assignment", course.assignment, "--force", log=log)
    state["source"] = source_hash
    state["students"] = {}  # a new assignment version: everyone is graded again


@contextlib.contextmanager
def one_transaction(gb):
    """Run nbgrader Gradebook calls as ONE database transaction.

    Gradebook's methods commit after each call. Here `gb.db` is a session
    joined to a connection whose transaction this context owns (SQLAlchemy's
    "join a session into an external transaction" recipe, with
    join_transaction_mode="create_savepoint"): the methods' commits only
    release savepoints, and the work lands (or is rolled back) as a whole
    when the block ends. pysqlite needs its own BEGIN for savepoints to nest
    (SQLAlchemy's documented SQLite workaround)."""
    from sqlalchemy import create_engine, event
    from sqlalchemy.orm import Session

    engine = create_engine(str(gb.engine.url), future=True)

    @event.listens_for(engine, "connect")
    def _no_implicit_transactions(dbapi_connection, _record):
        dbapi_connection.isolation_level = None

    @event.listens_for(engine, "begin")
    def _begin(conn):
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    saved = gb.db
    try:
        with engine.connect() as conn:
            outer = conn.begin()
            gb.db = Session(bind=conn, join_transaction_mode="create_savepoint", autoflush=True)
            try:
                yield gb
                gb.db.flush()
                outer.commit()
            except BaseException:
                outer.rollback()
                raise
            finally:
                gb.db.close()
    finally:
        gb.db = saved
        engine.dispose()


def merge(gb, assignment, result, name=None):
    """Write one student's result into the real gradebook, in one transaction."""
    from nbgrader.api import MissingEntry

    sid = result["student"]
    with one_transaction(gb):
        gb.update_or_create_student(sid, **({"last_name": name} if name else {}))
        try:
            gb.remove_submission(assignment, sid)
        except MissingEntry:
            pass
        ts = result.get("timestamp")
        gb.add_submission(assignment, sid, **({"timestamp": dt.datetime.fromisoformat(ts)} if ts else {}))
        for nbname, nb in result.get("notebooks", {}).items():
            for g in nb["grades"]:
                grade = gb.find_grade(g["name"], nbname, assignment, sid)
                grade.auto_score, grade.manual_score = g["auto_score"], g["manual_score"]
                grade.needs_manual_grade = g["needs_manual_grade"]
            for c in nb["comments"]:
                comment = gb.find_comment(c["name"], nbname, assignment, sid)
                comment.auto_comment, comment.manual_comment = c["auto_comment"], c["manual_comment"]
            if "late_penalty" in nb:
                gb.find_submission_notebook(nbname, assignment, sid).late_submission_penalty = nb["late_penalty"]


def score(g):
    return g["manual_score"] if g["manual_score"] is not None else (g["auto_score"] or 0.0)


def summarize(result, notebooks, max_scores, submitted):
    """One CSV row: per-notebook and total score, max, status, reason."""
    row = {"student": result["student"]}
    reasons, total = [], 0.0
    for nb in notebooks:
        data = result.get("notebooks", {}).get(nb)
        s = sum(score(g) for g in data["grades"]) if data else 0.0
        row[nb] = round(s, 3)
        total += s
        if nb not in submitted and data is not None:
            continue
        if data:
            for name, msg in data.get("solution_errors", {}).items():
                reasons.append(f"{nb}/{name}: your code raised {msg.splitlines()[0][:240] if msg else 'an error'}")
            for g in data["grades"]:
                if score(g) < (g["max_score"] or 0):
                    msg = (g.get("message") or "failed").splitlines()[0].lstrip("\u2718 ")[:240]
                    reasons.append(f"{nb}/{g['name']} ({score(g):g}/{g['max_score']:g}): {msg}")
    missing = [nb for nb in notebooks if nb not in submitted]
    if missing and len(missing) < len(notebooks):
        reasons.append("not submitted: " + ", ".join(missing))
    maximum = sum(max_scores.values())
    full = all(row[nb] >= max_scores.get(nb, 0) for nb in submitted if nb in max_scores)
    status = result.get("status") or ("ok" if result.get("ok") and full else
                                      "partial" if result.get("ok") else "error")
    if result.get("reason"):
        reasons.insert(0, result["reason"])
    penalty = sum(nb.get("late_penalty") or 0.0 for nb in result.get("notebooks", {}).values())
    if penalty:
        reasons.insert(0, f"late submission penalty {penalty:g} (nbgrader)")
    row.update(late_penalty=round(penalty, 3), total=round(total - penalty, 3), max=round(maximum, 3),
               status=status, reason=" | ".join(reasons))
    return row


def feedback_page(row, result, course: Course, out):
    notebooks = course.notebooks
    sid = row["student"]
    parts = [f"<!doctype html><meta charset='utf-8'><title>Feedback: {html.escape(sid)}</title>",
             "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}td,th{border:1px solid #ccc;"
             "padding:.3em .6em;vertical-align:top}table{border-collapse:collapse}.pass{color:#070}.fail{color:#a00}</style>",
             f"<h1>Buffer Donation Lab: feedback for {html.escape(sid)}</h1>",
             f"<p><b>Score: {row['total']:g} / {row['max']:g}</b> (status: {html.escape(row['status'])})</p>"]
    if row.get("late_penalty"):
        parts.append(f"<p class='fail'>Submitted after the due date: {row['late_penalty']:g} points deducted.</p>")
    if result.get("reason"):
        parts.append(f"<p class='fail'>{html.escape(result['reason'])}</p>")
    for nb in notebooks:
        data = result.get("notebooks", {}).get(nb)
        if not data or not data.get("graded"):
            continue
        parts.append(f"<h2>{html.escape(nb)}: {row[nb]:g} points</h2><table><tr><th>check</th><th>points</th>"
                     "<th>result</th><th>message</th></tr>")
        for g in data["grades"]:
            ok = score(g) >= (g["max_score"] or 0)
            parts.append(f"<tr><td>{html.escape(g['name'])}</td><td>{score(g):g} / {g['max_score']:g}</td>"
                         f"<td class='{'pass' if ok else 'fail'}'>{'pass' if ok else 'fail'}</td>"
                         f"<td><pre>{html.escape(g.get('message') or '')}</pre></td></tr>")
        parts.append("</table>")
        nbfb = course.root / "feedback" / sid / course.assignment / f"{nb}.html"
        if nbfb.exists():
            dest = out / "feedback" / sid / f"{nb}.html"
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(nbfb, dest)
            parts.append(f"<p><a href='{html.escape(sid)}/{html.escape(nb)}.html'>Your graded notebook</a></p>")
    (out / "feedback" / f"{sid}.html").write_text("\n".join(parts), encoding="utf-8")


# --- the run, step by step ----------------------------------------------------

@contextlib.contextmanager
def run_lock(state_dir: Path):
    """One `./course grade` per course at a time; the lock file is closed on every exit."""
    import fcntl

    state_dir.mkdir(parents=True, exist_ok=True)
    with open(state_dir / "lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise CourseError(f"another ./course grade is running on {state_dir.parent}; "
                              "wait for it to finish") from None
        yield


def write_atomic(path: Path, text: str) -> None:
    """Write a file so that a reader (or a crash) sees the old or the new content, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def load_state(path: Path, say) -> dict:
    if not path.exists():
        return {}
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(state, dict) or not isinstance(state.get("students", {}), dict):
            raise ValueError("not a JSON object of the expected shape")
        return state
    except (ValueError, OSError, UnicodeDecodeError) as exc:
        say(f"warning: {path} is unreadable ({str(exc).splitlines()[0][:120]}); rebuilding it from the "
            "gradebook (every student is graded again)")
        return {}


def save_state(path: Path, state: dict) -> None:
    write_atomic(path, json.dumps(state, indent=1))


def prepare(course: Course, out: Path, say, compile_cache: bool = True) -> dict:
    """A run's first step on a course: read the state file (or start it
    afresh), generate the assignment if its source changed, save the state;
    with `compile_cache`, fill the compile cache anew if it is missing or
    the notebooks with hidden tests (or JAX) changed since it was filled
    (compile_cache.py). Returns the state."""
    path = course.root / STATE
    state = load_state(path, say)
    ensure_assignment(course, state, out / "logs" / "generate_assignment.log")
    state.setdefault("students", {})
    save_state(path, state)
    if compile_cache:
        cache, digest = course.root / CACHE, cache_digest(course)
        if filled_from(cache) != digest:
            say(fill(course, cache, digest))
    return state


def late_timestamp(files: dict, duedate, notes: list, sid: str):
    """nbgrader's timestamp for a student's chosen files: the latest LMS
    timestamp; for a file the LMS only flags late (Canvas's _LATE_, no time),
    one second after the due date, so nbgrader's LateSubmissionPlugin sees it late."""
    stamps = [f.timestamp for f in files.values() if f.timestamp]
    if stamps:
        return max(stamps)
    if any(f.late for f in files.values()):
        if duedate is None:
            notes.append(f"{sid}: flagged late by the LMS, but the assignment has no due date in the "
                         "gradebook; no late penalty can apply")
            return None
        return duedate + dt.timedelta(seconds=1)
    return None


class Run:
    """One `./course grade` run; main() calls its steps in order."""

    def __init__(self, args, say):
        self.args, self.say = args, say
        self.C = Course(args.course.resolve())
        self.A = self.C.assignment
        self.out = (args.out or self.C.root / ".grading").resolve()
        args.out_dir = self.out
        self.state_path = self.C.root / STATE
        self.rows, self.failed = {}, False
        self.cell_timeout = min(args.cell_timeout or self.C.cell_timeout(), args.timeout)

    def prepare(self):
        self.state = prepare(self.C, self.out, self.say, compile_cache=not self.args.no_compile_cache)
        self.students_state = self.state["students"]

    def collect(self, workdir: Path):
        """Find every submission (before nbgrader runs: bad input fails in a moment)."""
        src = self.args.submissions
        self.found, self.preset = collect(src.resolve() if src.exists() else src, self.C.notebooks, self.A,
                                          workdir, lms=self.args.lms, regex=self.args.name_regex)
        for line in self.found.notes:
            self.say(f"note: {line}")
        for line in self.found.problems:
            self.say(f"problem: {line}")
        self.failed = bool(self.found.problems)

    def read_gradebook(self):
        from nbgrader.api import Gradebook

        with Gradebook(self.C.db_url, self.C.course_id) as gb:
            a = gb.find_assignment(self.A)
            self.duedate = a.duedate
            self.max_scores = {nb.name: nb.max_score for nb in a.notebooks}
            self.in_gradebook = {s.student.id for s in a.submissions}

    def plan(self):
        """Which students to grade, their nbgrader timestamps, invalid notebooks."""
        students = self.found.students
        if self.args.student:
            missing = [s for s in self.args.student if s not in students]
            if missing:
                raise CourseError(f"--student {', '.join(missing)}: not in {self.args.submissions} "
                                  f"(found {len(students)} students, e.g. {', '.join(sorted(students)[:5])})")
            students = {s: students[s] for s in self.args.student}
        self.timestamps, self.invalid, self.hashes = {}, {}, {}
        for sid, files in students.items():
            notes = []
            self.timestamps[sid] = late_timestamp(files, self.duedate, notes, sid)
            for line in notes:
                self.say(f"note: {line}")
            ts = self.timestamps[sid].isoformat() if self.timestamps[sid] else ""
            self.hashes[sid] = (digest_files([f.path for f in files.values()]) + ":" + ts + ":"
                                + self.state["source"])
            for nb, f in list(files.items()):
                try:
                    read_notebook(f.path)
                except CourseError as exc:
                    self.invalid.setdefault(sid, []).append(f"{f.rel}: {str(exc).split(': ', 1)[-1]}")
                    del files[nb]
        self.todo = [sid for sid in sorted(students)
                     if not (self.args.only_changed and sid in self.in_gradebook
                             and self.students_state.get(sid, {}).get("hash") == self.hashes[sid])]
        self.skipped = sorted(set(students) - set(self.todo))

    def stage(self):
        self.repaired, submitted = {}, self.C.root / "submitted"
        for sid in self.todo:
            notes = stage(self.found.students[sid], submitted, self.A, timestamp=self.timestamps[sid],
                          release_dir=self.C.release)
            if notes:
                self.repaired[sid] = notes
        self.gradable = [sid for sid in self.todo if any((submitted / sid / self.A).glob("*.ipynb"))]

    def backup(self):
        db = self.C.gradebook
        self.backup_path = db.with_name(f"gradebook.db.bak-{dt.datetime.now():%Y%m%d-%H%M%S}")
        shutil.copyfile(db, self.backup_path)
        for old in sorted(self.C.root.glob("gradebook.db.bak-*"))[:-3]:
            old.unlink()  # keep the three newest backups

    def on_result(self, result):
        from nbgrader.api import Gradebook

        sid = result["student"]
        if result.get("log"):
            log = self.out / "logs" / "students" / f"{sid}.log"
            write_atomic(log, result.pop("log"))  # the instructor's; the learner sees the reason only
        extra = self.invalid.get(sid, []) + self.found.student_problems.get(sid, []) + self.repaired.get(sid, [])
        if sid in self.invalid:
            result["ok"] = False
        if extra:
            result["reason"] = "; ".join(extra) + (" | " + result["reason"] if result.get("reason") else "")
        name = self.found.names.get(sid)
        with Gradebook(self.C.db_url, self.C.course_id) as gb, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            merge(gb, self.A, result, name=name)
        submitted = set(self.found.students.get(sid, {})) | {
            nb for nb in self.C.notebooks if (self.C.root / "submitted" / sid / self.A / f"{nb}.ipynb").exists()}
        row = summarize(result, self.C.notebooks, self.max_scores, submitted)
        if (sid in self.invalid or sid in self.found.student_problems) and row["status"] == "ok":
            row["status"] = "partial"
        if self.args.no_sandbox:  # said on every row: these grades came from unsandboxed kernels
            row["reason"] = "sandbox off" + (" | " + row["reason"] if row["reason"] else "")
        row["files"] = " ".join(f.rel for f in self.found.students.get(sid, {}).values())
        if name:
            row["name"] = name
        self.rows[sid] = row
        feedback_page(row, result, self.C, self.out)
        self.students_state[sid] = {"hash": self.hashes.get(sid, ""), "row": row}
        self.save_state()

    def grade(self):
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "feedback").mkdir(exist_ok=True)
        for sid in self.todo:
            if sid not in self.gradable:  # nothing valid to grade
                self.on_result({"student": sid, "notebooks": {}, "ok": False, "status": "invalid", "reason": ""})
        bar = None if self.args.no_progress else progress_bar(len(self.gradable))
        self.start = time.monotonic()
        try:
            if self.gradable:
                run_pool(self.gradable, self.C, self.args, self.cell_timeout, self.on_result,
                         (bar.update if bar else lambda: None))
        finally:
            if bar:
                bar.close()

    def save_state(self):
        save_state(self.state_path, self.state)

    def write_reports(self):
        """grades.csv (and canvas-import.csv) from the WHOLE gradebook, whatever this run graded."""
        from nbgrader.api import Gradebook

        nbs = self.C.notebooks
        rows, checks = [], []
        with Gradebook(self.C.db_url, self.C.course_id) as gb:
            a = gb.find_assignment(self.A)
            for nb in a.notebooks:
                checks += [f"{nb.name}:{c.name}" for c in nb.grade_cells]
            for sub in sorted(a.submissions, key=lambda s: s.student.id):
                sid = sub.student.id
                saved = self.students_state.get(sid, {}).get("row", {})
                row = {"student": sid, "name": saved.get("name") or sub.student.last_name or "",
                       "timestamp": sub.timestamp.isoformat(sep=" ") if sub.timestamp else "",
                       "late_penalty": round(sub.late_submission_penalty or 0.0, 3)}
                for nb in sub.notebooks:
                    row[nb.name] = round(nb.score, 3)
                    for g in nb.grades:
                        row[f"{nb.name}:{g.name}"] = round(g.score, 3)
                points = sum(row.get(nb, 0.0) for nb in nbs)
                row.update(total=round(points - row["late_penalty"], 3), max=round(sub.max_score, 3),
                           status=saved.get("status") or ("ok" if points >= sub.max_score else "partial"),
                           reason=saved.get("reason", ""), files=saved.get("files", ""))
                if row["late_penalty"] and "late" not in row["reason"]:
                    row["reason"] = (f"late submission penalty {row['late_penalty']:g} (nbgrader)"
                                     + (" | " + row["reason"] if row["reason"] else ""))
                rows.append(row)
        fields = ["student", "name", *nbs, "late_penalty", "total", "max", "status", "reason", "timestamp",
                  "files", *checks]
        write_atomic(self.out / "grades.csv", csv_text(fields, rows))
        header = self.args.canvas_column or f"{self.A}"
        canvas = [{"Student": r["name"] or r["student"], "ID": r["student"], "SIS User ID": "",
                   "SIS Login ID": "", "Section": "", header: r["total"]} for r in rows]
        points = {"Student": "    Points Possible", "ID": "", "SIS User ID": "", "SIS Login ID": "",
                  "Section": "", header: rows[0]["max"] if rows else ""}
        write_atomic(self.out / "canvas-import.csv",
                     csv_text(["Student", "ID", "SIS User ID", "SIS Login ID", "Section", header],
                              [points, *canvas]))
        return rows


def progress_bar(total: int):
    """tqdm's bar on stderr, without its monitor thread (tqdm starts one per
    process by default): the grading workers are forked from this process,
    which must run one thread then (pool.py)."""
    from tqdm import tqdm

    tqdm.monitor_interval = 0
    return tqdm(total=total, unit="student", desc="grading", file=sys.stderr)


def csv_text(fields, rows) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: row.get(k, "") for k in fields})
    return buf.getvalue()


def main(argv) -> int:
    args = parse(argv)
    if not args.no_sandbox:
        from .sandbox import probe

        problem = probe()
        if problem:
            raise CourseError(problem)
    for name in ("workers", "timeout", "memory_mb"):
        if getattr(args, name) < 1:
            raise CourseError(f"--{name.replace('_', '-')} must be at least 1")
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    run = Run(args, say)
    with run_lock(run.state_path.parent), tempfile.TemporaryDirectory(prefix="donation-lab-run-") as work:
        run.collect(Path(work))
        run.prepare()
        run.read_gradebook()
        run.plan()
        run.stage()
        run.backup()
        try:
            run.grade()
        finally:
            rows = run.write_reports()
            run.save_state()
    elapsed = time.monotonic() - run.start
    print(f"graded {len(run.gradable)} submission(s) in {elapsed:.1f}s with {args.workers} worker(s)"
          + (f", {len(run.skipped)} unchanged skipped" if run.skipped else "")
          + f"; {len(rows)} student(s) in grades: {run.out / 'grades.csv'} (Canvas import: "
          f"{run.out / 'canvas-import.csv'}); feedback: {run.out / 'feedback'}; gradebook: {run.C.gradebook} "
          f"(backup {run.backup_path.name})")
    if run.failed:
        say(f"course: error: {len(run.found.problems)} file(s) could not be graded as given (see 'problem:' "
            "lines above); everything else was graded")
        return 1
    return 0
