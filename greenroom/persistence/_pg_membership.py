"""Cluster membership on PostgreSQL: a node's row in ``gr_nodes`` (incarnation, lease on the
database clock), and what the cluster service asks about nodes and owners. A mixin of
:class:`~greenroom.persistence.postgres.PostgresStore` (``_tx``, ``_read``, ``_node_id``,
``_incarnation``, ``_lease_ttl``). Expiry is judged only by the database's ``now()``: node
clocks are never compared."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg

from greenroom.errors import SessionNotFound

from ._records import NodeInfo

T = TypeVar("T")
Conn = psycopg.Connection[Any]
log = logging.getLogger(__name__)

_NODES = (
    "SELECT n.node_id, n.incarnation, n.advertise_url, n.state,"
    " EXTRACT(EPOCH FROM n.lease_until - now())::float8,"
    " COALESCE(array_agg(h.session_id ORDER BY h.session_id)"
    " FILTER (WHERE h.session_id IS NOT NULL), '{}')"
    " FROM gr_nodes n LEFT JOIN gr_heads h"
    " ON h.owner_node = n.node_id AND h.owner_inc = n.incarnation"
)
_SWEEP = (
    "SELECT h.session_id FROM gr_heads h JOIN gr_sessions s ON s.session_id = h.session_id"
    " LEFT JOIN gr_nodes n ON n.node_id = h.owner_node"
    " WHERE h.state <> 'idle' AND s.deleted_at IS NULL AND ("
    "  (h.owner_node IS NULL AND h.state = 'running')"
    "  OR (h.owner_node IS NOT NULL AND (n.node_id IS NULL OR n.incarnation <> h.owner_inc"
    "      OR n.lease_until <= now())))"
    " ORDER BY h.session_id LIMIT 100"
)


def _node(row: Any) -> NodeInfo:
    return NodeInfo(row[0], int(row[1]), row[2], row[3], float(row[4]), tuple(row[5]))


class PgMembership:
    _node_id: str
    _incarnation: int
    _lease_ttl: float
    advertise_url: str

    if TYPE_CHECKING:

        async def _read(self, fn: Callable[[Conn], T], *, transaction: bool = False) -> T: ...

        async def _tx(self, fn: Callable[[Conn], T]) -> T: ...

    @property
    def node_id(self) -> str:
        return self._node_id

    @property
    def incarnation(self) -> int:
        return self._incarnation

    @property
    def lease_ttl(self) -> float:
        return self._lease_ttl

    async def join(self) -> int:
        node, url, ttl = self._node_id, self.advertise_url, self._lease_ttl

        def join(conn: Conn) -> int:
            row = conn.execute(
                "INSERT INTO gr_nodes (node_id, incarnation, advertise_url, lease_until, state)"
                " VALUES (%s, 1, %s, now() + make_interval(secs => %s), 'up')"
                " ON CONFLICT (node_id) DO UPDATE SET incarnation = gr_nodes.incarnation + 1,"
                " advertise_url = excluded.advertise_url, lease_until = excluded.lease_until,"
                " state = 'up' RETURNING incarnation",
                (node, url, ttl),
            ).fetchone()
            assert row is not None
            inc = int(row[0])
            # An earlier incarnation of this node is dead: its sessions are free at once.
            conn.execute(
                "UPDATE gr_heads SET owner_node = NULL, owner_inc = NULL"
                " WHERE owner_node = %s AND owner_inc < %s",
                (node, inc),
            )
            return inc

        self._incarnation = await self._tx(join)
        log.info("node %s joined as incarnation %d", node, self._incarnation)
        return self._incarnation

    async def renew(self) -> bool:
        node, inc, ttl = self._node_id, self._incarnation, self._lease_ttl
        if inc == 0:
            return False
        return await self._read(
            lambda conn: (
                conn.execute(
                    "UPDATE gr_nodes SET lease_until = now() + make_interval(secs => %s)"
                    " WHERE node_id = %s AND incarnation = %s AND lease_until > now()",
                    (ttl, node, inc),
                ).rowcount
                == 1
            )
        )

    async def drain(self) -> None:
        node, inc = self._node_id, self._incarnation
        await self._read(
            lambda conn: conn.execute(
                "UPDATE gr_nodes SET state = 'draining' WHERE node_id = %s AND incarnation = %s",
                (node, inc),
            )
        )

    async def leave(self) -> None:
        node, inc = self._node_id, self._incarnation
        if inc == 0:
            return

        def leave(conn: Conn) -> None:
            conn.execute(
                "UPDATE gr_heads SET owner_node = NULL, owner_inc = NULL"
                " WHERE owner_node = %s AND owner_inc = %s",
                (node, inc),
            )
            # The row stays (incarnations only grow); its lease ends now.
            conn.execute(
                "UPDATE gr_nodes SET lease_until = now() WHERE node_id = %s AND incarnation = %s",
                (node, inc),
            )

        self._incarnation = 0
        await self._tx(leave)

    async def nodes(self) -> list[NodeInfo]:
        return await self._read(
            lambda conn: [
                _node(r)
                for r in conn.execute(_NODES + " GROUP BY n.node_id ORDER BY n.node_id").fetchall()
            ]
        )

    async def owner_of(self, session_id: str) -> NodeInfo | None:
        def owner(conn: Conn) -> NodeInfo | None:
            row = conn.execute(
                "SELECT h.owner_node, h.owner_inc FROM gr_heads h JOIN gr_sessions s"
                " ON s.session_id = h.session_id WHERE h.session_id = %s"
                " AND s.deleted_at IS NULL",
                (session_id,),
            ).fetchone()
            if row is None:
                raise SessionNotFound(session_id)
            if row[0] is None:
                return None
            found = conn.execute(
                _NODES + " WHERE n.node_id = %s AND n.incarnation = %s AND n.lease_until > now()"
                " GROUP BY n.node_id",
                (row[0], row[1]),
            ).fetchone()
            return None if found is None else _node(found)

        return await self._read(owner)

    async def sweep(self) -> list[str]:
        return await self._read(lambda conn: [r[0] for r in conn.execute(_SWEEP).fetchall()])

    async def ping(self) -> None:
        await self._read(lambda conn: conn.execute("SELECT 1").fetchone())
