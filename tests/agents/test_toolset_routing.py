"""Keys of docker-agent's examples greenroom now applies: a toolset's ``toon`` and ``model``,
and a Docker Model Runner model's ``provider_opts`` (runtime flags, speculative decoding)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import trio

from greenroom.agents import AgentSources, LocalRuntimeFactory, parse_agent_file
from greenroom.agents._config import ToolsetConfig
from greenroom.agents.providers import ModelConfig, ToolSpec
from greenroom.agents.providers._dmr import configure_body, configure_url, merge_flags
from greenroom.agents.tools import FunctionTool, ToolContext, ToolResult, Toolset, build_tools
from greenroom.domain import ErrorEvent, Session
from greenroom.errors import AgentConfigError

from .fake_openai import FakeOpenAI, text_reply
from .fake_sse import Reply
from .loop_support import FakeIO, FakeProvider, call, make_runtime, start, text, tool_step

LIMIT = 15  # seconds (real clock)


# --- toon ---------------------------------------------------------------------------------


def _tool(name: str, output: str) -> FunctionTool:
    async def handler(arguments: Mapping[str, Any]) -> ToolResult:
        return ToolResult(output)

    return FunctionTool(ToolSpec(name), handler)


PAYLOAD = {"repo": "greenroom", "issues": [{"id": 1, "title": "a"}, {"id": 2, "title": "b"}]}


async def test_toon_re_encodes_the_json_objects_of_the_named_tools() -> None:
    def builder(config: ToolsetConfig, ctx: ToolContext) -> Toolset:
        return Toolset(
            [
                _tool("get_issues", json.dumps(PAYLOAD)),
                _tool("get_list", "[1, 2]"),
                _tool("get_text", "plain words"),
                _tool("other", json.dumps(PAYLOAD)),
            ]
        )

    toolset = ToolsetConfig(type="x", options={"toon": "get_.*, nothing"})
    tools = build_tools([toolset], builders={"x": builder})
    out = {name: (await tool.call({})).output for name, tool in tools.tools.items()}
    assert out["get_issues"] == "repo: greenroom\nissues[2]{id,title}:\n  1,a\n  2,b"
    assert out["get_list"] == "[1, 2]"  # only objects, as upstream
    assert out["get_text"] == "plain words"
    assert json.loads(out["other"]) == PAYLOAD


@pytest.mark.parametrize(
    ("toolset", "what"),
    [
        ("{type: think, toon: 'get_(x'}", "not a valid regular expression"),
        ("{type: think, toon: [a]}", "expected a string"),
        ("{type: think, model: missing}", "unknown model 'missing'"),
        ("{type: think, model: 3}", "expected a model ref"),
    ],
)
def test_bad_toon_and_model_values_are_errors(toolset: str, what: str) -> None:
    yaml = f"agents:\n  root:\n    model: openai/x\n    toolsets:\n      - {toolset}\n"
    with pytest.raises(AgentConfigError) as caught:
        parse_agent_file(yaml, "a.yaml")
    assert any(
        p.startswith("a.yaml:5: agents.root.toolsets[0]") and what in p
        for p in caught.value.problems
    ), caught.value.problems


# --- a toolset's model -------------------------------------------------------------------------

ROUTED = """\
models:
  primary: {provider: openai, model: big}
  fast: {provider: openai, model: small}
agents:
  root:
    model: primary
    instruction: Go.
    toolsets:
      - type: think
        model: fast
      - type: todo
