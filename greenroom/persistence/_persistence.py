"""Persistence: the store plus what a durable event log needs, behind one set of interfaces.

::

    Persistence
    ├── store       Store: sessions and their history (the contract in _protocol.py)
    ├── writer      Writer: events (write-behind, group commit), turn and tool-call records
    ├── events      EventReader: replay a session's log, read records for recovery
    ├── ownership   Ownership: who may append to a session's log (a Lease with its epoch)
    ├── bus         CommitBus: other nodes' commits (NullBus: there are none)
    ├── process_log ProcessLog: the process groups of running tool calls (_process_log.py)
    ├── run_log     RunLog: run records and the webhook outbox (_runs.py)
    └── schedules   ScheduleStore: scheduled runs and their next occurrence (_schedules.py)

Every store implements all of it on one object (its ``store``, ``writer``, ``events`` and
``ownership`` are the store itself). The in-memory and SQLite stores are the single-node form
(:class:`SingleNodeRoles`): SQLite grants every claim at the boot epoch of this process (the
exclusive lock on ``<db>.lock`` keeps other processes out), its writer runs the same fence a
multi-node store does (an event batch commits only on top of the session's committed head),
and no other node commits, so the bus never yields. The PostgreSQL store is the form for
several nodes, with a ``Membership`` and a bus that hears the other nodes' commits.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Protocol, Self

import trio

from greenroom.domain import Message

from ._process_log import ProcessLog
from ._protocol import Store
from ._records import (
    Decision,
    EventRow,
    Lease,
    NodeInfo,
    RecoveryPlan,
    RetentionPolicy,
    StoredEvent,
    ToolCallIntent,
    ToolCallRecord,
    ToolCallState,
    TurnEnd,
    TurnMark,
    TurnRecord,
    TurnStart,
    TurnState,
)
from ._runs import RunLog
from ._schedules import ScheduleStore

CommitListener = Callable[[Mapping[str, int], Mapping[str, str]], None]
"""Called in the trio thread after each commit: the newest committed seq per session, and the
sessions whose events could not be written (with why): their logs are lost from there on."""


class Writer(Protocol):
    """Group-commit writes of session logs and records. Events are write-behind: appending
    never waits, and the listener hears of the commit. Every other write returns once it is
    committed. Writes commit in the order they were made."""

    def listen(self, listener: CommitListener | None) -> None:
        """Set the one commit listener (the registry's)."""

    def append_event(self, row: EventRow) -> None:
        """Queue ``row``; it commits only right after the session's committed head (the
        fence), else the session is reported failed."""

    async def begin_turn(
        self, lease: Lease, turn: TurnStart, messages: tuple[Message, ...]
    ) -> tuple[int, ...]:
        """Store the turn's user messages and its ``running`` record at once; their ids."""

    async def add_turn_message(self, session_id: str, message: Message, mark: TurnMark) -> int:
        """``add_message`` for a message a turn adds; a tool result also finishes its call."""

    async def end_turn(self, lease: Lease, end: TurnEnd) -> None:
        """Record how the turn ended; the session's head is idle again."""

    async def begin_tool_call(self, lease: Lease, intent: ToolCallIntent) -> None:
        """Record that a tool call is about to run (the durability point before the tool)."""

    async def begin_rerun(self, lease: Lease, session_id: str, tool_call_id: str) -> None:
        """A call in doubt runs again: it is ``started`` once more (in doubt if we crash)."""

    async def decide(self, decision: Decision) -> int:
        """Store a decision and the result replacing the placeholder; the number of calls of
        the session still in doubt (none: the head is idle again). ToolCallNotFound unless the
        call is in doubt (or being rerun)."""

    async def reserve_key(self, session_id: str, key: str) -> bool:
        """Record a follow-up idempotency key; False when it was recorded before."""

    async def release_key(self, session_id: str, key: str) -> None: ...

    async def apply_recovery(self, plan: RecoveryPlan) -> tuple[int, ...]:
        """Write one session's recovery at once; the ids of the added history items."""

    async def apply_retention(self, policy: RetentionPolicy, now: float) -> int:
        """Remove the token deltas and idempotency keys the policy no longer keeps; how many."""


class EventReader(Protocol):
    async def read_events(self, session_id: str, after: int, limit: int) -> list[StoredEvent]:
        """Up to ``limit`` committed events with seq > ``after``, in order (retention may
        have removed some: seqs can jump)."""

    async def last_seq(self, session_id: str) -> int:
        """The session's newest committed seq (0: none)."""

    async def interrupted_sessions(self) -> list[str]:
        """Sessions whose head was left ``running`` (a turn or a rerun): what recovery repairs."""

    async def turns(self, session_id: str, states: tuple[TurnState, ...]) -> list[TurnRecord]:
        """The session's turn records in these states, oldest first."""

    async def tool_calls(
        self, session_id: str, states: tuple[ToolCallState, ...]
    ) -> list[ToolCallRecord]:
        """The session's tool-call records in these states, oldest first."""


class Ownership(Protocol):
    async def claim(self, session_id: str) -> Lease:
        """The right to append to ``session_id``'s log. SessionNotFound if it does not exist."""

    def release_lease(self, lease: Lease) -> None:
        """Give the session up (its actor retired)."""


class Membership(Protocol):
    """A node's place in a cluster of nodes sharing one database (PostgreSQL only).

    Leases run on the database clock. A node joins with a new incarnation (which releases every
    session an earlier incarnation of it owned), renews its lease well within ``lease_ttl``,
    and fences itself (stops its actors) when it cannot. ``Ownership.claim`` on such a store
    raises :class:`~greenroom.errors.OwnedElsewhere` for a session a live node owns, takes over
    a session whose owner's lease expired (epoch + 1), and raises
    :class:`~greenroom.errors.NodeFenced` while this node's own lease is not valid."""

    @property
    def node_id(self) -> str: ...

    @property
    def incarnation(self) -> int:
        """This node's incarnation since its last join (0: not joined)."""

    @property
    def lease_ttl(self) -> float: ...

    async def join(self) -> int:
        """Register this node with a new incarnation; its new incarnation."""

    async def renew(self) -> bool:
        """Extend this node's lease; False when the lease had expired or the row names
        another incarnation (the node must fence itself and join again)."""

    async def leave(self) -> None:
        """Release every session this incarnation owns and mark the node gone."""

    async def drain(self) -> None:
        """Mark this node ``draining`` (it is stopping: its running turns may finish)."""

    async def nodes(self) -> list[NodeInfo]:
        """Every node on record, with the sessions each owns."""

    async def owner_of(self, session_id: str) -> NodeInfo | None:
        """The live node that owns ``session_id`` (None: unowned, or its owner's lease
        expired). SessionNotFound if there is no such session."""

    async def sweep(self) -> list[str]:
        """Sessions owned by nodes whose lease expired (or by an old incarnation) whose head
        was left running: what some live node should claim and recover now."""

    async def ping(self) -> None:
        """One round trip to the database; DatabaseUnavailable when it fails."""


class CommitBus(Protocol):
    def updates(self) -> AsyncIterator[tuple[str, int]]:
        """(session id, committed seq) of commits made by other nodes."""


class NullBus:
    """One node: nobody else commits, so there is never an update."""

    def updates(self) -> AsyncIterator[tuple[str, int]]:
        return self

    def __aiter__(self) -> NullBus:
        return self

    async def __anext__(self) -> tuple[str, int]:
        await trio.sleep_forever()


class SingleNodeRoles:
    """The roles of a store that one node owns alone (memory, SQLite): its ``writer``,
    ``events`` and ``ownership`` are the store itself, its bus never yields, there is no
    membership, and a released lease has nothing to hand back."""

    _bus = NullBus()

    @property
    def writer(self) -> Self:
        return self

    @property
    def events(self) -> Self:
        return self

    @property
    def ownership(self) -> Self:
        return self

    @property
    def bus(self) -> NullBus:
        return self._bus

    @property
    def membership(self) -> None:
        """One node owns this store alone: no cluster."""
        return None

    def release_lease(self, lease: Lease) -> None:
        pass  # one process owns the whole store: nothing to hand back


class Persistence(Protocol):
    @property
    def store(self) -> Store: ...

    @property
    def writer(self) -> Writer: ...

    @property
    def events(self) -> EventReader: ...

    @property
    def ownership(self) -> Ownership: ...

    @property
    def bus(self) -> CommitBus: ...

    @property
    def process_log(self) -> ProcessLog: ...

    @property
    def schedules(self) -> ScheduleStore: ...

    @property
    def run_log(self) -> RunLog: ...

    @property
    def membership(self) -> Membership | None:
        """The cluster membership (None: one node owns the database alone)."""
