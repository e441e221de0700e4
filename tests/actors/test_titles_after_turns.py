"""When the title task runs: after the model answered, never for a turn that failed first.

Mock clock (autojump); the in-memory store; a fake runtime scripts what the turn emits.
"""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from greenroom.actors import Registry
from greenroom.agents import ModelTitleGenerator
from greenroom.agents.providers import EchoProvider, ModelConfig
from greenroom.domain import AgentChoice, ErrorEvent, Session
from greenroom.errors import ModelKeyMissing
from greenroom.persistence import MemoryStore
from tests.fakes import FakeFactory, FakeRuntime, GatedTitles, drain, user


async def run_once(registry: Registry, session: Session) -> None:
    with trio.fail_after(5):
        stream = await registry.session(session.id).run("agent", (user("plan a trip"),))
        await drain(stream)
    await trio.testing.wait_all_tasks_blocked()


async def test_no_title_attempt_when_the_turn_fails_before_an_answer(
    autojump_clock: trio.testing.MockClock,
    registry: Registry,
    factory: FakeFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    factory.runtime = FakeRuntime(script=[ErrorEvent("no key", "missing_api_key", "")])
    titles = GatedTitles("Never", gated=False)
    factory.titles = titles
    session = await registry.create(Session.new())
    with caplog.at_level(logging.INFO, logger="greenroom.actors"):
        await run_once(registry, session)
    assert titles.calls == []
    assert (await registry.get(session.id)).title == ""
    assert "no title, the turn failed before the model answered" in caplog.text


async def test_the_title_waits_for_the_first_answer(
    autojump_clock: trio.testing.MockClock, registry: Registry, factory: FakeFactory
) -> None:
    runtime = FakeRuntime(script=[AgentChoice("Sure", "root", "")], hold=True)
    factory.runtime = runtime
    titles = GatedTitles("Trip planning", gated=False)
    factory.titles = titles
    session = await registry.create(Session.new())
    with trio.fail_after(5):
        stream = await registry.session(session.id).run("agent", (user("plan a trip"),))
        await trio.testing.wait_all_tasks_blocked()
        assert titles.calls == [["plan a trip"]]  # the model answered: the title is under way
        runtime.release()
        await drain(stream)
    await trio.testing.wait_all_tasks_blocked()
    assert (await registry.get(session.id)).title == "Trip planning"


async def test_a_turn_that_ends_without_answering_still_gets_its_title(
    autojump_clock: trio.testing.MockClock, registry: Registry, factory: FakeFactory
) -> None:
    runtime = FakeRuntime(hold=True)  # says nothing until released
    factory.runtime = runtime
    titles = GatedTitles("Quiet turn", gated=False)
    factory.titles = titles
    session = await registry.create(Session.new())
    with trio.fail_after(5):
        stream = await registry.session(session.id).run("agent", (user("hello"),))
        await trio.testing.wait_all_tasks_blocked()
        assert titles.calls == []  # waiting for the model's first answer
        runtime.release()
        await drain(stream)
    await trio.testing.wait_all_tasks_blocked()
    assert titles.calls == [["hello"]]
    assert (await registry.get(session.id)).title == "Quiet turn"


class FailingTitles:
    async def generate(self, user_messages: list[str]) -> str:
        await trio.lowlevel.checkpoint()
        raise ModelKeyMissing("model openai/gpt needs an API key")


async def test_a_failed_title_logs_one_line_without_a_traceback(
    autojump_clock: trio.testing.MockClock,
    registry: Registry,
    factory: FakeFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    factory.runtime = FakeRuntime(reply="hello")
    factory.titles = FailingTitles()
    session = await registry.create(Session.new())
    with caplog.at_level(logging.INFO, logger="greenroom"):
        await run_once(registry, session)
    failures = [r for r in caplog.records if "title generation" in r.getMessage()]
    assert [r.getMessage() for r in failures] == [
        f"title generation for session {session.id} failed: model openai/gpt needs an API key"
    ]
    assert failures[0].exc_info is None


async def test_the_echo_model_titles_from_the_first_user_message() -> None:
    echo = ModelConfig(name="auto", provider="echo", model="echo")
    generator = ModelTitleGenerator(lambda: [echo], lambda _: EchoProvider())
    title = await generator.generate(["plan a three day trip to Lisbon in May please", "and?"])
    assert title == "Plan a three day trip to …"
    assert await generator.generate(["hi"]) == "Hi"


async def test_titles_on_the_bundled_agent_without_a_key(
    autojump_clock: trio.testing.MockClock, store: MemoryStore
) -> None:
    # The whole path: the bundled agent's auto model is echo here; its title is readable.
    from greenroom.actors import open_registry
    from greenroom.agents import AgentSources, LocalRuntimeFactory

    factory = LocalRuntimeFactory(AgentSources.bundled(), env={})
    async with open_registry(store, factory) as registry:
        session = await registry.create(Session.new())
        with trio.fail_after(5):
            stream = await registry.session(session.id).run(
                "default", (user("what should I cook tonight with rice"),)
            )
            await drain(stream)
        await trio.testing.wait_all_tasks_blocked()
        assert (await registry.get(session.id)).title == "What should I cook tonight with …"


async def test_a_turn_while_the_title_is_under_way_asks_for_no_second_title(
    autojump_clock: trio.testing.MockClock, registry: Registry, factory: FakeFactory
) -> None:
    factory.runtime = FakeRuntime(reply="Sure")
    titles = GatedTitles("Trip planning")  # answers only when released
    factory.titles = titles
    session = await registry.create(Session.new())
    await run_once(registry, session)
    assert titles.calls == [["plan a trip"]]
    await run_once(registry, session)  # the first title is still being written
    await run_once(registry, session)
    titles.release()
    await trio.testing.wait_all_tasks_blocked()
    assert titles.calls == [["plan a trip"]]
    assert (await registry.get(session.id)).title == "Trip planning"


class UnusableTitles:
    def __init__(self) -> None:
        self.calls = 0

    async def generate(self, user_messages: list[str]) -> str:
        self.calls += 1
        await trio.lowlevel.checkpoint()
        return "   "


async def test_a_title_request_that_gave_nothing_usable_is_not_repeated(
    autojump_clock: trio.testing.MockClock, registry: Registry, factory: FakeFactory
) -> None:
    factory.runtime = FakeRuntime(reply="Sure")
    titles = UnusableTitles()
    factory.titles = titles
    session = await registry.create(Session.new())
    for _ in range(3):
        await run_once(registry, session)
    assert titles.calls == 1
    assert (await registry.get(session.id)).title == ""


async def test_a_turn_that_failed_first_leaves_the_one_title_request_to_a_later_turn(
    autojump_clock: trio.testing.MockClock, registry: Registry, factory: FakeFactory
) -> None:
    runtime = FakeRuntime(script=[ErrorEvent("no key", "missing_api_key", "")])
    factory.runtime = runtime
    titles = GatedTitles("Second try", gated=False)
    factory.titles = titles
    session = await registry.create(Session.new())
    await run_once(registry, session)
    assert titles.calls == []
    runtime.script = [AgentChoice("Now it works", "root", "")]
    await run_once(registry, session)
    await run_once(registry, session)
    assert titles.calls == [["plan a trip"]]
    assert (await registry.get(session.id)).title == "Second try"
