"""Forwarding between two in-process greenroom servers on 127.0.0.1 sharing a fake cluster
(real clock: live sockets). Routing to the owner (REST, SSE run, WebSocket ops), a hop is never
forwarded again, one retry after a 421 then 503, 503 + Retry-After while a silent owner's lease
lasts, serving here once it expired, and a subscription to a remote session from the database."""

from __future__ import annotations

import json
import math
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any, cast

import attrs
import httpx
import hypercorn.trio
import pytest
import trio
from trio_websocket import open_websocket_url

from greenroom.actors import Registry, RegistryConfig, open_registry
from greenroom.cluster import ClusterConfig, ClusterNode
from greenroom.domain import Session, Warning
from greenroom.errors import GreenroomError, OwnedElsewhere
from greenroom.observe import metrics_scope
from greenroom.persistence import MemoryStore, Persistence
from greenroom.serve import ServeConfig, hypercorn_config
from greenroom.transport import AppConfig, Forwarder, ShieldedSend, create_app
from greenroom.transport._forward import MAX_FRAME, RemoteRun, Upstream  # white-box
from tests.cluster.fake_cluster import FakeCluster, NodeView, _Owner
from tests.fakes import FakeFactory, FakeRuntime
from tests.slowness import slow
from tests.transport.support import AGENT, FakeCatalog

TOKEN = "cluster-secret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
DEADLINE = slow(20)  # seconds any one test step may take (real clock: live sockets)


@attrs.frozen
class Node:
    url: str
    registry: Registry
    view: NodeView


@asynccontextmanager
async def serve_node(cluster: FakeCluster, node_id: str) -> AsyncIterator[Node]:
    view = cluster.view(node_id)
    await view.join()
    factory = FakeFactory(FakeRuntime(reply="hello from the owner"), sources=(AGENT,))
    persistence = cast(Persistence, view)
    async with (
        _own_metrics(),  # each node counts (and reads its gauges) apart, as a real server
        open_registry(persistence, factory, RegistryConfig()) as registry,
    ):
        node = ClusterNode(persistence, registry, ClusterConfig())
        forwarder = Forwarder(node, auth_token=TOKEN, connect_timeout=1.0, answer_timeout=10.0)
        app = create_app(
            registry,
            FakeCatalog(),
            AppConfig(auth_token=TOKEN),
            forwarder=forwarder,
            mirrors=node.mirrors,
        )
        config = hypercorn_config(ServeConfig(host="127.0.0.1", port=0, graceful_timeout=1.0))
        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            binds: list[str] = await nursery.start(
                lambda task_status: hypercorn.trio.serve(
                    ShieldedSend(app), config, shutdown_trigger=stop.wait, task_status=task_status
                )
            )
            cluster.set_url(node_id, binds[0])
            mirrors = trio.CancelScope()

            async def run_mirrors() -> None:
                with mirrors:
                    await node.mirrors.run()

            nursery.start_soon(run_mirrors)
            try:
                yield Node(binds[0], registry, view)
            finally:
                app.greenroom.shutting_down.set()  # type: ignore[attr-defined]
                registry.end_subscriptions()
                registry.cancel_turns()
                mirrors.cancel()
                stop.set()
                nursery.cancel_scope.deadline = trio.current_time() + 10
        await forwarder.aclose()


@asynccontextmanager
async def _own_metrics() -> AsyncIterator[None]:
    with metrics_scope():
        yield


@asynccontextmanager
async def two_nodes() -> AsyncIterator[tuple[FakeCluster, Node, Node, httpx.AsyncClient]]:
    cluster = FakeCluster(MemoryStore(), ttl=1000)
    async with (
        serve_node(cluster, "a") as a,
        serve_node(cluster, "b") as b,
        httpx.AsyncClient(headers=AUTH) as client,
    ):
        yield cluster, a, b, client


async def owned_by(node: Node, client: httpx.AsyncClient) -> str:
    """A new session, claimed by ``node``."""
    session = await node.registry.create(Session.new())
    reply = await client.patch(f"{node.url}/api/sessions/{session.id}/title", json={"title": "t"})
    assert reply.status_code == 200
    return session.id


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


async def test_requests_reach_the_owner_through_any_node() -> None:
    with trio.fail_after(DEADLINE):
        async with two_nodes() as (_, a, b, client):
            sid = await owned_by(b, client)
            reply = await client.patch(f"{a.url}/api/sessions/{sid}/title", json={"title": "via a"})
            assert reply.status_code == 200 and reply.json()["title"] == "via a"
            assert a.registry.live_ids() == [] and b.registry.live_ids() == [sid]
            got = await client.get(f"{a.url}/api/sessions/{sid}")  # live wins: the owner's
            assert got.status_code == 200 and got.json()["title"] == "via a"
            frames = []
            run = f"{a.url}/api/sessions/{sid}/agent/{AGENT}"
            body = {"messages": [{"role": "user", "content": "hi"}]}
            async with client.stream("POST", run, json=body) as streamed:
                assert streamed.status_code == 200
                assert streamed.headers["content-type"].startswith("text/event-stream")
                async for line in streamed.aiter_lines():
                    if line.startswith("data: "):
                        frames.append(json.loads(line[6:]))
            assert "hello from the owner" in [f.get("content") for f in frames]
            assert a.registry.live_ids() == []


async def test_a_hop_is_never_forwarded_again() -> None:
    with trio.fail_after(DEADLINE):
        async with two_nodes() as (_, a, b, client):
            sid = await owned_by(b, client)
            reply = await client.patch(
                f"{a.url}/api/sessions/{sid}/title",
                json={"title": "x"},
                headers={"Greenroom-Hop": "c:1"},
            )
            assert reply.status_code == 421
            assert reply.json() == {
                "message": "another node owns this session",
                "code": "owned_elsewhere",
                "owner": "b",
            }


