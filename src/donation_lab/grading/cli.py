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
import csv
import datetime as dt
import hashlib
import html
import json
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from multiprocessing.connection import wait
from pathlib import Path

from ..course import CourseError, nbgrader_command, read_notebook, venv_env
from ..paths import AUTOGRADER
from .collect import ASSIGNMENT, collect, stage

STATE = ".grading/state.json"  # beside the gradebook; .grading/ is git-ignored


def parse(argv):
    p = argparse.ArgumentParser(prog="./course grade", description=(
        "Grade a class: SUBMISSIONS is an nbgrader submitted/ folder (<student>/buffer-donation/*.ipynb), "
        "a flat folder of .ipynb files, or a .zip of them (<student>_<notebook>.ipynb or <student>.ipynb)."))
    p.add_argument("submissions", type=Path)
    p.add_argument("--course", type=Path, default=AUTOGRADER, help="nbgrader course folder (default: autograder/)")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="parallel workers (default: cores)")
    p.add_argument("--timeout", type=int, default=300, help="seconds per whole submission (default 300)")
    p.add_argument("--cell-timeout", type=int, default=None,
                   help="seconds per cell (default: the course's Execute.timeout, at most --timeout)")
    p.add_argument("--memory-mb", type=int, default=3072, help="address-space limit of each kernel (default 3072)")
    p.add_argument("--out", type=Path, default=None, help="where grades.csv and feedback/ go (default COURSE/.grading)")
    p.add_argument("--only-changed", action="store_true", help="grade only new or changed submissions")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--no-compile-cache", action="store_true",
                   help="compile every submission's JAX code afresh (default: each worker keeps a JAX "
                   "compilation cache for this run, so code many students share compiles once)")
    return p.parse_args(argv)


def digest_files(paths) -> str:
    h = hashlib.sha256()
    for path in sorted(paths, key=lambda p: p.name):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def config_timeout(course: Path) -> int:
    from traitlets.config.loader import PyFileConfigLoader

    cfg = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    return int(cfg.Execute.get("timeout", 30))


def ensure_assignment(course: Path, source_hash: str, state: dict) -> None:
    fresh = (state.get("source") == source_hash and (course / "gradebook.db").exists()
             and (course / "release" / ASSIGNMENT).is_dir())
    if fresh:
        return
    r = subprocess.run(nbgrader_command("generate_assignment", ASSIGNMENT, "--force"), cwd=course,
                       env=venv_env(), capture_output=True, text=True)
    if r.returncode != 0:
        lines = [ln for ln in (r.stdout + r.stderr).splitlines() if "ERROR" in ln]
        raise CourseError("nbgrader generate_assignment failed: " + (lines[-1] if lines else f"exit {r.returncode}"))
    state["source"] = source_hash
    state["students"] = {}  # a new assignment version: everyone is graded again


class Pool:
    """N long-lived workers; each can be killed (with its kernel) and replaced."""

    def __init__(self, n, course, dbdir, cell_timeout, memory_mb, kernel_dir, logs, compile_cache=True):
        self.ctx = mp.get_context("spawn")
        self.args = (course, dbdir, cell_timeout, memory_mb, kernel_dir)
        self.logs = logs
        self.compile_cache = compile_cache
        self.slots = [self._start(i) for i in range(n)]

    def _start(self, i):
        from .worker import serve

        course, dbdir, cell_timeout, memory_mb, kernel_dir = self.args
        db = Path(dbdir) / f"worker-{i}.db"
        shutil.copyfile(Path(course) / "gradebook.db", db)
        cache = ""
        if self.compile_cache:
            # a fresh folder for a fresh worker: one that was killed may have
            # left an entry half-written
            cache = Path(dbdir) / f"jax-cache-{i}"
            shutil.rmtree(cache, ignore_errors=True)
            cache.mkdir()
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=serve, args=(child, str(course), str(db), cell_timeout, memory_mb, kernel_dir,
                                      str(Path(self.logs) / f"worker-{i}.log"), str(cache)),
                                daemon=True)
        proc.start()
        child.close()
        return {"i": i, "proc": proc, "conn": parent, "ready": False, "student": None, "since": None}

    def kill(self, slot):
        import psutil

        try:
            procs = psutil.Process(slot["proc"].pid).children(recursive=True)
        except psutil.Error:
            procs = []
        for p in procs:
            try:
                p.kill()
            except psutil.Error:
                pass
        slot["proc"].kill()
        slot["proc"].join(5)
        slot["conn"].close()

    def replace(self, slot):
        self.kill(slot)
        new = self._start(slot["i"])
        self.slots[self.slots.index(slot)] = new

    def close(self):
        for slot in self.slots:
            try:
                slot["conn"].send(None)
            except OSError:
                pass
        for slot in self.slots:
            slot["proc"].join(10)
            if slot["proc"].is_alive():
                self.kill(slot)


