"""The SQLite session store: one writer thread with group commit, readers on their own connections.

Writes are jobs (a function of the writer connection) and event rows. A dedicated writer thread
owns the writer connection; it takes everything queued while it was committing the previous
transaction and writes it all in one transaction, so one wake-up and one fsync-free WAL commit
serve a whole batch: with many producers, throughput is bounded by SQLite, not by thread hops.
A job that writes more than one statement runs inside its own savepoint, so a failing job fails
alone. Event rows are write-behind: nobody waits for them; consecutive rows are inserted with
one ``executemany`` behind the fence (``_sqlite_journal.flush_events``), in queue order with
the jobs. The thread hands results back with ``TrioToken.run_sync_soon``: a job's caller
resumes only after the commit, so an acknowledged write survives a crash of the process (WAL
with ``synchronous=NORMAL``), and the commit listener hears which event seqs are committed.
Jobs go to the thread through a plain queue, not a trio task, so the thread starts the next
batch as soon as it has committed one.
"""

from __future__ import annotations

import logging
import queue
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import outcome
import trio

from greenroom.domain import (
    ErrorItem,
    Message,
    Session,
    SessionSummary,
    SubSession,
    Summary,
)
from greenroom.errors import (
    GreenroomError,
    InvalidRequest,
    MessageNotFound,
    SessionNotFound,
    StoreError,
    UnstorableValue,
)

from . import _rows, _sqlite_journal as journal, _sqlite_sql as sql
from ._persistence import CommitListener
from ._records import (
    EventRow,
)
from ._setters import FieldSetters
from ._sqlite_log import SqliteLog
from ._sqlite_open import (
    acquire_process_lock,
    check_access,
    connect,
    open_writer,
    release_process_lock,
)

T = TypeVar("T")
log = logging.getLogger(__name__)

# Jobs queued or being committed. When that many are, producers wait: the store's backpressure.
_QUEUE_SIZE = 4096
# The most jobs one transaction takes, so one commit never grows without bound.
_MAX_BATCH = 2048
_READERS = 4
# How long the writer waits, when an event (not a job) woke it, for more to share its commit:
# what a subscriber's event may wait beyond its commit, at most.
_LINGER = 0.005


class _Job:
    """One write: ``fn`` runs on the writer thread; ``task`` waits for its outcome."""

    __slots__ = ("atomic", "fn", "task")

    def __init__(
        self, fn: Callable[[sqlite3.Connection], Any], task: trio.lowlevel.Task, atomic: bool
    ) -> None:
        self.fn = fn
        # None once the caller stopped waiting (cancelled): the write still commits.
        self.task: trio.lowlevel.Task | None = task
        # One statement, or several with nothing written before the one that can fail: needs
        # no savepoint, because SQLite undoes a failed statement on its own.
        self.atomic = atomic


