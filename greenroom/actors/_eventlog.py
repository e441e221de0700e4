"""A session's event log: sequence numbers, commit before deliver, replay from the ring or the
store, bounded subscribers.

Everything but reading a subscription is synchronous, so each method runs atomically in trio.
``append`` numbers the event, encodes its JSON once (those bytes are stored and served as they
are) and hands the row to the writer without waiting. Subscribers only ever get events up to
the *committed* cursor, which moves when the writer reports a commit: a seq a subscriber saw is
durable, so after a crash the log goes on at the committed head and never names two events with
one seq. (The run stream of ``POST .../agent/...`` is not resumable and gets each entry as it is
appended, with the same seq.)

``subscribe(since)`` takes what it needs from the ring and registers the listener in one step,
so every event reaches a subscriber exactly once and in order; what is older than the ring is
read from the store first, page by page. A ``gap`` control event is left only where retention
removed events, or when ``since`` is ahead of the log (a restored database). The producer never
waits for a subscriber: one whose buffer is full is dropped (its stream ends without
``session_exited`` and the client resumes with its last seq). It waits for the writer only when
more than ``max_uncommitted`` events are not committed yet (``wait_for_room``).
"""

from __future__ import annotations

import collections
import logging
import time

import trio

from greenroom.domain import Event, SessionExited
from greenroom.errors import GreenroomError
from greenroom.persistence import EventReader, EventRow, Lease, StoredEvent, Writer

from ._entries import GAP, LogEntry
from ._subscription import Replay, Subscription

log = logging.getLogger(__name__)

DEFAULT_CAPACITY = 1024
IDLE_RING = 16
"""Committed entries a stored log keeps in memory between turns: "recent events" for a
subscriber without ``since``; a turn's 200 token entries would cost ~60 KB per idle session."""
DEFAULT_MAX_UNCOMMITTED = 4096
# At least what one commit can deliver at once (a turn waits when more are uncommitted): a
# subscriber that had caught up is never dropped by a single commit. A channel's buffer grows
# only as it fills, so the size costs nothing while the reader keeps up.
DEFAULT_SUBSCRIBER_BUFFER = DEFAULT_MAX_UNCOMMITTED


