"""The SQLite dialect of group commit (:mod:`._group_commit`): the writer connection, its
transaction and savepoints, the fence of event rows, and the error translation.

The writer connection was opened and migrated by :mod:`._sqlite_open`; the opener closes it
after the writer thread stopped. ``BEGIN IMMEDIATE`` takes the file's write lock for the whole
batch, so one WAL commit (``synchronous=NORMAL``: an acknowledged write survives a crash of the
process) serves every job and row in it. A job that writes more than one statement runs in its
own savepoint; an ``atomic`` job (one statement, or nothing written before the one that can
fail) needs none, because SQLite undoes a failed statement on its own.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from greenroom.errors import UnstorableValue

from . import _sqlite_journal as journal
from ._group_commit import translate_driver_error
from ._records import EventRow


class SqliteBackend:
    """The :class:`~._group_commit.CommitBackend` of one SQLite file."""

    errors: tuple[type[Exception], ...] = (sqlite3.Error,)
    kept: tuple[type[Exception], ...] = ()  # every failed batch is "commit to <path> failed"

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self._conn = conn
        self.where = str(path)
        self.closed_message = f"store {path} is closed"
        self.thread_name = f"greenroom-sqlite-writer {path}"

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    @contextmanager
    def savepoint(self, conn: sqlite3.Connection, atomic: bool) -> Iterator[None]:
        if atomic:
            yield
            return
        conn.execute("SAVEPOINT job")
        try:
            yield
        except Exception:
            conn.execute("ROLLBACK TO job")
            conn.execute("RELEASE job")
            raise
        conn.execute("RELEASE job")

    def check_transaction(self, conn: sqlite3.Connection, exc: Exception) -> None:
        if not conn.in_transaction:  # SQLite gave up the whole transaction
            raise sqlite3.OperationalError(f"transaction rolled back: {exc}") from exc

    def flush_events(
        self, conn: sqlite3.Connection, rows: list[EventRow], failed: dict[str, str]
    ) -> dict[str, int]:
        return journal.flush_events(conn, rows, failed)

    def before_commit(self, conn: sqlite3.Connection, heads: dict[str, int]) -> None:
        pass  # one node: nobody else to tell

    def translate(self, exc: Exception) -> Exception:
        return translate(self.path, exc)

    def close(self) -> None:
        pass  # the opener closes the connection, after the readers


def translate(path: Path, exc: Exception) -> Exception:
    """An sqlite3 or encoding error as greenroom's error tree has it."""
    if isinstance(exc, UnicodeEncodeError):  # a lone surrogate: SQLite text is UTF-8
        return UnstorableValue(f"a text value cannot be stored in {path}: {exc.reason}")
    if isinstance(exc, OverflowError):  # SQLite integers are 64-bit
        return UnstorableValue(f"an integer is too large to be stored in {path}")
    return translate_driver_error(exc, str(path), sqlite3.IntegrityError, sqlite3.Error)
