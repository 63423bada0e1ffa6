"""The built-in SQLite order system opens while another connection holds its write lock, as
when two workers start together on a new file (one used to refuse to start)."""

import sqlite3
import threading
from pathlib import Path

import pytest

from ledger.downstream import open_downstream


@pytest.mark.parametrize("lock", ["BEGIN IMMEDIATE", "BEGIN EXCLUSIVE"])
def test_a_new_file_opens_once_another_connection_lets_go(tmp_path: Path, lock: str) -> None:
    path = tmp_path / "var" / "downstream.sqlite3"
    path.parent.mkdir()
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute(lock)  # the other worker, inside its first write
    released = threading.Event()

    def release() -> None:
        other.execute("COMMIT")
        released.set()

    timer = threading.Timer(0.3, release)
    timer.start()
    try:
        db = open_downstream(path)
    finally:
        timer.join()
        other.close()
    assert released.is_set()
    assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert db.execute("SELECT count(*) FROM orders").fetchone() == (0,)
