"""The durable-log roles of the PostgreSQL store: ownership (claim and release, fenced by
epoch), the writer's log records, the event reader. A mixin of
:class:`~greenroom.persistence.postgres.PostgresStore`, which supplies the writer thread
(``_writer``), the read pool (``_read``, ``_tx``) and this node's identity (``_me``)."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg

from greenroom.domain import Message, format_datetime

from . import _pg_fence as fence, _pg_journal as journal, _rows
from ._persistence import CommitListener
from ._pg_writer import PgWriter
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

T = TypeVar("T")
Conn = psycopg.Connection[Any]


class PgLog:
    _writer: PgWriter

    if TYPE_CHECKING:

        def _me(self) -> tuple[str, int]: ...

        async def _read(self, fn: Callable[[Conn], T]) -> T: ...

        async def _tx(self, fn: Callable[[Conn], T]) -> T: ...

    # --- Ownership ---------------------------------------------------------------------------

    async def claim(self, session_id: str) -> Lease:
        node, inc = self._me()
        return await self._tx(lambda conn: fence.claim(conn, session_id, node, inc))

    def release_lease(self, lease: Lease) -> None:
        node = self._me()[0]
        # Queued on the writer: after this node's last writes of the session, never blocking.
        self._writer.post(lambda conn: fence.release(conn, lease, node))

    # --- Writer ------------------------------------------------------------------------------

    def listen(self, listener: CommitListener | None) -> None:
        self._writer.listener = listener

    def append_event(self, row: EventRow) -> None:
        self._writer.append(row)  # write-behind: nobody waits; the listener hears back

    async def begin_turn(
        self, lease: Lease, turn: TurnStart, messages: tuple[Message, ...]
    ) -> tuple[int, ...]:
        me = self._me()
        rows = [_rows.item_to_row(m) for m in messages]
        return await self._writer.write(
            lambda conn: journal.begin_turn(conn, me, lease, turn, rows)
        )

    async def add_turn_message(self, session_id: str, message: Message, mark: TurnMark) -> int:
        me = self._me()
        row = _rows.item_to_row(message)
        call_id = message.message.tool_call_id if message.role == "tool" else ""
        return await self._writer.write(
            lambda conn: journal.add_turn_message(conn, me, session_id, row, mark, call_id)
        )

    async def end_turn(self, lease: Lease, end: TurnEnd) -> None:
        me = self._me()
        ended_at = format_datetime(dt.datetime.now(dt.UTC))
        await self._writer.write(lambda conn: journal.end_turn(conn, me, lease, end, ended_at))

    async def begin_tool_call(self, lease: Lease, intent: ToolCallIntent) -> None:
        me = self._me()
        await self._writer.write(lambda conn: journal.begin_tool_call(conn, me, lease, intent))

    async def begin_rerun(self, lease: Lease, session_id: str, tool_call_id: str) -> None:
        me = self._me()
        await self._writer.write(
            lambda conn: journal.begin_rerun(conn, me, lease, session_id, tool_call_id)
        )

    async def decide(self, decision: Decision) -> int:
        me = self._me()
        row = _rows.item_to_row(decision.result)
        return await self._writer.write(lambda conn: journal.decide(conn, me, decision, row))

    async def reserve_key(self, session_id: str, key: str) -> bool:
        now = time.time()
        return await self._writer.write(
            lambda conn: journal.reserve_key(conn, session_id, key, now)
        )

    async def release_key(self, session_id: str, key: str) -> None:
        await self._writer.write(lambda conn: journal.release_key(conn, session_id, key))

    async def apply_recovery(self, plan: RecoveryPlan) -> tuple[int, ...]:
        me = self._me()
        rows = [(_rows.item_to_row(item), call_id) for item, call_id in plan.items]
        ids = await self._writer.write(lambda conn: journal.apply_recovery(conn, me, plan, rows))
        listener = self._writer.listener
        if plan.events and listener is not None:  # committed: its events may be served
            listener({plan.lease.session_id: plan.events[-1].seq}, {})
        return ids

    async def apply_retention(self, policy: RetentionPolicy, now: float) -> int:
        writer = self._writer

        def sweep(conn: Conn) -> int:
            # On the writer thread, which alone updates touched: no lock needed.
            touched: set[str] = set()
            if policy.max_deltas_per_session is not None:
                touched, writer.touched = writer.touched, set()
            return journal.retention(conn, policy, now, touched)

        return await writer.write(sweep)

    # --- EventReader -------------------------------------------------------------------------

    async def read_events(self, session_id: str, after: int, limit: int) -> list[StoredEvent]:
        return await self._read(lambda conn: journal.read_events(conn, session_id, after, limit))

    async def last_seq(self, session_id: str) -> int:
        return await self._read(lambda conn: journal.last_seq(conn, session_id))

    async def interrupted_sessions(self) -> list[str]:
        node, inc = self._me()
        return await self._read(lambda conn: journal.interrupted_sessions(conn, node, inc))

    async def turns(self, session_id: str, states: tuple[TurnState, ...]) -> list[TurnRecord]:
        return await self._read(lambda conn: journal.turns(conn, session_id, states))

    async def tool_calls(
        self, session_id: str, states: tuple[ToolCallState, ...]
    ) -> list[ToolCallRecord]:
        return await self._read(lambda conn: journal.tool_calls(conn, session_id, states))
