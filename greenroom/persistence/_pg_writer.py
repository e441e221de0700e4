"""The PostgreSQL store's writer: one thread, one connection, group commit.

As on SQLite (sqlite.py), writes are jobs (a function of the connection) and event rows,
queued in order on a plain queue; the thread takes everything queued while it committed the
previous batch and writes it in one transaction: each job in its own savepoint (a failing job
fails alone), consecutive event rows behind one fence UPDATE and one COPY, and one NOTIFY on
``gr_ev`` per batch (per 7,000 bytes of ``session_id:last_seq``). Results go back to trio with
``TrioToken.run_sync_soon``: the commit listener first, then the callers, so a write is
acknowledged only once it is committed. A lost connection fails its batch
(DatabaseUnavailable, the batch's sessions reported failed) and the next batch reconnects.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import outcome
import psycopg
import psycopg.errors
import trio

from greenroom.errors import (
    DatabaseUnavailable,
    GreenroomError,
    OwnerUnavailable,
    StoreError,
    UnstorableValue,
)

from . import _pg_fence as fence
from ._persistence import CommitListener
from ._pg_open import connect, describe
from ._records import EventRow

T = TypeVar("T")
Conn = psycopg.Connection[Any]
log = logging.getLogger(__name__)

_QUEUE_SIZE = 4096  # jobs queued or being committed; producers wait beyond (backpressure)
_MAX_BATCH = 2048  # the most jobs and rows one transaction takes
# How long the thread waits, when an event (not a job) woke it, for more to share its commit.
_LINGER = 0.005


class _Job:
    __slots__ = ("fn", "slot", "task")

    def __init__(self, fn: Callable[[Conn], Any], task: trio.lowlevel.Task | None) -> None:
        self.fn = fn
        self.slot = task is not None  # holds one of the queue's slots until delivered
        # None: nobody waits (a posted job, or the caller was cancelled); it commits all the same.
        self.task = task


def translate(dsn: str, exc: Exception) -> Exception:
    """A psycopg or encoding error as greenroom's error tree has it."""
    if isinstance(exc, GreenroomError):
        return exc
    if isinstance(exc, UnicodeEncodeError):
        return UnstorableValue(f"a text value cannot be stored in PostgreSQL: {exc.reason}")
    if isinstance(exc, psycopg.errors.LockNotAvailable):
        return OwnerUnavailable(f"a session's row stayed locked by another node: {exc}")
    if isinstance(exc, psycopg.DataError):  # out of range, NUL in text, ...
        return UnstorableValue(f"a value cannot be stored in PostgreSQL: {exc}")
    if isinstance(exc, psycopg.OperationalError):
        return DatabaseUnavailable(f"the {describe(dsn)} is unavailable: {exc}")
    if isinstance(exc, psycopg.IntegrityError):
        return StoreError(f"constraint failed in the {describe(dsn)}: {exc}")
    if isinstance(exc, psycopg.Error):
        return StoreError(f"writing the {describe(dsn)} failed: {exc}")
    return exc


