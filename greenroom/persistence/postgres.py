"""The PostgreSQL session store: several greenroom nodes on one database.

The same roles as the SQLite store (a :class:`~greenroom.persistence.Persistence`), for a
cluster: writes go through one writer thread per node with group commit
(:mod:`._pg_writer`), every write of a session's log and records is fenced by the epoch and
the owner in ``gr_heads`` (:mod:`._pg_fence`), ownership is claimed across nodes and
membership kept on the database clock (:mod:`._pg_membership`), and other nodes' commits
arrive on the bus (:mod:`._pg_listen`). Reads use a small connection pool through
``trio.to_thread`` (psycopg's async API does not run under trio). Deleted sessions stay as
tombstones: their ids are never used again.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import outcome
import psycopg
import trio
from psycopg_pool import ConnectionPool

from greenroom.domain import (
    ErrorItem,
    Message,
    Session,
    SessionSummary,
    SubSession,
    Summary,
)
from greenroom.errors import InvalidRequest, MessageNotFound

from . import _pg_fence as fence, _pg_sql as sql, _rows
from ._pg_listen import PgBus
from ._pg_log import PgLog
from ._pg_membership import PgMembership
from ._pg_open import connection_kwargs, describe, explain, open_and_migrate
from ._pg_writer import PgWriter, translate
from ._setters import FieldSetters

T = TypeVar("T")
Conn = psycopg.Connection[Any]
_READERS = 4  # pooled read connections at most (2 kept open)


class PostgresStore(FieldSetters, PgLog, PgMembership):
    """The store, writer, event reader, ownership, bus and membership of one node on a
    PostgreSQL database. Use :func:`open_postgres_store`; call ``membership.join()`` before
    claiming sessions."""

    def __init__(
        self,
        dsn: str,
        writer_conn: Conn,
        pool: ConnectionPool[Any],
        *,
        node_id: str,
        advertise_url: str,
        lease_ttl: float,
    ) -> None:
        self.dsn = dsn
        self.advertise_url = advertise_url
        self._node_id = node_id
        self._incarnation = 0
        self._lease_ttl = lease_ttl
        self._pool = pool
        self._writer = PgWriter(dsn, writer_conn, node_id, self._me, lease_ttl)
        self._bus = PgBus(dsn, node_id)
        self._read_limiter = trio.CapacityLimiter(_READERS)

    def _me(self) -> tuple[str, int]:
        return self._node_id, self._incarnation

    @property
    def batches(self) -> int:
        return self._writer.batches

    # --- the roles of Persistence ------------------------------------------------------------

    @property
    def store(self) -> PostgresStore:
        return self

    @property
    def writer(self) -> PostgresStore:
        return self

    @property
    def events(self) -> PostgresStore:
        return self

    @property
    def ownership(self) -> PostgresStore:
        return self

    @property
    def membership(self) -> PostgresStore:
        return self

    @property
    def bus(self) -> PgBus:
        return self._bus

    # --- plumbing ----------------------------------------------------------------------------

    async def _read(self, fn: Callable[[Conn], T]) -> T:
        """``fn`` on a pooled connection in a worker thread (autocommit: one statement, one
        transaction). Not abandoned on cancel: the connection goes back to the pool first."""
        self._writer.check_open()
        async with self._read_limiter:
            result = await trio.to_thread.run_sync(self._run_read, fn, False)
        return result.unwrap()

    async def _tx(self, fn: Callable[[Conn], T]) -> T:
        """``fn`` in one transaction on a pooled connection (claims, membership)."""
        self._writer.check_open()
        async with self._read_limiter:
            result = await trio.to_thread.run_sync(self._run_read, fn, True)
        return result.unwrap()

    def _run_read(self, fn: Callable[[Conn], T], transaction: bool) -> outcome.Outcome[T]:
        try:
            with self._pool.connection() as conn:
                if not transaction:
                    return outcome.Value(fn(conn))
                with conn.transaction():
                    return outcome.Value(fn(conn))
        except Exception as exc:
            return outcome.Error(translate(self.dsn, exc))

    async def _guarded(self, session_id: str, fn: Callable[[Conn], T]) -> T:
        """``fn`` as a write that another node's ownership of the session refuses."""
        node, inc = self._me()

        def write(conn: Conn) -> T:
            fence.not_owned_elsewhere(conn, session_id, node, inc)
            return fn(conn)

        return await self._writer.write(write)

    # --- the Store contract ------------------------------------------------------------------

    async def add_session(self, session: Session) -> Session:
        if not session.id:
            raise InvalidRequest("session id is empty", path="$.id")
        return await self._writer.write(lambda conn: sql.insert_session(conn, session))

    async def get_session(self, session_id: str) -> Session:
        return await self._read(lambda conn: sql.load_session(conn, session_id))

    async def list_sessions(self) -> list[SessionSummary]:
        return await self._read(sql.list_sessions)

    async def update_session(self, session: Session) -> None:
        row = _rows.session_to_row(session)
        await self._guarded(session.id, lambda conn: sql.upsert_session(conn, row))

    async def delete_session(self, session_id: str) -> None:
        await self._guarded(session_id, lambda conn: sql.delete_tree(conn, session_id))

    async def _append(self, session_id: str, item: Message | Summary | ErrorItem) -> int:
        row = _rows.item_to_row(item)  # serialised here, so the writer thread only runs SQL
        return await self._guarded(session_id, lambda conn: sql.append_row(conn, session_id, row))

    async def add_message(self, session_id: str, message: Message) -> int:
        return await self._append(session_id, message)

    async def update_message(self, session_id: str, message_id: int, message: Message) -> None:
        _, role, body = _rows.item_to_row(message)

        def update(conn: Conn) -> None:
            if not sql.update_message(conn, session_id, message_id, role, body):
                sql.require_session(conn, session_id)
                raise MessageNotFound(f"message {message_id} not found in session {session_id}")

        await self._guarded(session_id, update)

    async def add_error(self, session_id: str, error: ErrorItem) -> None:
        await self._append(session_id, error)

    async def add_summary(self, session_id: str, summary: Summary) -> None:
        await self._append(session_id, summary)

    async def add_sub_session(self, parent_id: str, sub_session: Session) -> None:
        await self._guarded(
            parent_id, lambda conn: sql.append_item(conn, parent_id, SubSession(sub_session))
        )

    async def _set(self, session_id: str, fields: Mapping[str, Any]) -> None:
        assignments = ", ".join(f"{column} = %s" for column in fields)
        values = tuple(fields.values())
        await self._guarded(
            session_id, lambda conn: sql.set_fields(conn, session_id, assignments, values)
        )

    async def titles(self) -> list[str]:
        return await self._read(
            lambda conn: [
                r[0]
                for r in conn.execute(
                    "SELECT title FROM gr_sessions WHERE deleted_at IS NULL"
                ).fetchall()
            ]
        )

    async def count_sessions(self) -> int:
        def count(conn: Conn) -> int:
            row = conn.execute(
                "SELECT COUNT(*) FROM gr_sessions WHERE parent_id IS NULL AND deleted_at IS NULL"
            ).fetchone()
            return int(row[0]) if row else 0

        return await self._read(count)

    async def aclose(self) -> None:
        self._writer.shutdown()
        await self._writer.stopped()


