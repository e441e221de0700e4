"""The cluster service ``greenroom serve`` starts on a database with a membership: the lease
keeper, the sweeper and the mirrors of remote sessions, in one nursery; plus what ``greenroom
nodes`` and ``/ready`` show."""

from __future__ import annotations

import contextlib
from typing import Any

import attrs
import trio

from greenroom.actors import Registry
from greenroom.errors import GreenroomError
from greenroom.persistence import Membership, NodeInfo, Persistence

from ._lease import LeaseKeeper, LeaseTimes
from ._remote import Mirrors
from ._sweeper import sweeper


@attrs.frozen
class ClusterConfig:
    lease_ttl: float = 10.0
    lease_renew: float = 0.0  # 0: lease_ttl / 3
    poll_interval: float = 2.0  # mirrors read the database at least this often
    forward_timeout: float = 30.0  # a forwarded non-streaming request, end to end
    connect_timeout: float = 2.0  # reaching a peer; longer: it is "not answering"

    @property
    def sweep_interval(self) -> float:
        return min(self.lease_ttl / 2, 1.0)


class ClusterNode:
    """This node of a cluster: its membership, lease keeper and mirrors."""

    def __init__(self, persistence: Persistence, registry: Registry, config: ClusterConfig) -> None:
        membership = persistence.membership
        if membership is None:
            raise ValueError("a cluster node needs a store with a membership (PostgreSQL)")
        self.membership: Membership = membership
        self.registry = registry
        self.config = config
        self.keeper = LeaseKeeper(
            membership, registry, LeaseTimes(config.lease_ttl, config.lease_renew)
        )
        self.mirrors = Mirrors(
            persistence.events,
            persistence.bus,
            poll_interval=config.poll_interval,
            subscriber_buffer=registry.config.subscriber_buffer,
        )
        registry.observe_commits(self.mirrors.local_commits)

    @property
    def node_id(self) -> str:
        return self.membership.node_id

    @property
    def incarnation(self) -> int:
        return self.membership.incarnation

    @property
    def hop(self) -> str:
        """The ``Greenroom-Hop`` value of requests this node forwards."""
        return f"{self.node_id}:{self.incarnation}"

    async def owner(self, session_id: str) -> tuple[str, str, float] | None:
        """(node id, advertised URL, lease seconds left) of the session's live owner."""
        found = await self.membership.owner_of(session_id)
        if found is None or not found.alive:
            return None
        return found.node_id, found.advertise_url, found.lease_remaining

    async def run(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Join, then keep the lease, sweep and mirror until cancelled; reports the
        incarnation once joined. The caller :meth:`leave` s once its actors have stopped."""
        async with trio.open_nursery() as nursery:
            incarnation = await nursery.start(self.keeper.run)
            nursery.start_soon(sweeper, self.membership, self.registry, self.config.sweep_interval)
            nursery.start_soon(self.mirrors.run)
            task_status.started(incarnation)

    async def leave(self) -> None:
        """Release this incarnation's sessions and mark the node gone (shutdown, after the
        actors persisted); if the database does not answer, the lease runs out instead."""
        if self.membership.incarnation:
            with trio.move_on_after(2, shield=True), contextlib.suppress(GreenroomError):
                await self.membership.leave()


def shown_state(node: NodeInfo) -> str:
    """``up`` or ``draining`` while its lease holds, else ``expired``."""
    return node.state if node.alive else "expired"


def node_json(node: NodeInfo) -> dict[str, Any]:
    return {
        "node_id": node.node_id,
        "incarnation": node.incarnation,
        "advertise_url": node.advertise_url,
        "state": shown_state(node),
        "lease_remaining": round(node.lease_remaining, 3),
        "sessions": list(node.sessions),
    }


def nodes_table(nodes: list[NodeInfo]) -> list[str]:
    """``greenroom nodes`` as text lines."""
    if not nodes:
        return ["no nodes on record"]
    lines = []
    for node in sorted(nodes, key=lambda n: n.node_id):
        state = shown_state(node)
        lease = (
            f"lease {node.lease_remaining:.1f} s left"
            if node.alive
            else f"lease expired {-node.lease_remaining:.1f} s ago"
        )
        lines.append(
            f"{node.node_id}  incarnation {node.incarnation}  {state}  {lease}  "
            f"{node.advertise_url}  {len(node.sessions)} session(s)"
        )
        lines.extend(f"    {sid}" for sid in node.sessions)
    return lines