class EventLog:
    """The sequenced, durable, replayable event stream of one session.

    Without a ``writer`` the log lives in memory only: an event is committed as it is appended.
    With one, the log starts once its head is known (``start`` with the lease of the claim);
    events appended before that wait in order and are numbered then.
    """

    def __init__(
        self,
        session_id: str,
        *,
        capacity: int = DEFAULT_CAPACITY,
        subscriber_buffer: int = DEFAULT_SUBSCRIBER_BUFFER,
        max_uncommitted: int = DEFAULT_MAX_UNCOMMITTED,
        writer: Writer | None = None,
        reader: EventReader | None = None,
    ) -> None:
        self.session_id = session_id
        self._capacity = capacity
        self._subscriber_buffer = subscriber_buffer
        self.max_uncommitted = max_uncommitted
        self._writer = writer
        self._reader = reader
        # Contiguous seqs: every uncommitted entry, and up to ``_limit`` committed ones.
        self._ring: collections.deque[LogEntry] = collections.deque()
        self._limit = capacity  # IDLE_RING between turns of a stored log (see ``idle``)
        self._subscribers: set[Subscription] = set()
        self._early: list[Event] = []  # appended before the head was known
        self._predecessor: EventLog | None = None  # a closed log whose tail is not committed
        self._progress = trio.Event()  # set (and replaced) whenever the committed cursor moves
        self.lease: Lease | None = None
        self.ready = trio.Event()
        self.error: GreenroomError | None = None
        self.last_seq = 0  # the last seq given out
        self.committed = 0  # the last seq the writer committed: what subscribers may see
        self.closed = False  # no more appends
        self._ended = False  # subscribers ended
        self._closing_seq = 0  # session_exited: subscribers end once it is committed
        if writer is None:
            self.ready.set()

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)

    @property
    def started(self) -> bool:
        return self.ready.is_set() and self.error is None

    @property
    def uncommitted(self) -> int:
        return self.last_seq - self.committed

    @property
    def in_memory(self) -> int:
        """Entries held in memory for replay (every uncommitted one, then the newest)."""
        return len(self._ring)

    # --- the head --------------------------------------------------------------------------

    def start(self, lease: Lease) -> None:
        """The head is known: number the events that waited for it, and go on from there."""
        if self.ready.is_set():
            return
        self.lease = lease
        self.last_seq = self.committed = lease.last_seq
        self.ready.set()
        early, self._early = self._early, []
        for event in early:
            self.append(event)

    def abort(self, error: GreenroomError) -> None:
        """The head could not be had (the session does not exist): drop what waited."""
        if self.ready.is_set():
            return
        self.error = error
        self._early.clear()
        self.closed = True
        self.ready.set()
        self._end_subscribers()

    async def wait_ready(self) -> None:
        await self.ready.wait()
        if self.error is not None:
            raise self.error

    def successor(self) -> EventLog:
        """A fresh log going on where this closed one stopped (same numbering); it hands
        commits of this one's uncommitted tail back to it."""
        new = EventLog(
            self.session_id,
            capacity=self._capacity,
            subscriber_buffer=self._subscriber_buffer,
            max_uncommitted=self.max_uncommitted,
            writer=self._writer,
            reader=self._reader,
        )
        new.lease, new.last_seq, new.committed = self.lease, self.last_seq, self.committed
        new._ring.extend(e for e in self._ring if e.seq > self.committed)
        new._predecessor = self if self.uncommitted else None
        new.ready.set()
        return new

    # --- appending and committing -----------------------------------------------------------

    def append(self, event: Event) -> LogEntry | None:
        """Sequence ``event``, keep it for replay and hand it to the writer.

        Returns the entry, or None when the log is closed (the event is dropped) or its head is
        not known yet (the event waits and is numbered then).
        """
        if self.closed:
            return None
        if self.lease is None and self._writer is not None:  # the head is not known yet
            self._early.append(event)
            return None
        self.last_seq += 1
        entry = LogEntry.of(self.last_seq, event)
        self._ring.append(entry)
        if self._writer is None or self.lease is None:  # in memory only: committed at once
            self.on_committed(entry.seq)
        else:
            row = EventRow(
                self.session_id, entry.seq, self.lease.epoch, entry.type, entry.data, time.time()
            )
            self._writer.append_event(row)  # may report the commit at once (memory store)
        return entry

    def on_committed(self, seq: int) -> None:
        """The writer committed this log up to ``seq``: deliver up to there."""
        if self._predecessor is not None:
            self._predecessor.on_committed(min(seq, self._predecessor.last_seq))
            if not self._predecessor.uncommitted:
                self._predecessor = None
        if seq <= self.committed or not self._ring:
            self.committed = max(self.committed, min(seq, self.last_seq))
            return
        seq = min(seq, self.last_seq)
        if self._subscribers:
            # The fresh entries are the ring's newest: index them (a deque indexes from its
            # nearer end) rather than skip the committed ones from the left, up to ``capacity``.
            ring = self._ring
            first = ring[0].seq
            for index in range(self.committed + 1 - first, seq + 1 - first):
                entry = ring[index]
                for subscriber in list(self._subscribers):
                    if not subscriber.offer(entry):
                        self._subscribers.discard(subscriber)
        self.committed = seq
        while len(self._ring) > self._limit and self._ring[0].seq <= seq:
            self._ring.popleft()
        if self._closing_seq and seq >= self._closing_seq:
            self._end_subscribers()
        self._progress.set()
        self._progress = trio.Event()

    def extend_committed(self, rows: list[StoredEvent]) -> None:
        """A mirror of a log another node writes (no writer of its own): take the events it
        committed, with their seqs, in order, and deliver them; the ones it has are skipped.
        Subscribers end after ``session_exited``."""
        for row in rows:
            if self._ended or row.seq <= self.committed:
                continue
            entry = LogEntry.stored(row)
            self._ring.append(entry)
            for subscriber in list(self._subscribers):
                if not subscriber.offer(entry):
                    self._subscribers.discard(subscriber)
            self.last_seq = self.committed = row.seq
            if entry.type == "session_exited":
                self.closed = True
                self._end_subscribers()
        while len(self._ring) > self._limit:
            self._ring.popleft()
        self._progress.set()
        self._progress = trio.Event()

    async def wait_committed(self, seq: int) -> bool:
        """Wait until ``seq`` is committed; False when the log ends first (it was lost)."""
        while self.committed < seq:
            if self._ended:
                return False
            await self._progress.wait()
        return True

    async def wait_for_room(self) -> None:
        """Wait while more than ``max_uncommitted`` events are not committed (the writer is
        behind): the producer's backpressure."""
        while self.uncommitted > self.max_uncommitted and not self._ended:
            await self._progress.wait()

    # --- ending ------------------------------------------------------------------------------

    def close(self, reason: str = "session ended") -> LogEntry | None:
        """Append the sequenced terminal ``session_exited``; subscribers end once it is
        committed. Returns that entry (None if the log was closed already, or its head is not
        known yet)."""
        if self.closed:
            return None
        entry = self.append(SessionExited(reason))
        self.closed = True
        if entry is None or entry.seq <= self.committed:
            self._end_subscribers()
        else:
            self._closing_seq = entry.seq
        return entry

    def fail(self) -> None:
        """The writer could not commit this log (it is lost): no more appends, and every
        subscription ends without ``session_exited`` (clients resume from the store)."""
        self.closed = True
        self._end_subscribers()

    def end_subscribers(self) -> None:
        """End every subscription without ``session_exited`` (they may resume later)."""
        for subscriber in list(self._subscribers):
            subscriber.end()
        self._subscribers.clear()

    def _end_subscribers(self) -> None:
        self._ended = True
        self.end_subscribers()
        self._progress.set()

    def idle(self, between_turns: bool) -> None:
        """Between turns a stored log keeps only its newest ``IDLE_RING`` committed entries in
        memory (older ones are read back from the store for a subscriber that asks); a turn
        keeps up to ``capacity``. A log without a store keeps ``capacity`` always."""
        if self._reader is None:
            return
        self._limit = min(IDLE_RING, self._capacity) if between_turns else self._capacity
        while len(self._ring) > self._limit and self._ring[0].seq <= self.committed:
            self._ring.popleft()

    # --- reading -----------------------------------------------------------------------------

    def backlog(self, since: int | None) -> list[LogEntry]:
        """The committed ring entries after ``since`` (all when None), with a leading gap when
        ``since`` is ahead of the log or (with no store to read) older than the ring."""
        committed = [e for e in self._ring if e.seq <= self.committed]
        if since is None:
            return committed
        if since > self.last_seq:
            return [GAP]
        first = self._ring[0].seq if self._ring else self.committed + 1
        later = [e for e in committed if e.seq > since]
        if since + 1 < first and self._reader is None:
            return [GAP, *later]
        return later

    def subscribe(self, since: int | None = None) -> Subscription:
        """Backlog after ``since`` plus every later committed event, registered atomically.

        ``since`` None: what the ring holds; ahead of the log: a gap, then live events.
        """
        if not self.started and self.error is None:
            raise RuntimeError("subscribe to a log whose head is not known yet")
        replay = None
        skip = 0
        if since is not None and since < self.committed and self._reader is not None:
            first = self._ring[0].seq if self._ring else self.committed + 1
            if since + 1 < first:
                replay = Replay(
                    self._reader, self.session_id, since, min(first - 1, self.committed)
                )
        if since is not None and self.committed < since <= self.last_seq:
            skip = since  # seen on a run stream before the commit: not again
        subscription = Subscription(
            self.session_id,
            self._subscribers.discard,
            self.backlog(since),
            self._subscriber_buffer,
            replay=replay,
            skip_through=skip,
        )
        if self._ended:
            subscription.end()
        else:
            self._subscribers.add(subscription)
        return subscription
