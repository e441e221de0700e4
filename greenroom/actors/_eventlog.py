"""A session's event log: sequence numbers, a bounded replay ring, bounded subscribers.

Everything here is synchronous, so each method runs atomically in trio: ``subscribe`` takes the
backlog and registers the listener in one step, which is why every event reaches a subscriber
exactly once and in order. The producer never waits: a subscriber whose buffer is full is
dropped (its stream ends without ``session_exited`` and the client resumes with its last seq).
Each event is serialised to JSON once and the bytes are shared by every consumer.
"""

from __future__ import annotations

import collections
import json
import time
from collections.abc import Iterator
from typing import Any

import attrs
import trio

from greenroom.domain import Event, Gap, SessionExited, event_to_json

DEFAULT_CAPACITY = 1024
DEFAULT_SUBSCRIBER_BUFFER = 1024
# One shared encoder: json.dumps with options builds a new JSONEncoder on every call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


_second: list[Any] = [-1, ""]  # (whole second, its RFC 3339 text): formatted once a second


def _timestamp() -> str:
    """Now as RFC 3339 UTC with microseconds (``2026-12-01T15:04:05.123456Z``), cheaply."""
    now = time.time()
    whole = int(now)
    if whole != _second[0]:
        _second[0], _second[1] = whole, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
    return f"{_second[1]}.{int((now - whole) * 1_000_000):06d}Z"


@attrs.frozen
class LogEntry:
    """One delivered event: ``seq`` is 0 for control events that are not in the log (gap)."""

    seq: int
    event: Event
    data: bytes  # the event's JSON, encoded once

    @classmethod
    def of(cls, seq: int, event: Event) -> LogEntry:
        body = event_to_json(event)
        body.setdefault("timestamp", _timestamp())  # as docker-agent's events carry one
        return cls(seq, event, _ENCODER.encode(body).encode())

    def json(self) -> Any:
        return json.loads(self.data)


GAP = LogEntry.of(0, Gap())


class Subscription:
    """A listener: the backlog it joined with, then live entries until the log closes or drops
    it. Iterate it with ``async for``; ``close()`` (or ``with``) unregisters it."""

    def __init__(self, log: EventLog, backlog: list[LogEntry], buffer: int) -> None:
        self._log = log
        self._backlog = collections.deque(backlog)
        self._send, self._recv = trio.open_memory_channel[LogEntry](buffer)
        self.dropped = False

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._log._subscribers.discard(self)
        self._send.close()
        self._recv.close()

    def _offer(self, entry: LogEntry) -> bool:
        try:
            self._send.send_nowait(entry)
        except trio.WouldBlock:
            self.dropped = True
            self._send.close()
            return False
        except trio.ClosedResourceError:
            return False
        return True

    def __aiter__(self) -> Subscription:
        return self

    def ready(self, limit: int) -> list[LogEntry]:
        """Up to ``limit`` entries that are already waiting (never blocks)."""
        entries: list[LogEntry] = []
        while len(entries) < limit and self._backlog:
            entries.append(self._backlog.popleft())
        while len(entries) < limit:
            try:
                entries.append(self._recv.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                break
        return entries

    async def __anext__(self) -> LogEntry:
        if self._backlog:
            await trio.lowlevel.checkpoint()
            return self._backlog.popleft()
        try:
            return await self._recv.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise StopAsyncIteration from None


class EventLog:
    """The sequenced, replayable event stream of one session."""

    def __init__(
        self,
        session_id: str,
        *,
        capacity: int = DEFAULT_CAPACITY,
        subscriber_buffer: int = DEFAULT_SUBSCRIBER_BUFFER,
    ) -> None:
        self.session_id = session_id
        self._ring: collections.deque[LogEntry] = collections.deque(maxlen=capacity)
        self._subscriber_buffer = subscriber_buffer
        self._subscribers: set[Subscription] = set()
        self.last_seq = 0
        self.closed = False

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)

    def append(self, event: Event) -> LogEntry | None:
        """Sequence ``event``, keep it for replay and offer it to every subscriber.

        Returns the entry, or None when the log is closed (the event is dropped).
        """
        if self.closed:
            return None
        self.last_seq += 1
        entry = LogEntry.of(self.last_seq, event)
        self._ring.append(entry)
        for subscriber in list(self._subscribers):
            if not subscriber._offer(entry):
                self._subscribers.discard(subscriber)
        return entry

    def close(self, reason: str = "session ended") -> LogEntry | None:
        """Append the sequenced terminal ``session_exited`` and end every subscription.

        Returns that terminal entry (None if the log was closed already)."""
        if self.closed:
            return None
        entry = self.append(SessionExited(reason))
        self.closed = True
        for subscriber in list(self._subscribers):
            subscriber._send.close()
        self._subscribers.clear()
        return entry

    def end_subscribers(self) -> None:
        """End every subscription without ``session_exited`` (they may resume later)."""
        for subscriber in list(self._subscribers):
            subscriber._send.close()
        self._subscribers.clear()

    def backlog(self, since: int | None) -> Iterator[LogEntry]:
        """Entries after ``since`` (all buffered ones when None), with a leading gap entry when
        ``since`` is older than the ring or newer than the head (the log was restarted)."""
        if since is None or not self._ring:
            yield from self._ring
            return
        oldest = self._ring[0].seq
        if since + 1 < oldest or since > self.last_seq:
            yield GAP
            yield from self._ring
            return
        for entry in self._ring:
            if entry.seq > since:
                yield entry

    def subscribe(self, since: int | None = None) -> Subscription:
        """Backlog after ``since`` plus every later event, registered atomically."""
        subscription = Subscription(self, list(self.backlog(since)), self._subscriber_buffer)
        if self.closed:
            subscription._send.close()
        else:
            self._subscribers.add(subscription)
        return subscription
