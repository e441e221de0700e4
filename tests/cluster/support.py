"""Helpers of the cluster tests: a registry on one node view, a turn left running by a node
that died."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import cast

from greenroom.actors import Registry, RegistryConfig, open_registry
from greenroom.domain import Message, utcnow
from greenroom.persistence import Persistence, TurnStart
from tests.cluster.fake_cluster import NodeView
from tests.fakes import FakeFactory, FakeRuntime


@asynccontextmanager
async def node_registry(
    view: NodeView, runtime: FakeRuntime | None = None
) -> AsyncIterator[Registry]:
    factory = FakeFactory(runtime or FakeRuntime(hold=True))
    async with open_registry(cast(Persistence, view), factory, RegistryConfig()) as registry:
        yield registry


async def crash_mid_turn(view: NodeView, session_id: str) -> None:
    """``view``'s node claims the session and starts a turn, then dies (its lease expires):
    the head is left ``running`` with nobody to end it."""
    lease = await view.claim(session_id)
    turn = TurnStart("turn-1", session_id, lease.last_seq + 1, utcnow())
    await view.writer.begin_turn(lease, turn, (Message.user("hello"),))
    view.cluster.expire(view.node_id)
