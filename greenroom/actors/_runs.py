"""Run records (issue 25): what one turn's actor notes while it runs, the end it writes, the
webhook delivery written with that end, and the JSON every transport and webhook shows.

A run is a turn; its id is the turn id. The facts are gathered by the turn task (through its
``TurnIO``: events, usage, messages) and written once, with the turn's end, by the actor's
live session (the only writer of the session's records).
"""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from collections.abc import Callable
from typing import Any, Protocol

import attrs

from greenroom.domain import (
    AgentChoice,
    AgentChoiceReasoning,
    AgentInfo,
    ErrorEvent,
    Event,
    Message,
    TokenUsage,
    format_datetime,
    to_json,
    utcnow,
)
from greenroom.errors import RunNotFound, SessionNotFound
from greenroom.persistence import (
    Delivery,
    RunLog,
    RunRecord,
    TurnRecord,
    TurnStart,
    TurnState,
)

STATUS: dict[str, str] = {"done": "completed"}  # the record's state as the API names it


@attrs.define(eq=False)
class RunFacts:
    """What a running turn's record will say: noted as its events go by (synchronously)."""

    created_at: dt.datetime = attrs.Factory(utcnow)
    webhook: str = ""
    model: str = ""  # asked for, then what answered (the last model call's)
    first_token_at: dt.datetime | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    error: str = ""
    error_code: str = ""
    answer: Message | None = None  # the last assistant message the turn stored
    start: TurnStart | None = None  # its record's start, once stored (None: no record)
    announced: bool = False  # its id went out on a stream_started

    def note(self, event: Event) -> None:
        if isinstance(event, AgentChoice | AgentChoiceReasoning):
            if self.first_token_at is None:
                self.first_token_at = utcnow()
        elif isinstance(event, TokenUsage):
            last = event.usage.last_message
            if last is not None and last.model:
                self.model = last.model
        elif isinstance(event, AgentInfo):
            if event.model and not self.model:
                self.model = event.model
        elif isinstance(event, ErrorEvent):
            self.error, self.error_code = event.error, event.code

    def add_usage(self, input_tokens: int, output_tokens: int, cost: float) -> None:
        self.input_tokens += max(0, input_tokens)
        self.output_tokens += max(0, output_tokens)
        self.cost += max(0.0, cost or 0.0)

    def stored(self, message: Message) -> None:
        if message.role == "assistant":
            self.answer = message


def _time(value: dt.datetime | None) -> str | None:
    return format_datetime(value) if value is not None else None


def delivery_json(delivery: Delivery) -> dict[str, Any]:
    finished = delivery.finished_at
    return {
        "url": delivery.url,
        "delivery_id": delivery.delivery_id,
        "status": delivery.state,
        "attempts": delivery.attempts,
        "last_error": delivery.last_error,
        "finished_at": (
            format_datetime(dt.datetime.fromtimestamp(finished, dt.UTC)) if finished else None
        ),
    }


def run_json(record: RunRecord) -> dict[str, Any]:
    """The run record as the API shows it (and a webhook sends it)."""
    t = record.turn
    body: dict[str, Any] = {
        "id": t.turn_id,
        "session_id": t.session_id,
        "status": STATUS.get(t.state, t.state),
        "agent": t.source,
        "agent_name": t.agent_name,
        "model": t.model,
        "created_at": _time(t.created_at or t.started_at),
        "started_at": _time(t.started_at),
        "first_token_at": _time(t.first_token_at),
        "ended_at": _time(t.ended_at),
        "input_tokens": t.input_tokens,
        "output_tokens": t.output_tokens,
        "cost": t.cost,
        "error": {"message": t.error, "code": t.error_code} if t.error else None,
        "reason": t.reason,
        "webhook": None,
    }
    if record.delivery is not None:
        body["webhook"] = delivery_json(record.delivery)
    elif t.webhook:
        body["webhook"] = {"url": t.webhook, "status": "pending" if t.state == "running" else ""}
    return body


