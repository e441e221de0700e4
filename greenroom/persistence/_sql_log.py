"""The durable-log roles of both SQL stores: ownership (``claim``), the writer's log records and
the event reader, once. A mixin over the store's journal module (:class:`Journal`:
:mod:`._sqlite_journal`, :mod:`._pg_journal`, the same signatures in two dialects), its
group-commit writer, ``_read`` and ``_owner``: what every fenced write names as its writer (on
PostgreSQL this node's (id, incarnation), on SQLite the process's boot epoch).

``release_lease`` is the store's own: PostgreSQL hands the session back (queued on the writer,
after the session's last writes); one node has nothing to hand back
(:class:`~._persistence.SingleNodeRoles`).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Iterable
from typing import Generic, Protocol, TypeVar

from greenroom.domain import Message, format_datetime

from . import _rows
from ._group_commit import GroupCommitWriter
from ._persistence import CommitListener
from ._records import (
    Decision,
    EventRow,
    Lease,
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
from ._sql_store import ItemRow

T = TypeVar("T")
C = TypeVar("C")
O = TypeVar("O")  # noqa: E741 -- the owner, as C is the connection
Cx = TypeVar("Cx", contravariant=True)  # C and O in the protocol
Ox = TypeVar("Ox", contravariant=True)


class Journal(Protocol[Cx, Ox]):
    """A dialect's log SQL. Writes run on the writer thread, each behind the fence of
    ``owner``; reads on a read connection."""

    def claim(self, conn: Cx, session_id: str, owner: Ox, /) -> Lease: ...

    def begin_turn(
        self, conn: Cx, owner: Ox, lease: Lease, turn: TurnStart, rows: list[ItemRow], /
    ) -> tuple[int, ...]: ...

    def add_turn_message(
        self, conn: Cx, owner: Ox, session_id: str, row: ItemRow, mark: TurnMark, call_id: str, /
    ) -> int: ...

    def end_turn(
        self, conn: Cx, owner: Ox, lease: Lease, end: TurnEnd, ended_at: str, /
    ) -> None: ...

    def begin_tool_call(
        self, conn: Cx, owner: Ox, lease: Lease, intent: ToolCallIntent, /
    ) -> None: ...

    def begin_rerun(
        self, conn: Cx, owner: Ox, lease: Lease, session_id: str, tool_call_id: str, /
    ) -> None: ...

    def decide(self, conn: Cx, owner: Ox, decision: Decision, result: ItemRow, /) -> int: ...

    def reserve_key(self, conn: Cx, session_id: str, key: str, now: float, /) -> bool: ...

    def release_key(self, conn: Cx, session_id: str, key: str, /) -> None: ...

    def apply_recovery(
        self, conn: Cx, owner: Ox, plan: RecoveryPlan, rows: list[tuple[ItemRow, str]], /
    ) -> tuple[int, ...]: ...

    def retention(
        self, conn: Cx, policy: RetentionPolicy, now: float, touched: set[str], /
    ) -> int: ...

    def read_events(
        self, conn: Cx, session_id: str, after: int, limit: int, /
    ) -> list[StoredEvent]: ...

    def last_seq(self, conn: Cx, session_id: str, /) -> int: ...

    def interrupted_sessions(self, conn: Cx, owner: Ox, /) -> list[str]: ...

    def turns(self, conn: Cx, session_id: str, states: Iterable[str], /) -> list[TurnRecord]: ...

    def tool_calls(
        self, conn: Cx, session_id: str, states: Iterable[str], /
    ) -> list[ToolCallRecord]: ...


class SqlLog(Generic[C, O]):
    group_commit: GroupCommitWriter[C]
    _journal: Journal[C, O]

    def _owner(self) -> O:
        raise NotImplementedError

    async def _read(self, fn: Callable[[C], T], *, transaction: bool = False) -> T:
        raise NotImplementedError

    # --- Ownership ---------------------------------------------------------------------------

    async def claim(self, session_id: str) -> Lease:
        owner = self._owner()
        return await self._read(
            lambda conn: self._journal.claim(conn, session_id, owner), transaction=True
        )

    # --- Writer ------------------------------------------------------------------------------

    def listen(self, listener: CommitListener | None) -> None:
        self.group_commit.listener = listener

    def append_event(self, row: EventRow) -> None:
        self.group_commit.append(row)  # write-behind: nobody waits; the listener hears back

    async def begin_turn(
        self, lease: Lease, turn: TurnStart, messages: tuple[Message, ...]
    ) -> tuple[int, ...]:
        owner = self._owner()
        rows = [_rows.item_to_row(m) for m in messages]
        return await self.group_commit.write(
            lambda conn: self._journal.begin_turn(conn, owner, lease, turn, rows)
        )

    async def add_turn_message(self, session_id: str, message: Message, mark: TurnMark) -> int:
        owner = self._owner()
        row = _rows.item_to_row(message)
        call_id = message.message.tool_call_id if message.role == "tool" else ""
        return await self.group_commit.write(
            lambda conn: self._journal.add_turn_message(conn, owner, session_id, row, mark, call_id)
        )

    async def end_turn(self, lease: Lease, end: TurnEnd) -> None:
        owner = self._owner()
        ended_at = format_datetime(end.ended_at or dt.datetime.now(dt.UTC))
        await self.group_commit.write(
            lambda conn: self._journal.end_turn(conn, owner, lease, end, ended_at)
        )
        if end.delivery is not None:
            self._outbox_changed()  # committed: the deliverer may send it

    def _outbox_changed(self) -> None:
        pass  # the run log (SqlRuns) wakes its deliverer

    async def begin_tool_call(self, lease: Lease, intent: ToolCallIntent) -> None:
        owner = self._owner()
        await self.group_commit.write(
            lambda conn: self._journal.begin_tool_call(conn, owner, lease, intent), atomic=True
        )

    async def begin_rerun(self, lease: Lease, session_id: str, tool_call_id: str) -> None:
        owner = self._owner()
        await self.group_commit.write(
            lambda conn: self._journal.begin_rerun(conn, owner, lease, session_id, tool_call_id)
        )

    async def decide(self, decision: Decision) -> int:
        owner = self._owner()
        row = _rows.item_to_row(decision.result)
        return await self.group_commit.write(
            lambda conn: self._journal.decide(conn, owner, decision, row)
        )

    async def reserve_key(self, session_id: str, key: str) -> bool:
        now = time.time()
        return await self.group_commit.write(
            lambda conn: self._journal.reserve_key(conn, session_id, key, now), atomic=True
        )

    async def release_key(self, session_id: str, key: str) -> None:
        await self.group_commit.write(
            lambda conn: self._journal.release_key(conn, session_id, key), atomic=True
        )

    async def apply_recovery(self, plan: RecoveryPlan) -> tuple[int, ...]:
        owner = self._owner()
        rows = [(_rows.item_to_row(item), call_id) for item, call_id in plan.items]
        ids = await self.group_commit.write(
            lambda conn: self._journal.apply_recovery(conn, owner, plan, rows)
        )
        listener = self.group_commit.listener
        if plan.events and listener is not None:  # committed: its events may be served
            listener({plan.lease.session_id: plan.events[-1].seq}, {})
        if plan.deliveries:
            self._outbox_changed()
        return ids

    async def apply_retention(self, policy: RetentionPolicy, now: float) -> int:
        writer = self.group_commit

        def sweep(conn: C) -> int:
            touched: set[str] = set()
            if policy.max_deltas_per_session is not None:
                touched = writer.take_touched()  # on the writer thread, as take_touched needs
            return self._journal.retention(conn, policy, now, touched)

        return await writer.write(sweep)

    # --- EventReader -------------------------------------------------------------------------

    async def read_events(self, session_id: str, after: int, limit: int) -> list[StoredEvent]:
        return await self._read(
            lambda conn: self._journal.read_events(conn, session_id, after, limit)
        )

    async def last_seq(self, session_id: str) -> int:
        return await self._read(lambda conn: self._journal.last_seq(conn, session_id))

    async def interrupted_sessions(self) -> list[str]:
        owner = self._owner()
        return await self._read(lambda conn: self._journal.interrupted_sessions(conn, owner))

    async def turns(self, session_id: str, states: tuple[TurnState, ...]) -> list[TurnRecord]:
        return await self._read(lambda conn: self._journal.turns(conn, session_id, states))

    async def tool_calls(
        self, session_id: str, states: tuple[ToolCallState, ...]
    ) -> list[ToolCallRecord]:
        return await self._read(lambda conn: self._journal.tool_calls(conn, session_id, states))
