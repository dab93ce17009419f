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
import os
import shutil
import sys
import time
import warnings
from pathlib import Path

from ..course import AUTOGRADER, Course, CourseError, read_notebook, run_nbgrader
from .collect import collect, stage
from .pool import run_pool

STATE = ".grading/state.json"  # beside the gradebook; .grading/ is git-ignored


def parse(argv):
    p = argparse.ArgumentParser(prog="./course grade", description=(
        "Grade a class: SUBMISSIONS is an nbgrader submitted/ folder (<student>/<assignment>/*.ipynb), "
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
    p.add_argument("--no-sandbox", action="store_true",
                   help="run the grading kernels without bubblewrap (every CSV row then says 'sandbox off')")
    return p.parse_args(argv)


def digest_files(paths) -> str:
    h = hashlib.sha256()
    for path in sorted(paths, key=lambda p: p.name):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def ensure_assignment(course: Course, source_hash: str, state: dict, log: Path) -> None:
    fresh = (state.get("source") == source_hash and course.gradebook.exists() and course.release.is_dir())
    if fresh:
        return
    run_nbgrader(course.root, "generate_assignment", course.assignment, "--force", log=log)
    state["source"] = source_hash
    state["students"] = {}  # a new assignment version: everyone is graded again


def merge(gb, assignment, result, timestamp=None):
    """Write one student's result into the real gradebook, in one transaction."""
    from nbgrader.api import MissingEntry

    sid, db = result["student"], gb.db
    db.commit = db.flush  # Gradebook methods commit after each call; make them one transaction
    try:
        gb.update_or_create_student(sid)
        try:
            gb.remove_submission(assignment, sid)
        except MissingEntry:
            pass
        ts = result.get("timestamp") or timestamp
        gb.add_submission(assignment, sid, **({"timestamp": dt.datetime.fromisoformat(ts)} if ts else {}))
        for nbname, nb in result.get("notebooks", {}).items():
            for g in nb["grades"]:
                grade = gb.find_grade(g["name"], nbname, assignment, sid)
                grade.auto_score, grade.manual_score = g["auto_score"], g["manual_score"]
                grade.needs_manual_grade = g["needs_manual_grade"]
            for c in nb["comments"]:
                comment = gb.find_comment(c["name"], nbname, assignment, sid)
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


def feedback_page(row, result, course: Course, out):
    notebooks = course.notebooks
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
        nbfb = course.root / "feedback" / sid / course.assignment / f"{nb}.html"
        if nbfb.exists():
            dest = out / "feedback" / sid / f"{nb}.html"
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(nbfb, dest)
            parts.append(f"<p><a href='{html.escape(sid)}/{html.escape(nb)}.html'>Your graded notebook</a></p>")
    (out / "feedback" / f"{sid}.html").write_text("\n".join(parts), encoding="utf-8")


def main(argv) -> int:
    args = parse(argv)
    if not args.no_sandbox:
        from .sandbox import probe

        if probe():
            raise CourseError(probe())
    C = Course(args.course.resolve())
    course, ASSIGNMENT = C.root, C.assignment
    for name in ("workers", "timeout", "memory_mb"):
        if getattr(args, name) < 1:
            raise CourseError(f"--{name.replace('_', '-')} must be at least 1")
    sources = C.source_notebooks()
    notebooks = C.notebooks
    exercise = C.exercise
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    found = collect(args.submissions.resolve() if args.submissions.exists() else args.submissions,
                    notebooks, exercise, ASSIGNMENT, warn=say)
    out = (args.out or course / ".grading").resolve()
    args.out_dir = out
    cell_timeout = min(args.cell_timeout or C.cell_timeout(), args.timeout)

    state_path = course / STATE
    state_path.parent.mkdir(exist_ok=True)
    import fcntl

    lock = open(state_path.parent / "lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        raise CourseError(f"another ./course grade is running on {course}; wait for it to finish") from None
    state = json.loads(state_path.read_text()) if state_path.exists() else {}
    ensure_assignment(C, digest_files(sources + [course / "nbgrader_config.py"]), state, out / "logs" / "generate_assignment.log")
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

    with Gradebook(C.db_url, C.course_id) as gb:
        in_gradebook = {s.student.id for s in gb.find_assignment(ASSIGNMENT).submissions}
    todo = [sid for sid in sorted(found)
            if not (args.only_changed and sid in in_gradebook
                    and students_state.get(sid, {}).get("hash") == hashes[sid])]
    skipped = sorted(set(found) - set(todo))
    repaired = stage(found, course / "submitted", ASSIGNMENT, students=set(todo), release_dir=C.release)

    from nbgrader.api import Gradebook

    db_path = course / "gradebook.db"
    backup = db_path.with_name(f"gradebook.db.bak-{dt.datetime.now():%Y%m%d-%H%M%S}")
    shutil.copyfile(db_path, backup)
    for old in sorted(course.glob("gradebook.db.bak-*"))[:-3]:
        old.unlink()  # keep the three newest backups

    with Gradebook(C.db_url, C.course_id) as gb:
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
        with Gradebook(C.db_url, C.course_id) as gb, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            merge(gb, ASSIGNMENT, result)
        row = summarize(result, notebooks, max_scores, set(found[sid]) | {Path(m.split(':')[0]).stem
                                                                             for m in invalid.get(sid, [])})
        if sid in invalid and row["status"] == "ok":
            row["status"] = "partial"
        if args.no_sandbox:  # said on every row: these grades came from unsandboxed kernels
            row["reason"] = "sandbox off" + (" | " + row["reason"] if row["reason"] else "")
        rows[sid] = row
        feedback_page(row, result, C, out)
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
        run_pool(gradable, C, args, cell_timeout, on_result, (bar.update if bar else lambda: None))
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
