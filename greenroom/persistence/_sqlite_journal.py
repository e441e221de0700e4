"""The SQL of the SQLite durable log: events behind the fence, turn and tool-call records, keys,
recovery and retention. Functions of a connection, run on the writer or reader threads.

The signatures are those of :mod:`._pg_journal` (one :class:`~._sql_log.SqlLog` serves both):
``owner`` is the boot epoch of this process, the one owner there is, and ``_fence`` is what
the PostgreSQL fence is on one node (the lock file keeps every other writer out): the head's
new state, SessionNotFound when the session is gone."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Any

from greenroom.domain import DELTA_TYPES, format_datetime, parse_datetime
from greenroom.errors import SessionNotFound, StoreError, ToolCallNotFound

from . import _sqlite_sql as sql
from ._records import (
    Decision,
    EventRow,
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

ItemRow = tuple[str, str | None, str]  # (kind, role, body JSON): serialised by the caller
Owner = int  # the boot epoch of this process
_DELTAS = ", ".join(f"'{t}'" for t in sorted(DELTA_TYPES))

# --- events --------------------------------------------------------------------------------

# The fence: a session's rows commit only right on top of its committed head, by a writer
# whose epoch is not older than the last one. On one node it always holds (the lock file keeps
# other processes out); it still proves the seqs contiguous and never reused.
FENCE = (
    "UPDATE heads SET last_seq = ?, epoch = ? WHERE session_id = ? AND last_seq = ? AND epoch <= ?"
)
INSERT_EVENT = (
    "INSERT INTO events (session_id, seq, epoch, type, body, created_at) VALUES (?, ?, ?, ?, ?, ?)"
)


def flush_events(
    conn: sqlite3.Connection, rows: list[EventRow], failed: dict[str, str]
) -> dict[str, int]:
    """Fence and insert ``rows`` (in append order); the new head of each session written.

    A session whose rows do not continue its head lands in ``failed`` and writes nothing more
    in this transaction (its later rows cannot continue the head either).
    """
    spans: dict[str, list[EventRow]] = {}
    for row in rows:
        spans.setdefault(row.session_id, []).append(row)
    heads: dict[str, int] = {}
    fences = []
    for session_id, span in spans.items():
        if session_id in failed:
            continue
        first, last, epoch = span[0].seq, span[-1].seq, span[-1].epoch
        if last - first + 1 != len(span):
            failed[session_id] = f"event seqs {first}..{last} are not contiguous"
            continue
        heads[session_id] = last
        fences.append((last, epoch, session_id, first - 1, epoch))
    # Every session's fence in one call; if one does not hold (rare), undo and go one by one.
    conn.execute("SAVEPOINT fence")
    if conn.executemany(FENCE, fences).rowcount != len(fences):
        conn.execute("ROLLBACK TO fence")
        for fence in fences:
            if conn.execute(FENCE, fence).rowcount != 1:
                session_id = fence[2]
                failed[session_id] = "the session's log moved on or is gone (fenced)"
                del heads[session_id]
    conn.execute("RELEASE fence")
    conn.executemany(INSERT_EVENT, [row for row in rows if row.session_id in heads])
    return heads


def read_events(
    conn: sqlite3.Connection, session_id: str, after: int, limit: int
) -> list[StoredEvent]:
    rows = conn.execute(
        "SELECT seq, type, body FROM events WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?",
        (session_id, after, limit),
    ).fetchall()
    return [StoredEvent(seq, kind, bytes(body)) for seq, kind, body in rows]


def claim(conn: sqlite3.Connection, session_id: str, owner: Owner) -> Lease:
    row = conn.execute(
        "SELECT last_seq, state FROM heads WHERE session_id = ?", (session_id,)
    ).fetchone()
    if row is None:
        raise SessionNotFound(session_id)
    return Lease(session_id, owner, int(row[0]), row[1])


def last_seq(conn: sqlite3.Connection, session_id: str) -> int:
    return claim(conn, session_id, 0).last_seq


def bump_boot_epoch(conn: sqlite3.Connection) -> int:
    """The epoch of this process: one more than the last process that opened the file."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("UPDATE meta SET value = value + 1 WHERE key = 'boot_epoch'")
        (epoch,) = conn.execute("SELECT value FROM meta WHERE key = 'boot_epoch'").fetchone()
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return int(epoch)


# --- turns ---------------------------------------------------------------------------------


def _fence(conn: sqlite3.Connection, session_id: str, state: str) -> None:
    if (
        conn.execute(
            "UPDATE heads SET state = ? WHERE session_id = ?", (state, session_id)
        ).rowcount
        == 0
    ):
        raise SessionNotFound(session_id)