async def test_a_421_from_the_peer_is_retried_once_then_503() -> None:
    with trio.fail_after(DEADLINE):
        async with two_nodes() as (_, a, b, client):
            sid = await owned_by(b, client)
            b.registry.fence_all("test")  # b no longer has it, but the cluster says b owns it
            b.registry.unfence()
            b.view.refuse = OwnedElsewhere(owner="a", owner_url=a.url)  # b believes a owns it
            before = len(b.view.claims)
            reply = await client.patch(f"{a.url}/api/sessions/{sid}/title", json={"title": "x"})
            assert reply.status_code == 503 and reply.json()["code"] == "owner_unavailable"
            assert len(b.view.claims) - before == 2  # the first try and one retry


async def test_a_silent_owner_answers_503_until_its_lease_runs_out() -> None:
    with trio.fail_after(DEADLINE):
        async with two_nodes() as (cluster, a, _, client):
            session = await a.registry.create(Session.new())
            down = cluster.view("c", closed_port_url())
            await down.join()
            lease_until = cluster.nodes["c"].lease_until = trio.current_time() + 3.5
            cluster.owners[session.id] = _Owner("c", down.incarnation)
            title = f"{a.url}/api/sessions/{session.id}/title"
            asked = trio.current_time()
            reply = await client.patch(title, json={"title": "x"})
            answered = trio.current_time()  # real clock: a busy machine answers late
            assert reply.status_code == 503
            assert reply.json()["code"] == "owner_unavailable"
            # The lease's seconds left when the node answered (whole seconds, at least 1).
            left = int(reply.headers["Retry-After"])
            assert (
                max(1, math.floor(lease_until - answered)) <= left <= math.ceil(lease_until - asked)
            )
            cluster.expire("c")  # the owner is dead for good: this node serves it
            reply = await client.patch(title, json={"title": "here"})
            assert reply.status_code == 200
            assert a.registry.live_ids() == [session.id]


async def test_websocket_ops_are_forwarded_too() -> None:
    with trio.fail_after(DEADLINE):
        async with two_nodes() as (_, a, b, client):
            sid = await owned_by(b, client)
            ws_url = a.url.replace("http://", "ws://") + "/api/ws"
            async with open_websocket_url(
                ws_url, extra_headers=[(b"Authorization", f"Bearer {TOKEN}".encode())]
            ) as ws:
                await ws.send_message(
                    json.dumps({"id": 1, "op": "set_title", "session_id": sid, "title": "ws"})
                )
                assert json.loads(await ws.get_message()) == {
                    "id": 1,
                    "ok": True,
                    "result": {"id": sid, "title": "ws"},
                }
                messages = [{"role": "user", "content": "hi"}]
                frame = {"id": 2, "op": "run", "session_id": sid, "agent": AGENT}
                await ws.send_message(json.dumps({**frame, "messages": messages}))
                seen: list[Any] = []
                while True:
                    got = json.loads(await ws.get_message())
                    seen.append(got)
                    if got.get("end"):
                        break
            assert seen[0] == {"id": 2, "ok": True, "result": {"streaming": True}}
            contents = [f["event"].get("content") for f in seen if "event" in f]
            assert "hello from the owner" in contents
            assert a.registry.live_ids() == []


async def test_events_of_a_remote_session_come_from_the_database() -> None:
    with trio.fail_after(DEADLINE):
        async with two_nodes() as (_, a, b, client):
            sid = await owned_by(b, client)
            b.registry.append_event(sid, _warning("first"))
            url = f"{a.url}/api/sessions/{sid}/events?since=0"
            seen: list[str] = []
            async with client.stream("GET", url) as streamed:
                assert streamed.status_code == 200
                async for line in streamed.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    event = json.loads(line[6:])
                    if event.get("type") == "warning":
                        seen.append(event["message"])
                        if event["message"] == "first":
                            b.registry.append_event(sid, _warning("live"))
                        else:
                            break
            assert seen == ["first", "live"]
            assert a.registry.live_ids() == []


def _warning(text: str) -> Warning:
    return Warning(text)


async def test_batch_delete_reaches_each_sessions_owner() -> None:
    with trio.fail_after(DEADLINE):
        async with two_nodes() as (cluster, a, b, client):
            remote = await owned_by(b, client)
            free = (await a.registry.create(Session.new())).id
            reply = await client.post(
                f"{a.url}/api/sessions/batch/delete",
                json={"session_ids": [remote, free, "no-such-session"]},
            )
            assert reply.json() == {
                "deleted_count": 2,
                "failed_count": 1,
                "failed_ids": ["no-such-session"],
            }
            assert b.registry.is_deleted(remote) and a.registry.is_deleted(free)
            assert await cluster.memory.list_sessions() == []


async def test_a_peers_run_stream_is_read_frame_by_frame_and_bounded() -> None:
    chunks = iter([b'id: 1\ndata: {"a"', b": 1}\n\nid: 2\ndata: {}\n\n", b"x" * (MAX_FRAME + 1)])

    class Raw:  # the peer's response body, chunk by chunk
        def __aiter__(self) -> Raw:
            return self

        async def __anext__(self) -> bytes:
            return next(chunks)

    response = SimpleNamespace(aiter_raw=Raw)
    run = RemoteRun(Upstream(200, {}, response))  # type: ignore[arg-type]
    first, second = await run.__anext__(), await run.__anext__()
    assert [(first.seq, first.data), (second.seq, second.data)] == [(1, b'{"a": 1}'), (2, b"{}")]
    with pytest.raises(GreenroomError, match="frame over"):
        await run.__anext__()
