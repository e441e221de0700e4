"""Subscriptions to sessions another node owns, served from the database on this node.

A subscriber to such a session gets a :class:`~greenroom.actors.Subscription` on a *mirror*: an
``EventLog`` without a writer that replays from the database (``read_events`` after ``since``) and
takes the events other nodes commit. One consumer per node reads the commit bus and marks mirrors
stale (this node's own commits, which the bus leaves out, come from the registry: a mirror made
while another node owned the session goes on at once after a takeover here); one fetcher reads what
a stale mirror lacks, from its cursor; every ``poll_interval`` seconds every mirror is read from
its cursor anyway, so a lost notification delays an event, never loses it. Mirrors fan out like
local logs (bounded buffers, a slow subscriber is dropped), end their subscribers after
``session_exited``, and go away when their last subscriber leaves.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import trio

from greenroom.actors import DEFAULT_SUBSCRIBER_BUFFER, IDLE_RING, EventLog, Subscription
from greenroom.errors import GreenroomError, SessionNotFound
from greenroom.persistence import CommitBus, EventReader

log = logging.getLogger(__name__)

FETCH_PAGE = 500
STALE_QUEUE = 1024  # mirrors waiting for a read; a fuller queue is left to the poll


class Mirrors:
    def __init__(
        self,
        events: EventReader,
        bus: CommitBus,
        *,
        poll_interval: float = 2.0,
        subscriber_buffer: int = DEFAULT_SUBSCRIBER_BUFFER,
    ) -> None:
        self.events = events
        self.bus = bus
        self.poll_interval = poll_interval
        self.subscriber_buffer = subscriber_buffer
        self._mirrors: dict[str, EventLog] = {}
        self._locks: dict[str, trio.Lock] = {}
        self._stale: set[str] = set()
        self._stale_send, self._stale_recv = trio.open_memory_channel[str](STALE_QUEUE)

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._mirrors

    async def subscribe(self, session_id: str, since: int | None = None) -> Subscription:
        """Replay after ``since`` from the database, then what other nodes commit."""
        mirror = self._mirrors.get(session_id)
        if mirror is None:
            head = await self.events.last_seq(session_id)
            mirror = self._mirrors.get(session_id)  # made while we read: use that one
            if mirror is None:
                mirror = EventLog(
                    session_id,
                    capacity=IDLE_RING,
                    subscriber_buffer=self.subscriber_buffer,
                    reader=self.events,
                )
                mirror.last_seq = mirror.committed = head
                self._mirrors[session_id] = mirror
                self._locks[session_id] = trio.Lock()
        subscription = mirror.subscribe(since)
        self._mark_stale(session_id)  # anything committed since the head was read
        return subscription

    def total_subscribers(self) -> int:
        """Subscribers of the mirrors: clients following here sessions another node owns."""
        return sum(mirror.subscriber_count for mirror in self._mirrors.values())

    def local_commits(self, heads: Mapping[str, int]) -> None:
        """This node's own commits (the bus skips them): a mirror of a session this node has
        taken over since it was made reads them at once, not at the next poll."""
        for session_id, seq in heads.items():
            mirror = self._mirrors.get(session_id)
            if mirror is not None and seq > mirror.committed:
                self._mark_stale(session_id)

    def _mark_stale(self, session_id: str) -> None:
        if session_id in self._stale:
            return
        try:
            self._stale_send.send_nowait(session_id)
        except trio.WouldBlock:
            return  # the poll reads it
        self._stale.add(session_id)

    def _forget_unused(self, session_id: str) -> None:
        mirror = self._mirrors.get(session_id)
        if mirror is not None and (mirror.subscriber_count == 0 or mirror.closed):
            del self._mirrors[session_id]
            self._locks.pop(session_id, None)

    async def fetch(self, session_id: str) -> None:
        """Read what the mirror lacks, from its cursor, and deliver it."""
        self._forget_unused(session_id)
        mirror = self._mirrors.get(session_id)
        lock = self._locks.get(session_id)
        if mirror is None or lock is None:
            return
        async with lock:
            while not mirror.closed:
                try:
                    rows = await self.events.read_events(session_id, mirror.committed, FETCH_PAGE)
                except SessionNotFound:  # deleted, its events gone: subscribers end (404 next)
                    mirror.fail()
                    break
                except GreenroomError as exc:  # the next poll tries again
                    log.warning("reading the events of session %s: %s", session_id, exc)
                    return
                mirror.extend_committed(rows)
                if len(rows) < FETCH_PAGE:
                    break
        self._forget_unused(session_id)

    async def run(self) -> None:
        """The node's one bus consumer, the fetcher and the poll; until cancelled."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._consume)
            nursery.start_soon(self._poll)
            async with self._stale_recv:
                async for session_id in self._stale_recv:
                    self._stale.discard(session_id)
                    await self.fetch(session_id)

    async def _consume(self) -> None:
        async for session_id, seq in self.bus.updates():
            mirror = self._mirrors.get(session_id)
            if mirror is not None and seq > mirror.committed:
                self._mark_stale(session_id)

    async def _poll(self) -> None:
        while True:
            await trio.sleep(self.poll_interval)
            for session_id in list(self._mirrors):
                await self.fetch(session_id)
