"""The shortest path through an actor: one run streams its events with seqs, then the title
and the reply are in the live session and the store. Mock clock; every wait is bounded."""

from __future__ import annotations

import trio
import trio.testing

from greenroom.actors import Registry
from greenroom.domain import AgentChoice, Message, Session
from greenroom.persistence import MemoryStore
from tests.fakes import FakeFactory, FakeRuntime, GatedTitles, drain, user


async def test_run_turn_end_to_end(
    autojump_clock: trio.testing.MockClock,
    registry: Registry,
    store: MemoryStore,
    factory: FakeFactory,
) -> None:
    factory.runtime = FakeRuntime(script=[AgentChoice("hel"), AgentChoice("lo")], reply="hello")
    factory.titles = GatedTitles("A title")
    session = await registry.create(Session.new())
    handle = registry.session(session.id)
    with trio.fail_after(5):
        stream = await handle.run("agent", (user("hi"),))
        entries = await drain(stream)
    assert [e.json()["type"] for e in entries] == ["agent_choice"] * 3
    assert [e.seq for e in entries] == [1, 2, 3]
    factory.titles.release()
    await trio.testing.wait_all_tasks_blocked()
    live = await registry.get(session.id)
    assert live.title == "A title"
    assert [m.content for m in live.items if isinstance(m, Message)] == ["hi", "hello"]
    stored = await store.get_session(session.id)
    assert stored.title == "A title"
    assert len(stored.items) == 2
    assert registry.last_event_seq(session.id) == 4
