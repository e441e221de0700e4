"""Readiness: whether a node can serve (what ``/ready`` shows)."""

from __future__ import annotations

import attrs
import trio

from greenroom.errors import GreenroomError
from greenroom.persistence import Membership, Store

COUNT_BUDGET = 0.1
"""Seconds the store has to count sessions; slower is "connected, but busy"."""


@attrs.frozen
class Readiness:
    """Whether this node can serve (``/ready``): its store answers, its cluster lease is held."""

    store_connected: bool
    active_sessions: int
    node_id: str = ""  # a cluster node's id ("" on a single node)
    fenced: bool = False


async def readiness(
    store: Store, membership: Membership | None, fenced: bool, budget: float
) -> Readiness:
    """Ask the store (and a cluster's database) whether this node can serve; the database's
    ping has ``budget`` seconds. A store that is slow to count is connected, not down."""
    count, connected = 0, False
    with trio.move_on_after(COUNT_BUDGET) as scope:
        try:
            count = await store.count_sessions()
            connected = True
        except GreenroomError:
            connected = False
    if scope.cancelled_caught:
        connected = True  # slow, not down: the query timed out
    if membership is None:
        return Readiness(connected, count)
    connected = False  # a cluster node: the database must answer, the lease be held
    with trio.move_on_after(budget):
        try:
            await membership.ping()
            connected = True
        except GreenroomError:
            pass
    return Readiness(connected and not fenced, count, membership.node_id, fenced)
