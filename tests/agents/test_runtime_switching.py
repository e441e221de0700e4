"""Agent and model switching, the model picker, and elicitations of a LocalRuntime."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from greenroom.agents import Command, ElicitationAnswer, ModelChoice
from greenroom.agents.providers import ModelConfig
from greenroom.domain import AgentChoice, ElicitationRequest, Event
from greenroom.errors import AgentNotFound, InvalidRequest, NoPendingRequest

from .loop_support import FakeIO, FakeProvider, make_runtime, start, text


def test_current_agent_exposes_description_and_commands() -> None:
    runtime = make_runtime(FakeProvider())
    current = runtime.current_agent()
    assert (current.name, current.description) == ("root", "The main agent")
    assert dict(current.commands) == {
        "plan": Command(description="Plan it", agent="planner"),
        "hello": Command(instruction="Say hello"),
    }


def test_starting_agent_can_be_chosen_and_must_exist() -> None:
    assert make_runtime(FakeProvider(), agent="planner").current_agent().name == "planner"
    with pytest.raises(AgentNotFound):
        make_runtime(FakeProvider(), agent="ghost")


async def test_switching_agent_changes_who_answers() -> None:
    provider = FakeProvider(text("planned"))
    runtime = make_runtime(provider)
    await runtime.set_current_agent("planner")
    current = runtime.current_agent()
    assert (current.name, dict(current.commands)) == ("planner", {})
    io = start(FakeIO(), "make a plan")
    await runtime.run_stream(io)
    request = provider.requests[0]
    assert request.messages[0].content == "You plan."
    assert (request.model.name, request.model.model) == ("alt", "alternative")
    assert request.tools == ()
    assert io.of(AgentChoice)[0].agent_name == "planner"
    assert io.messages()[-1].agent_name == "planner"
    with pytest.raises(AgentNotFound):
        await runtime.set_current_agent("ghost")
    assert runtime.current_agent().name == "planner"


async def test_set_agent_model_named_inline_and_restore() -> None:
    provider = FakeProvider(text("1"), text("2"), text("3"))
    runtime = make_runtime(provider)
    assert runtime.supports_model_switching()

    await runtime.set_agent_model("root", "alt")
    await runtime.run_stream(start(FakeIO(), "a"))
    assert provider.requests[-1].model.model == "alternative"

    await runtime.set_agent_model("root", "other/big")
    await runtime.run_stream(start(FakeIO(), "b"))
    assert (provider.requests[-1].model.provider, provider.requests[-1].model.model) == (
        "other",
        "big",
    )

    await runtime.set_agent_model("root", "")
    await runtime.run_stream(start(FakeIO(), "c"))
    assert provider.requests[-1].model.ref == "openai/main"


async def test_set_agent_model_refuses_unknown_agents_and_refs() -> None:
    runtime = make_runtime(FakeProvider())
    with pytest.raises(AgentNotFound):
        await runtime.set_agent_model("ghost", "alt")
    with pytest.raises(InvalidRequest):
        await runtime.set_agent_model("root", "no-such-model")


async def test_a_provider_that_cannot_be_made_fails_the_switch() -> None:
    def refuse(model: ModelConfig) -> FakeProvider:
        raise InvalidRequest(f"unknown provider {model.provider!r}")

    from greenroom.agents import LocalRuntime, parse_agent_file

    config = parse_agent_file("agents:\n  root: {model: openai/b}\n", "agent.yaml")
    runtime = LocalRuntime(config, provider_for=refuse)
    with pytest.raises(InvalidRequest, match="unknown provider 'weird'"):
        await runtime.set_agent_model("root", "weird/model")
    assert [c.ref for c in await runtime.available_models()] == ["openai/b"]


async def test_available_models_lists_file_models_default_and_custom_refs() -> None:
    runtime = make_runtime(FakeProvider(), custom_models=["old/one"])
    choices = await runtime.available_models()
    assert choices == [
        ModelChoice(name="alt", ref="alt", provider="openai", model="alternative"),
        ModelChoice(
            name="openai/main",
            ref="openai/main",
            provider="openai",
            model="main",
            is_default=True,
            is_current=True,
        ),
        ModelChoice(name="old/one", ref="old/one", provider="old", model="one", is_custom=True),
    ]
    await runtime.set_agent_model("root", "new/two")
    choices = await runtime.available_models()
    assert [(c.ref, c.is_current, c.is_custom) for c in choices] == [
        ("alt", False, False),
        ("openai/main", False, False),
        ("old/one", False, True),
        ("new/two", True, True),
    ]
    await runtime.set_agent_model("root", "alt")
    assert [c.ref for c in await runtime.available_models() if c.is_current] == ["alt"]
    # The picker is for the current agent.
    await runtime.set_current_agent("planner")
    choices = await runtime.available_models()
    assert [c.ref for c in choices if c.is_default] == ["alt"]
    assert [c.ref for c in choices if c.is_current] == ["alt"]


def test_title_models_put_the_title_model_first() -> None:
    runtime = make_runtime(FakeProvider(), agent="planner")
    assert [m.ref for m in runtime.title_models()] == ["openai/titles", "openai/alternative"]
    assert [m.ref for m in make_runtime(FakeProvider()).title_models()] == ["openai/main"]


async def test_resume_elicitation_without_a_request_is_refused() -> None:
    runtime = make_runtime(FakeProvider())
    with pytest.raises(NoPendingRequest):
        await runtime.resume_elicitation("accept", {"ok": True})
    with pytest.raises(NoPendingRequest):
        await runtime.resume_elicitation("accept", None, "some-id")


async def test_elicitation_goes_to_the_sink_and_waits_for_the_answer(autojump_clock) -> None:
    runtime = make_runtime(FakeProvider())
    seen: list[Event] = []
    runtime.on_elicitation_request(seen.append)
    answers: list[ElicitationAnswer] = []

    async def ask() -> None:
        answers.append(await runtime.elicit("Your name?", schema={"type": "object"}))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask)
        nursery.start_soon(ask)
        await trio.testing.wait_all_tasks_blocked()
        assert len(seen) == 2
        first = seen[0]
        assert isinstance(first, ElicitationRequest)
        assert (first.message, first.schema) == ("Your name?", {"type": "object"})
        with pytest.raises(NoPendingRequest, match="several"):
            await runtime.resume_elicitation("accept", {"name": "x"})
        await runtime.resume_elicitation("accept", {"name": "Ada"}, first.elicitation_id)
        await trio.testing.wait_all_tasks_blocked()
        await runtime.resume_elicitation("decline", None)
    assert answers == [ElicitationAnswer("accept", {"name": "Ada"}), ElicitationAnswer("decline")]
    with pytest.raises(NoPendingRequest):
        await runtime.resume_elicitation("accept", None, first.elicitation_id)


async def test_elicitation_without_anyone_to_answer_is_declined_at_once() -> None:
    runtime = make_runtime(FakeProvider())
    runtime.on_elicitation_request(lambda event: None)
    runtime.on_elicitation_request(None)
    assert await runtime.elicit("Anyone?") == ElicitationAnswer("decline")


async def test_aclose_declines_pending_elicitations(autojump_clock) -> None:
    runtime = make_runtime(FakeProvider())
    runtime.on_elicitation_request(lambda event: None)
    answers: list[ElicitationAnswer] = []

    async def ask() -> None:
        answers.append(await runtime.elicit("Still there?"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask)
        await trio.testing.wait_all_tasks_blocked()
        await runtime.aclose()
    assert answers == [ElicitationAnswer("decline")]
