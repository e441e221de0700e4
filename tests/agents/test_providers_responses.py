"""ResponsesProvider (``api_type: openai_responses``) against a fake Responses API server over
real HTTP, and a whole turn with a tool call through the agent loop.

Rules: the fake runs in the test's nursery on 127.0.0.1 port 0; real clock (network I/O), each
call bounded by ``trio.fail_after``; backoff is tiny.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio

from greenroom.agents import LocalRuntime, parse_agent_file
from greenroom.agents.providers import (
    Backoff,
    ModelConfig,
    ModelRequest,
    ReasoningDelta,
    StructuredOutput,
    TextDelta,
    ToolSpec,
    make_provider,
)
from greenroom.domain import ChatMessage, FunctionCall, ToolCall, ToolCallResponse, Usage
from greenroom.errors import ModelError

from .fake_responses import FakeResponses, call_reply, failed_reply, text_reply
from .loop_support import FakeIO, start
from .provider_support import Deltas

ENV = {"OPENAI_API_KEY": "sk-test"}
LIMIT = 10
FAST = Backoff(attempts=1, base=0.01, cap=0.02)


@pytest.fixture
async def fake(nursery: trio.Nursery) -> AsyncIterator[FakeResponses]:
    server: FakeResponses = await nursery.start(FakeResponses().serve)
    yield server
    server.stop()


def model(fake: FakeResponses, name: str = "gpt-5-mini", **kw: Any) -> ModelConfig:
    opts = {"api_type": "openai_responses"}
    return ModelConfig(
        name="m", provider="openai", model=name, base_url=fake.base_url, provider_opts=opts, **kw
    )


async def test_a_responses_model_streams_reasoning_and_text(fake: FakeResponses) -> None:
    config = model(fake, thinking_budget="low", top_p=0.5, max_tokens=300)
    provider = make_provider(config, env=ENV)
    assert type(provider).__name__ == "ResponsesProvider"
    fake.script(text_reply("Hel", "lo", reasoning=["think", "ing"]))
    deltas = Deltas()
    history = (
        ChatMessage(role="system", content="be brief"),
        ChatMessage(role="user", content="hi"),
    )
    with trio.fail_after(LIMIT):
        response = await provider.complete(ModelRequest(model=config, messages=history), deltas)
    assert deltas.got == [
        ReasoningDelta("think"),
        ReasoningDelta("ing"),
        TextDelta("Hel"),
        TextDelta("lo"),
    ]
    assert (response.content, response.reasoning, response.stop_reason) == (
        "Hello",
        "thinking",
        "stop",
    )
    assert response.usage == Usage(input_tokens=30, output_tokens=8)
    sent = fake.requests[0]
    assert (sent.method, sent.path) == ("POST", "/v1/responses")
    assert sent.headers["authorization"] == "Bearer sk-test"
    assert sent.json == {
        "model": "gpt-5-mini",
        "input": [
            {
                "type": "message",
                "role": "system",
                "content": [{"type": "input_text", "text": "be brief"}],
            },
            {"role": "user", "content": "hi"},
        ],
        "stream": True,
        "store": False,
        "top_p": 0.5,
        "max_output_tokens": 300,
        "reasoning": {"summary": "detailed", "effort": "low"},
    }


async def test_tool_calls_history_and_structured_output_in_the_request(fake: FakeResponses) -> None:
    config = model(fake, parallel_tool_calls=False)
    provider = make_provider(config, env=ENV)
    fake.script(call_reply("call_9", "lookup", ['{"q":', ' "x"}'], say="checking"))
    tool = ToolSpec(name="lookup", description="looks", parameters={"type": "object"})
    output = StructuredOutput(name="v", schema={"type": "object"}, strict=True)
    history = (
        ChatMessage(role="user", content="find x"),
        ChatMessage(
            role="assistant",
            content="ignored with calls",
            tool_calls=(ToolCall(id="call_1", function=FunctionCall("lookup", "{}")),),
        ),
        ChatMessage(role="tool", content="nothing", tool_call_id="call_1"),
    )
    request = ModelRequest(
        model=config, messages=history, tools=(tool,), structured_output=output, thinking=False
    )
    with trio.fail_after(LIMIT):
        response = await provider.complete(request, Deltas())
    assert response.stop_reason == "tool_calls"
    assert response.content == "checking"
    assert response.tool_calls == (
        ToolCall(id="call_9", function=FunctionCall("lookup", '{"q": "x"}')),
    )
    body = fake.requests[0].json
    assert body["input"] == [
        {"role": "user", "content": "find x"},
        {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "nothing"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "name": "lookup",
            "description": "looks",
            "parameters": {"type": "object"},
            "strict": False,
        }
    ]
    assert body["parallel_tool_calls"] is False
    assert body["text"] == {
        "format": {"type": "json_schema", "name": "v", "schema": {"type": "object"}, "strict": True}
    }
    assert "reasoning" not in body  # the session turned thinking off


async def test_a_failed_response_is_a_model_error(fake: FakeResponses) -> None:
    config = model(fake)
    fake.script(failed_reply("the model is overloaded"))
    with trio.fail_after(LIMIT), pytest.raises(ModelError, match="the model is overloaded"):
        await make_provider(config, env=ENV).complete(
            ModelRequest(model=config, messages=(ChatMessage(role="user", content="hi"),)),
            Deltas(),
        )


async def test_a_turn_with_a_tool_call_over_the_responses_api(fake: FakeResponses) -> None:
    yaml_text = f"""\
providers:
  gateway:
    api_type: openai_responses
    base_url: {fake.base_url}
    token_key: GATEWAY_KEY
models:
  m:
    provider: gateway
    model: gpt-4.1
agents:
  root:
    model: m
    toolsets:
      - type: think
"""
    config = parse_agent_file(yaml_text, "agent.yaml")
    assert config.warnings == ()
    fake.script(
        call_reply("call_1", "think", ['{"thought": "plan"}']),
        text_reply("all done"),
    )
    runtime = LocalRuntime(
        config,
        provider_for=lambda m: make_provider(m, env={"GATEWAY_KEY": "gk"}),
    )
    io = start(FakeIO(), "go")
    with trio.fail_after(LIMIT):
        await runtime.run_stream(io)
    assert [r.path for r in fake.requests] == ["/v1/responses", "/v1/responses"]
    assert fake.requests[0].headers["authorization"] == "Bearer gk"
    second = fake.requests[1].json["input"]
    assert second[-2] == {
        "type": "function_call",
        "call_id": "call_1",
        "name": "think",
        "arguments": '{"thought": "plan"}',
    }
    assert second[-1]["type"] == "function_call_output"
    assert second[-1]["call_id"] == "call_1"
    assert len(io.of(ToolCallResponse)) == 1
    assert io.messages()[-1].message.content == "all done"
