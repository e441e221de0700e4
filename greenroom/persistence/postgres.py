"""The PostgreSQL session store: several greenroom nodes on one database.

This module is public, unlike the other stores' (``_memory``, ``_sqlite``), because psycopg is
an optional dependency: ``greenroom.persistence`` does not import it, and whoever opens a
PostgreSQL store imports this module on its own.

The same roles as the SQLite store (a :class:`~greenroom.persistence.Persistence`), for a
cluster: writes go through one group-commit writer thread per node
(:mod:`._group_commit`, the PostgreSQL dialect in :mod:`._pg_writer`); the Store contract and
the log's roles are the SQL templates (:mod:`._sql_store`, :mod:`._sql_log`) over
:mod:`._pg_sql` and :mod:`._pg_journal`, where every write of a session's log and records is
fenced by the epoch and the owner in ``gr_heads`` (:mod:`._pg_fence`). Ownership is claimed
across nodes and membership kept on the database clock (:mod:`._pg_membership`), and other
nodes' commits arrive on the bus (:mod:`._pg_listen`). Reads use a small connection pool through
``trio.to_thread`` (psycopg's async API does not run under trio). Deleted sessions stay as
tombstones: their ids are never used again.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import outcome
import psycopg
import trio
from psycopg_pool import ConnectionPool

from . import _pg_fence as fence, _pg_journal as journal, _pg_sql as sql
from ._group_commit import GroupCommitWriter
from ._pg_listen import PgBus
from ._pg_membership import PgMembership
from ._pg_open import connection_kwargs, describe, explain, open_and_migrate
from ._pg_writer import PgBackend, translate
from ._process_log import SqlProcessLog
from ._records import Lease
from ._schedules import SqlSchedules
from ._sql_log import SqlLog
from ._sql_runs import POSTGRES, SqlRuns
from ._sql_store import SqlStore

T = TypeVar("T")
Conn = psycopg.Connection[Any]
_READERS = 4  # pooled read connections at most (2 kept open)


class PostgresStore(
    SqlStore[Conn],
    SqlRuns,
    SqlLog[Conn, journal.Owner],
    PgMembership,
    SqlProcessLog,
    SqlSchedules,
):
    """The store, writer, event reader, ownership, bus and membership of one node on a
    PostgreSQL database. Use :func:`open_postgres_store`; call ``membership.join()`` before
    claiming sessions."""

    _sql = sql
    _journal = journal
    _placeholder = "%s"
    _runs_dialect = POSTGRES

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
        backend = PgBackend(dsn, writer_conn, node_id, self._owner, lease_ttl)
        self.group_commit = GroupCommitWriter(backend)
        self._bus = PgBus(dsn, node_id)
        self._read_limiter = trio.CapacityLimiter(_READERS)

    def _owner(self) -> journal.Owner:
        """(node id, incarnation): the owner every fence of this node's writes requires."""
        return self._node_id, self._incarnation

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

    def release_lease(self, lease: Lease) -> None:
        node = self._node_id
        # Queued on the writer: after this node's last writes of the session, never blocking.
        self.group_commit.post(lambda conn: fence.release(conn, lease, node))

    # --- plumbing ----------------------------------------------------------------------------

    async def _read(self, fn: Callable[[Conn], T], *, transaction: bool = False) -> T:
        """``fn`` on a pooled connection in a worker thread: in autocommit (one statement, one
        transaction), or in one ``transaction`` (claims, membership). Not abandoned on cancel:
        the connection goes back to the pool first."""
        self.group_commit.check_open()
        async with self._read_limiter:
            result = await trio.to_thread.run_sync(self._run_read, fn, transaction)
        return result.unwrap()

    async def _tx(self, fn: Callable[[Conn], T]) -> T:
        return await self._read(fn, transaction=True)

    def _run_read(self, fn: Callable[[Conn], T], transaction: bool) -> outcome.Outcome[T]:
        try:
            with self._pool.connection() as conn:
                if not transaction:
                    return outcome.Value(fn(conn))
                with conn.transaction():
                    return outcome.Value(fn(conn))
        except Exception as exc:
            return outcome.Error(translate(self.dsn, exc))

    async def _guarded(
        self, session_id: str, fn: Callable[[Conn], T], *, atomic: bool = False
    ) -> T:
        """``fn`` as a write that another node's ownership of the session refuses."""
        node, inc = self._owner()

        def write(conn: Conn) -> T:
            fence.not_owned_elsewhere(conn, session_id, node, inc)
            return fn(conn)

        return await self.group_commit.write(write, atomic=atomic)


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
        store.group_commit.start()
        store._bus.start()
        try:
            yield store
        finally:
            await store.aclose()
            await store._bus.aclose()
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(pool.close)
        writer_conn.close()  # if the writer never started; a no-op otherwise


__all__ = ["PostgresStore", "describe", "open_postgres_store"]