class PgWriter:
    """The writer thread and its queue. ``me`` gives (node id, incarnation) at each batch: the
    owner every fence of that batch requires."""

    def __init__(
        self,
        dsn: str,
        conn: Conn | None,
        node_id: str,
        me: Callable[[], tuple[str, int]],
        lease_ttl: float | None = None,
    ) -> None:
        self.dsn = dsn
        self.node_id = node_id
        self.lease_ttl = lease_ttl
        self._conn = conn
        self._me = me
        self.listener: CommitListener | None = None
        self.touched: set[str] = set()  # sessions with events since the last retention sweep
        self.closed = False
        self.batches = 0  # committed transactions, for benchmarks and tests
        self._jobs: queue.SimpleQueue[_Job | EventRow | None] = queue.SimpleQueue()
        self._job_queued = threading.Event()
        self._slots = trio.Semaphore(_QUEUE_SIZE)
        self._token = trio.lowlevel.current_trio_token()
        self._stopped = trio.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"greenroom-pg-writer {node_id}", daemon=True
        )

    # --- the trio side -------------------------------------------------------------------

    def check_open(self) -> None:
        if self.closed:
            raise StoreError(f"the store on the {describe(self.dsn)} is closed")

    async def write(self, fn: Callable[[Conn], T]) -> T:
        """Run ``fn`` in the next batch; its result once committed (its error if it failed).
        A cancelled caller stops waiting; the write commits all the same."""
        self.check_open()
        try:
            self._slots.acquire_nowait()
        except trio.WouldBlock:
            await self._slots.acquire()
            try:
                self.check_open()
            except StoreError:
                self._slots.release()
                raise
        job = _Job(fn, trio.lowlevel.current_task())
        self._jobs.put(job)
        self._job_queued.set()

        def abort(_: Any) -> trio.lowlevel.Abort:
            job.task = None
            return trio.lowlevel.Abort.SUCCEEDED

        # No checkpoint since put(): the reply (a callback of the trio loop) comes after this.
        result: T = await trio.lowlevel.wait_task_rescheduled(abort)
        return result

    def post(self, fn: Callable[[Conn], Any]) -> None:
        """Queue ``fn`` without waiting for it (a failure is logged)."""
        if self.closed:
            return
        self._jobs.put(_Job(fn, None))
        self._job_queued.set()

    def append(self, row: EventRow) -> None:
        if self.closed:
            if self.listener is not None:
                self.listener({}, {row.session_id: "the store is closed"})
            return
        self._jobs.put(row)

    def start(self) -> None:
        self._thread.start()

    def shutdown(self) -> None:
        if not self.closed:
            self.closed = True
            self._jobs.put(None)
            self._job_queued.set()

    async def stopped(self) -> None:
        # Shielded: the thread finishes what is queued (bounded), then closes its connection.
        with trio.CancelScope(shield=True):
            await self._stopped.wait()

    def _deliver(
        self,
        jobs: list[_Job],
        results: list[outcome.Outcome[Any]],
        heads: dict[str, int],
        failed: dict[str, str],
    ) -> None:
        if (heads or failed) and self.listener is not None:
            try:
                self.listener(heads, failed)
            except Exception:  # a bug in the listener must not take the trio loop down
                log.exception("the commit listener failed")
        for job, result in zip(jobs, results, strict=True):
            if job.slot:
                self._slots.release()
            if job.task is not None:
                trio.lowlevel.reschedule(job.task, result)
            elif isinstance(result, outcome.Error):
                log.warning("a queued write failed: %s", result.error)

    # --- the writer thread ---------------------------------------------------------------

    def _run(self) -> None:
        running = True
        while running:
            first = self._jobs.get()
            if first is None:
                break
            if isinstance(first, EventRow):
                self._job_queued.wait(_LINGER)  # let more events share this commit
            self._job_queued.clear()
            batch = [first]
            while len(batch) < _MAX_BATCH:
                try:
                    item = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    running = False
                    break
                batch.append(item)
            jobs = [job for job in batch if isinstance(job, _Job)]
            try:
                results, heads, failed = self._commit(batch)
            except BaseException as exc:  # a bug: fail the batch loudly, keep serving
                error = StoreError(f"writing the {describe(self.dsn)} failed: {exc!r}")
                results, heads = [outcome.Error(error) for _ in jobs], {}
                failed = _all_failed(batch, repr(exc))
            self.batches += 1
            self._token.run_sync_soon(self._deliver, jobs, results, heads, failed)
        if self._conn is not None:
            self._conn.close()
        self._token.run_sync_soon(self._stopped.set)

    def _connection(self) -> Conn:
        if self._conn is None or self._conn.closed or self._conn.broken:
            if self._conn is not None:
                self._conn.close()
            self._conn = None
            self._conn = connect(self.dsn, "writer", self.node_id, self.lease_ttl)
        return self._conn

    def _commit(
        self, batch: list[_Job | EventRow]
    ) -> tuple[list[outcome.Outcome[Any]], dict[str, int], dict[str, str]]:
        node, inc = self._me()
        results: list[outcome.Outcome[Any]] = []
        heads: dict[str, int] = {}
        failed: dict[str, str] = {}
        rows: list[EventRow] = []
        try:
            conn = self._connection()
            with conn.transaction():
                for job in batch:
                    if not isinstance(job, _Job):
                        rows.append(job)
                        continue
                    if rows:  # the events queued before this job go first
                        heads.update(fence.flush_events(conn, rows, failed, node, inc))
                        rows = []
                    try:
                        with conn.transaction():  # a savepoint: a failing job fails alone
                            results.append(outcome.Value(job.fn(conn)))
                    except Exception as exc:
                        if conn.broken:
                            raise  # the connection is gone: the whole batch with it
                        # Undone to its savepoint (a lock or statement timeout included).
                        results.append(outcome.Error(translate(self.dsn, exc)))
                if rows:
                    heads.update(fence.flush_events(conn, rows, failed, node, inc))
                fence.notify(conn, node, heads)
        except psycopg.Error as exc:
            error = translate(self.dsn, exc)
            if not isinstance(error, (DatabaseUnavailable, OwnerUnavailable)):
                error = StoreError(f"commit to the {describe(self.dsn)} failed: {exc}")
            jobs = sum(1 for job in batch if isinstance(job, _Job))
            return [outcome.Error(error) for _ in range(jobs)], {}, _all_failed(batch, str(exc))
        self.touched.update(heads)
        return results, heads, failed


def _all_failed(batch: list[_Job | EventRow], reason: str) -> dict[str, str]:
    return {row.session_id: reason for row in batch if isinstance(row, EventRow)}
