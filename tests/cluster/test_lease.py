"""The membership loop on trio's mock clock against the fake cluster: join, renew, self-fence
after ``ttl`` without a successful renew (failing, hanging, or refused), rejoin and unfence."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from greenroom.cluster import LeaseKeeper, LeaseTimes
from greenroom.persistence import MemoryStore
from tests.cluster.fake_cluster import FakeCluster, NodeView

TTL = 3.0
RENEW = 0.5


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, float]] = []

    def fence_all(self, reason: str = "") -> None:
        self.events.append(("fence", trio.current_time()))

    def unfence(self) -> None:
        self.events.append(("unfence", trio.current_time()))


async def start(view: NodeView, nursery: trio.Nursery) -> tuple[LeaseKeeper, Recorder, Any]:
    recorder = Recorder()
    keeper = LeaseKeeper(view, recorder, LeaseTimes(TTL, RENEW))
    incarnation = await nursery.start(keeper.run)
    return keeper, recorder, incarnation


async def test_renewals_keep_the_node_up(autojump_clock: trio.testing.MockClock) -> None:
    cluster = FakeCluster(MemoryStore(), ttl=TTL)
    view = cluster.view("a")
    async with trio.open_nursery() as nursery:
        keeper, recorder, incarnation = await start(view, nursery)
        assert incarnation == 1 and keeper.phase == "up"
        await trio.sleep(60)  # virtual time (mock clock)
        assert recorder.events == [] and keeper.phase == "up"
        assert cluster.live("a", 1)
        nursery.cancel_scope.cancel()


async def test_a_failing_database_fences_after_ttl_then_rejoin_unfences(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cluster = FakeCluster(MemoryStore(), ttl=TTL)
    view = cluster.view("a")
    async with trio.open_nursery() as nursery:
        keeper, recorder, _ = await start(view, nursery)
        await trio.sleep(10)  # virtual time (mock clock)
        last_ok = keeper.last_ok
        view.renew_fails = True  # DatabaseUnavailable from now on
        await trio.sleep(TTL + 2 * RENEW)  # virtual time (mock clock)
        assert [what for what, _ in recorder.events] == ["fence"]
        fenced_at = recorder.events[0][1]
        # Exactly ttl after the start of the last successful renew, not a renew later.
        assert fenced_at == last_ok + TTL
        await trio.sleep(10)  # virtual time (mock clock): still down, the node stays fenced
        assert str(keeper.phase) == "fenced" and view.joins == 1
        view.renew_fails = False
        await trio.sleep(RENEW + 0.01)  # virtual time (mock clock)
        assert [what for what, _ in recorder.events] == ["fence", "unfence"]
        assert str(keeper.phase) == "up" and view.incarnation == 2  # a new incarnation
        await trio.sleep(20)  # virtual time (mock clock)
        assert len(recorder.events) == 2
        nursery.cancel_scope.cancel()


async def test_one_failed_renewal_does_not_fence(autojump_clock: trio.testing.MockClock) -> None:
    cluster = FakeCluster(MemoryStore(), ttl=TTL)
    view = cluster.view("a")
    async with trio.open_nursery() as nursery:
        _, recorder, _ = await start(view, nursery)
        view.renew_fails = True
        await trio.sleep(TTL - RENEW - 0.1)  # virtual time (mock clock)
        view.renew_fails = False
        await trio.sleep(10)  # virtual time (mock clock)
        assert recorder.events == []
        nursery.cancel_scope.cancel()


async def test_a_refused_renewal_fences_at_once(autojump_clock: trio.testing.MockClock) -> None:
    cluster = FakeCluster(MemoryStore(), ttl=TTL)
    view = cluster.view("a")
    async with trio.open_nursery() as nursery:
        keeper, recorder, _ = await start(view, nursery)
        await trio.sleep(1.1)  # virtual time (mock clock)
        view.renew_answer = False  # the row names another incarnation / the lease expired
        await trio.sleep(RENEW)  # virtual time (mock clock)
        assert [what for what, _ in recorder.events] == ["fence"]
        assert recorder.events[0][1] < keeper.last_ok + TTL  # long before the watchdog
        view.renew_answer = None
        await trio.sleep(RENEW + 0.01)  # virtual time (mock clock)
        assert [what for what, _ in recorder.events] == ["fence", "unfence"]
        assert view.incarnation == 2
        nursery.cancel_scope.cancel()


async def test_a_hanging_renewal_is_fenced_by_the_watchdog(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cluster = FakeCluster(MemoryStore(), ttl=TTL)
    view = cluster.view("a")
    async with trio.open_nursery() as nursery:
        keeper, recorder, _ = await start(view, nursery)
        await trio.sleep(2)  # virtual time (mock clock)
        last_ok = keeper.last_ok
        view.hang = trio.Event()
        await trio.sleep(TTL + 5)  # virtual time (mock clock)
        assert recorder.events == [("fence", last_ok + TTL)]
        hang, view.hang = view.hang, None
        hang.set()  # the stuck renew fails at last; the next round rejoins
        await trio.sleep(2 * RENEW)  # virtual time (mock clock)
        assert [what for what, _ in recorder.events] == ["fence", "unfence"]
        nursery.cancel_scope.cancel()
