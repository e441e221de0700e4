"""Subscriptions to a session another node owns, from the database (fake cluster, mock clock):
replay after ``since``, live from the bus, the poll when a notification is lost, the end after
``session_exited``, and a slow subscriber dropped."""

from __future__ import annotations

import trio
import trio.testing

from greenroom.cluster import Mirrors
from greenroom.domain import Session, Warning
from greenroom.persistence import MemoryStore
from tests.cluster.fake_cluster import FakeCluster, NodeView
from tests.cluster.support import node_registry
from tests.fakes import collect


async def two_nodes_and_a_session() -> tuple[MemoryStore, FakeCluster, NodeView, NodeView, Session]:
    """Nodes a and b, joined, of one fake cluster, and a session in its store."""
    store = MemoryStore()
    cluster = FakeCluster(store, ttl=1000)
    a, b = cluster.view("a"), cluster.view("b")
    await a.join()
    await b.join()
    return store, cluster, a, b, await store.add_session(Session.new())


def messages(entries) -> list[str]:
    return [e.json()["message"] for e in entries if e.type == "warning"]


async def test_replay_live_poll_and_end(autojump_clock: trio.testing.MockClock) -> None:
    store, _, a, b, session = await two_nodes_and_a_session()
    async with node_registry(b) as owner, trio.open_nursery() as nursery:
        await owner.session(session.id).set_title("t")  # b owns it
        for i in range(3):
            owner.append_event(session.id, Warning(f"before {i}"))
        mirrors = Mirrors(a.events, a.bus, poll_interval=2.0)
        nursery.start_soon(mirrors.run)
        first = await store.read_events(session.id, 0, 100)
        since = first[0].seq  # the client saw the first event
        subscription = await mirrors.subscribe(session.id, since)
        entries, _ = await collect(subscription)
        assert [e.seq for e in entries] == [e.seq for e in first[1:]]  # replay, in order
        owner.append_event(session.id, Warning("live"))
        entries, _ = await collect(subscription)
        assert messages(entries) == ["live"]

        a.bus.muted = True  # a lost NOTIFY: the poll reads it, within its interval
        await trio.sleep(0.5)  # virtual time (mock clock): between two polls
        owner.append_event(session.id, Warning("lost notify"))
        start = trio.current_time()
        await trio.testing.wait_all_tasks_blocked()
        assert subscription.ready(10) == []  # nothing told this node
        entry = await subscription.__anext__()
        assert messages([entry]) == ["lost notify"]
        assert 0 < trio.current_time() - start <= 2.0
        a.bus.muted = False

        await owner.delete(session.id)
        entries, ended = await collect(subscription)
        assert ended and entries[-1].type == "session_exited"
        await trio.sleep(2.1)  # virtual time (mock clock)
        assert session.id not in mirrors  # the mirror went with its last subscriber
        nursery.cancel_scope.cancel()


async def test_a_slow_remote_subscriber_is_dropped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    _, _, a, b, session = await two_nodes_and_a_session()
    async with node_registry(b) as owner, trio.open_nursery() as nursery:
        await owner.session(session.id).set_title("t")
        mirrors = Mirrors(a.events, a.bus, subscriber_buffer=4)
        nursery.start_soon(mirrors.run)
        slow = await mirrors.subscribe(session.id, None)
        fast = await mirrors.subscribe(session.id, None)
        seen: list[str] = []

        async def read_fast() -> None:
            async for entry in fast:
                seen.extend(messages([entry]))

        nursery.start_soon(read_fast)
        for i in range(10):
            owner.append_event(session.id, Warning(f"w{i}"))
            await trio.testing.wait_all_tasks_blocked()
        entries, ended = await collect(slow)
        assert ended and slow.dropped and len(entries) <= 4
        assert seen == [f"w{i}" for i in range(10)]
        nursery.cancel_scope.cancel()


async def test_a_mirror_hears_this_nodes_own_commits_after_a_takeover(
    autojump_clock: trio.testing.MockClock,
) -> None:
    _, cluster, a, b, session = await two_nodes_and_a_session()
    async with (
        node_registry(b) as owner,
        node_registry(a) as mine,
        trio.open_nursery() as nursery,
    ):
        await owner.session(session.id).set_title("b's")  # b owns it; a mirrors it
        mirrors = Mirrors(a.events, a.bus, poll_interval=2.0)
        mine.observe_commits(mirrors.local_commits)
        nursery.start_soon(mirrors.run)
        subscription = await mirrors.subscribe(session.id)
        cluster.expire("b")
        await mine.session(session.id).set_title("a's")  # a takes the session over
        start = trio.current_time()
        mine.append_event(session.id, Warning("committed by a"))  # a's bus never hears it
        seen: list[str] = []
        while "committed by a" not in seen:
            seen += messages([await subscription.__anext__()])
        assert trio.current_time() - start < 0.5  # at once, not at the next 2 s poll
        nursery.cancel_scope.cancel()