class SqliteStore(FieldSetters, SqliteLog):
    """A :class:`~greenroom.persistence.Persistence` on one SQLite file: the store, the writer,
    the event reader and local ownership at this process's boot epoch (those in
    :mod:`._sqlite_log`). Use :func:`open_sqlite_store`."""

    def __init__(self, path: Path, writer: sqlite3.Connection, boot_epoch: int = 1) -> None:
        self.path = path
        self.boot_epoch = boot_epoch
        self._writer = writer
        self._jobs: queue.SimpleQueue[_Job | EventRow | None] = queue.SimpleQueue()
        self._job_queued = threading.Event()
        self._listener: CommitListener | None = None
        self._touched: set[str] = set()  # sessions with events since the last retention sweep
        self._slots = trio.Semaphore(_QUEUE_SIZE)
        self._token = trio.lowlevel.current_trio_token()
        self._thread = threading.Thread(
            target=self._writer_thread, name=f"greenroom-sqlite-writer {path}", daemon=True
        )
        self._stopped = trio.Event()
        self._readers: list[sqlite3.Connection] = []
        self._read_limiter = trio.CapacityLimiter(_READERS)
        self._closed = False
        self.batches = 0  # committed transactions, for benchmarks and tests

    # --- plumbing ------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"store {self.path} is closed")

    async def _write(self, fn: Callable[[sqlite3.Connection], T], *, atomic: bool = False) -> T:
        self._check_open()
        try:
            self._slots.acquire_nowait()
        except trio.WouldBlock:
            await self._slots.acquire()  # backpressure: wait for a free slot
            try:
                self._check_open()
            except StoreError:
                self._slots.release()
                raise
        job = _Job(fn, trio.lowlevel.current_task(), atomic)
        self._jobs.put(job)
        self._job_queued.set()  # ends the writer's wait for more events

        def abort(_: Any) -> trio.lowlevel.Abort:
            job.task = None  # the caller is cancelled; the job commits all the same
            return trio.lowlevel.Abort.SUCCEEDED

        # No checkpoint between put() and here: the reply, delivered by a callback of the
        # trio loop, cannot arrive before this task waits for it. The job's outcome comes back
        # unwrapped: its value, or its exception raised here.
        result: T = await trio.lowlevel.wait_task_rescheduled(abort)
        return result

    def _deliver(
        self,
        jobs: list[_Job],
        results: list[outcome.Outcome[Any]],
        heads: dict[str, int],
        failed: dict[str, str],
    ) -> None:
        # Runs in the trio thread (TrioToken.run_sync_soon). The listener first: a caller that
        # resumes after its write finds the events committed before it delivered too.
        if (heads or failed) and self._listener is not None:
            try:
                self._listener(heads, failed)
            except Exception:  # a bug in the listener must not take the trio loop down
                log.exception("the commit listener of %s failed", self.path)
        for job, result in zip(jobs, results, strict=True):
            self._slots.release()
            if job.task is not None:
                trio.lowlevel.reschedule(job.task, result)

    def _writer_thread(self) -> None:
        # The only user of the writer connection, so it never needs a lock. Stops at the None
        # that _shutdown queues after the last job.
        running = True
        while running:
            first = self._jobs.get()
            if first is None:
                break
            if isinstance(first, EventRow):
                # Nobody waits for events: let more gather for this transaction, so a busy
                # log commits in batches rather than an event at a time (fewer commits, fewer
                # wake-ups of this thread and of trio). A job someone waits for ends it.
                self._job_queued.wait(_LINGER)
            self._job_queued.clear()  # before taking the queue: a later job sets it again
            batch = [first]
            while len(batch) < _MAX_BATCH:
                try:
                    job = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    running = False
                    break
                batch.append(job)
            jobs = [job for job in batch if isinstance(job, _Job)]
            try:
                results, heads, failed = self._commit(batch)
            except BaseException as exc:  # a bug: fail the batch loudly, keep serving
                error = StoreError(f"writing {self.path} failed: {exc!r}")
                results, heads = [outcome.Error(error) for _ in jobs], {}
                failed = _all_failed(batch, repr(exc))
            self.batches += 1
            self._token.run_sync_soon(self._deliver, jobs, results, heads, failed)
        self._token.run_sync_soon(self._stopped.set)

    def _commit(
        self, batch: list[_Job | EventRow]
    ) -> tuple[list[outcome.Outcome[Any]], dict[str, int], dict[str, str]]:
        conn = self._writer
        results: list[outcome.Outcome[Any]] = []
        heads: dict[str, int] = {}
        failed: dict[str, str] = {}
        rows: list[EventRow] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            for job in batch:
                if not isinstance(job, _Job):
                    rows.append(job)
                    continue
                if rows:  # the events queued before this job go first
                    heads.update(journal.flush_events(conn, rows, failed))
                    rows = []
                if job.atomic:
                    try:
                        results.append(outcome.Value(job.fn(conn)))
                    except Exception as exc:
                        results.append(outcome.Error(_translate(self.path, exc)))
                        if not conn.in_transaction:  # SQLite gave up the whole transaction
                            raise sqlite3.OperationalError(
                                f"transaction rolled back: {exc}"
                            ) from exc
                    continue
                conn.execute("SAVEPOINT job")
                try:
                    results.append(outcome.Value(job.fn(conn)))
                except Exception as exc:
                    conn.execute("ROLLBACK TO job")
                    results.append(outcome.Error(_translate(self.path, exc)))
                conn.execute("RELEASE job")
            if rows:
                heads.update(journal.flush_events(conn, rows, failed))
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            error = StoreError(f"commit to {self.path} failed: {exc}")
            jobs = sum(1 for job in batch if isinstance(job, _Job))
            return [outcome.Error(error) for _ in range(jobs)], {}, _all_failed(batch, str(exc))
        self._touched.update(heads)
        return results, heads, failed

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        self._check_open()
        async with self._read_limiter:
            spare = self._readers.pop() if self._readers else None
            conn, result = await trio.to_thread.run_sync(self._run_read, spare, fn)
            if conn is not None:
                self._return_reader(conn)
        return result.unwrap()

    def _return_reader(self, conn: sqlite3.Connection) -> None:
        if self._closed:
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
            return conn, outcome.Error(_translate(self.path, exc))

    def _start(self) -> None:
        self._thread.start()

    def _shutdown(self) -> None:
        # The writer thread commits what is queued, then stops. Idempotent.
        if not self._closed:
            self._closed = True
            self._jobs.put(None)
            self._job_queued.set()

    async def _stopped_writing(self) -> None:
        # Shielded: the thread is finishing queued jobs (bounded by _QUEUE_SIZE), and the
        # connections must outlive it.
        with trio.CancelScope(shield=True):
            await self._stopped.wait()

    def _close_connections(self) -> None:
        for conn in self._readers:
            conn.close()
        self._readers.clear()
        self._writer.close()

    # --- the Store contract ----------------------------------------------------------------

    async def add_session(self, session: Session) -> Session:
        if not session.id:
            raise InvalidRequest("session id is empty", path="$.id")
        return await self._write(lambda conn: sql.insert_session(conn, session))

    async def get_session(self, session_id: str) -> Session:
        return await self._read(lambda conn: sql.load_session(conn, session_id))

    async def list_sessions(self) -> list[SessionSummary]:
        return await self._read(sql.list_sessions)

    async def update_session(self, session: Session) -> None:
        row = _rows.session_to_row(session)

        def upsert(conn: sqlite3.Connection) -> None:
            conn.execute(sql.UPSERT_METADATA, row)
            conn.execute(sql.INSERT_HEAD, (session.id,))  # cannot fail once the row is there

        await self._write(upsert, atomic=True)

    async def delete_session(self, session_id: str) -> None:
        def delete(conn: sqlite3.Connection) -> None:
            journal.delete_events_of_tree(conn, session_id)
            # The sub-sessions, items, heads and records go with it (ON DELETE CASCADE).
            if conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,)).rowcount == 0:
                raise SessionNotFound(session_id)

        await self._write(delete)

    async def _append(self, session_id: str, item: Message | Summary | ErrorItem) -> int:
        # Serialised here, in the caller, so the writer thread only runs SQL.
        row = _rows.item_to_row(item)
        return await self._write(lambda conn: sql.append_row(conn, session_id, row), atomic=True)

    async def add_message(self, session_id: str, message: Message) -> int:
        return await self._append(session_id, message)

    async def update_message(self, session_id: str, message_id: int, message: Message) -> None:
        _, role, body = _rows.item_to_row(message)

        def update(conn: sqlite3.Connection) -> None:
            cursor = conn.execute(
                "UPDATE items SET role = ?, body = ? WHERE id = ? AND session_id = ?"
                " AND kind = 'message'",
                (role, body, message_id, session_id),
            )
            if cursor.rowcount == 0:
                sql.require_session(conn, session_id)
                raise MessageNotFound(f"message {message_id} not found in session {session_id}")

        await self._write(update, atomic=True)

    async def add_error(self, session_id: str, error: ErrorItem) -> None:
        await self._append(session_id, error)

    async def add_summary(self, session_id: str, summary: Summary) -> None:
        await self._append(session_id, summary)

    async def add_sub_session(self, parent_id: str, sub_session: Session) -> None:
        def add(conn: sqlite3.Connection) -> None:
            sql.require_session(conn, parent_id)
            sql.append_item(conn, parent_id, SubSession(sub_session))

        await self._write(add)

    async def _set(self, session_id: str, fields: Mapping[str, Any]) -> None:
        assignments = ", ".join(f"{column} = ?" for column in fields)

        def update(conn: sqlite3.Connection) -> None:
            sql = f"UPDATE sessions SET {assignments} WHERE id = ?"
            if conn.execute(sql, (*fields.values(), session_id)).rowcount == 0:
                raise SessionNotFound(session_id)

        await self._write(update, atomic=True)

    async def titles(self) -> list[str]:
        return await self._read(
            lambda conn: [r[0] for r in conn.execute("SELECT title FROM sessions")]
        )

    async def count_sessions(self) -> int:
        return await self._read(
            lambda conn: int(
                conn.execute("SELECT COUNT(*) FROM sessions WHERE parent_id IS NULL").fetchone()[0]
            )
        )

    async def aclose(self) -> None:
        self._shutdown()
        await self._stopped_writing()

    @property
    def store(self) -> SqliteStore:
        return self


def _all_failed(batch: list[_Job | EventRow], reason: str) -> dict[str, str]:
    return {row.session_id: reason for row in batch if isinstance(row, EventRow)}


def _translate(path: Path, exc: Exception) -> Exception:
    if isinstance(exc, GreenroomError):
        return exc
    if isinstance(exc, UnicodeEncodeError):  # a lone surrogate: SQLite text is UTF-8
        return UnstorableValue(f"a text value cannot be stored in {path}: {exc.reason}")
    if isinstance(exc, OverflowError):  # SQLite integers are 64-bit
        return UnstorableValue(f"an integer is too large to be stored in {path}")
    if isinstance(exc, sqlite3.IntegrityError):
        return StoreError(f"constraint failed in {path}: {exc}")
    if isinstance(exc, sqlite3.Error):
        return StoreError(f"writing {path} failed: {exc}")
    return exc


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
            store._start()
            try:
                yield store
            finally:
                store._shutdown()
                await store._stopped_writing()
        finally:
            store._close_connections()
    finally:
        release_process_lock(lock)


__all__ = ["SqliteStore", "open_sqlite_store"]
