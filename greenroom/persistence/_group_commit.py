"""The group-commit writer of the SQL stores: one thread, one connection, one queue.

Writes are jobs (a function of the writer connection) and event rows, queued in order on a plain
queue (not a trio task, so the thread starts the next batch as soon as it committed one). The
thread takes everything queued while it committed the previous batch, at most ``MAX_BATCH``, and
writes it in one transaction: each job in its own savepoint (a failing job fails alone),
consecutive event rows behind the backend's fence. A batch that an event row started waits up to
``LINGER`` for more to share its commit; a job someone waits for ends that wait at once.

Results go back to trio through the trio token (``TrioToken.run_sync_soon``): the commit
listener first, then the callers, so a write is acknowledged only once it is committed and a
caller that resumes finds the events committed before its write delivered too. A caller waits
in ``wait_task_rescheduled``; a cancelled caller stops waiting and its job commits all the
same. Awaited jobs hold one of ``QUEUE_SIZE`` slots until delivered (backpressure); posted jobs
and event rows take none (events are bounded by each log's ``max_uncommitted``).

The backend (:class:`CommitBackend`) is the dialect: its connection (and reconnection), its
transaction and savepoints, the fence for event rows, and its error translation. This module
is the only place that hands results from the thread to trio.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Generic, Protocol, TypeVar

import attrs
import outcome
import trio

from greenroom.errors import GreenroomError, StoreError
from greenroom.observe import commit_span, current_span_context, metrics, store_write_span

from ._persistence import CommitListener
from ._records import EventRow

T = TypeVar("T")
C = TypeVar("C")
log = logging.getLogger(__name__)

# Awaited jobs queued or being committed. When that many are, producers wait: the backpressure.
QUEUE_SIZE = 4096
# The most jobs and rows one transaction takes, so one commit never grows without bound.
MAX_BATCH = 2048
# How long the thread waits, when an event (not a job) woke it, for more to share its commit:
# what a subscriber's event may wait beyond its commit, at most.
LINGER = 0.005


class CommitBackend(Protocol[C]):
    """What a dialect gives the writer. Every method but ``translate`` runs on the writer
    thread, which alone uses the connection, so none needs a lock."""

    @property
    def where(self) -> str:
        """What messages name: ``/path/to.db``, ``the PostgreSQL database "x" on host:5432``."""

    @property
    def closed_message(self) -> str:
        """The StoreError of a write to the closed store."""

    @property
    def thread_name(self) -> str: ...

    @property
    def errors(self) -> tuple[type[Exception], ...]:
        """The driver's errors: raised out of a transaction, they fail the whole batch."""

    @property
    def kept(self) -> tuple[type[Exception], ...]:
        """Translations a failed batch reports as they are (else: StoreError "commit failed")."""

    def transaction(self) -> AbstractContextManager[C]:
        """The batch's transaction on the writer connection (connecting first if need be):
        committed when the block ends, rolled back when it raises."""

    def savepoint(self, conn: C, atomic: bool) -> AbstractContextManager[None]:
        """One job's savepoint, undone when the job raises. ``atomic``: the job is one
        statement (or writes nothing before the one that can fail), which a dialect that undoes
        a failed statement on its own may run without one."""

    def check_transaction(self, conn: C, exc: Exception) -> None:
        """After ``exc`` failed a job: raise when it took the whole transaction with it (the
        connection broke, or the database rolled back): the batch fails."""

    def flush_events(self, conn: C, rows: list[EventRow], failed: dict[str, str]) -> dict[str, int]:
        """Fence and insert ``rows`` (append order); each written session's new head. A session
        whose rows do not continue its head lands in ``failed`` and writes nothing more."""

    def before_commit(self, conn: C, heads: dict[str, int]) -> None:
        """Last statements of the batch's transaction (PostgreSQL: the NOTIFY of ``heads``)."""

    def translate(self, exc: Exception) -> Exception:
        """A driver or encoding error as greenroom's error tree has it."""

    def close(self) -> None:
        """The thread stops: release what the backend opened itself."""


@attrs.frozen
class WriterStatistics:
    """A look at the writer (trio's ``statistics()`` manner), for tests and benchmarks."""

    batches: int  # transactions committed (or failed) since the store opened
    jobs_waiting: int  # awaited jobs queued or being committed (slots taken)
    tasks_waiting: int  # producers waiting for a slot (backpressure)
    queue_size: int


class _Job:
    """One write: ``fn`` runs on the writer thread; ``task`` waits for its outcome."""

    __slots__ = ("atomic", "fn", "link", "slot", "task")

    def __init__(self, fn: Callable[[Any], Any], task: trio.lowlevel.Task | None, atomic: bool):
        self.fn = fn
        self.link = current_span_context()  # the waiting caller's span (tracing on only)
        self.slot = task is not None  # holds one of the queue's slots until delivered
        # None: nobody waits (a posted job, or the caller was cancelled); it commits all the same.
        self.task = task
        self.atomic = atomic


