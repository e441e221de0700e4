"""The run records and the webhook outbox of both SQL stores (:mod:`._runs`), once.

The statements are written with ``?`` and turned into ``%s`` for PostgreSQL; the tables that
differ (``turns`` / ``gr_turns``, the sessions) come from the store's :class:`RunsDialect`.
Claims run on the writer (one transaction each); on PostgreSQL the rows are picked with
``FOR UPDATE SKIP LOCKED``, so two nodes claiming at once never take the same row.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import attrs

from greenroom.domain import parse_datetime

from ._records import Delivery, DeliveryState, TurnRecord
from ._runs import OutboxSignal, RunRecord

T = TypeVar("T")

# The columns of a turn record, in TurnRecord's field names (both dialects).
TURN_COLUMNS = (
    "turn_id, session_id, epoch, state, first_seq, text_seq, started_at, source, agent_name,"
    " last_seq, ended_at, reason, created_at, first_token_at, model, input_tokens,"
    " output_tokens, cost, error, error_code, webhook"
)
_TURN_FIELDS = [name.strip() for name in TURN_COLUMNS.split(",")]
DELIVERY_COLUMNS = (
    "delivery_id, session_id, run_id, url, body, created_at, state, attempts, last_error,"
    " next_attempt_at, finished_at"
)
_DELIVERY_FIELDS = [name.strip() for name in DELIVERY_COLUMNS.split(",")]
_INSERT_DELIVERY = (
    f"INSERT INTO webhook_outbox ({DELIVERY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (delivery_id) DO NOTHING"
)


def _sql(text: str, placeholder: str) -> str:
    return text.replace("?", placeholder)


def insert_delivery(conn: Any, delivery: Delivery, placeholder: str = "?") -> None:
    """Write ``delivery`` to the outbox (in the caller's transaction: the run's end)."""
    d = delivery
    conn.execute(
        _sql(_INSERT_DELIVERY, placeholder),
        (
            d.delivery_id,
            d.session_id,
            d.run_id,
            d.url,
            d.body,
            d.created_at,
            d.state,
            d.attempts,
            d.last_error,
            d.next_attempt_at,
            d.finished_at,
        ),
    )


def turn_record(row: Iterable[Any]) -> TurnRecord:
    data = dict(zip(_TURN_FIELDS, row, strict=True))
    for name in ("started_at", "ended_at", "created_at", "first_token_at"):
        if data[name] is not None:
            data[name] = parse_datetime(data[name])
    data["cost"] = float(data["cost"] or 0.0)
    return TurnRecord(**data)


def _delivery(row: Iterable[Any]) -> Delivery:
    data = dict(zip(_DELIVERY_FIELDS, row, strict=True))
    data["body"] = bytes(data["body"])
    return Delivery(**data)


@attrs.frozen
class RunsDialect:
    placeholder: str  # "?" or "%s"
    turns: str  # the table of turn records
    session_exists: str  # SQL: one row when the session (?) exists
    skip_locked: str  # what picks rows no other transaction holds ("" on SQLite)


SQLITE = RunsDialect("?", "turns", "SELECT 1 FROM sessions WHERE id = ?", "")
POSTGRES = RunsDialect(
    "%s",
    "gr_turns",
    "SELECT 1 FROM gr_sessions WHERE session_id = ? AND deleted_at IS NULL",
    " FOR UPDATE SKIP LOCKED",
)


class SqlRuns(OutboxSignal):
    """:class:`~._runs.RunLog` for a SQL store (mixed in; reads on its read connections,
    claims and attempts through its group-commit writer)."""

    _runs_dialect: RunsDialect
    group_commit: Any

    async def _read(self, fn: Callable[[Any], T], *, transaction: bool = False) -> T:
        raise NotImplementedError

    def _q(self, text: str) -> str:
        return _sql(text, self._runs_dialect.placeholder)

    def _require_session(self, conn: Any, session_id: str) -> None:
        from greenroom.errors import SessionNotFound

        if (
            conn.execute(self._q(self._runs_dialect.session_exists), (session_id,)).fetchone()
            is None
        ):
            raise SessionNotFound(session_id)

    def _deliveries(self, conn: Any, run_ids: list[str]) -> dict[str, Delivery]:
        if not run_ids:
            return {}
        marks = ", ".join("?" for _ in run_ids)
        rows = conn.execute(
            self._q(f"SELECT {DELIVERY_COLUMNS} FROM webhook_outbox WHERE run_id IN ({marks})"),
            tuple(run_ids),
        ).fetchall()
        return {d.run_id: d for d in map(_delivery, rows)}

    async def runs(self, session_id: str, limit: int) -> list[RunRecord]:
        table = self._runs_dialect.turns
        order = "inserted" if table == "gr_turns" else "rowid"

        def read(conn: Any) -> list[RunRecord]:
            self._require_session(conn, session_id)
            rows = conn.execute(
                self._q(
                    f"SELECT {TURN_COLUMNS} FROM {table} WHERE session_id = ?"
                    f" ORDER BY started_at DESC, {order} DESC LIMIT ?"
                ),
                (session_id, limit),
            ).fetchall()
            turns = [turn_record(r) for r in rows]
            found = self._deliveries(conn, [t.turn_id for t in turns])
            return [RunRecord(t, found.get(t.turn_id)) for t in turns]

        return await self._read(read, transaction=True)

    async def run(self, session_id: str, run_id: str) -> RunRecord | None:
        table = self._runs_dialect.turns

        def read(conn: Any) -> RunRecord | None:
            self._require_session(conn, session_id)
            row = conn.execute(
                self._q(f"SELECT {TURN_COLUMNS} FROM {table} WHERE session_id = ? AND turn_id = ?"),
                (session_id, run_id),
            ).fetchone()
            if row is None:
                return None
            return RunRecord(turn_record(row), self._deliveries(conn, [run_id]).get(run_id))

        return await self._read(read, transaction=True)

    async def claim_deliveries(
        self, claimer: str, now: float, lease: float, limit: int
    ) -> list[Delivery]:
        sql = self._q(
            "UPDATE webhook_outbox SET claimed_by = ?, claimed_until = ? WHERE delivery_id IN"
            " (SELECT delivery_id FROM webhook_outbox WHERE state = 'pending'"
            " AND next_attempt_at <= ? AND claimed_until <= ? ORDER BY created_at LIMIT ?"
            f"{self._runs_dialect.skip_locked}) RETURNING {DELIVERY_COLUMNS}"
        )
        rows = await self.group_commit.write(
            lambda conn: conn.execute(sql, (claimer, now + lease, now, now, limit)).fetchall()
        )
        return sorted(map(_delivery, rows), key=lambda d: d.created_at)

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
        sql = self._q(
            "UPDATE webhook_outbox SET state = ?, attempts = ?, last_error = ?,"
            " next_attempt_at = ?, finished_at = ?, claimed_by = '', claimed_until = 0"
            " WHERE delivery_id = ? AND claimed_by = ?"
        )
        args = (
            state,
            attempts,
            last_error[:2000],
            next_attempt_at,
            None if state == "pending" else now,
            delivery_id,
            claimer,
        )
        count = await self.group_commit.write(lambda conn: conn.execute(sql, args).rowcount)
        return bool(count)

    async def release_claims(self) -> int:
        sql = "UPDATE webhook_outbox SET claimed_by = '', claimed_until = 0 WHERE claimed_by <> ''"
        return int(await self.group_commit.write(lambda conn: conn.execute(sql).rowcount))


__all__ = [
    "POSTGRES",
    "SQLITE",
    "TURN_COLUMNS",
    "RunsDialect",
    "SqlRuns",
    "insert_delivery",
    "turn_record",
]