def run_pool(students, course, args, cell_timeout, on_result, progress):
    with tempfile.TemporaryDirectory(prefix="donation-lab-grade-") as tmp:
        from .worker import make_kernelspec

        kernel_dir = make_kernelspec(Path(tmp) / "jupyter", sys.executable)
        logs = Path(args.out_dir) / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        pool = Pool(max(1, min(args.workers, len(students))), course, tmp, cell_timeout, args.memory_mb,
                    str(kernel_dir), str(logs), compile_cache=not args.no_compile_cache)
        queue = list(students)
        pending = len(queue)
        try:
            while pending:
                for slot in pool.slots:
                    if slot["ready"] and slot["student"] is None and queue:
                        slot["student"], slot["since"] = queue.pop(0), time.monotonic()
                        slot["conn"].send(slot["student"])
                conns = {slot["conn"]: slot for slot in pool.slots}
                sentinels = {slot["proc"].sentinel: slot for slot in pool.slots}
                ready = wait(list(conns) + list(sentinels), timeout=1.0)
                now = time.monotonic()
                for obj in ready:
                    slot = conns.get(obj) or sentinels.get(obj)
                    if slot not in pool.slots:
                        continue
                    if obj in conns:
                        try:
                            kind, payload = slot["conn"].recv()
                        except (EOFError, OSError):
                            kind, payload = "dead", None
                    else:
                        if slot["conn"].poll():
                            continue  # read the message first
                        kind, payload = "dead", None
                    if kind == "ready":
                        slot["ready"] = True
                    elif kind == "done":
                        slot["student"] = None
                        pending -= 1
                        on_result(payload)
                        progress()
                    else:  # the worker process died
                        student = slot["student"]
                        pool.replace(slot)
                        if student is not None:
                            pending -= 1
                            on_result({"student": student, "notebooks": {}, "ok": False, "status": "error",
                                       "reason": "the grading process died (out of memory or killed)"})
                            progress()
                for slot in list(pool.slots):
                    if slot["student"] is not None and now - slot["since"] > args.timeout:
                        student = slot["student"]
                        pool.replace(slot)
                        pending -= 1
                        on_result({"student": student, "notebooks": {}, "ok": False, "status": "timeout",
                                   "reason": f"grading took longer than {args.timeout} s (whole-submission "
                                   "time limit); no score could be recorded"})
                        progress()
        finally:
            pool.close()


def merge(gb, result, timestamp=None):
    """Write one student's result into the real gradebook, in one transaction."""
    from nbgrader.api import MissingEntry

    sid, db = result["student"], gb.db
    db.commit = db.flush  # Gradebook methods commit after each call; make them one transaction
    try:
        gb.update_or_create_student(sid)
        try:
            gb.remove_submission(ASSIGNMENT, sid)
        except MissingEntry:
            pass
        ts = result.get("timestamp") or timestamp
        gb.add_submission(ASSIGNMENT, sid, **({"timestamp": dt.datetime.fromisoformat(ts)} if ts else {}))
        for nbname, nb in result.get("notebooks", {}).items():
            for g in nb["grades"]:
                grade = gb.find_grade(g["name"], nbname, ASSIGNMENT, sid)
                grade.auto_score, grade.manual_score = g["auto_score"], g["manual_score"]
                grade.needs_manual_grade = g["needs_manual_grade"]
            for c in nb["comments"]:
                comment = gb.find_comment(c["name"], nbname, ASSIGNMENT, sid)
                comment.auto_comment, comment.manual_comment = c["auto_comment"], c["manual_comment"]
        del db.commit
        db.commit()
    except Exception:
        db.__dict__.pop("commit", None)
        db.rollback()
        raise


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
    row.update(total=round(total, 3), max=round(maximum, 3), status=status, reason=" | ".join(reasons))
    return row


def feedback_page(row, result, notebooks, course, out):
    sid = row["student"]
    parts = [f"<!doctype html><meta charset='utf-8'><title>Feedback: {html.escape(sid)}</title>",
             "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}td,th{border:1px solid #ccc;"
             "padding:.3em .6em;vertical-align:top}table{border-collapse:collapse}.pass{color:#070}.fail{color:#a00}</style>",
             f"<h1>Buffer Donation Lab: feedback for {html.escape(sid)}</h1>",
             f"<p><b>Score: {row['total']:g} / {row['max']:g}</b> (status: {html.escape(row['status'])})</p>"]
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
        nbfb = course / "feedback" / sid / ASSIGNMENT / f"{nb}.html"
        if nbfb.exists():
            dest = out / "feedback" / sid / f"{nb}.html"
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(nbfb, dest)
            parts.append(f"<p><a href='{html.escape(sid)}/{html.escape(nb)}.html'>Your graded notebook</a></p>")
    (out / "feedback" / f"{sid}.html").write_text("\n".join(parts), encoding="utf-8")


