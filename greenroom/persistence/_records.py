"""The values a session's durable log is written and read as: events, leases, turn and tool-call
records, decisions, recovery plans and the retention policy.

Stores keep them; the actors layer decides what they say. Every value is frozen.
"""

from __future__ import annotations

import datetime as dt
from typing import Literal, NamedTuple

import attrs

from greenroom.domain import ErrorItem, Message

HeadState = Literal["idle", "running", "needs_decision"]
TurnState = Literal["running", "done", "failed", "cancelled", "interrupted"]
ToolCallState = Literal["started", "finished", "in_doubt", "resolved"]
DecisionAction = Literal["rerun", "done", "skip"]
DECISION_ACTIONS: tuple[str, ...] = ("rerun", "done", "skip")


@attrs.frozen
class Lease:
    """The right to append to one session's log, granted by ``Ownership.claim``.

    ``last_seq`` is the last committed event of the session when it was claimed: the log goes
    on at ``last_seq + 1``. ``epoch`` fences writers that lost the session (on SQLite, the
    boot epoch of this process); ``state`` is the session's head state at the claim.
    """

    session_id: str
    epoch: int
    last_seq: int
    state: HeadState = "idle"


NodeState = Literal["up", "draining"]


@attrs.frozen
class NodeInfo:
    """One node of a cluster as the database sees it (``greenroom nodes``, forwarding)."""

    node_id: str
    incarnation: int
    advertise_url: str
    state: NodeState
    lease_remaining: float  # seconds until its lease runs out, database clock (< 0: expired)
    sessions: tuple[str, ...] = ()  # the sessions it owns now

    @property
    def alive(self) -> bool:
        return self.lease_remaining > 0


class EventRow(NamedTuple):
    """One event as the writer stores it; ``body`` is the event's JSON, encoded once."""

    session_id: str
    seq: int
    epoch: int
    type: str
    body: bytes
    created_at: float  # seconds since the epoch (retention by age)


@attrs.frozen
class StoredEvent:
    seq: int
    type: str
    body: bytes


@attrs.frozen
class TurnStart:
    """A turn about to run: its user messages are stored with it, in one transaction."""

    turn_id: str
    session_id: str
    first_seq: int  # the seq its first event will get
    started_at: dt.datetime
    source: str = ""  # the agent source and agent that run it (a rerun rebuilds the runtime)
    agent_name: str = ""
    created_at: dt.datetime | None = None  # when the run was asked for (before any build)
    model: str = ""  # the model asked for ("" = the agent's)
    webhook: str = ""  # where the run's summary goes when it ends ("" = nowhere)


@attrs.frozen
class TurnEnd:
    """How a turn ended, and what its run record says about it: written at once with the
    webhook delivery of the run (``delivery``), if it asked for one."""

    turn_id: str
    session_id: str
    state: TurnState
    last_seq: int
    reason: str = ""
    ended_at: dt.datetime | None = None  # None: now
    first_token_at: dt.datetime | None = None
    model: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    error: str = ""
    error_code: str = ""
    delivery: Delivery | None = None


@attrs.frozen
class TurnMark:
    """Stored with a message a turn adds: its streamed text up to ``text_seq`` is now in the
    history, so recovery folds only the deltas after it into an interrupted message."""

    turn_id: str
    text_seq: int


@attrs.frozen
class TurnRecord:
    turn_id: str
    session_id: str
    epoch: int
    state: TurnState
    first_seq: int
    text_seq: int
    started_at: dt.datetime
    source: str = ""
    agent_name: str = ""
    last_seq: int | None = None
    ended_at: dt.datetime | None = None
    reason: str = ""
    # The run record (issue 25): when it was asked for, its first token, what it used.
    created_at: dt.datetime | None = None
    first_token_at: dt.datetime | None = None
    model: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    error: str = ""
    error_code: str = ""
    webhook: str = ""


DeliveryState = Literal["pending", "delivered", "failed"]


@attrs.frozen
class Delivery:
    """One webhook delivery: a row of the outbox, written in the transaction that ends its
    run and sent (at least once) by a deliverer that claims it. ``body`` is sent as it is;
    ``next_attempt_at`` and the claim are on the deliverer's clock (seconds)."""

    delivery_id: str
    session_id: str
    run_id: str
    url: str
    body: bytes
    created_at: float
    state: DeliveryState = "pending"
    attempts: int = 0
    last_error: str = ""
    next_attempt_at: float = 0.0
    finished_at: float | None = None


@attrs.frozen
class ToolCallIntent:
    """A tool call about to run, recorded (and committed) before the tool starts."""

    session_id: str
    tool_call_id: str
    turn_id: str
    name: str
    arguments: str
    started_seq: int
    started_at: dt.datetime
    agent_name: str = ""


@attrs.frozen
class ToolCallRecord:
    session_id: str
    tool_call_id: str
    turn_id: str
    name: str
    arguments: str
    state: ToolCallState
    started_seq: int
    started_at: dt.datetime
    agent_name: str = ""
    placeholder_id: int = 0  # the history message standing in for the result while in doubt
    decision: str = ""
    decided_by: str = ""
    decided_at: dt.datetime | None = None


@attrs.frozen
class Decision:
    """A person's decision about a tool call in doubt; ``result`` replaces its placeholder."""

    session_id: str
    tool_call_id: str
    action: DecisionAction
    decided_by: str
    decided_at: dt.datetime
    result: Message


@attrs.frozen
class RecoveryPlan:
    """Everything recovery writes for one session, in one transaction.

    ``items`` are appended to the history in order; an item paired with a tool call id is that
    call's placeholder result. ``events`` continue the log at ``lease.last_seq + 1``. Calls in
    ``in_doubt`` become ``in_doubt`` (they keep an existing placeholder); the turns in
    ``interrupted_turns`` end as ``interrupted``.
    """

    lease: Lease
    items: tuple[tuple[Message | ErrorItem, str], ...]
    events: tuple[EventRow, ...]
    in_doubt: tuple[str, ...]
    interrupted_turns: tuple[str, ...]
    reason: str
    ended_at: dt.datetime
    deliveries: tuple[Delivery, ...] = ()  # the webhooks of interrupted runs that asked for one

    @property
    def head_state(self) -> HeadState:
        return "needs_decision" if self.in_doubt else "idle"


@attrs.frozen
class RetentionPolicy:
    """How long token deltas stay replayable; every other event is kept.

    Deltas older than ``max_age`` seconds go, and so do a session's deltas beyond its newest
    ``max_deltas_per_session``. None switches a limit off. Follow-up idempotency keys older than
    ``max_key_age`` go too (a retry comes within seconds, not days).
    """

    max_age: float | None = 3600.0
    max_deltas_per_session: int | None = 5000
    max_key_age: float = 86400.0
