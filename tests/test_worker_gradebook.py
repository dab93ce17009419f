"""A grading worker's own copy of the gradebook commits without waiting for the disk (SQLite synchronous=OFF, its
journal kept); every other database the process opens, the course's real gradebook included, keeps SQLite's
default."""
import ast
import sqlite3
import subprocess
import sys

IN_A_WORKER = """
import multiprocessing as mp, sys
from pathlib import Path
from sqlalchemy import create_engine, text

def synchronous(url):
    engine = create_engine(url)
    with engine.connect() as conn:
        conn.execute(text("CREATE TABLE IF NOT EXISTS t (x INTEGER)"))
        conn.execute(text("INSERT INTO t VALUES (1)"))
        conn.commit()
        found = conn.execute(text("PRAGMA synchronous")).scalar(), conn.execute(text("PRAGMA journal_mode")).scalar()
    engine.dispose()
    return found

def worker(copy, real, conn):
    from donation_course.grading.executors.worker import unsynced_gradebook

    unsynced_gradebook(Path(copy))
    conn.send((synchronous(f"sqlite:///{copy}"), synchronous(f"sqlite:///{real}")))

parent, child = mp.Pipe()
proc = mp.get_context("fork").Process(target=worker, args=(sys.argv[1], sys.argv[2], child))
proc.start()
print(repr(parent.recv()))
proc.join(30)
print(repr(synchronous(f"sqlite:///{sys.argv[2]}")))  # the parent never had the listener
"""


def test_only_the_workers_copy_of_the_gradebook_is_unsynced(tmp_path):
    copy, real = tmp_path / "worker-0.db", tmp_path / "gradebook.db"
    for db in (copy, real):
        sqlite3.connect(db).close()
    # a fresh one-thread process that forks a worker, as the run does
    out = subprocess.run([sys.executable, "-c", IN_A_WORKER, str(copy), str(real)], capture_output=True, text=True,
                         timeout=120)
    lines = out.stdout.splitlines()
    assert len(lines) == 2, out.stderr[-2000:]
    (copy_sync, copy_journal), (real_sync, real_journal) = ast.literal_eval(lines[0])
    assert copy_sync == 0 and copy_journal == real_journal == "delete"
    assert real_sync == 2  # FULL, SQLite's default: untouched
    assert ast.literal_eval(lines[1])[0] == 2
    assert sqlite3.connect(copy).execute("SELECT count(*) FROM t").fetchone() == (1,)
