"""The SQLite session store: one writer thread with group commit, readers on their own
connections, one node.

Writes go through a :class:`~._group_commit.GroupCommitWriter` over the SQLite dialect
(:mod:`._sqlite_writer`): jobs and write-behind event rows, everything queued while the
previous transaction committed in one transaction, so with many producers throughput is bounded
by SQLite, not by thread hops; a job's caller resumes only after the commit, so an acknowledged
write survives a crash of the process. The Store contract and the log's roles are the SQL
templates (:mod:`._sql_store`, :mod:`._sql_log`) over this dialect's SQL (:mod:`._sqlite_sql`,
:mod:`._sqlite_journal`); ownership is local, at the boot epoch of this process.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TypeVar

import outcome
import trio

from greenroom.errors import StoreError

from . import _sqlite_journal as journal, _sqlite_sql as sql
from ._group_commit import GroupCommitWriter
from ._persistence import SingleNodeRoles
from ._process_log import SqlProcessLog
from ._schedules import SqlSchedules
from ._sql_log import SqlLog
from ._sql_runs import SQLITE, SqlRuns
from ._sql_store import SqlStore
from ._sqlite_open import (
    acquire_process_lock,
    check_access,
    connect,
    open_writer,
    release_process_lock,
)
from ._sqlite_writer import SqliteBackend, translate

T = TypeVar("T")
_READERS = 4


class SqliteStore(
    SingleNodeRoles,
    SqlStore[sqlite3.Connection],
    SqlRuns,
    SqlLog[sqlite3.Connection, journal.Owner],
    SqlProcessLog,
    SqlSchedules,
):
    """A :class:`~greenroom.persistence.Persistence` on one SQLite file: the store, the writer,
    the event reader and local ownership at this process's boot epoch. Use
    :func:`open_sqlite_store`."""

    _sql = sql
    _journal = journal
    _runs_dialect = SQLITE

    def __init__(self, path: Path, writer: sqlite3.Connection, boot_epoch: int = 1) -> None:
        self.path = path
        self.boot_epoch = boot_epoch
        self.group_commit = GroupCommitWriter(SqliteBackend(path, writer))
        self._writer = writer
        self._readers: list[sqlite3.Connection] = []
        self._read_limiter = trio.CapacityLimiter(_READERS)

    @property
    def store(self) -> SqliteStore:
        return self

    def _owner(self) -> int:
        return self.boot_epoch

    async def _guarded(
        self, session_id: str, fn: Callable[[sqlite3.Connection], T], *, atomic: bool = False
    ) -> T:
        # One node: nobody else owns a session, so every write is a plain one.
        return await self.group_commit.write(fn, atomic=atomic)

    async def _read(self, fn: Callable[[sqlite3.Connection], T], *, transaction: bool = False) -> T:
        # ``transaction`` changes nothing: each read here is one statement, its own transaction.
        self.group_commit.check_open()
        async with self._read_limiter:
            spare = self._readers.pop() if self._readers else None
            conn, result = await trio.to_thread.run_sync(self._run_read, spare, fn)
            if conn is not None:
                self._return_reader(conn)
        return result.unwrap()

    def _return_reader(self, conn: sqlite3.Connection) -> None:
        if self.group_commit.closed:
            conn.close()  # the store closed while this read ran: nobody would reuse it
        else:
            self._readers.append(conn)

    def _run_read(
        self, conn: sqlite3.Connection | None, fn: Callable[[sqlite3.Connection], T]
    ) -> tuple[sqlite3.Connection | None, outcome.Outcome[T]]:
        # Runs in a worker thread with a connection no other thread holds right now. Whatever
        # fails, the connection goes back to the caller, so it is reused or closed, never lost.
        try:
            if conn is None:
                conn = connect(self.path, readonly=True)
            return conn, outcome.Value(fn(conn))
        except sqlite3.Error as exc:
            return conn, outcome.Error(StoreError(f"reading {self.path} failed: {exc}"))
        except Exception as exc:
            return conn, outcome.Error(translate(self.path, exc))

    def _close_connections(self) -> None:
        for conn in self._readers:
            conn.close()
        self._readers.clear()
        self._writer.close()


@asynccontextmanager
async def open_sqlite_store(path: str | Path) -> AsyncIterator[SqliteStore]:
    """Open (creating and migrating) the store at ``path`` for the duration of the block.

    Raises a :class:`~greenroom.errors.DatabaseError` subclass naming the file and what to do
    when the file is not a greenroom database, was written by a newer schema, cannot be
    written, or is held by another greenroom process.
    """
    path = await trio.to_thread.run_sync(lambda: Path(path).expanduser().absolute())
    await trio.to_thread.run_sync(check_access, path)
    lock = await trio.to_thread.run_sync(acquire_process_lock, path)
    try:
        writer = await trio.to_thread.run_sync(open_writer, path)
        try:
            epoch = await trio.to_thread.run_sync(journal.bump_boot_epoch, writer)
        except BaseException:
            writer.close()
            raise
        store = SqliteStore(path, writer, epoch)
        try:
            store.group_commit.start()
            try:
                yield store
            finally:
                await store.aclose()
        finally:
            store._close_connections()
    finally:
        release_process_lock(lock)


__all__ = ["SqliteStore", "open_sqlite_store"]