"""


async def test_the_call_after_a_routed_toolset_uses_its_model_once() -> None:
    provider = FakeProvider(
        tool_step(call("think", {"thought": "hm"}, "c1")),
        tool_step(call("list_todos", {}, "c2")),
        tool_step(call("list_todos", {}, "c3"), call("think", {"thought": "x"}, "c4")),
        text("done"),
    )
    runtime = make_runtime(provider, ROUTED)
    io = start(FakeIO(), "plan")
    await runtime.run_stream(io)
    assert io.of(ErrorEvent) == []
    assert [r.model.model for r in provider.requests] == ["big", "small", "big", "small"]
    # The next turn starts on the agent's own model again.
    provider.add(text("again"))
    io.add_user("more")
    await runtime.run_stream(io)
    assert provider.requests[-1].model.model == "big"


# --- Docker Model Runner ------------------------------------------------------------------------


def test_the_configure_request_as_docker_agent_builds_it() -> None:
    assert configure_url("http://h:1/engines/v1/") == "http://h:1/engines/_configure"
    assert configure_url("http://h/engines/llama.cpp/v1") == "http://h/engines/llama.cpp/_configure"
    assert merge_flags(["--temp", "0.5", "--ctx", "9"], ["--temp=0.1", "-v"]) == [
        "--ctx",
        "9",
        "--temp=0.1",
        "-v",
    ]
    model = ModelConfig(
        name="q",
        provider="dmr",
        model="ai/qwen3",
        temperature=0.7,
        max_tokens=4096,
        provider_opts={
            "runtime_flags": "--threads 4, --temp 0.2",
            "speculative_draft_model": "ai/qwen3:0.6B",
            "speculative_num_tokens": 16,
            "speculative_acceptance_rate": "0.8",
        },
    )
    assert configure_body(model) == {
        "model": "ai/qwen3",
        "context-size": 4096,
        "runtime-flags": ["--threads", "4", "--temp", "0.2"],
        "speculative": {
            "draft_model": "ai/qwen3:0.6B",
            "num_tokens": 16,
            "min_acceptance_rate": 0.8,
        },
    }
    assert configure_body(ModelConfig(name="p", provider="dmr", model="ai/x")) is None


DMR = """\
models:
  fast:
    provider: dmr
    model: ai/qwen3
    provider_opts:
      speculative_draft_model: ai/qwen3:0.6B-Q4_K_M
      speculative_num_tokens: 16
      runtime_flags: [--threads, "2"]
  plain: {provider: dmr, model: ai/plain}
agents:
  root: {model: fast, instruction: Talk like a pirate.}
  other: {model: plain, instruction: Plain.}
"""


async def test_a_dmr_model_is_configured_once_before_its_first_call(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    path = tmp_path / "dmr.yaml"
    path.write_text(DMR)
    assert parse_agent_file(DMR, str(path)).warnings == ()
    server = await nursery.start(FakeOpenAI().serve)
    server.script(Reply(status=202, body={}), text_reply("arr"), text_reply("arr again"))
    factory = LocalRuntimeFactory(
        AgentSources.from_paths([path]), env={"MODEL_RUNNER_HOST": server.url}
    )
    built = await factory.build("dmr", "root", Session.new())
    io = start(FakeIO(), "hi")
    with trio.fail_after(LIMIT):
        await built.runtime.run_stream(io)
        io.add_user("again")
        await built.runtime.run_stream(io)
    await built.runtime.aclose()
    assert io.of(ErrorEvent) == []
    paths = [r.path for r in server.requests]
    assert paths == [
        "/engines/_configure",
        "/engines/v1/chat/completions",
        "/engines/v1/chat/completions",
    ]
    assert server.requests[0].json == {
        "model": "ai/qwen3",
        "runtime-flags": ["--threads", "2"],
        "speculative": {"draft_model": "ai/qwen3:0.6B-Q4_K_M", "num_tokens": 16},
    }
    # A model with nothing to configure is called directly; a failed configure is not fatal.
    server.script(text_reply("plain"))
    built = await factory.build("dmr", "other", Session.new())
    io = start(FakeIO(), "hi")
    with trio.fail_after(LIMIT):
        await built.runtime.run_stream(io)
    await built.runtime.aclose()
    server.stop()
    assert server.requests[-1].path == "/engines/v1/chat/completions"
    assert len(server.requests) == 4
