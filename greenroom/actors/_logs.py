"""The event logs of one node's sessions, the tombstones of deleted sessions, and event pumps.

A session's log is created lazily (by its actor, a subscriber or an embedder's sink) and claims
the session's head from the store in the background; it outlives an idle actor while it is
*pinned* (subscribers, a pump, events not committed yet). The writer's commit reports come here
and are delivered to the logs; a log that could not be written is lost, and the registry is told
through ``on_lost`` (it stops that session's actor). Everything but the claim and the pumps is
synchronous, so each method runs atomically in trio.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping

import attrs
import trio

from greenroom.domain import Event
from greenroom.errors import GreenroomError, StoreError
from greenroom.persistence import Lease, Persistence

from ._entries import LogEntry
from ._eventlog import EventLog
from ._recovery import recover_session

log = logging.getLogger(__name__)

EventSource = Callable[[Callable[[Event], None]], Awaitable[None]]
"""An embedder's event stream: called with an ``append`` function, runs until it ends."""


@attrs.define(eq=False)
class _LogSlot:
    log: EventLog
    pump: trio.CancelScope | None = None


class EventLogs:
    """The logs of this node's sessions by id (see the module docstring)."""

    def __init__(
        self,
        persistence: Persistence,
        nursery: trio.Nursery,
        *,
        capacity: int,
        subscriber_buffer: int,
        max_uncommitted: int,
        on_lost: Callable[[str], None],
    ) -> None:
        self._persistence = persistence
        self._nursery = nursery
        self._capacity = capacity
        self._subscriber_buffer = subscriber_buffer
        self._max_uncommitted = max_uncommitted
        self._on_lost = on_lost
        self._logs: dict[str, _LogSlot] = {}
        # Logs of deleted sessions whose session_exited is not committed yet: their
        # subscribers end once it is.
        self._draining: dict[str, EventLog] = {}
        self._tombstones: set[str] = set()
        # Told of this node's own commits (a cluster's mirrors: the bus brings only others').
        self._commit_observers: list[Callable[[Mapping[str, int]], None]] = []

    # --- reading -----------------------------------------------------------------------------

    def is_deleted(self, session_id: str) -> bool:
        return session_id in self._tombstones

    def has_log(self, session_id: str) -> bool:
        return session_id in self._logs

    def get(self, session_id: str) -> EventLog | None:
        """The session's log if it has one now (never creates one)."""
        slot = self._logs.get(session_id)
        return slot.log if slot is not None else None

    def last_seq(self, session_id: str) -> int:
        slot = self._logs.get(session_id)
        return slot.log.last_seq if slot is not None else 0

    def subscriber_count(self, session_id: str) -> int:
        slot = self._logs.get(session_id)
        return slot.log.subscriber_count if slot is not None else 0

    def total_subscribers(self) -> int:
        """Subscribers of every log on this node: sessions with a live actor or not (a deleted
        session's log until its ``session_exited`` is committed)."""
        live = sum(slot.log.subscriber_count for slot in self._logs.values())
        return live + sum(log_.subscriber_count for log_ in self._draining.values())

    def pinned(self, session_id: str) -> bool:
        """Whether the log must outlive an idle actor: it has subscribers or a pump, or events
        not committed yet (a new log would claim a head behind them)."""
        slot = self._logs.get(session_id)
        return slot is not None and (
            slot.log.subscriber_count > 0
            or slot.pump is not None
            or slot.log.uncommitted > 0
            or not slot.log.ready.is_set()
        )

    # --- creating, claiming, giving up -------------------------------------------------------

    def ensure(self, session_id: str) -> EventLog | None:
        """The session's log, created lazily; None once the session is deleted.

        A new log claims the session's head from the store in the background (events appended
        meanwhile wait for their seqs). A log closed because an embedder's event source ended
        is replaced by a fresh one that goes on with the same numbering.
        """
        slot = self._logs.get(session_id)
        if slot is not None and not slot.log.closed:
            return slot.log
        if session_id in self._tombstones:
            return None
        if slot is not None and slot.log.started:
            log_ = slot.log.successor()
            self._logs[session_id] = _LogSlot(log_)
            return log_
        log_ = EventLog(
            session_id,
            capacity=self._capacity,
            subscriber_buffer=self._subscriber_buffer,
            max_uncommitted=self._max_uncommitted,
            writer=self._persistence.writer,
            reader=self._persistence.events,
        )
        self._logs[session_id] = _LogSlot(log_)
        self._nursery.start_soon(self._claim, log_)
        return log_

    async def _claim(self, log_: EventLog) -> None:
        session_id = log_.session_id
        try:
            lease = await self._claim_repaired(session_id)
        except Exception as exc:
            if not isinstance(exc, GreenroomError):
                log.exception("claiming the log of session %s failed", session_id)
                exc = StoreError(f"claiming the log of session {session_id} failed")
            log_.abort(exc)
            slot = self._logs.get(session_id)
            if slot is not None and slot.log is log_:
                del self._logs[session_id]
            return
        log_.start(lease)

    async def _claim_repaired(self, session_id: str) -> Lease:
        """Claim the session's head; a head left ``running`` (its owner died mid-turn, on
        another node or before a lost log) is repaired by crash recovery first, with this very
        lease, so the actor only ever starts on a head that is idle or needs a decision."""
        lease = await self._persistence.ownership.claim(session_id)
        if lease.state != "running":
            return lease
        plan = await recover_session(
            self._persistence, session_id, reason="owner_lost", lease=lease
        )
        log.warning(
            "session %s taken over: %d turn(s) interrupted, %d tool call(s) in doubt",
            session_id,
            len(plan.interrupted_turns),
            len(plan.in_doubt),
        )
        return attrs.evolve(
            lease, last_seq=lease.last_seq + len(plan.events), state=plan.head_state
        )

    def release(self, session_id: str) -> None:
        """Give the session up (its actor retired, or an adoption is done): the log goes and
        its lease is released, unless the log is pinned."""
        slot = self._logs.get(session_id)
        if slot is not None and not self.pinned(session_id):
            del self._logs[session_id]
            if slot.log.lease is not None:
                self._persistence.ownership.release_lease(slot.log.lease)

    async def adopt(self, session_id: str, in_use: Callable[[], bool]) -> None:
        """Claim the session (repairing a head left running) and give it up again unless
        ``in_use`` says an actor took it meanwhile. OwnedElsewhere when another node was
        faster."""
        if session_id in self._logs:
            return  # ours already: it was repaired when it was claimed
        log_ = self.ensure(session_id)
        if log_ is None:
            return
        await log_.wait_ready()
        slot = self._logs.get(session_id)
        if slot is None or slot.log is not log_ or in_use():
            return
        self.release(session_id)

    def drop(self, session_id: str) -> LogEntry | None:
        """Tombstone ``session_id`` for good and end its log with ``session_exited``; returns
        that terminal entry (None when the session had no log)."""
        self._tombstones.add(session_id)
        slot = self._logs.pop(session_id, None)
        if slot is None:
            return None
        if slot.pump is not None:
            slot.pump.cancel(reason="session deleted")
        self._draining[session_id] = slot.log  # before: the commit may be reported at once
        exited = slot.log.close()
        if not slot.log.uncommitted:
            self._draining.pop(session_id, None)
        return exited

    def fail_all(self, reason: str) -> None:
        """This node was fenced: every log ends at once, writing nothing more."""
        logs, self._logs = self._logs, {}
        draining, self._draining = self._draining, {}
        for slot in logs.values():
            if slot.pump is not None:
                slot.pump.cancel(reason=reason)
            slot.log.fail()
        for log_ in draining.values():
            log_.fail()

    def end_subscriptions(self) -> None:
        """End every live subscription without ``session_exited`` (server shutdown: clients
        reconnect with their last seq)."""
        for slot in self._logs.values():
            slot.log.end_subscribers()

    # --- appending -------------------------------------------------------------------------

    def append(self, session_id: str, event: Event) -> LogEntry | None:
        """Append to the session's log (creating it); dropped for a deleted session."""
        log_ = self.ensure(session_id)
        return log_.append(event) if log_ is not None else None

    def between_turns(self, session_id: str, between: bool) -> None:
        """A turn of the session started (False) or ended (True): see ``EventLog.idle``."""
        slot = self._logs.get(session_id)
        if slot is not None:
            slot.log.idle(between)

    def register_source(self, session_id: str, source: EventSource) -> None:
        """Pump an embedder's events into the session's log (adopting a lazy log) until the
        source ends or the session is deleted. A no-op for a deleted session."""
        if session_id in self._tombstones:
            return
        self.ensure(session_id)
        slot = self._logs[session_id]
        if slot.pump is not None:
            slot.pump.cancel(reason="replaced by a new event source")
        scope = trio.CancelScope()
        slot.pump = scope
        self._nursery.start_soon(self._pump, slot, source, scope)

    async def _pump(self, slot: _LogSlot, source: EventSource, scope: trio.CancelScope) -> None:
        def append(event: Event) -> None:
            slot.log.append(event)

        with scope:
            try:
                await source(append)
            except Exception:
                log.exception("event source of session %s failed", slot.log.session_id)
        if slot.pump is scope:
            slot.pump = None
            slot.log.close()

    # --- commits -----------------------------------------------------------------------------

    def observe_commits(self, observer: Callable[[Mapping[str, int]], None]) -> None:
        """Call ``observer`` with the newest committed seq per session after each of this
        node's commits (in the trio thread; it must not block)."""
        self._commit_observers.append(observer)

    def on_commit(self, heads: Mapping[str, int], failed: Mapping[str, str]) -> None:
        """The writer's report (trio thread, after each commit): deliver what is committed;
        a log that could not be written is lost, and so is its actor (the next request claims
        the session afresh from what the store has)."""
        for observer in self._commit_observers:
            observer(heads)
        for session_id, seq in heads.items():
            slot = self._logs.get(session_id)
            if slot is not None:
                slot.log.on_committed(seq)
            draining = self._draining.get(session_id)
            if draining is not None:
                draining.on_committed(seq)
                if not draining.uncommitted:
                    del self._draining[session_id]
        for session_id, reason in failed.items():
            draining = self._draining.pop(session_id, None)
            if draining is not None:
                draining.fail()
            slot = self._logs.get(session_id)
            if slot is None or slot.log.closed:
                continue
            log.error("the event log of session %s was lost: %s", session_id, reason)
            del self._logs[session_id]
            if slot.pump is not None:
                slot.pump.cancel(reason="event log lost")
            slot.log.fail()
            self._on_lost(session_id)