def ended_record(
    turn: TurnRecord, state: TurnState, reason: str, facts: RunFacts, ended_at: dt.datetime
) -> TurnRecord:
    """``turn`` (its start) as it ends now, with what was noted."""
    return attrs.evolve(
        turn,
        state=state,
        reason=reason,
        ended_at=ended_at,
        first_token_at=facts.first_token_at,
        model=facts.model or turn.model,
        input_tokens=facts.input_tokens,
        output_tokens=facts.output_tokens,
        cost=facts.cost,
        error=facts.error,
        error_code=facts.error_code,
    )


def started_record(start: TurnStart, epoch: int) -> TurnRecord:
    """The record ``start`` stored (a running turn)."""
    return TurnRecord(
        start.turn_id,
        start.session_id,
        epoch,
        "running",
        start.first_seq,
        start.first_seq - 1,
        start.started_at,
        start.source,
        start.agent_name,
        created_at=start.created_at or start.started_at,
        model=start.model,
        webhook=start.webhook,
    )


class RunningTurn(Protocol):
    """What :func:`live_record` reads of a running ``Turn``."""

    @property
    def turn_id(self) -> str: ...

    @property
    def run(self) -> RunFacts: ...


def live_record(record: RunRecord, turn: RunningTurn | None) -> RunRecord:
    """``record`` as the running ``turn`` of its session's actor (None: none) knows it: a
    running run's stored record with what its turn noted so far."""
    t = record.turn
    if turn is None or turn.turn_id != t.turn_id or t.state != "running":
        return record
    facts = turn.run
    live = attrs.evolve(
        t,
        first_token_at=facts.first_token_at,
        model=facts.model or t.model,
        input_tokens=facts.input_tokens,
        output_tokens=facts.output_tokens,
        cost=facts.cost,
    )
    return attrs.evolve(record, turn=live)


def webhook_delivery(record: TurnRecord, now: float | None = None) -> Delivery | None:
    """The outbox row of an ended run that asked for a webhook: its summary, sent as it is.
    The delivery id is fresh here and stays the same on every attempt."""
    if not record.webhook:
        return None
    delivery_id = uuid.uuid4().hex
    run = run_json(RunRecord(record))
    run["webhook"] = None  # its own delivery is in the headers, not the body
    summary = {"type": "run.ended", "delivery_id": delivery_id, "run": run}
    created = time.time() if now is None else now
    body = json.dumps(summary, separators=(",", ":"), ensure_ascii=False).encode()
    return Delivery(delivery_id, record.session_id, record.turn_id, record.webhook, body, created)


def answer_json(message: Message | None) -> Any:
    return to_json(message.message) if message is not None else None


__all__ = [
    "RunFacts",
    "answer_json",
    "delivery_json",
    "ended_record",
    "live_record",
    "run_json",
    "started_record",
    "webhook_delivery",
]


@attrs.frozen
class RunReader:
    """Run records as the API reads them: from the store (any node can), a running one of an
    actor here showing what it used so far."""

    run_log: RunLog
    deleted: Callable[[str], bool]
    running: Callable[[str], RunningTurn | None]

    async def runs(self, session_id: str, limit: int) -> list[RunRecord]:
        """The session's newest runs, newest first."""
        if self.deleted(session_id):
            raise SessionNotFound(session_id)
        return [self._live(r) for r in await self.run_log.runs(session_id, limit)]

    async def run(self, session_id: str, run_id: str) -> RunRecord:
        if self.deleted(session_id):
            raise SessionNotFound(session_id)
        found = await self.run_log.run(session_id, run_id)
        if found is None:
            raise RunNotFound(f"session {session_id} has no run {run_id!r}")
        return self._live(found)

    def _live(self, record: RunRecord) -> RunRecord:
        return live_record(record, self.running(record.turn.session_id))
