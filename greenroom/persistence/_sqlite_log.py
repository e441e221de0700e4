"""The durable-log roles of the SQLite store: local ownership at the boot epoch, the writer's
log records (events go through the writer thread in sqlite.py), the event reader.

A mixin of :class:`~greenroom.persistence.SqliteStore`, which supplies the writer thread
(``_write``), the readers (``_read``) and the state below.
"""

from __future__ import annotations

import datetime as dt
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from greenroom.domain import Message, format_datetime

from . import _rows, _sqlite_journal as journal
from ._persistence import CommitListener, NullBus
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


class SqliteLog:
    _bus = NullBus()
    path: Path
    boot_epoch: int
    _listener: CommitListener | None
    _touched: set[str]  # sessions with events since the last retention sweep (writer thread)
    _closed: bool
    _jobs: queue.SimpleQueue[Any]
    _job_queued: threading.Event

    if TYPE_CHECKING:

        async def _write(
            self, fn: Callable[[sqlite3.Connection], T], *, atomic: bool = False
        ) -> T: ...

        async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...

    # --- the roles of Persistence ------------------------------------------------------------

    @property
    def writer(self) -> SqliteLog:
        return self

    @property
    def events(self) -> SqliteLog:
        return self

    @property
    def ownership(self) -> SqliteLog:
        return self

    @property
    def bus(self) -> NullBus:
        return self._bus

    @property
    def membership(self) -> None:
        """One node owns this store alone: no cluster."""
        return None

    # --- Ownership: local, at the boot epoch -------------------------------------------------

    async def claim(self, session_id: str) -> Lease:
        return await self._read(lambda conn: journal.claim(conn, session_id, self.boot_epoch))

    def release_lease(self, lease: Lease) -> None:
        pass  # one process owns the whole file: nothing to hand back

    # --- Writer ------------------------------------------------------------------------------

    def listen(self, listener: CommitListener | None) -> None:
        self._listener = listener

    def append_event(self, row: EventRow) -> None:
        if self._closed:
            if self._listener is not None:
                self._listener({}, {row.session_id: f"store {self.path} is closed"})
            return
        self._jobs.put(row)  # write-behind: no slot, nobody waits; the listener hears back

    async def begin_turn(
        self, lease: Lease, turn: TurnStart, messages: tuple[Message, ...]
    ) -> tuple[int, ...]:
        rows = [_rows.item_to_row(m) for m in messages]
        return await self._write(lambda conn: journal.begin_turn(conn, lease, turn, rows))

    async def add_turn_message(self, session_id: str, message: Message, mark: TurnMark) -> int:
        row = _rows.item_to_row(message)
        call_id = message.message.tool_call_id if message.role == "tool" else ""
        return await self._write(
            lambda conn: journal.add_turn_message(conn, session_id, row, mark, call_id)
        )

    async def end_turn(self, lease: Lease, end: TurnEnd) -> None:
        ended_at = format_datetime(dt.datetime.now(dt.UTC))
        await self._write(lambda conn: journal.end_turn(conn, end, ended_at))

    async def begin_tool_call(self, lease: Lease, intent: ToolCallIntent) -> None:
        await self._write(lambda conn: journal.begin_tool_call(conn, lease, intent), atomic=True)

    async def begin_rerun(self, lease: Lease, session_id: str, tool_call_id: str) -> None:
        await self._write(lambda conn: journal.begin_rerun(conn, session_id, tool_call_id))

    async def decide(self, decision: Decision) -> int:
        row = _rows.item_to_row(decision.result)
        return await self._write(lambda conn: journal.decide(conn, decision, row))

    async def reserve_key(self, session_id: str, key: str) -> bool:
        now = time.time()
        return await self._write(
            lambda conn: journal.reserve_key(conn, session_id, key, now), atomic=True
        )

    async def release_key(self, session_id: str, key: str) -> None:
        def release(conn: sqlite3.Connection) -> None:
            conn.execute(
                "DELETE FROM idempotency_keys WHERE session_id = ? AND key = ?", (session_id, key)
            )

        await self._write(release, atomic=True)

    async def apply_recovery(self, plan: RecoveryPlan) -> tuple[int, ...]:
        rows = [(_rows.item_to_row(item), call_id) for item, call_id in plan.items]
        ids = await self._write(lambda conn: journal.apply_recovery(conn, plan, rows))
        if plan.events and self._listener is not None:  # committed: its events may be served
            self._listener({plan.lease.session_id: plan.events[-1].seq}, {})
        return ids

    async def apply_retention(self, policy: RetentionPolicy, now: float) -> int:
        def sweep(conn: sqlite3.Connection) -> int:
            # On the writer thread, which alone updates _touched: no lock needed.
            touched = set()
            if policy.max_deltas_per_session is not None:
                touched, self._touched = self._touched, set()
            return journal.retention(conn, policy, now, touched)

        return await self._write(sweep)

    # --- EventReader -------------------------------------------------------------------------

    async def read_events(self, session_id: str, after: int, limit: int) -> list[StoredEvent]:
        return await self._read(lambda conn: journal.read_events(conn, session_id, after, limit))

    async def last_seq(self, session_id: str) -> int:
        return await self._read(lambda conn: journal.last_seq(conn, session_id))

    async def interrupted_sessions(self) -> list[str]:
        return await self._read(journal.interrupted_sessions)

    async def turns(self, session_id: str, states: tuple[TurnState, ...]) -> list[TurnRecord]:
        return await self._read(lambda conn: journal.turns(conn, session_id, states))

    async def tool_calls(
        self, session_id: str, states: tuple[ToolCallState, ...]
    ) -> list[ToolCallRecord]:
        return await self._read(lambda conn: journal.tool_calls(conn, session_id, states))
