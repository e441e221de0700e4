"""``serve`` wired as a cluster node (in process, the fake cluster standing in for the
PostgreSQL store ``open_store`` will open): the advertised URL defaults to the bound address,
requests are forwarded between two served nodes, ``/ready`` reflects the database and the
fence, and a refused renewal fences the node until it rejoins. Real clock: live sockets and
the lease keeper's real timers (a lease of 1 s keeps it short)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import httpx
import pytest
import trio

import greenroom.serve._server  # white-box: the store serve opens is replaced by the fake one
from greenroom.domain import Session
from greenroom.persistence import MemoryStore
from greenroom.serve import ServeConfig, serve
from tests.cluster.fake_cluster import FakeCluster, NodeView
from tests.slowness import slow

DEADLINE = slow(30)


def node_config(node_id: str) -> ServeConfig:
    return ServeConfig(
        db="postgresql://fake/greenroom",
        port=0,
        node_id=node_id,
        lease_ttl=1.0,
        lease_renew=0.1,
        titles=False,
        graceful_timeout=1.0,
    )


async def ready_is(client: httpx.AsyncClient, url: str, status: int) -> None:
    """Until ``/ready`` answers ``status`` (polled: real timers move the node's state)."""
    for _ in range(round(slow(400))):
        if (await client.get(f"{url}/ready")).status_code == status:
            return
        await trio.sleep(0.05)  # real clock: the node's own timers move its state
    raise AssertionError(f"/ready never answered {status}")


async def test_two_served_nodes_forward_and_fence(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = FakeCluster(MemoryStore(), ttl=1.0)
    opened: dict[str, str] = {}

    @asynccontextmanager
    async def fake_open_store(
        db: str, *, node_id: str = "", advertise_url: str = "", lease_ttl: float = 10.0
    ) -> AsyncIterator[NodeView]:
        opened[node_id] = advertise_url
        yield cluster.view(node_id, advertise_url)
        await trio.lowlevel.checkpoint()

    monkeypatch.setattr(greenroom.serve._server, "open_store", fake_open_store)
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery, httpx.AsyncClient() as client:
            url_a = await nursery.start(partial(serve, node_config("a"), embedded=True))
            url_b = await nursery.start(partial(serve, node_config("b"), embedded=True))
            assert opened == {"a": url_a, "b": url_b}  # the bound address, port 0 resolved
            assert cluster.nodes["a"].incarnation == 1

            ready = await client.get(f"{url_a}/ready")
            assert ready.status_code == 200
            assert ready.json()["node_id"] == "a" and ready.json()["fenced"] is False

            session = await cluster.memory.add_session(Session.new())
            title = f"/api/sessions/{session.id}/title"
            assert (await client.patch(url_b + title, json={"title": "b"})).status_code == 200
            reply = await client.patch(url_a + title, json={"title": "via a"})
            assert reply.status_code == 200
            assert cluster.owners[session.id].node_id == "b"
            assert (await cluster.memory.get_session(session.id)).title == "via a"

            view_b = cluster.views["b"]
            view_b.renew_answer = False  # the database says b's lease is gone
            await ready_is(client, url_b, 503)  # the next renewal (0.1 s) fences
            fenced = (await client.get(f"{url_b}/ready")).json()
            assert fenced["fenced"] is True and fenced["ready"] is False
            created = await client.post(f"{url_b}/api/sessions", json={})
            assert created.status_code == 503 and created.json()["code"] == "node_fenced"
            view_b.renew_answer = None
            await ready_is(client, url_b, 200)  # the rejoin comes with the next round
            assert cluster.nodes["b"].incarnation == 2
            nursery.cancel_scope.cancel()
    assert cluster.nodes["a"].lease_until == float("-inf")  # a left on the way out