class GroupCommitWriter(Generic[C]):
    """The writer thread and its queue over one :class:`CommitBackend`. Create it in trio
    (it keeps the trio token), ``start()`` it, and ``shutdown()`` then ``await stopped()``."""

    def __init__(self, backend: CommitBackend[C], *, queue_size: int | None = None) -> None:
        self.backend = backend
        self.listener: CommitListener | None = None
        self._closed = False
        self._batches = 0
        # Sessions with events since the last retention sweep; only the writer thread uses it.
        self._touched: set[str] = set()
        self._queue_size = QUEUE_SIZE if queue_size is None else queue_size
        self._jobs: queue.SimpleQueue[_Job | EventRow | None] = queue.SimpleQueue()
        self._job_queued = threading.Event()
        self._slots = trio.Semaphore(self._queue_size)
        self._token = trio.lowlevel.current_trio_token()
        self._metrics = metrics()  # the server's (the thread has no context of its own)
        self._stopped = trio.Event()
        self._thread = threading.Thread(target=self._run, name=backend.thread_name, daemon=True)

    # --- the trio side -----------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def check_open(self) -> None:
        if self._closed:
            raise StoreError(self.backend.closed_message)

    def statistics(self) -> WriterStatistics:
        return WriterStatistics(
            batches=self._batches,
            jobs_waiting=self._queue_size - self._slots.value,
            tasks_waiting=self._slots.statistics().tasks_waiting,
            queue_size=self._queue_size,
        )

    async def write(self, fn: Callable[[C], T], *, atomic: bool = False) -> T:
        """Run ``fn`` in the next batch; its result once committed (its error if it failed).
        A cancelled caller stops waiting; the write commits all the same.

        Raises:
            StoreError: the store is closed (also when it closed while this waited for a slot).
        """
        with store_write_span(self.backend.where):  # a commit_span links to it
            return await self._write(fn, atomic)

    async def _write(self, fn: Callable[[C], T], atomic: bool) -> T:
        self.check_open()
        try:
            self._slots.acquire_nowait()
        except trio.WouldBlock:
            await self._slots.acquire()  # backpressure: wait for a free slot
            try:
                self.check_open()
            except StoreError:
                self._slots.release()
                raise
        job = _Job(fn, trio.lowlevel.current_task(), atomic)
        self._jobs.put(job)
        self._job_queued.set()  # ends the thread's wait for more events

        def abort(_: Any) -> trio.lowlevel.Abort:
            job.task = None  # the caller is cancelled; the job commits all the same
            return trio.lowlevel.Abort.SUCCEEDED

        # No checkpoint between put() and here: the reply, delivered by a callback of the trio
        # loop, cannot arrive before this task waits for it. The job's outcome comes back
        # unwrapped: its value, or its exception raised here.
        result: T = await trio.lowlevel.wait_task_rescheduled(abort)
        return result

    def post(self, fn: Callable[[C], Any]) -> None:
        """Queue ``fn`` without waiting for it and without a slot (a failure is logged);
        nothing once the store is closed."""
        if self._closed:
            return
        self._jobs.put(_Job(fn, None, atomic=False))
        self._job_queued.set()

    def append(self, row: EventRow) -> None:
        """Queue an event row: write-behind, no slot, nobody waits; the listener hears back
        (a closed store reports the session failed at once)."""
        if self._closed:
            if self.listener is not None:
                self.listener({}, {row.session_id: self.backend.closed_message})
            return
        self._jobs.put(row)

    def take_touched(self) -> set[str]:
        """The sessions with events committed since the last call. Only inside a job (on the
        writer thread, which alone updates the set: no lock needed)."""
        touched, self._touched = self._touched, set()
        return touched

    def start(self) -> None:
        self._thread.start()

    def shutdown(self) -> None:
        """Refuse new writes; the thread commits what is queued, then stops. Idempotent."""
        if not self._closed:
            self._closed = True
            self._jobs.put(None)
            self._job_queued.set()

    async def stopped(self) -> None:
        """Until the thread has stopped (after ``shutdown``)."""
        # Shielded: the thread finishes what is queued (bounded by the queue size), and the
        # connections must outlive it.
        with trio.CancelScope(shield=True):
            await self._stopped.wait()

    def _deliver(
        self,
        jobs: list[_Job],
        results: list[outcome.Outcome[Any]],
        heads: dict[str, int],
        failed: dict[str, str],
    ) -> None:
        # Runs in the trio thread (TrioToken.run_sync_soon). The listener first: a caller that
        # resumes after its write finds the events committed before it delivered too.
        if (heads or failed) and self.listener is not None:
            try:
                self.listener(heads, failed)
            except Exception:  # a bug in the listener must not take the trio loop down
                log.exception("the commit listener of %s failed", self.backend.where)
        for job, result in zip(jobs, results, strict=True):
            if job.slot:
                self._slots.release()
            if job.task is not None:
                trio.lowlevel.reschedule(job.task, result)
            elif isinstance(result, outcome.Error):
                log.warning("a write nobody waited for failed: %s", result.error)

    # --- the writer thread -------------------------------------------------------------------

    def _run(self) -> None:
        # Stops at the None that shutdown() queues after the last job.
        running = True
        while running:
            first = self._jobs.get()
            if first is None:
                break
            if isinstance(first, EventRow):
                # Nobody waits for events: let more gather for this transaction, so a busy log
                # commits in batches rather than an event at a time.
                self._job_queued.wait(LINGER)
            self._job_queued.clear()  # before taking the queue: a later job sets it again
            batch = [first]
            while len(batch) < MAX_BATCH:
                try:
                    item = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    running = False
                    break
                batch.append(item)
            jobs = [job for job in batch if isinstance(job, _Job)]
            started = time.monotonic()
            traced = commit_span(
                self.backend.where, len(jobs), len(batch) - len(jobs), (j.link for j in jobs)
            )
            try:
                with traced:
                    results, heads, failed = self._commit(batch)
            except BaseException as exc:  # a bug: fail the batch loudly, keep serving
                error = StoreError(f"writing {self.backend.where} failed: {exc!r}")
                results, heads = [outcome.Error(error) for _ in jobs], {}
                failed = _all_failed(batch, repr(exc))
            self._batches += 1
            self._observe(batch, failed, time.monotonic() - started)
            self._token.run_sync_soon(self._deliver, jobs, results, heads, failed)
        self.backend.close()
        self._token.run_sync_soon(self._stopped.set)

    def _observe(self, batch: list[_Job | EventRow], failed: dict[str, str], took: float) -> None:
        """Metrics of one transaction: its latency and size, the events it wrote, and how long
        its oldest event waited since its append (what a subscriber waits, at least)."""
        m = self._metrics
        m.commit_seconds.observe(took)
        m.commit_batch.observe(len(batch))
        rows = [r for r in batch if isinstance(r, EventRow) and r.session_id not in failed]
        if rows:
            m.events_written.inc(len(rows))
            m.delivery_lag_seconds.observe(max(0.0, time.time() - rows[0].created_at))

    def _commit(
        self, batch: list[_Job | EventRow]
    ) -> tuple[list[outcome.Outcome[Any]], dict[str, int], dict[str, str]]:
        backend = self.backend
        results: list[outcome.Outcome[Any]] = []
        heads: dict[str, int] = {}
        failed: dict[str, str] = {}
        rows: list[EventRow] = []
        try:
            with backend.transaction() as conn:
                for job in batch:
                    if not isinstance(job, _Job):
                        rows.append(job)
                        continue
                    if rows:  # the events queued before this job go first
                        heads.update(backend.flush_events(conn, rows, failed))
                        rows = []
                    try:
                        with backend.savepoint(conn, job.atomic):  # a failing job fails alone
                            value = job.fn(conn)
                    except Exception as exc:
                        backend.check_transaction(conn, exc)
                        results.append(outcome.Error(backend.translate(exc)))
                    else:
                        results.append(outcome.Value(value))
                if rows:
                    heads.update(backend.flush_events(conn, rows, failed))
                backend.before_commit(conn, heads)
        except backend.errors as exc:
            error = backend.translate(exc)
            if not isinstance(error, backend.kept):
                error = StoreError(f"commit to {backend.where} failed: {exc}")
            jobs = sum(1 for job in batch if isinstance(job, _Job))
            return [outcome.Error(error) for _ in range(jobs)], {}, _all_failed(batch, str(exc))
        self._touched.update(heads)
        return results, heads, failed


def translate_driver_error(
    exc: Exception, where: str, integrity: type[Exception], driver: type[Exception]
) -> Exception:
    """The end of every dialect's ``translate``: greenroom's own errors as they are, a failed
    constraint and any other error of the driver as a StoreError naming ``where``, anything else
    (a bug) as it is."""
    if isinstance(exc, GreenroomError):
        return exc
    if isinstance(exc, integrity):
        return StoreError(f"constraint failed in {where}: {exc}")
    if isinstance(exc, driver):
        return StoreError(f"writing {where} failed: {exc}")
    return exc


def _all_failed(batch: list[_Job | EventRow], reason: str) -> dict[str, str]:
    return {row.session_id: reason for row in batch if isinstance(row, EventRow)}


__all__ = [
    "LINGER",
    "MAX_BATCH",
    "QUEUE_SIZE",
    "CommitBackend",
    "GroupCommitWriter",
    "WriterStatistics",
]
