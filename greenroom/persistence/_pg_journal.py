"""The SQL of the PostgreSQL durable log's records: turns, tool calls, decisions, idempotency
keys, recovery, retention and the event reader. Functions of a connection, run on the writer
thread (writes, each behind the fence of ``_pg_fence`` for ``owner``, this node's id and
incarnation) or a read-pool thread (reads). The signatures are those of
:mod:`._sqlite_journal`: one :class:`~._sql_log.SqlLog` serves both."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import psycopg
from psycopg.rows import dict_row

from greenroom.domain import DELTA_TYPES, format_datetime, parse_datetime
from greenroom.errors import SessionNotFound, StoreError, ToolCallNotFound

from . import _pg_fence as fence, _pg_sql as sql
from ._records import (
    Decision,
    Lease,
    RecoveryPlan,
    RetentionPolicy,
    StoredEvent,
    ToolCallIntent,
    ToolCallRecord,
    TurnEnd,
    TurnMark,
    TurnRecord,
    TurnStart,
)
from ._sql_runs import TURN_COLUMNS, insert_delivery, turn_record

Conn = psycopg.Connection[Any]
ItemRow = sql.ItemRow
Owner = tuple[str, int]  # (node id, incarnation) of the writer: the owner the fence requires
_DELTAS = list(DELTA_TYPES)

# --- events --------------------------------------------------------------------------------


def read_events(conn: Conn, session_id: str, after: int, limit: int) -> list[StoredEvent]:
    rows = conn.execute(
        "SELECT seq, type, body FROM gr_events WHERE session_id = %s AND seq > %s"
        " ORDER BY seq LIMIT %s",
        (session_id, after, limit),
    ).fetchall()
    return [StoredEvent(int(seq), kind, bytes(body)) for seq, kind, body in rows]


def last_seq(conn: Conn, session_id: str) -> int:
    row = conn.execute(
        "SELECT h.last_seq FROM gr_heads h JOIN gr_sessions s ON s.session_id = h.session_id"
        " WHERE h.session_id = %s AND s.deleted_at IS NULL",
        (session_id,),
    ).fetchone()
    if row is None:
        raise SessionNotFound(session_id)
    return int(row[0])


def claim(conn: Conn, session_id: str, owner: Owner) -> Lease:
    """Take ``session_id`` for this node, in the caller's transaction (``_pg_fence.claim``)."""
    return fence.claim(conn, session_id, *owner)


def interrupted_sessions(conn: Conn, owner: Owner) -> list[str]:
    """Heads left running that this node may recover: its own, unowned ones, and those of
    dead owners (a live node's running session is its own business)."""
    rows = conn.execute(
        "SELECT h.session_id FROM gr_heads h JOIN gr_sessions s ON s.session_id = h.session_id"
        " LEFT JOIN gr_nodes n ON n.node_id = h.owner_node"
        " WHERE h.state = 'running' AND s.deleted_at IS NULL AND (h.owner_node IS NULL"
        " OR (h.owner_node = %s AND h.owner_inc = %s) OR n.node_id IS NULL"
        " OR n.incarnation <> h.owner_inc OR n.lease_until <= now()) ORDER BY h.session_id",
        owner,
    ).fetchall()
    return [r[0] for r in rows]


# --- turns ---------------------------------------------------------------------------------


def begin_turn(
    conn: Conn, owner: Owner, lease: Lease, turn: TurnStart, rows: list[ItemRow]
) -> tuple[int, ...]:
    fence.fence(conn, lease, *owner, state="running")
    ids = tuple(sql.append_row(conn, turn.session_id, row) for row in rows)
    conn.execute(
        "INSERT INTO gr_turns (turn_id, session_id, epoch, state, first_seq, text_seq, source,"
        " agent_name, started_at, created_at, model, webhook)"
        " VALUES (%s, %s, %s, 'running', %s, %s, %s, %s, %s, %s, %s, %s)",
        (
            turn.turn_id,
            turn.session_id,
            lease.epoch,
            turn.first_seq,
            turn.first_seq - 1,
            turn.source,
            turn.agent_name,
            format_datetime(turn.started_at),
            format_datetime(turn.created_at or turn.started_at),
            turn.model,
            turn.webhook,
        ),
    )
    return ids


def add_turn_message(
    conn: Conn, owner: Owner, session_id: str, row: ItemRow, mark: TurnMark, call_id: str
) -> int:
    fence.fence_owner(conn, session_id, *owner)
    message_id = sql.append_row(conn, session_id, row)
    conn.execute(
        "UPDATE gr_turns SET text_seq = %s WHERE turn_id = %s", (mark.text_seq, mark.turn_id)
    )
    if call_id:
        conn.execute(
            "UPDATE gr_tool_calls SET state = 'finished' WHERE session_id = %s"
            " AND tool_call_id = %s AND state = 'started'",
            (session_id, call_id),
        )
    return message_id


