"""The built-in SQLite order system opens while another connection holds its write lock, as
when two workers start together on a new file (one used to refuse to start)."""

import sqlite3
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from ledger import downstream

WAIT_S = 30


def open_and_read(path: Path, opened: list[tuple[object, ...]]) -> None:
    """In the opener's thread (a connection stays in its thread): journal mode, order count."""
    db = downstream.open_downstream(path)
    journal = db.execute("PRAGMA journal_mode").fetchone()
    opened.append((*journal, *db.execute("SELECT count(*) FROM orders").fetchone()))
    db.close()


def test_a_new_file_opens_once_a_writer_lets_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer's lock makes SQLite refuse the switch to WAL at once: open_downstream waits.
    Ordered by progress: the lock is let go once the opener has been refused and waits."""
    path = tmp_path / "downstream.sqlite3"
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # the other worker, inside its first write
    refused = threading.Event()

    def pause(seconds: float) -> None:
        refused.set()
        time.sleep(seconds)

    monkeypatch.setattr(downstream, "time", SimpleNamespace(monotonic=time.monotonic, sleep=pause))
    opened: list[tuple[object, ...]] = []
    opener = threading.Thread(target=open_and_read, args=(path, opened))
    opener.start()
    try:
        assert refused.wait(WAIT_S), "the opener was never refused"
        assert not opened  # still waiting for the writer
    finally:
        other.execute("COMMIT")
        opener.join(WAIT_S)
        other.close()
    assert opened == [("wal", 0)]


def test_a_new_file_opens_once_an_exclusive_lock_is_let_go(tmp_path: Path) -> None:
    """SQLite's own busy handler waits out an exclusive lock; released once the opener runs."""
    path = tmp_path / "downstream.sqlite3"
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN EXCLUSIVE")
    opened: list[tuple[object, ...]] = []
    opener = threading.Thread(target=open_and_read, args=(path, opened))
    opener.start()
    try:
        assert not opened  # it cannot open before the lock goes
    finally:
        other.execute("COMMIT")
        opener.join(WAIT_S)
        other.close()
    assert opened == [("wal", 0)]
