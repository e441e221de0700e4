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
from greenroom.agents.providers._routing import ExampleIndex, analyze
from greenroom.agents.tools import FunctionTool, ToolContext, ToolResult, Toolset, build_tools
from greenroom.domain import ErrorEvent, Session, Usage
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


# --- rule-based routing ---------------------------------------------------------------------

ROUTER = """\
models:
  router:
    provider: openai
    model: router-own
    routing:
      - model: fast
        examples: ["hello", "hi there", "good morning", "thanks", "bye"]
      - model: capable
        examples: ["explain the algorithm", "debug this code", "fix this error"]
      - model: openai/analyst
        examples: ["analyze this document in detail", "provide a comprehensive review"]
  capable: {provider: openai, model: capable-model, max_tokens: 900}
  fast: {provider: openai, model: fast-model}
agents:
  root: {model: router, instruction: Help.}
"""


def test_the_english_analysis_of_examples_and_messages() -> None:
    assert analyze("Debugging this code's errors, please!") == ["debug", "code", "error", "pleas"]
    assert analyze("How are you?") == []  # stop words only
    index = ExampleIndex.of([["hello", "good morning"], ["debug this code", "fix this error"]])
    assert index.best("Hello!") == 0
    assert index.best("the code crashes, can you debug it") == 1
    assert index.best("fixing errors") == 1  # stems match
    assert index.best("what is the weather on mars") is None
    assert index.best("how are you") is None


async def test_each_call_goes_to_the_model_its_message_matches() -> None:
    config = parse_agent_file(ROUTER, "r.yaml")
    assert config.warnings == ()
    assert [r.model for r in config.models["router"].routing] == [
        "fast",
        "capable",
        "openai/analyst",
    ]
    provider = FakeProvider()
    runtime = make_runtime(provider, ROUTER)
    io = FakeIO()
    for message in [
        "hi there, good morning",
        "please fix this error in my code",
        "a comprehensive review of the attached document",
        "what is the weather on mars",
    ]:
        provider.add(text("ok"))
        io.add_user(message)
        await runtime.run_stream(io)
    assert io.of(ErrorEvent) == []
    sent = [(r.model.model, r.max_tokens) for r in provider.requests]
    assert sent == [
        ("fast-model", None),
        ("capable-model", 900),
        ("analyst", None),
        ("router-own", None),
    ]


PRICED_ROUTER = """\
models:
  router:
    provider: openai
    model: router-own
    cost: {input: 10, output: 30}
    routing:
      - model: fast
        examples: ["hello", "hi there", "good morning"]
  fast: {provider: openai, model: fast-model, cost: {input: 1, output: 2}}
agents:
  root: {model: router, instruction: Help.}
"""


async def test_a_routed_call_is_priced_at_the_routed_model() -> None:
    provider = FakeProvider()
    runtime = make_runtime(provider, PRICED_ROUTER)
    io = FakeIO()
    for message in ["hi there, good morning", "what is the weather on mars"]:
        provider.add(text("ok", usage=Usage(1_000_000, 1_000_000)))
        io.add_user(message)
        await runtime.run_stream(io)
    assert io.of(ErrorEvent) == []
    assert [r.model.model for r in provider.requests] == ["fast-model", "router-own"]
    costs = [item.message.cost for item in io.messages() if item.message.role == "assistant"]
    assert costs == [pytest.approx(1 + 2), pytest.approx(10 + 30)]


@pytest.mark.parametrize(
    ("routing", "what"),
    [
        ("routing: fast", "expected a non-empty list"),
        ("routing: [{model: nowhere, examples: [a]}]", "unknown model 'nowhere'"),
        ("routing: [{examples: [a]}]", "is required"),
        ("routing: [{model: 'a,b', examples: [a]}]", "not an alloy"),
        ("routing: [{model: openai/x, examples: a}]", "a list of strings"),
    ],
)
def test_bad_routing_rules_are_errors(routing: str, what: str) -> None:
    yaml = (
        f"models:\n  r:\n    provider: openai\n    model: m\n    {routing}\n"
        "agents:\n  root: {model: r}\n"
    )
    with pytest.raises(AgentConfigError) as caught:
        parse_agent_file(yaml, "a.yaml")
    assert any("models.r.routing" in p and what in p for p in caught.value.problems), (
        caught.value.problems
    )


async def test_a_title_never_configures_the_runner(tmp_path: Path, nursery: trio.Nursery) -> None:
    path = tmp_path / "dmr.yaml"
    path.write_text(DMR)
    server = await nursery.start(FakeOpenAI().serve)
    server.script(text_reply("Pirate talk"))
    factory = LocalRuntimeFactory(
        AgentSources.from_paths([path]), env={"MODEL_RUNNER_HOST": server.url}
    )
    built = await factory.build("dmr", "root", Session.new())
    titles = built.title_generator
    assert titles is not None
    with trio.fail_after(LIMIT):
        title = await titles.generate(["talk like a pirate"])
    await built.runtime.aclose()
    server.stop()
    assert title == "Pirate talk"
    assert [r.path for r in server.requests] == ["/engines/v1/chat/completions"]
