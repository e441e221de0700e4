"""A subscriber of a session's event log: its backlog (from the store, then the ring), then
live committed entries, through a bounded channel it is dropped from when it falls behind."""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable

import trio

from greenroom.errors import GreenroomError
from greenroom.persistence import EventReader

from ._entries import GAP, LogEntry

log = logging.getLogger(__name__)

REPLAY_PAGE = 500  # events a subscription reads from the store at a time


class Replay:
    """The part of a subscription's backlog that only the store still has: (after, upto]."""

    def __init__(self, reader: EventReader, session_id: str, after: int, upto: int) -> None:
        self._reader = reader
        self._session_id = session_id
        self._after = after
        self._upto = upto
        self._page: collections.deque[LogEntry] = collections.deque()
        self._gap_sent = False

    @property
    def done(self) -> bool:
        return not self._page and self._after >= self._upto

    def take(self, limit: int) -> list[LogEntry]:
        """What is already read (never blocks)."""
        return [self._page.popleft() for _ in range(min(limit, len(self._page)))]

    async def next(self) -> LogEntry | None:
        if not self._page and self._after < self._upto:
            await self._read_page()
        return self._page.popleft() if self._page else None

    def _gap(self) -> None:
        if not self._gap_sent:
            self._gap_sent = True
            self._page.append(GAP)

    async def _read_page(self) -> None:
        limit = min(REPLAY_PAGE, self._upto - self._after)
        rows = await self._reader.read_events(self._session_id, self._after, limit)
        rows = [row for row in rows if row.seq <= self._upto]
        if not rows:  # retention removed the rest of the range
            self._after = self._upto
            self._gap()
            return
        for row in rows:
            if row.seq != self._after + 1:  # retention removed events in between
                self._gap()
            self._page.append(LogEntry.stored(row))
            self._after = row.seq


class Subscription:
    """A listener: its backlog (from the store, then the ring), then live committed entries
    until the log ends it or drops it. Iterate it with ``async for``; ``close()`` (or
    ``with``) unregisters it."""

    def __init__(
        self,
        session_id: str,
        unsubscribe: Callable[[Subscription], None],
        backlog: list[LogEntry],
        buffer: int,
        *,
        replay: Replay | None = None,
        skip_through: int = 0,
    ) -> None:
        self._session_id = session_id
        self._unsubscribe = unsubscribe
        self._replay = replay
        self._backlog = collections.deque(backlog)
        self._skip_through = skip_through  # live entries the client already has
        # The live entries: a deque the log appends to and one parked reader, instead of a
        # memory channel (decision 0037: less work per event and subscriber).
        self._buffer = buffer
        self._live: collections.deque[LogEntry] = collections.deque()
        self._waiter: trio.lowlevel.Task | None = None
        self._ended = False  # no more live entries (what is queued is still read)
        self._closed = False  # closed by its reader: nothing more is read
        self.dropped = False

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._unsubscribe(self)
        self._ended = self._closed = True
        self._live.clear()
        self._wake()

    def offer(self, entry: LogEntry) -> bool:
        """Called by the log with each committed entry; False: this subscriber is dropped
        (its buffer was full) or closed."""
        if entry.seq <= self._skip_through:
            return True
        if self._ended:
            return False
        if len(self._live) >= self._buffer:
            self.dropped = True
            self.end()
            return False
        self._live.append(entry)
        self._wake()
        return True

    def end(self) -> None:
        """Called by the log: no more entries (what is buffered is still read)."""
        self._ended = True
        self._wake()

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None:
            trio.lowlevel.reschedule(waiter)

    def __aiter__(self) -> Subscription:
        return self

    def ready(self, limit: int) -> list[LogEntry]:
        """Up to ``limit`` entries that are already waiting (never blocks)."""
        entries: list[LogEntry] = []
        if self._replay is not None:
            entries = self._replay.take(limit)
            if not self._replay.done:
                return entries
            self._replay = None
        while len(entries) < limit and self._backlog:
            entries.append(self._backlog.popleft())
        live = self._live
        while len(entries) < limit and live:
            entries.append(live.popleft())
        return entries

    async def __anext__(self) -> LogEntry:
        if self._replay is not None:
            try:
                entry = await self._replay.next()
            except GreenroomError as exc:  # the store failed: end; the client resumes later
                log.warning("replaying session %s: %s", self._session_id, exc)
                self.dropped = True
                self.close()
                raise StopAsyncIteration from None
            if entry is not None:
                return entry
            self._replay = None
        if self._backlog:
            await trio.lowlevel.checkpoint()
            return self._backlog.popleft()
        return await self._receive()

    async def _receive(self) -> LogEntry:
        """The next live entry, as a memory channel's ``receive`` gives it: a checkpoint either
        way (an entry already waiting after a yield; else the reader parks until one comes)."""
        if self._live:
            await trio.lowlevel.checkpoint()
        while not self._live and not self._ended:
            if self._waiter is not None:
                raise trio.BusyResourceError("another task is reading this subscription")
            self._waiter = trio.lowlevel.current_task()
            await trio.lowlevel.wait_task_rescheduled(self._abort)
        if self._closed or not self._live:
            raise StopAsyncIteration
        return self._live.popleft()

    def _abort(self, _: object) -> trio.lowlevel.Abort:
        self._waiter = None
        return trio.lowlevel.Abort.SUCCEEDED
