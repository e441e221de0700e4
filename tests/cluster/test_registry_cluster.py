"""The registry in a cluster (fake cluster, mock clock): OwnedElsewhere reaches the caller and
leaves nothing behind, fence_all stops everything and unfence lets sessions back, a head left
running by a dead node is repaired before the actor takes commands, the sweeper adopts it."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from greenroom.cluster import sweep_once
from greenroom.domain import Session, Warning
from greenroom.errors import NodeFenced, OwnedElsewhere
from greenroom.persistence import MemoryStore
from tests.cluster.fake_cluster import FakeCluster
from tests.cluster.support import crash_mid_turn, node_registry
from tests.fakes import FakeRuntime, collect, user


async def joined(cluster: FakeCluster, node_id: str, url: str = ""):
    view = cluster.view(node_id, url or f"http://{node_id}.test")
    await view.join()
    return view


async def test_owned_elsewhere_reaches_the_caller_and_leaves_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore()
    cluster = FakeCluster(store, ttl=1000)
    a, b = await joined(cluster, "a"), await joined(cluster, "b", "http://b.test:9")
    session = await store.add_session(Session.new())
    async with node_registry(a) as reg_a, node_registry(b) as reg_b:
        await reg_b.session(session.id).set_title("owned by b")
        with pytest.raises(OwnedElsewhere) as caught:
            await reg_a.session(session.id).set_title("from a")
        assert (caught.value.owner, caught.value.owner_url) == ("b", "http://b.test:9")
        assert reg_a.live_ids() == [] and not reg_a.has_event_log(session.id)
        with pytest.raises(OwnedElsewhere):  # live wins: a get names the owner too
            await reg_a.get(session.id)
        with pytest.raises(OwnedElsewhere):
            await reg_a.subscribe(session.id, 0)
        assert reg_a.live_ids() == [] and not reg_a.has_event_log(session.id)
        assert (await store.get_session(session.id)).title == "owned by b"


async def test_fence_all_stops_everything_until_unfence(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore()
    cluster = FakeCluster(store, ttl=1000)
    a = await joined(cluster, "a")
    session = await store.add_session(Session.new())
    runtime = FakeRuntime(hold=True)
    async with node_registry(a, runtime) as registry:
        subscription = await registry.subscribe(session.id, 0)
        stream = await registry.session(session.id).run("agent", (user("hi"),))
        await runtime.turn_started.wait()
        registry.fence_all("test")
        entries, ended = await collect(subscription)
        assert ended  # the stream ended, without session_exited: clients resume elsewhere
        assert "session_exited" not in [e.type for e in entries]
        async for _ in stream:  # the run stream ends too
            pass
        with pytest.raises(NodeFenced):
            await registry.session(session.id).set_title("x")
        with pytest.raises(NodeFenced):
            await registry.create(Session.new())
        assert registry.live_ids() == []
        await trio.testing.wait_all_tasks_blocked()
        registry.unfence()
        # What the lost actor's turn reported while it ended (its end record included) and
        # still reports is dropped: no new log, no new claim.
        claims = len(a.claims)
        assert claims == 1
        await runtime.ios[-1].emit(Warning("late"))  # the lost turn's IO, used late
        assert not registry.has_event_log(session.id) and len(a.claims) == claims
        runtime.rearm()
        runtime.hold = False
        await registry.session(session.id).set_title("back")
        assert (await store.get_session(session.id)).title == "back"


async def test_a_head_left_running_is_repaired_before_the_actor_starts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore()
    cluster = FakeCluster(store, ttl=5)
    a, b = await joined(cluster, "a"), await joined(cluster, "b")
    session = await store.add_session(Session.new())
    await crash_mid_turn(b, session.id)
    await a.renew()
    async with node_registry(a) as registry:
        await registry.session(session.id).set_title("after the crash")
        registry.append_event(session.id, Warning("after the takeover"))
        events = await store.read_events(session.id, 0, 100)
        types = [e.type for e in events]
        assert "turn_interrupted" in types
        # The log goes on after the recovery's events: one seq each, in order.
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        assert types[-1] == "warning"
        assert await store.interrupted_sessions() == []


async def test_the_sweeper_adopts_a_dead_nodes_running_session_and_lets_it_go(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore()
    cluster = FakeCluster(store, ttl=5)
    a, b = await joined(cluster, "a"), await joined(cluster, "b")
    session = await store.add_session(Session.new())
    idle = await store.add_session(Session.new())
    await crash_mid_turn(b, session.id)
    await a.renew()
    async with node_registry(a) as registry:
        assert await sweep_once(a, registry) == [session.id]
        assert "turn_interrupted" in [e.type for e in await store.read_events(session.id, 0, 99)]
        assert session.id not in cluster.owners  # given up again: any node may claim it
        assert registry.live_ids() == [] and not registry.has_event_log(session.id)
        assert idle.id not in a.claims  # only sessions left running are swept
        assert await sweep_once(a, registry) == []


async def test_the_sweeper_skips_what_another_node_won(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = MemoryStore()
    cluster = FakeCluster(store, ttl=5)
    a, b, c = await joined(cluster, "a"), await joined(cluster, "b"), await joined(cluster, "c")
    session = await store.add_session(Session.new())
    await crash_mid_turn(b, session.id)
    await a.renew()
    await c.renew()
    cluster.owners[session.id].node_id = "c"  # c claimed it first (the head still running)
    cluster.owners[session.id].incarnation = c.incarnation
    async with node_registry(a) as registry:
        assert await sweep_once(a, registry) == []
        assert registry.live_ids() == [] and not registry.has_event_log(session.id)