def main(argv) -> int:
    args = parse(argv)
    course = args.course.resolve()
    if not (course / "nbgrader_config.py").is_file() or not (course / "source" / ASSIGNMENT).is_dir():
        raise CourseError(f"{course}: not an nbgrader course (needs nbgrader_config.py and source/{ASSIGNMENT}/)")
    for name in ("workers", "timeout", "memory_mb"):
        if getattr(args, name) < 1:
            raise CourseError(f"--{name.replace('_', '-')} must be at least 1")
    sources = sorted((course / "source" / ASSIGNMENT).glob("*.ipynb"))
    notebooks = [p.stem for p in sources]
    exercise = notebooks[-1]
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    found = collect(args.submissions.resolve() if args.submissions.exists() else args.submissions,
                    notebooks, exercise, warn=say)
    out = (args.out or course / ".grading").resolve()
    args.out_dir = out
    cell_timeout = min(args.cell_timeout or config_timeout(course), args.timeout)

    state_path = course / STATE
    state_path.parent.mkdir(exist_ok=True)
    import fcntl

    lock = open(state_path.parent / "lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        raise CourseError(f"another ./course grade is running on {course}; wait for it to finish") from None
    state = json.loads(state_path.read_text()) if state_path.exists() else {}
    ensure_assignment(course, digest_files(sources + [course / "nbgrader_config.py"]), state)
    students_state = state.setdefault("students", {})

    # validate notebooks; invalid ones are reported and not graded
    invalid, hashes = {}, {}
    for sid, files in found.items():
        hashes[sid] = digest_files(files.values()) + ":" + state["source"]
        for nb, path in list(files.items()):
            try:
                read_notebook(path)
            except CourseError as exc:
                invalid.setdefault(sid, []).append(str(exc))
                del files[nb]
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", "buffer-donation-lab") as gb:
        in_gradebook = {s.student.id for s in gb.find_assignment(ASSIGNMENT).submissions}
    todo = [sid for sid in sorted(found)
            if not (args.only_changed and sid in in_gradebook
                    and students_state.get(sid, {}).get("hash") == hashes[sid])]
    skipped = sorted(set(found) - set(todo))
    repaired = stage(found, course / "submitted", students=set(todo), release_dir=course / "release" / ASSIGNMENT)

    from nbgrader.api import Gradebook

    db_path = course / "gradebook.db"
    backup = db_path.with_name(f"gradebook.db.bak-{dt.datetime.now():%Y%m%d-%H%M%S}")
    shutil.copyfile(db_path, backup)
    for old in sorted(course.glob("gradebook.db.bak-*"))[:-3]:
        old.unlink()  # keep the three newest backups

    with Gradebook(f"sqlite:///{db_path}", "buffer-donation-lab") as gb:
        max_scores = {nb.name: nb.max_score for nb in gb.find_assignment(ASSIGNMENT).notebooks}
    out.mkdir(parents=True, exist_ok=True)
    (out / "feedback").mkdir(exist_ok=True)
    rows = {}

    def on_result(result):
        sid = result["student"]
        if sid in invalid:
            result["ok"] = False
            result["reason"] = "; ".join(invalid[sid]) + (" | " + result["reason"] if result.get("reason") else "")
        if sid in repaired:
            result["reason"] = "; ".join(repaired[sid]) + (" | " + result["reason"] if result.get("reason") else "")
        with Gradebook(f"sqlite:///{db_path}", "buffer-donation-lab") as gb, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            merge(gb, result)
        row = summarize(result, notebooks, max_scores, set(found[sid]) | {Path(m.split(':')[0]).stem
                                                                             for m in invalid.get(sid, [])})
        if sid in invalid and row["status"] == "ok":
            row["status"] = "partial"
        rows[sid] = row
        feedback_page(row, result, notebooks, course, out)
        students_state[sid] = {"hash": hashes[sid], "row": row}
        state_path.write_text(json.dumps(state, indent=1))

    gradable = [sid for sid in todo if found[sid]]
    for sid in todo:
        if not found[sid]:  # nothing valid to grade
            on_result({"student": sid, "notebooks": {}, "ok": False, "status": "invalid", "reason": ""})

    bar = None
    if not args.no_progress:
        from tqdm import tqdm

        bar = tqdm(total=len(gradable), unit="student", desc="grading", file=sys.stderr)
    start = time.monotonic()
    if gradable:
        run_pool(gradable, course, args, cell_timeout, on_result, (bar.update if bar else lambda: None))
    if bar:
        bar.close()
    for sid in skipped:
        rows[sid] = students_state[sid]["row"]
    state_path.write_text(json.dumps(state, indent=1))

    fields = ["student", *notebooks, "total", "max", "status", "reason"]
    with open(out / "grades.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        for sid in sorted(rows):
            writer.writerow({k: rows[sid].get(k, "") for k in fields})
    elapsed = time.monotonic() - start
    print(f"graded {len(gradable)} submission(s) in {elapsed:.1f}s with {args.workers} worker(s)"
          + (f", {len(skipped)} unchanged skipped" if skipped else "")
          + f"; grades: {out / 'grades.csv'}; feedback: {out / 'feedback'}; gradebook: {db_path} "
          f"(backup {backup.name})")
    return 0
