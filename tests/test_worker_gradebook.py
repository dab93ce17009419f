"""A grading worker's own copy of the gradebook commits without waiting for the disk (SQLite synchronous=OFF, its
journal kept); every other database the process opens, the course's real gradebook included, keeps SQLite's
default."""
import ast
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

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


SHARED_ENGINE = """
import multiprocessing as mp, sys, warnings
warnings.simplefilter("ignore")
from nbgrader.api import Gradebook

def engines(urls):
    seen, kept = [], []  # (kept alive: a freed engine's id could be the next one's)
    for i, url in enumerate(urls):
        gb = Gradebook(url)
        if i == 0:
            gb.add_student("ann")
        found = gb.find_student("ann").id if i < 2 else None
        gb.close()
        kept.append(gb.engine)
        seen.append((id(gb.engine), found, gb.engine.pool.checkedin(), gb.engine.pool.checkedout()))
    return seen

def worker(urls, conn):
    from donation_course.grading.executors.worker import one_engine_per_database

    one_engine_per_database()
    try:
        conn.send(engines(urls))
    except Exception as exc:
        conn.send(repr(exc))

urls = sys.argv[1:]
parent, child = mp.Pipe()
proc = mp.get_context("fork").Process(target=worker, args=([urls[0], urls[0], urls[1]], child))
proc.start()
print(repr(parent.recv() if parent.poll(60) else "no answer"))
proc.join(30)
print(repr(engines([urls[2], urls[2]])))  # the parent keeps nbgrader's way
"""


def test_a_workers_gradebooks_on_one_database_share_one_engine_and_keep_no_connection_open(tmp_path):
    """worker.one_engine_per_database: in a grading worker every nbgrader Gradebook on one database uses one
    SQLAlchemy engine (its compiled statements kept), each close() still closes its connections, and what one
    wrote the next reads; another database gets its own engine, and a process that never called it (the run's)
    gets a new engine per Gradebook, as nbgrader makes them."""
    urls = [f"sqlite:///{tmp_path / name}" for name in ("worker-0.db", "other.db", "gradebook.db")]
    # (a new gradebook is stamped by nbgrader's `alembic` command: the environment's bin/ on PATH, as ./course runs)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    out = subprocess.run([sys.executable, "-c", SHARED_ENGINE, *urls], capture_output=True, text=True, timeout=120,
                         env=env)
    lines = out.stdout.splitlines()
    assert len(lines) == 2, out.stderr[-2000:]
    (first, second, other), (plain_first, plain_second) = map(ast.literal_eval, lines)
    assert first[0] == second[0] != other[0]  # one engine for the worker's database, another for another
    assert first[1] == second[1] == "ann"  # the second Gradebook reads what the first wrote
    assert all(seen[2:] == (0, 0) for seen in (first, second, other))  # closed: no connection left open
    assert plain_first[0] != plain_second[0] and plain_second[1] == "ann"  # elsewhere: nbgrader's own engines