def default_node_id() -> str:
    return socket.gethostname()


@asynccontextmanager
async def open_postgres_store(
    dsn: str, *, node_id: str, advertise_url: str, lease_ttl: float = 10.0
) -> AsyncIterator[PostgresStore]:
    """Open (migrating if needed) the store on the PostgreSQL database ``dsn`` for the block.

    The node is not joined yet: ``membership.join()`` gives it an incarnation, after which it
    may claim sessions. Raises a :class:`~greenroom.errors.DatabaseError` naming the server
    and what to do when it cannot connect, and NewerDatabase for a schema newer than this code.
    """
    node_id = node_id or default_node_id()
    writer_conn = await trio.to_thread.run_sync(open_and_migrate, dsn, node_id, lease_ttl)
    pool: ConnectionPool[Any] = ConnectionPool(
        dsn,
        min_size=2,
        max_size=_READERS,
        kwargs=connection_kwargs("read", node_id, lease_ttl),
        open=False,
        name=f"greenroom-read {node_id}",
        timeout=5.0,  # a request waits this long for a connection, then DatabaseUnavailable
    )
    try:
        try:
            await trio.to_thread.run_sync(lambda: pool.open(wait=True, timeout=15.0))
        except psycopg.Error as exc:
            raise explain(dsn, exc) from None
        store = PostgresStore(
            dsn,
            writer_conn,
            pool,
            node_id=node_id,
            advertise_url=advertise_url,
            lease_ttl=lease_ttl,
        )
        store._writer.start()
        store._bus.start()
        try:
            yield store
        finally:
            store._writer.shutdown()
            await store._writer.stopped()
            await store._bus.aclose()
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(pool.close)
        writer_conn.close()  # if the writer never started; a no-op otherwise


__all__ = ["PostgresStore", "describe", "open_postgres_store"]
