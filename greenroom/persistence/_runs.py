"""Run records and the webhook outbox (issue 25, decision 0027).

A run is a turn: its record is the turn's row (``turns`` / ``gr_turns``), which says how it
ended, when, what it used and cost. A run that asked for a webhook gets a :class:`Delivery`
row in the *outbox*, written in the same transaction as the run's end (``Writer.end_turn``
with ``TurnEnd.delivery``, or a recovery that interrupts it), so a crash never loses it.

A deliverer (``serve/_webhooks.py``) *claims* due rows (a claimer name and a lease: on
PostgreSQL with ``FOR UPDATE SKIP LOCKED``, so two nodes never take the same row at once),
sends them, and records each attempt: delivered, failed (its last error) or pending again
with the time of the next attempt. A claim whose lease ran out (its deliverer died) can be
claimed again: delivery is at least once, and the receiver de-duplicates by delivery id.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import attrs
import trio

from ._records import Delivery, DeliveryState, TurnRecord


@attrs.frozen
class RunRecord:
    """A run as ``GET /api/sessions/{id}/runs`` shows it: its turn record and its webhook
    delivery (None: it asked for none, or its run has not ended yet)."""

    turn: TurnRecord
    delivery: Delivery | None = None


class RunLog(Protocol):
    """The run records and the webhook outbox of a store."""

    async def runs(self, session_id: str, limit: int) -> list[RunRecord]:
        """The session's newest ``limit`` runs, newest first. SessionNotFound."""

    async def run(self, session_id: str, run_id: str) -> RunRecord | None:
        """One run of the session (None: no such run). SessionNotFound."""

    async def claim_deliveries(
        self, claimer: str, now: float, lease: float, limit: int
    ) -> list[Delivery]:
        """Up to ``limit`` pending deliveries due at ``now`` and not claimed by anyone whose
        claim lasts, oldest first, claimed for ``claimer`` until ``now + lease``."""

    async def record_attempt(
        self,
        delivery_id: str,
        claimer: str,
        state: DeliveryState,
        attempts: int,
        last_error: str,
        now: float,
        next_attempt_at: float,
    ) -> bool:
        """Record an attempt of a delivery ``claimer`` holds, and give the claim up (a pending
        one is claimed again once due, by any deliverer). False: the claim was lost (nothing
        written)."""

    async def release_claims(self) -> int:
        """Free every claim (one node owns the store: claims of a dead process); how many."""

    def outbox_written(self) -> trio.Event:
        """Set when a run's end writes a delivery in this process (the deliverer's wake-up);
        a fresh event after it was set and read."""


class OutboxSignal:
    """The deliverer's wake-up: a trio event set after a commit that wrote a delivery; and
    the store's ``run_log`` role (the store itself)."""

    _outbox_event: trio.Event | None = None

    @property
    def run_log(self) -> RunLog:
        # The store this is mixed into implements the whole protocol.
        return self  # type: ignore[return-value]

    def outbox_written(self) -> trio.Event:
        event = self._outbox_event
        if event is None or event.is_set():
            event = self._outbox_event = trio.Event()
        return event

    def _outbox_changed(self) -> None:
        if self._outbox_event is not None:
            self._outbox_event.set()


class MemoryRuns(OutboxSignal):
    """:class:`RunLog` of the memory store (its journal holds the turn records)."""

    _turns: dict[str, TurnRecord]
    _outbox: dict[str, Delivery]
    _claims: dict[str, tuple[str, float]]  # delivery id -> (claimer, until)

    def _require(self, session_id: str) -> None:
        raise NotImplementedError

    def _delivery_of(self, run_id: str) -> Delivery | None:
        return next((d for d in self._outbox.values() if d.run_id == run_id), None)

    async def runs(self, session_id: str, limit: int) -> list[RunRecord]:
        self._require(session_id)
        found = [t for t in self._turns.values() if t.session_id == session_id]
        found.reverse()  # insertion order: newest last
        return [RunRecord(t, self._delivery_of(t.turn_id)) for t in found[:limit]]

    async def run(self, session_id: str, run_id: str) -> RunRecord | None:
        self._require(session_id)
        turn = self._turns.get(run_id)
        if turn is None or turn.session_id != session_id:
            return None
        return RunRecord(turn, self._delivery_of(run_id))

    def _add_deliveries(self, deliveries: Sequence[Delivery]) -> None:
        for delivery in deliveries:
            self._outbox[delivery.delivery_id] = delivery
        if deliveries:
            self._outbox_changed()

    async def claim_deliveries(
        self, claimer: str, now: float, lease: float, limit: int
    ) -> list[Delivery]:
        await trio.lowlevel.checkpoint()
        due = [
            d
            for d in self._outbox.values()
            if d.state == "pending"
            and d.next_attempt_at <= now
            and self._claims.get(d.delivery_id, ("", 0.0))[1] <= now
        ]
        due.sort(key=lambda d: d.created_at)
        for delivery in due[:limit]:
            self._claims[delivery.delivery_id] = (claimer, now + lease)
        return due[:limit]

    async def record_attempt(
        self,
        delivery_id: str,
        claimer: str,
        state: DeliveryState,
        attempts: int,
        last_error: str,
        now: float,
        next_attempt_at: float,
    ) -> bool:
        await trio.lowlevel.checkpoint()
        delivery = self._outbox.get(delivery_id)
        if delivery is None or self._claims.get(delivery_id, ("", 0.0))[0] != claimer:
            return False
        finished = None if state == "pending" else now
        self._outbox[delivery_id] = attrs.evolve(
            delivery,
            state=state,
            attempts=attempts,
            last_error=last_error,
            next_attempt_at=next_attempt_at,
            finished_at=finished,
        )
        self._claims.pop(delivery_id, None)
        return True

    async def release_claims(self) -> int:
        await trio.lowlevel.checkpoint()
        count = len(self._claims)
        self._claims.clear()
        return count


__all__ = ["MemoryRuns", "OutboxSignal", "RunLog", "RunRecord"]