def end_turn(conn: Conn, owner: Owner, lease: Lease, end: TurnEnd, ended_at: str) -> None:
    fence.fence(conn, lease, *owner, state="idle")
    first = format_datetime(end.first_token_at) if end.first_token_at else None
    conn.execute(
        "UPDATE gr_turns SET state = %s, last_seq = %s, ended_at = %s, reason = %s,"
        " first_token_at = %s, model = CASE WHEN %s = '' THEN model ELSE %s END,"
        " input_tokens = %s, output_tokens = %s, cost = %s, error = %s, error_code = %s"
        " WHERE turn_id = %s",
        (
            end.state,
            end.last_seq,
            ended_at,
            end.reason,
            first,
            end.model,
            end.model,
            end.input_tokens,
            end.output_tokens,
            end.cost,
            end.error,
            end.error_code,
            end.turn_id,
        ),
    )
    if end.delivery is not None:
        insert_delivery(conn, end.delivery, "%s")


def _dicts(conn: Conn, query: str, params: tuple[Any, ...]) -> list[dict[str, Any]]:
    return conn.cursor(row_factory=dict_row).execute(query, params).fetchall()


def _times(data: dict[str, Any], *names: str) -> dict[str, Any]:
    for name in names:
        if data[name] is not None:
            data[name] = parse_datetime(data[name])
    return data


def turns(conn: Conn, session_id: str, states: Iterable[str]) -> list[TurnRecord]:
    rows = conn.execute(
        f"SELECT {TURN_COLUMNS} FROM gr_turns WHERE session_id = %s"
        " AND state = ANY(%s) ORDER BY started_at, inserted",
        (session_id, list(states)),
    ).fetchall()
    return [turn_record(r) for r in rows]


# --- tool calls ----------------------------------------------------------------------------


def begin_tool_call(conn: Conn, owner: Owner, lease: Lease, intent: ToolCallIntent) -> None:
    fence.fence(conn, lease, *owner)
    # A model may reuse a call id later in a session: the newer call replaces the record.
    conn.execute(
        "INSERT INTO gr_tool_calls (session_id, tool_call_id, turn_id, name, arguments,"
        " agent_name, state, started_seq, started_at)"
        " VALUES (%s, %s, %s, %s, %s, %s, 'started', %s, %s)"
        " ON CONFLICT (session_id, tool_call_id) DO UPDATE SET turn_id = excluded.turn_id,"
        " name = excluded.name, arguments = excluded.arguments,"
        " agent_name = excluded.agent_name, state = 'started',"
        " started_seq = excluded.started_seq, started_at = excluded.started_at,"
        " placeholder_id = NULL, decision = '', decided_by = '', decided_at = NULL",
        (
            intent.session_id,
            intent.tool_call_id,
            intent.turn_id,
            intent.name,
            intent.arguments,
            intent.agent_name,
            intent.started_seq,
            format_datetime(intent.started_at),
        ),
    )


_CALL_COLUMNS = (
    "session_id, tool_call_id, turn_id, name, arguments, state, started_seq, started_at,"
    " agent_name, placeholder_id, decision, decided_by, decided_at"
)


def _call(row: dict[str, Any]) -> ToolCallRecord:
    data = _times(row, "started_at", "decided_at")
    data["placeholder_id"] = data["placeholder_id"] or 0
    return ToolCallRecord(**data)


def tool_calls(conn: Conn, session_id: str, states: Iterable[str]) -> list[ToolCallRecord]:
    rows = _dicts(
        conn,
        f"SELECT {_CALL_COLUMNS} FROM gr_tool_calls WHERE session_id = %s AND state = ANY(%s)"
        " ORDER BY started_seq, tool_call_id",
        (session_id, list(states)),
    )
    return [_call(r) for r in rows]


def _in_doubt(conn: Conn, session_id: str, tool_call_id: str) -> ToolCallRecord:
    rows = _dicts(
        conn,
        f"SELECT {_CALL_COLUMNS} FROM gr_tool_calls WHERE session_id = %s AND tool_call_id = %s"
        " AND state IN ('in_doubt', 'started')",
        (session_id, tool_call_id),
    )
    if not rows:
        raise ToolCallNotFound(f"no tool call {tool_call_id!r} in doubt in {session_id}")
    return _call(rows[0])


def begin_rerun(conn: Conn, owner: Owner, lease: Lease, session_id: str, tool_call_id: str) -> None:
    _in_doubt(conn, session_id, tool_call_id)
    fence.fence(conn, lease, *owner, state="running")
    conn.execute(
        "UPDATE gr_tool_calls SET state = 'started', decision = 'rerun'"
        " WHERE session_id = %s AND tool_call_id = %s",
        (session_id, tool_call_id),
    )


