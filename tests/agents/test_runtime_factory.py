"""LocalRuntimeFactory: agent selection, errors, stored overrides, titles, the real echo model."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from greenroom.agents import AgentSources, LocalRuntime, LocalRuntimeFactory
from greenroom.agents.providers import ModelConfig
from greenroom.domain import Session
from greenroom.errors import AgentNotFound, AgentSourceUnavailable

from .loop_support import AGENT_YAML, FakeIO, FakeProvider, start, text

NO_ROOT = "agents:\n  alpha: {model: openai/a}\n  beta: {model: openai/b}\n"


@pytest.fixture
def sources(tmp_path: Path) -> AgentSources:
    (tmp_path / "team.yaml").write_text(AGENT_YAML)
    (tmp_path / "noroot.yaml").write_text(NO_ROOT)
    (tmp_path / "auto.yaml").write_text("agents:\n  root: {model: auto}\n")
    (tmp_path / "broken.yaml").write_text("agents: {}\n")
    return AgentSources.from_paths([tmp_path])


def factory(sources: AgentSources, provider: FakeProvider, **kwargs) -> LocalRuntimeFactory:
    return LocalRuntimeFactory(sources, env={}, provider_for=provider.provider_for, **kwargs)


async def built_agent(f: LocalRuntimeFactory, source: str, agent: str = "") -> str:
    built = await f.build(source, agent, Session.new())
    assert isinstance(built.runtime, LocalRuntime)
    return built.runtime.current_agent().name


async def test_agent_selection_given_then_root_then_first(sources) -> None:
    f = factory(sources, FakeProvider())
    assert await built_agent(f, "team", "planner") == "planner"
    assert await built_agent(f, "team") == "root"
    assert await built_agent(f, "noroot") == "alpha"


async def test_unknown_source_or_agent_is_agent_not_found(sources) -> None:
    f = factory(sources, FakeProvider())
    with pytest.raises(AgentNotFound):
        await f.build("ghost", "", Session.new())
    with pytest.raises(AgentNotFound):
        await f.build("team", "ghost", Session.new())
    with pytest.raises(AgentSourceUnavailable, match="broken"):
        await f.build("broken", "", Session.new())


async def test_stored_model_overrides_are_reapplied_and_bad_ones_skipped(sources, caplog) -> None:
    provider = FakeProvider(text("hi"))
    session = Session.new(
        agent_model_overrides={"root": "alt", "ghost": "alt"},
        custom_models_used=["x/y"],
    )
    with caplog.at_level(logging.WARNING, logger="greenroom.agents"):
        built = await factory(sources, provider).build("team", "", session)
    assert "ghost" in caplog.text
    runtime = built.runtime
    await runtime.run_stream(start(FakeIO(session), "hello"))
    assert provider.requests[0].model.name == "alt"
    refs = [c.ref for c in await runtime.available_models()]
    assert "x/y" in refs


async def test_title_generator_uses_the_agents_title_model(sources) -> None:
    provider = FakeProvider(text("A title"))
    built = await factory(sources, provider).build("team", "planner", Session.new())
    assert built.title_generator is not None
    assert await built.title_generator.generate(["hello"]) == "A title"
    assert provider.requests[0].model.ref == "openai/titles"


async def test_titles_can_be_turned_off_by_the_server_or_by_the_agent_file(
    sources, tmp_path: Path
) -> None:
    provider = FakeProvider(text("A title"))
    off = await factory(sources, provider, titles=False).build("team", "planner", Session.new())
    assert off.title_generator is None
    (tmp_path / "quiet.yaml").write_text(
        "agents:\n  root: {model: openai/a}\nruntime:\n  titles: false\n"
    )
    quiet = AgentSources.from_paths([tmp_path / "quiet.yaml"])
    built = await factory(quiet, provider).build("quiet", "", Session.new())
    assert built.title_generator is None
    assert quiet.get_json("quiet")["runtime"] == {"titles": False}
    assert provider.requests == []


async def test_auto_is_resolved_by_the_factory(sources) -> None:
    provider = FakeProvider(text("from auto"))
    auto = ModelConfig(name="auto", provider="fake", model="resolved")
    built = await factory(sources, provider, auto_model=auto).build("auto", "", Session.new())
    io = start(FakeIO(), "hi")
    await built.runtime.run_stream(io)
    assert provider.requests[0].model == auto


async def test_bundled_default_agent_runs_on_the_real_echo_provider() -> None:
    f = LocalRuntimeFactory(AgentSources.bundled(), env={})
    built = await f.build("default", "", Session.new())
    io = start(FakeIO(), "ping")
    await built.runtime.run_stream(io)
    types = io.types()
    assert types[0] == "stream_started"
    assert types[-1] == "stream_stopped"
    assert "error" not in types, io.events
    answer = io.messages()[-1]
    assert (answer.role, answer.content) == ("assistant", "Echo: ping")
    assert io.session.input_tokens > 0


async def test_any_agent_can_switch_to_auto(sources) -> None:
    provider = FakeProvider(text("switched"))
    auto = ModelConfig(name="auto", provider="fake", model="resolved")
    built = await factory(sources, provider, auto_model=auto).build("team", "", Session.new())
    await built.runtime.set_agent_model("root", "auto")
    await built.runtime.run_stream(start(FakeIO(), "hi"))
    assert provider.requests[0].model == auto


async def test_runtimes_share_one_read_only_environment_until_it_changes(
    sources, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GREENROOM_FACTORY_TEST", "one")
    f = LocalRuntimeFactory(sources, provider_for=FakeProvider(text("x")).provider_for)
    first = await f.build("team", "", Session.new())
    second = await f.build("team", "", Session.new())
    env_of = lambda built: built.runtime.tool_context.env  # noqa: E731
    assert env_of(first) is env_of(second)
    assert env_of(first)["GREENROOM_FACTORY_TEST"] == "one"
    with pytest.raises(TypeError):
        env_of(first)["GREENROOM_FACTORY_TEST"] = "changed"
    monkeypatch.setenv("GREENROOM_FACTORY_TEST", "two")
    third = await f.build("team", "", Session.new())
    assert env_of(third)["GREENROOM_FACTORY_TEST"] == "two"
    assert env_of(first)["GREENROOM_FACTORY_TEST"] == "one"
