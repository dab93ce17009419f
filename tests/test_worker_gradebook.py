"""A grading worker's own copy of the gradebook commits without waiting for the disk (SQLite synchronous=OFF, its
journal kept); every other database the process opens, the course's real gradebook included, keeps SQLite's
default."""
import multiprocessing as mp
import sqlite3

from sqlalchemy import create_engine, text


def _synchronous(url: str) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            conn.execute(text("CREATE TABLE IF NOT EXISTS t (x INTEGER)"))
            conn.execute(text("INSERT INTO t VALUES (1)"))
            conn.commit()
            return conn.execute(text("PRAGMA synchronous")).scalar(), conn.execute(text("PRAGMA journal_mode")).scalar()
    finally:
        engine.dispose()


def _in_a_worker(copy, real, out) -> None:
    from pathlib import Path

    from donation_course.grading.worker import unsynced_gradebook

    unsynced_gradebook(Path(copy))
    out.send((_synchronous(f"sqlite:///{copy}"), _synchronous(f"sqlite:///{real}")))


def test_only_the_workers_copy_of_the_gradebook_is_unsynced(tmp_path):
    copy, real = tmp_path / "worker-0.db", tmp_path / "gradebook.db"
    for db in (copy, real):
        sqlite3.connect(db).close()
    ctx = mp.get_context("fork")  # as the pool's workers: the listener stays in the worker's process
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_in_a_worker, args=(str(copy), str(real), child))
    proc.start()
    (copy_sync, copy_journal), (real_sync, real_journal) = parent.recv()
    proc.join(30)
    assert copy_sync == 0 and copy_journal == real_journal == "delete"
    assert real_sync == 2  # FULL, SQLite's default: untouched
    assert _synchronous(f"sqlite:///{real}")[0] == 2  # and this process never had the listener
    assert sqlite3.connect(copy).execute("SELECT count(*) FROM t").fetchone() == (1,)
