"""Agent files shaped like docker-agent's published examples load and run a turn.

The files in ``agent_files/`` are ours, written to cover the shapes the examples use (inline and
named models, every provider, custom providers, alloys, fallbacks, sub-agents, commands,
unsupported features). Each runs one turn through ``LocalRuntimeFactory`` against live fake
servers (OpenAI, Anthropic, Gemini, Bedrock protocols) on 127.0.0.1; the environment points the
providers at them the way a user points a team at a gateway. Real clock, bounded.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import pytest
import trio

from greenroom.agents import AgentSources, LocalRuntimeFactory
from greenroom.agents._diagnose import DockerMcp, diagnose
from greenroom.agents._validate import check_files
from greenroom.domain import AgentInfo, ErrorEvent, Session
from tests.slowness import slow

from . import fake_anthropic, fake_bedrock, fake_gemini
from .fake_openai import FakeOpenAI, error_reply, text_reply
from .loop_support import FakeIO, start

FILES = Path(__file__).parent / "agent_files"
LIMIT = slow(15)  # seconds (real clock) for any one test


@attrs.frozen
class Fakes:
    openai: FakeOpenAI
    anthropic: fake_anthropic.FakeAnthropic
    gemini: fake_gemini.FakeGemini
    bedrock: fake_bedrock.FakeBedrock

    def env(self) -> dict[str, str]:
        return {
            "OPENAI_BASE_URL": self.openai.base_url,
            "OPENAI_API_KEY": "sk-test",
            "ANTHROPIC_BASE_URL": self.anthropic.url,
            "ANTHROPIC_API_KEY": "ak-test",
            "GOOGLE_GEMINI_BASE_URL": self.gemini.url,
            "GOOGLE_API_KEY": "g-test",
            "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": self.bedrock.url,
            "AWS_ACCESS_KEY_ID": "AKIDTEST",
            "AWS_SECRET_ACCESS_KEY": "secret",
            "MODEL_RUNNER_HOST": self.openai.url,
            "HOSTED_URL": self.openai.base_url,
            "MISTRAL_API_KEY": "mk-test",
            "GATEWAY_URL": self.openai.base_url,
            "GATEWAY_TOKEN": "gw-test",
        }


@pytest.fixture
async def fakes(nursery: trio.Nursery) -> AsyncIterator[Fakes]:
    servers = Fakes(
        await nursery.start(FakeOpenAI().serve),
        await nursery.start(fake_anthropic.FakeAnthropic().serve),
        await nursery.start(fake_gemini.FakeGemini().serve),
        await nursery.start(fake_bedrock.FakeBedrock().serve),
    )
    yield servers
    for server in (servers.openai, servers.anthropic, servers.gemini, servers.bedrock):
        server.stop()


def no_docker() -> DockerMcp:
    return DockerMcp(False, "no docker CLI on PATH")


def test_every_file_loads_and_only_the_unsupported_one_warns() -> None:
    reports = {
        Path(r.path).name: r
        for r in check_files([FILES], docker=no_docker, builders={"think": object()})
    }
    assert len(reports) == 8
    assert all(not r.errors for r in reports.values()), reports
    warned = {name for name, r in reports.items() if r.warnings}
    assert warned == {"with_unsupported.yaml"}


def test_unsupported_features_are_named_with_file_and_line() -> None:
    path = FILES / "with_unsupported.yaml"
    config = AgentSources.from_paths([path]).get("with_unsupported")
    lines = diagnose(config, docker=no_docker, builders={"think": object()})
    where = [line.removeprefix(f"{path}:").split(": warning: ")[0] for line in lines]
    assert where == [
        "4: rag.docs.strategies[0].chunking.code_aware",
        "15: agents.root.toolsets[1]",
        "17: agents.root.toolsets[2]",
        "19: agents.root.sub_agents[1]",
    ]
    assert "duckduckgo" in lines[1] and "Docker Desktop" in lines[1]
    assert "toolset type 'memory'" in lines[2]


CASES = [
    ("inline_anthropic", "root", "anthropic", "claude-fake"),
    ("named_openai_team", "root", "openai", "gpt-fake"),
    ("named_openai_team", "drafter", "openai", "gpt-fake"),
    ("gemini", "root", "gemini", "gemini-fake"),
    ("gemini", "second", "gemini", "gemini-fake"),
    ("bedrock", "root", "bedrock", "anthropic.claude-fake-v1:0"),
    ("local_dmr", "root", "openai", "ai/fake-model"),
    ("local_dmr", "hosted", "openai", "mistral-fake"),
    ("custom_gateway", "root", "openai", "gpt-fake-big"),
    ("custom_gateway", "small", "openai", "gpt-fake-small"),
    ("with_unsupported", "root", "anthropic", "claude-fake"),
]


def _script(fakes: Fakes, server: str, text: str) -> None:
    match server:
        case "openai":
            fakes.openai.script(text_reply(text))
        case "anthropic":
            fakes.anthropic.script(fake_anthropic.text_reply(text))
        case "gemini":
            fakes.gemini.script(fake_gemini.text_reply(text))
        case "bedrock":
            fakes.bedrock.script(fake_bedrock.text_reply(text))


def _model_sent(fakes: Fakes, server: str) -> object:
    match server:
        case "openai":
            return fakes.openai.requests[-1].json["model"]
        case "anthropic":
            return fakes.anthropic.requests[-1].json["model"]
        case "gemini":
            return fakes.gemini.requests[-1].path.split("/models/")[1].split(":")[0]
        case _:
            return fakes.bedrock.requests[-1].path.split("/model/")[1].split("/")[0]


async def run_turn(fakes: Fakes, source: str, agent: str) -> FakeIO:
    factory = LocalRuntimeFactory(AgentSources.from_paths([FILES]), env=fakes.env())
    built = await factory.build(source, agent, Session.new())
    io = start(FakeIO(), "hello")
    with trio.fail_after(LIMIT):
        await built.runtime.run_stream(io)
    await built.runtime.aclose()
    return io


@pytest.mark.parametrize(("source", "agent", "server", "model"), CASES)
async def test_a_turn_runs_against_the_fake_provider(
    fakes: Fakes, source: str, agent: str, server: str, model: str
) -> None:
    _script(fakes, server, f"hi from {agent}")
    io = await run_turn(fakes, source, agent)
    assert io.of(ErrorEvent) == []
    assert io.messages()[-1].message.content == f"hi from {agent}"
    assert _model_sent(fakes, server) == model


async def test_an_alloy_and_a_fallback_run(fakes: Fakes) -> None:
    fakes.openai.script(text_reply("alloy answer"))
    io = await run_turn(fakes, "alloy_fallback", "root")
    assert io.messages()[-1].message.content == "alloy answer"
    [info] = io.of(AgentInfo)
    assert info.model in ("openai/gpt-fake-a", "openai/gpt-fake-b")
    fakes.openai.script(error_reply(400, "no such model"), text_reply("fallback answer"))
    io = await run_turn(fakes, "alloy_fallback", "steady")
    assert io.of(ErrorEvent) == []
    assert io.messages()[-1].message.content == "fallback answer"
    assert [r.json["model"] for r in fakes.openai.requests[-2:]] == [
        "gpt-fake-broken",
        "gpt-fake-b",
    ]