def begin_turn(
    conn: sqlite3.Connection, owner: Owner, lease: Lease, turn: TurnStart, rows: list[ItemRow]
) -> tuple[int, ...]:
    _fence(conn, turn.session_id, "running")
    ids = tuple(sql.append_row(conn, turn.session_id, row) for row in rows)
    conn.execute(
        "INSERT INTO turns (turn_id, session_id, epoch, state, first_seq, text_seq, source,"
        " agent_name, started_at, created_at, model, webhook)"
        " VALUES (?, ?, ?, 'running', ?, ?, ?, ?, ?, ?, ?, ?)",
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
    conn: sqlite3.Connection,
    owner: Owner,
    session_id: str,
    row: ItemRow,
    mark: TurnMark,
    call_id: str,
) -> int:
    message_id = sql.append_row(conn, session_id, row)
    conn.execute("UPDATE turns SET text_seq = ? WHERE turn_id = ?", (mark.text_seq, mark.turn_id))
    if call_id:
        conn.execute(
            "UPDATE tool_calls SET state = 'finished' WHERE session_id = ? AND tool_call_id = ?"
            " AND state = 'started'",
            (session_id, call_id),
        )
    return message_id


def end_turn(
    conn: sqlite3.Connection, owner: Owner, lease: Lease, end: TurnEnd, ended_at: str
) -> None:
    _fence(conn, end.session_id, "idle")
    first = format_datetime(end.first_token_at) if end.first_token_at else None
    conn.execute(
        "UPDATE turns SET state = ?, last_seq = ?, ended_at = ?, reason = ?,"
        " first_token_at = ?, model = CASE WHEN ? = '' THEN model ELSE ? END,"
        " input_tokens = ?, output_tokens = ?, cost = ?, error = ?, error_code = ?"
        " WHERE turn_id = ?",
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
        insert_delivery(conn, end.delivery)


def turns(conn: sqlite3.Connection, session_id: str, states: Iterable[str]) -> list[TurnRecord]:
    wanted = list(states)
    marks = ", ".join("?" for _ in wanted)
    rows = conn.execute(
        f"SELECT {TURN_COLUMNS} FROM turns WHERE session_id = ?"
        f" AND state IN ({marks}) ORDER BY started_at, rowid",
        (session_id, *wanted),
    ).fetchall()
    return [turn_record(tuple(r)) for r in rows]


def _times(row: Any, *names: str) -> dict[str, Any]:
    data = dict(row)
    for name in names:
        if data[name] is not None:
            data[name] = parse_datetime(data[name])
    return data


def interrupted_sessions(conn: sqlite3.Connection, owner: Owner) -> list[str]:
    rows = conn.execute("SELECT session_id FROM heads WHERE state = 'running'").fetchall()
    return [r[0] for r in rows]


# --- tool calls ----------------------------------------------------------------------------


def begin_tool_call(
    conn: sqlite3.Connection, owner: Owner, lease: Lease, intent: ToolCallIntent
) -> None:
    # A model may reuse a call id later in a session: the newer call replaces the record.
    conn.execute(
        "INSERT INTO tool_calls (session_id, tool_call_id, turn_id, name, arguments, agent_name,"
        " state, started_seq, started_at) VALUES (?, ?, ?, ?, ?, ?, 'started', ?, ?)"
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


def _call(row: Any) -> ToolCallRecord:
    data = _times(row, "started_at", "decided_at")
    data["placeholder_id"] = data["placeholder_id"] or 0
    return ToolCallRecord(**data)


def tool_calls(
    conn: sqlite3.Connection, session_id: str, states: Iterable[str]
) -> list[ToolCallRecord]:
    wanted = list(states)
    marks = ", ".join("?" for _ in wanted)
    rows = conn.execute(
        f"SELECT {_CALL_COLUMNS} FROM tool_calls WHERE session_id = ? AND state IN ({marks})"
        " ORDER BY started_seq, tool_call_id",
        (session_id, *wanted),
    ).fetchall()
    return [_call(r) for r in rows]


def _in_doubt(conn: sqlite3.Connection, session_id: str, tool_call_id: str) -> ToolCallRecord:
    row = conn.execute(
        f"SELECT {_CALL_COLUMNS} FROM tool_calls WHERE session_id = ? AND tool_call_id = ?"
        " AND state IN ('in_doubt', 'started')",
        (session_id, tool_call_id),
    ).fetchone()
    if row is None:
        raise ToolCallNotFound(f"no tool call {tool_call_id!r} in doubt in {session_id}")
    return _call(row)


def begin_rerun(
    conn: sqlite3.Connection, owner: Owner, lease: Lease, session_id: str, tool_call_id: str
) -> None:
    _in_doubt(conn, session_id, tool_call_id)
    _fence(conn, session_id, "running")
    conn.execute(
        "UPDATE tool_calls SET state = 'started', decision = 'rerun'"
        " WHERE session_id = ? AND tool_call_id = ?",
        (session_id, tool_call_id),
    )


def decide(conn: sqlite3.Connection, owner: Owner, decision: Decision, result: ItemRow) -> int:
    sid, call_id = decision.session_id, decision.tool_call_id
    record = _in_doubt(conn, sid, call_id)
    _, role, body = result
    if (
        not record.placeholder_id
        or conn.execute(
            "UPDATE items SET role = ?, body = ? WHERE id = ? AND session_id = ?",
            (role, body, record.placeholder_id, sid),
        ).rowcount
        == 0
    ):
        sql.append_row(conn, sid, result)  # the placeholder was edited away: add the result
    conn.execute(
        "UPDATE tool_calls SET state = 'resolved', decision = ?, decided_by = ?, decided_at = ?"
        " WHERE session_id = ? AND tool_call_id = ?",
        (decision.action, decision.decided_by, format_datetime(decision.decided_at), sid, call_id),
    )
    (remaining,) = conn.execute(
        "SELECT COUNT(*) FROM tool_calls WHERE session_id = ? AND state = 'in_doubt'", (sid,)
    ).fetchone()
    _fence(conn, sid, "needs_decision" if remaining else "idle")
    return int(remaining)


# --- idempotency keys ----------------------------------------------------------------------


def reserve_key(conn: sqlite3.Connection, session_id: str, key: str, now: float) -> bool:
    try:
        cursor = conn.execute(
            "INSERT OR IGNORE INTO idempotency_keys (session_id, key, created_at) VALUES (?, ?, ?)",
            (session_id, key, now),
        )
    except sqlite3.IntegrityError:
        sql.require_session(conn, session_id)
        raise
    return cursor.rowcount == 1


def release_key(conn: sqlite3.Connection, session_id: str, key: str) -> None:
    conn.execute("DELETE FROM idempotency_keys WHERE session_id = ? AND key = ?", (session_id, key))


# --- recovery ------------------------------------------------------------------------------


def apply_recovery(
    conn: sqlite3.Connection, owner: Owner, plan: RecoveryPlan, rows: list[tuple[ItemRow, str]]
) -> tuple[int, ...]:
    lease = plan.lease
    sid = lease.session_id
    failed: dict[str, str] = {}
    if plan.events:
        flush_events(conn, list(plan.events), failed)
        if failed:
            raise StoreError(f"recovery of session {sid}: {failed[sid]}")
    elif claim(conn, sid, 0).last_seq != lease.last_seq:
        raise StoreError(f"recovery of session {sid}: the log moved on")
    ids = []
    for row, call_id in rows:
        item_id = sql.append_row(conn, sid, row)
        ids.append(item_id)
        if call_id:
            conn.execute(
                "UPDATE tool_calls SET placeholder_id = ?"
                " WHERE session_id = ? AND tool_call_id = ?",
                (item_id, sid, call_id),
            )
    conn.executemany(
        "UPDATE tool_calls SET state = 'in_doubt' WHERE session_id = ? AND tool_call_id = ?",
        [(sid, call_id) for call_id in plan.in_doubt],
    )
    last = plan.events[-1].seq if plan.events else lease.last_seq
    conn.executemany(
        "UPDATE turns SET state = 'interrupted', last_seq = ?, ended_at = ?, reason = ?"
        " WHERE turn_id = ?",
        [(last, format_datetime(plan.ended_at), plan.reason, t) for t in plan.interrupted_turns],
    )
    for delivery in plan.deliveries:
        insert_delivery(conn, delivery)
    _fence(conn, sid, plan.head_state)
    return tuple(ids)


# --- retention -----------------------------------------------------------------------------

_CHUNK = 5000  # rows one retention statement removes at most: no long stall of the writer


def retention(
    conn: sqlite3.Connection, policy: RetentionPolicy, now: float, touched: set[str]
) -> int:
    """Remove the deltas ``policy`` no longer keeps (by age everywhere, by count in the
    sessions written since the last sweep), and expired idempotency keys; how many rows."""
    removed = conn.execute(
        "DELETE FROM idempotency_keys WHERE created_at < ?", (now - policy.max_key_age,)
    ).rowcount
    if policy.max_age is not None:
        cutoff = now - policy.max_age
        while True:
            gone = conn.execute(
                "DELETE FROM events WHERE (session_id, seq) IN (SELECT session_id, seq"
                f" FROM events WHERE type IN ({_DELTAS}) AND created_at < ? LIMIT {_CHUNK})",
                (cutoff,),
            ).rowcount
            removed += gone
            if gone < _CHUNK:
                break
    if policy.max_deltas_per_session is not None:
        for session_id in touched:
            removed += conn.execute(
                f"DELETE FROM events WHERE session_id = ? AND type IN ({_DELTAS}) AND seq <"
                f" (SELECT seq FROM events WHERE session_id = ? AND type IN ({_DELTAS})"
                " ORDER BY seq DESC LIMIT 1 OFFSET ?)",
                (session_id, session_id, policy.max_deltas_per_session - 1),
            ).rowcount
    return removed
