"""An in-memory cluster for the tests: one MemoryStore shared by several node views.

``FakeCluster`` keeps what PostgreSQL would: the nodes (incarnation, lease deadline on the trio
clock, advertised URL) and each session's owner. ``NodeView`` is one node's ``Persistence``:
the shared store, writer and reader; an ``Ownership`` whose ``claim`` follows the PG store's
rules (OwnedElsewhere for a live owner, a takeover of a dead one's session, NodeFenced unless
this node's lease is valid); a ``Membership``; and a bus that hears the other nodes' commits.
Tests steer it with ``fail_renew``, ``renew_answer`` and ``expire``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import attrs
import trio

from greenroom.errors import DatabaseUnavailable, NodeFenced, OwnedElsewhere, SessionNotFound
from greenroom.persistence import Lease, MemoryStore, NodeInfo


@attrs.define
class _Node:
    node_id: str
    url: str
    incarnation: int = 0
    lease_until: float = float("-inf")


@attrs.define
class _Owner:
    node_id: str
    incarnation: int


class FakeCluster:
    def __init__(self, store: MemoryStore, ttl: float = 3.0) -> None:
        self.memory = store
        self.ttl = ttl
        self.nodes: dict[str, _Node] = {}
        self.owners: dict[str, _Owner] = {}
        self.views: dict[str, NodeView] = {}
        store.listen(self._on_commit)
        # PostgreSQL keeps a deleted session's events until retention removes them.
        store.keep_deleted_logs = True

    def view(self, node_id: str, url: str = "") -> NodeView:
        self.nodes.setdefault(node_id, _Node(node_id, url))
        view = NodeView(self, node_id)
        self.views[node_id] = view
        return view

    def set_url(self, node_id: str, url: str) -> None:
        self.nodes[node_id].url = url

    def live(self, node_id: str, incarnation: int) -> bool:
        node = self.nodes.get(node_id)
        return (
            node is not None
            and node.incarnation == incarnation
            and node.lease_until > trio.current_time()
        )

    def expire(self, node_id: str) -> None:
        self.nodes[node_id].lease_until = trio.current_time() - 1

    def info(self, node: _Node) -> NodeInfo:
        owned = tuple(
            sid
            for sid, o in self.owners.items()
            if (o.node_id, o.incarnation) == (node.node_id, node.incarnation)
        )
        remaining = node.lease_until - trio.current_time()
        return NodeInfo(node.node_id, node.incarnation, node.url, "up", remaining, owned)

    def _on_commit(self, heads: Mapping[str, int], failed: Mapping[str, str]) -> None:
        # Every view's registry hears every commit (one ignores sessions it has no log of);
        # the bus of each node hears the commits of sessions it does not own.
        for view in list(self.views.values()):
            if view.listener is not None:
                view.listener(heads, failed)
            for sid, seq in heads.items():
                owner = self.owners.get(sid)
                if owner is None or owner.node_id != view.node_id:
                    view.bus.push(sid, seq)


class FakeBus:
    def __init__(self) -> None:
        self._send, self._recv = trio.open_memory_channel[tuple[str, int]](1024)
        self.muted = False  # a lost NOTIFY: the poll must catch up

    def push(self, session_id: str, seq: int) -> None:
        if not self.muted:
            with contextlib.suppress(trio.WouldBlock):
                self._send.send_nowait((session_id, seq))

    def updates(self) -> AsyncIterator[tuple[str, int]]:
        return self._recv.__aiter__()


class NodeView:
    """One node's Persistence over the shared store (see the module docstring)."""

    def __init__(self, cluster: FakeCluster, node_id: str) -> None:
        self.cluster = cluster
        self.node_id = node_id
        self.listener: Any = None
        self.bus = FakeBus()
        self.renew_fails = False  # renew raises DatabaseUnavailable
        self.renew_answer: bool | None = None  # force renew's answer
        self.hang: trio.Event | None = None  # renew waits for it, then fails
        self.joins = 0
        self.drained = False  # drain() was called (a stopping node)
        self.claims: list[str] = []
        self.refuse: OwnedElsewhere | None = None  # claim raises it (a stale view of the owner)

    # --- Persistence ---------------------------------------------------------------------

    @property
    def store(self) -> MemoryStore:
        return self.cluster.memory

    @property
    def schedules(self) -> Any:
        return self.cluster.memory.schedules

    @property
    def writer(self) -> NodeView:
        return self

    @property
    def events(self) -> MemoryStore:
        return self.cluster.memory

    @property
    def ownership(self) -> NodeView:
        return self

    @property
    def membership(self) -> NodeView:
        return self

    # writer: the shared store's, with one listener per view
    def listen(self, listener: Any) -> None:
        self.listener = listener

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cluster.memory, name)

    # --- Ownership ---------------------------------------------------------------------------

    @property
    def _node(self) -> _Node:
        return self.cluster.nodes[self.node_id]

    async def claim(self, session_id: str) -> Lease:
        await trio.lowlevel.checkpoint()
        self.claims.append(session_id)
        if self.refuse is not None:
            raise self.refuse
        node = self._node
        if not self.cluster.live(self.node_id, node.incarnation):
            raise NodeFenced()
        await self.cluster.memory.get_session(session_id)  # SessionNotFound
        owner = self.cluster.owners.get(session_id)
        if (
            owner is not None
            and owner.node_id != self.node_id
            and self.cluster.live(owner.node_id, owner.incarnation)
        ):
            url = self.cluster.nodes[owner.node_id].url
            raise OwnedElsewhere(owner=owner.node_id, owner_url=url)
        self.cluster.owners[session_id] = _Owner(self.node_id, node.incarnation)
        return await self.cluster.memory.claim(session_id)

    def release_lease(self, lease: Lease) -> None:
        owner = self.cluster.owners.get(lease.session_id)
        if owner is not None and owner.node_id == self.node_id:
            del self.cluster.owners[lease.session_id]

    # --- Membership --------------------------------------------------------------------------

    @property
    def incarnation(self) -> int:
        return self._node.incarnation

    @property
    def lease_ttl(self) -> float:
        return self.cluster.ttl

    async def join(self) -> int:
        await trio.lowlevel.checkpoint()
        if self.renew_fails:
            raise DatabaseUnavailable()
        node = self._node
        node.incarnation += 1
        node.lease_until = trio.current_time() + self.cluster.ttl
        self.joins += 1
        return node.incarnation

    async def renew(self) -> bool:
        await trio.lowlevel.checkpoint()
        if self.hang is not None:
            await self.hang.wait()
            raise DatabaseUnavailable()
        if self.renew_fails:
            raise DatabaseUnavailable()
        if self.renew_answer is not None:
            return self.renew_answer
        node = self._node
        if node.lease_until <= trio.current_time():
            return False
        node.lease_until = trio.current_time() + self.cluster.ttl
        return True

    async def leave(self) -> None:
        await trio.lowlevel.checkpoint()
        self._node.lease_until = float("-inf")

    async def drain(self) -> None:
        await trio.lowlevel.checkpoint()
        self.drained = True

    async def nodes(self) -> list[NodeInfo]:
        await trio.lowlevel.checkpoint()
        return [self.cluster.info(n) for n in self.cluster.nodes.values()]

    async def owner_of(self, session_id: str) -> NodeInfo | None:
        await self.cluster.memory.get_session(session_id)
        owner = self.cluster.owners.get(session_id)
        if owner is None or not self.cluster.live(owner.node_id, owner.incarnation):
            return None
        return self.cluster.info(self.cluster.nodes[owner.node_id])

    async def sweep(self) -> list[str]:
        heads = await self.cluster.memory.interrupted_sessions()
        found = []
        for sid in heads:
            owner = self.cluster.owners.get(sid)
            if owner is None or not self.cluster.live(owner.node_id, owner.incarnation):
                found.append(sid)
        return found

    async def ping(self) -> None:
        await trio.lowlevel.checkpoint()
        if self.renew_fails:
            raise DatabaseUnavailable()


__all__ = ["FakeCluster", "NodeView", "SessionNotFound"]