def decide(conn: Conn, owner: Owner, decision: Decision, result: ItemRow) -> int:
    sid, call_id = decision.session_id, decision.tool_call_id
    record = _in_doubt(conn, sid, call_id)
    fence.fence_owner(conn, sid, *owner)
    _, role, body = result
    if not record.placeholder_id or not sql.update_message(
        conn, sid, record.placeholder_id, role, body
    ):
        sql.append_row(conn, sid, result)  # the placeholder was edited away: add the result
    conn.execute(
        "UPDATE gr_tool_calls SET state = 'resolved', decision = %s, decided_by = %s,"
        " decided_at = %s WHERE session_id = %s AND tool_call_id = %s",
        (decision.action, decision.decided_by, format_datetime(decision.decided_at), sid, call_id),
    )
    (remaining,) = conn.execute(
        "SELECT COUNT(*) FROM gr_tool_calls WHERE session_id = %s AND state = 'in_doubt'", (sid,)
    ).fetchone() or (0,)
    fence.fence_owner(conn, sid, *owner, "needs_decision" if remaining else "idle")
    return int(remaining)


# --- idempotency keys ----------------------------------------------------------------------


def reserve_key(conn: Conn, session_id: str, key: str, now: float) -> bool:
    sql.require_session(conn, session_id)
    cursor = conn.execute(
        "INSERT INTO gr_idempotency (session_id, key, created_at) VALUES (%s, %s, %s)"
        " ON CONFLICT DO NOTHING",
        (session_id, key, now),
    )
    return cursor.rowcount == 1


def release_key(conn: Conn, session_id: str, key: str) -> None:
    conn.execute("DELETE FROM gr_idempotency WHERE session_id = %s AND key = %s", (session_id, key))


# --- recovery ------------------------------------------------------------------------------


def apply_recovery(
    conn: Conn, owner: Owner, plan: RecoveryPlan, rows: list[tuple[ItemRow, str]]
) -> tuple[int, ...]:
    lease = plan.lease
    sid = lease.session_id
    # The fence first (NodeFenced / SessionNotFound), then the log goes on right after its head.
    fence.fence(conn, lease, *owner, last_seq=lease.last_seq)
    if plan.events:
        failed: dict[str, str] = {}
        heads = fence.flush_events(conn, list(plan.events), failed, *owner)
        if failed:
            raise StoreError(f"recovery of session {sid}: {failed[sid]}")
        fence.notify(conn, owner[0], heads)
    ids = []
    for row, call_id in rows:
        item_id = sql.append_row(conn, sid, row)
        ids.append(item_id)
        if call_id:
            conn.execute(
                "UPDATE gr_tool_calls SET placeholder_id = %s"
                " WHERE session_id = %s AND tool_call_id = %s",
                (item_id, sid, call_id),
            )
    conn.execute(
        "UPDATE gr_tool_calls SET state = 'in_doubt' WHERE session_id = %s"
        " AND tool_call_id = ANY(%s)",
        (sid, list(plan.in_doubt)),
    )
    last = plan.events[-1].seq if plan.events else lease.last_seq
    conn.execute(
        "UPDATE gr_turns SET state = 'interrupted', last_seq = %s, ended_at = %s, reason = %s"
        " WHERE turn_id = ANY(%s)",
        (last, format_datetime(plan.ended_at), plan.reason, list(plan.interrupted_turns)),
    )
    for delivery in plan.deliveries:
        insert_delivery(conn, delivery, "%s")
    fence.fence(conn, lease, *owner, state=plan.head_state)
    return tuple(ids)


# --- retention -----------------------------------------------------------------------------

_CHUNK = 5000  # rows one retention statement removes at most: no long stall of the writer


def retention(conn: Conn, policy: RetentionPolicy, now: float, touched: set[str]) -> int:
    """Remove the deltas ``policy`` no longer keeps (by age everywhere, by count in the
    sessions this node wrote since the last sweep), and expired idempotency keys; how many."""
    removed = conn.execute(
        "DELETE FROM gr_idempotency WHERE created_at < %s", (now - policy.max_key_age,)
    ).rowcount
    if policy.max_age is not None:
        cutoff = now - policy.max_age
        while True:
            gone = conn.execute(
                "DELETE FROM gr_events WHERE (session_id, seq) IN (SELECT session_id, seq"
                " FROM gr_events WHERE type = ANY(%s) AND created_at < %s LIMIT %s)",
                (_DELTAS, cutoff, _CHUNK),
            ).rowcount
            removed += gone
            if gone < _CHUNK:
                break
    if policy.max_deltas_per_session is not None:
        for session_id in sorted(touched):
            removed += conn.execute(
                "DELETE FROM gr_events WHERE session_id = %s AND type = ANY(%s) AND seq <"
                " (SELECT seq FROM gr_events WHERE session_id = %s AND type = ANY(%s)"
                " ORDER BY seq DESC LIMIT 1 OFFSET %s)",
                (session_id, _DELTAS, session_id, _DELTAS, policy.max_deltas_per_session - 1),
            ).rowcount
    return removed
