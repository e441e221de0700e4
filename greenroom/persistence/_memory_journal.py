"""The in-memory store's durable-log half: events, heads, turn and tool-call records, keys.

A write "commits" when it returns, so the commit listener hears of each event as it is
appended. Everything here is synchronous inside, hence atomic in trio, like one transaction.
"""

from __future__ import annotations

import bisect
import datetime as dt
from collections.abc import Iterator, Sequence

import attrs

from greenroom.domain import DELTA_TYPES, ErrorItem, Message, Session
from greenroom.errors import StoreError, ToolCallNotFound
from greenroom.observe import metrics

from ._persistence import CommitListener, SingleNodeRoles
from ._records import (
    Decision,
    Delivery,
    EventRow,
    HeadState,
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

BOOT_EPOCH = 1  # one process, one epoch: nothing outlives it


@attrs.define
class _Head:
    last_seq: int = 0
    epoch: int = 0
    state: HeadState = "idle"


class MemoryJournal(SingleNodeRoles):
    """Mixed into :class:`~greenroom.persistence.MemoryStore`, which supplies the sessions.

    ``keep_deleted_logs``: a deleted session's events stay readable (until retention removes
    them), as PostgreSQL keeps them behind its tombstone; by default they go with the session,
    as on SQLite.
    """

    def __init__(self) -> None:
        self.keep_deleted_logs = False
        self._heads: dict[str, _Head] = {}
        self._events: dict[str, list[EventRow]] = {}
        self._turns: dict[str, TurnRecord] = {}
        self._tool_calls: dict[tuple[str, str], ToolCallRecord] = {}
        self._keys: dict[str, dict[str, float]] = {}
        self._written = metrics().events_written  # commits are at once: no lag to observe
        self._listener: CommitListener | None = None

    # --- what the store supplies ---------------------------------------------------------

    def _get(self, session_id: str) -> Session:
        raise NotImplementedError

    def _store_message(self, session_id: str, message: Message) -> int:
        raise NotImplementedError

    def _store_item(self, session_id: str, item: Message | ErrorItem) -> int:
        raise NotImplementedError

    def _replace_message(self, session_id: str, message_id: int, message: Message) -> None:
        raise NotImplementedError

    def _add_deliveries(self, deliveries: Sequence[Delivery]) -> None:
        raise NotImplementedError

    def _head(self, session_id: str) -> _Head:
        self._get(session_id)
        return self._heads.setdefault(session_id, _Head())

    def _forget(self, session_id: str) -> None:
        """The session was deleted: its log and records go with it."""
        self._heads.pop(session_id, None)
        if not self.keep_deleted_logs:
            self._events.pop(session_id, None)
        self._keys.pop(session_id, None)
        for turn_id in [t for t, r in self._turns.items() if r.session_id == session_id]:
            del self._turns[turn_id]
        for key in [k for k in self._tool_calls if k[0] == session_id]:
            del self._tool_calls[key]

    # --- Ownership -------------------------------------------------------------------------

    async def claim(self, session_id: str) -> Lease:
        head = self._head(session_id)
        return Lease(session_id, BOOT_EPOCH, head.last_seq, head.state)

    # --- Writer ----------------------------------------------------------------------------

    def listen(self, listener: CommitListener | None) -> None:
        self._listener = listener

    def append_event(self, row: EventRow) -> None:
        head = self._heads.get(row.session_id)
        if head is None or head.last_seq != row.seq - 1 or head.epoch > row.epoch:
            if self._listener is not None:
                self._listener({}, {row.session_id: "the session's log moved on or is gone"})
            return
        head.last_seq, head.epoch = row.seq, row.epoch
        self._events.setdefault(row.session_id, []).append(row)
        self._written.inc()
        if self._listener is not None:
            self._listener({row.session_id: row.seq}, {})

    async def begin_turn(
        self, lease: Lease, turn: TurnStart, messages: tuple[Message, ...]
    ) -> tuple[int, ...]:
        head = self._head(turn.session_id)
        ids = tuple(self._store_message(turn.session_id, m) for m in messages)
        self._turns[turn.turn_id] = TurnRecord(
            turn.turn_id,
            turn.session_id,
            lease.epoch,
            "running",
            turn.first_seq,
            turn.first_seq - 1,
            turn.started_at,
            turn.source,
            turn.agent_name,
            created_at=turn.created_at or turn.started_at,
            model=turn.model,
            webhook=turn.webhook,
        )
        head.state = "running"
        return ids

    async def add_turn_message(self, session_id: str, message: Message, mark: TurnMark) -> int:
        message_id = self._store_message(session_id, message)
        turn = self._turns.get(mark.turn_id)
        if turn is not None:
            self._turns[mark.turn_id] = attrs.evolve(turn, text_seq=mark.text_seq)
        call_id = message.message.tool_call_id
        record = self._tool_calls.get((session_id, call_id))
        if message.role == "tool" and record is not None and record.state == "started":
            self._tool_calls[(session_id, call_id)] = attrs.evolve(record, state="finished")
        return message_id

    async def end_turn(self, lease: Lease, end: TurnEnd) -> None:
        head = self._head(end.session_id)
        turn = self._turns.get(end.turn_id)
        if turn is not None:
            self._turns[end.turn_id] = attrs.evolve(
                turn,
                state=end.state,
                last_seq=end.last_seq,
                ended_at=end.ended_at or dt.datetime.now(dt.UTC),
                reason=end.reason,
                first_token_at=end.first_token_at,
                model=end.model or turn.model,
                input_tokens=end.input_tokens,
                output_tokens=end.output_tokens,
                cost=end.cost,
                error=end.error,
                error_code=end.error_code,
            )
        head.state = "idle"
        if end.delivery is not None:
            self._add_deliveries((end.delivery,))

    async def begin_tool_call(self, lease: Lease, intent: ToolCallIntent) -> None:
        self._head(intent.session_id)
        self._tool_calls[(intent.session_id, intent.tool_call_id)] = ToolCallRecord(
            intent.session_id,
            intent.tool_call_id,
            intent.turn_id,
            intent.name,
            intent.arguments,
            "started",
            intent.started_seq,
            intent.started_at,
            intent.agent_name,
        )

    def _in_doubt(self, session_id: str, tool_call_id: str) -> ToolCallRecord:
        record = self._tool_calls.get((session_id, tool_call_id))
        if record is None or record.state not in ("in_doubt", "started"):
            raise ToolCallNotFound(f"no tool call {tool_call_id!r} in doubt in {session_id}")
        return record

    async def begin_rerun(self, lease: Lease, session_id: str, tool_call_id: str) -> None:
        head = self._head(session_id)
        record = self._in_doubt(session_id, tool_call_id)
        self._tool_calls[(session_id, tool_call_id)] = attrs.evolve(
            record, state="started", decision="rerun"
        )
        head.state = "running"

    async def decide(self, decision: Decision) -> int:
        sid = decision.session_id
        head = self._head(sid)
        record = self._in_doubt(sid, decision.tool_call_id)
        if record.placeholder_id:
            self._replace_message(sid, record.placeholder_id, decision.result)
        else:
            self._store_message(sid, decision.result)
        self._tool_calls[(sid, decision.tool_call_id)] = attrs.evolve(
            record,
            state="resolved",
            decision=decision.action,
            decided_by=decision.decided_by,
            decided_at=decision.decided_at,
        )
        remaining = sum(1 for r in self._calls_of(sid) if r.state == "in_doubt")
        head.state = "needs_decision" if remaining else "idle"
        return remaining

    async def reserve_key(self, session_id: str, key: str) -> bool:
        self._head(session_id)
        keys = self._keys.setdefault(session_id, {})
        if key in keys:
            return False
        keys[key] = dt.datetime.now(dt.UTC).timestamp()
        return True

    async def release_key(self, session_id: str, key: str) -> None:
        self._keys.get(session_id, {}).pop(key, None)

    async def apply_recovery(self, plan: RecoveryPlan) -> tuple[int, ...]:
        sid = plan.lease.session_id
        head = self._head(sid)
        if head.last_seq != plan.lease.last_seq:
            raise StoreError(f"the log of session {sid} moved on during recovery")
        ids = []
        for item, call_id in plan.items:
            item_id = self._store_item(sid, item)
            ids.append(item_id)
            if call_id:
                record = self._tool_calls[(sid, call_id)]
                self._tool_calls[(sid, call_id)] = attrs.evolve(record, placeholder_id=item_id)
        for call_id in plan.in_doubt:
            record = self._tool_calls[(sid, call_id)]
            self._tool_calls[(sid, call_id)] = attrs.evolve(record, state="in_doubt")
        for turn_id in plan.interrupted_turns:
            turn = self._turns[turn_id]
            self._turns[turn_id] = attrs.evolve(
                turn,
                state="interrupted",
                last_seq=plan.events[-1].seq if plan.events else head.last_seq,
                ended_at=plan.ended_at,
                reason=plan.reason,
            )
        self._add_deliveries(plan.deliveries)
        self._events.setdefault(sid, []).extend(plan.events)
        if plan.events:
            head.last_seq, head.epoch = plan.events[-1].seq, plan.lease.epoch
        head.state = plan.head_state
        if plan.events and self._listener is not None:
            self._listener({sid: head.last_seq}, {})
        return tuple(ids)

    async def apply_retention(self, policy: RetentionPolicy, now: float) -> int:
        removed = 0
        for keys in self._keys.values():
            expired = [k for k, at in keys.items() if at < now - policy.max_key_age]
            for key in expired:
                del keys[key]
            removed += len(expired)
        for sid, rows in self._events.items():
            deltas = [r.seq for r in rows if r.type in DELTA_TYPES]
            drop: set[int] = set()
            if policy.max_age is not None:
                cutoff = now - policy.max_age
                drop.update(r.seq for r in rows if r.type in DELTA_TYPES and r.created_at < cutoff)
            if policy.max_deltas_per_session is not None:
                keep = policy.max_deltas_per_session
                drop.update(deltas[: max(0, len(deltas) - keep)])
            if drop:
                self._events[sid] = [r for r in rows if r.seq not in drop]
                removed += len(drop)
        return removed

    # --- EventReader -----------------------------------------------------------------------

    async def read_events(self, session_id: str, after: int, limit: int) -> list[StoredEvent]:
        rows = self._events.get(session_id, [])
        start = bisect.bisect_right(rows, after, key=lambda r: r.seq)
        return [StoredEvent(r.seq, r.type, r.body) for r in rows[start : start + limit]]

    async def last_seq(self, session_id: str) -> int:
        return self._head(session_id).last_seq

    async def interrupted_sessions(self) -> list[str]:
        return [sid for sid, head in self._heads.items() if head.state == "running"]

    async def turns(self, session_id: str, states: tuple[TurnState, ...]) -> list[TurnRecord]:
        self._get(session_id)
        found = [t for t in self._turns.values() if t.session_id == session_id]
        return [t for t in found if t.state in states]

    def _calls_of(self, session_id: str) -> Iterator[ToolCallRecord]:
        return (r for (sid, _), r in self._tool_calls.items() if sid == session_id)

    async def tool_calls(
        self, session_id: str, states: tuple[ToolCallState, ...]
    ) -> list[ToolCallRecord]:
        self._get(session_id)
        return [r for r in self._calls_of(session_id) if r.state in states]


__all__ = ["BOOT_EPOCH", "MemoryJournal"]
