"""Registry lifecycle details: logs after an event source ended, shutdown, idle retirement."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio
import trio.testing

from greenroom.actors import RegistryConfig, open_registry
from greenroom.domain import AgentChoice, Event, Session, Warning
from greenroom.errors import SessionGone
from greenroom.persistence import MemoryStore
from tests.fakes import FakeFactory, FakeRuntime, drain, user


async def test_events_after_an_ended_source_go_to_a_fresh_log(
    autojump_clock: trio.testing.MockClock, registry, store: MemoryStore
) -> None:
    session = await registry.create(Session.new())

    async def source(append: Callable[[Event], None]) -> None:
        append(Warning("from the embedder"))
        await trio.lowlevel.checkpoint()

    registry.register_event_source(session.id, source)
    await trio.testing.wait_all_tasks_blocked()
    old = registry.ensure_log(session.id)
    assert old is not None
    # The source returned: its log was closed with session_exited, but the session lives on.
    registry.append_event(session.id, Warning("later"))
    log = registry.ensure_log(session.id)
    assert log is not None and not log.closed
    assert [e.json()["message"] for e in log.backlog(None)] == ["later"]


async def test_shutdown_lets_a_cancelled_turn_persist_its_usage(
    autojump_clock: trio.testing.MockClock, store: MemoryStore
) -> None:
    class SlowToStop(FakeRuntime):
        async def run_stream(self, io) -> None:
            try:
                await trio.sleep_forever()
            finally:
                with trio.CancelScope(shield=True):
                    await trio.sleep(1)  # winding down takes a (virtual) second
                    io.add_usage(7, 3, 0.0)

    factory = FakeFactory(SlowToStop())
    session = await store.add_session(Session.new())
    async with open_registry(store, factory, RegistryConfig(shutdown_grace=5)) as registry:
        stream = await registry.session(session.id).run("agent", (user("hi"),))
        await trio.testing.wait_all_tasks_blocked()
    assert await drain(stream) == []
    stored = await store.get_session(session.id)
    assert (stored.input_tokens, stored.output_tokens) == (7, 3)


async def test_idle_actor_retires_and_comes_back(
    autojump_clock: trio.testing.MockClock, store: MemoryStore
) -> None:
    factory = FakeFactory(FakeRuntime(reply="hi"))
    session = await store.add_session(Session.new())
    config = RegistryConfig(idle_timeout=60)
    async with open_registry(store, factory, config) as registry:
        await drain(await registry.session(session.id).run("agent", (user("a"),)))
        assert registry.live_ids() == [session.id]
        await trio.sleep(61)  # virtual time (autojump clock)
        assert registry.live_ids() == []
        assert registry.has_event_log(session.id) is False  # no subscriber kept it
        # Reading it needs no actor; the next command rebuilds one from the store.
        stored = await registry.get(session.id)
        assert [m.content for m in stored.items] == ["a", "hi"]  # type: ignore[union-attr]
        assert registry.live_ids() == []
        snapshot = await registry.session(session.id).snapshot()
        assert [m.content for m in snapshot.session.items] == ["a", "hi"]  # type: ignore[union-attr]
        assert registry.live_ids() == [session.id]


async def test_a_subscriber_keeps_an_idle_actor_alive(
    autojump_clock: trio.testing.MockClock, store: MemoryStore
) -> None:
    session = await store.add_session(Session.new())
    async with open_registry(store, FakeFactory(), RegistryConfig(idle_timeout=60)) as registry:
        with await registry.subscribe(session.id) as subscription:
            await trio.sleep(600)  # virtual time (autojump clock)
            assert registry.live_ids() == [session.id]
            registry.append_event(session.id, AgentChoice("x"))
            entry = await subscription.__anext__()
            assert entry.seq == 1
        await trio.sleep(61)  # virtual time (autojump clock)
        assert registry.live_ids() == []


async def test_a_crashing_actor_is_supervised_one_for_one(
    autojump_clock: trio.testing.MockClock, store: MemoryStore
) -> None:
    class FlakyStore(MemoryStore):
        broken = True

        async def update_title(self, session_id: str, title: str) -> None:
            if self.broken:
                raise RuntimeError("disk on fire")  # a bug, not a domain error
            await super().update_title(session_id, title)

    flaky = FlakyStore()
    crashing = await flaky.add_session(Session.new(title="a"))
    healthy = await flaky.add_session(Session.new(title="b"))
    async with open_registry(flaky, FakeFactory()) as registry:
        await registry.session(healthy.id).snapshot()  # a live actor for the sibling
        with await registry.subscribe(crashing.id) as subscription:
            with pytest.raises(SessionGone):
                await registry.session(crashing.id).set_title("new")
            entry = await subscription.__anext__()
            assert entry.json()["type"] == "error"
            assert entry.json()["code"] == "internal_error"
        await trio.testing.wait_all_tasks_blocked()
        assert crashing.id not in registry.live_ids()
        assert healthy.id in registry.live_ids()  # its sibling runs on
        flaky.broken = False
        await registry.session(crashing.id).set_title("again")  # rebuilt from the store
        assert (await registry.get(crashing.id)).title == "again"
