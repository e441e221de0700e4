"""The agent-file keys of issue 20 (reasoning, structured output, the other model keys) from
YAML to the model request, and what the loop does with them.

Rules: the fake provider records each ModelRequest; virtual time only.
"""

from __future__ import annotations

import attrs
import pytest

from greenroom.agents import parse_agent_file
from greenroom.agents.providers import ModelResponse, StructuredOutput
from greenroom.domain import (
    ChatMessage,
    ErrorEvent,
    Message,
    Session,
    StreamStopped,
    Usage,
    item_from_json,
    item_to_json,
)
from greenroom.errors import AgentConfigError

from .loop_support import FakeIO, FakeProvider, Step, make_runtime, start, text

MODEL_KEYS = """\
models:
  m:
    provider: openai
    model: gpt-5-mini
    thinking_budget: low
    top_p: 0.9
    frequency_penalty: 0.1
    presence_penalty: 0.2
    parallel_tool_calls: false
    track_usage: false
  claude:
    provider: anthropic
    model: claude-sonnet-4-5
    thinking_budget: 2048
    provider_opts:
      interleaved_thinking: true
agents:
  root:
    model: m
    fallback:
      models: [claude]
      retries: -1
    structured_output:
      name: verdict
      description: the verdict
      strict: true
      schema:
        type: object
        properties:
          ok: {type: boolean}
        required: [ok]
"""


def test_the_model_keys_parse_without_warnings() -> None:
    config = parse_agent_file(MODEL_KEYS, "agent.yaml")
    assert config.warnings == ()
    m = config.models["m"]
    assert (m.thinking_budget, m.top_p, m.frequency_penalty, m.presence_penalty) == (
        "low",
        0.9,
        0.1,
        0.2,
    )
    assert (m.parallel_tool_calls, m.track_usage) == (False, False)
    assert config.models["claude"].thinking_budget == 2048
    root = config.agent("root")
    assert root.fallback is not None and root.fallback.retries == -1
    assert root.structured_output == StructuredOutput(
        name="verdict",
        description="the verdict",
        strict=True,
        schema={"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
    )


@pytest.mark.parametrize(
    ("snippet", "line", "what"),
    [
        (
            "    structured_output:\n      name: v\n      schema: {type: objekt}\n",
            6,
            "agents.root.structured_output.schema: is not a valid JSON schema",
        ),
        (
            "    structured_output:\n      schema: {type: object}\n",
            4,
            "agents.root.structured_output.name: is required",
        ),
        (
            "    structured_output:\n      name: v\n"
            "      schema: {properties: {a: {minimum: x}}}\n",
            6,
            "is not a valid JSON schema at properties/a/minimum",
        ),
    ],
)
def test_a_malformed_structured_output_is_an_error_with_its_line(
    snippet: str, line: int, what: str
) -> None:
    text_ = "agents:\n  root:\n    model: openai/gpt-4o\n" + snippet
    with pytest.raises(AgentConfigError) as info:
        parse_agent_file(text_, "a.yaml")
    assert any(f"a.yaml:{line}: " in p and what in p for p in info.value.problems), (
        info.value.problems
    )


def test_bad_model_key_values_are_errors() -> None:
    text_ = (
        "models:\n  m:\n    provider: openai\n    model: gpt-5\n    thinking_budget: huge\n"
        "    top_p: high\nagents:\n  root:\n    model: m\n"
    )
    with pytest.raises(AgentConfigError) as info:
        parse_agent_file(text_, "a.yaml")
    problems = "\n".join(info.value.problems)
    assert "a.yaml:5: models.m.thinking_budget: expected an integer or one of" in problems
    assert "a.yaml:6: models.m.top_p: expected a number" in problems


STRUCTURED = """\
agents:
  root:
    model: openai/gpt-4o
    structured_output:
      name: verdict
      schema:
        type: object
        properties:
          ok: {type: boolean}
        required: [ok]
"""


async def test_a_matching_answer_ends_the_turn_normally() -> None:
    provider = FakeProvider(text('{"ok": true}'))
    io = start(FakeIO(), "judge")
    await make_runtime(provider, STRUCTURED).run_stream(io)
    assert provider.requests[0].structured_output is not None
    assert provider.requests[0].structured_output.name == "verdict"
    assert io.of(ErrorEvent) == []
    assert io.of(StreamStopped)[-1].reason == "normal"


@pytest.mark.parametrize(
    ("answer", "detail"),
    [
        ('{"ok": "yes"}', "$.ok: 'yes' is not of type 'boolean'"),
        ("{}", "'ok' is a required property"),
        ("sure, it is ok", "the answer is not JSON"),
    ],
)
async def test_an_answer_that_does_not_match_the_schema_is_an_error_event(
    answer: str, detail: str
) -> None:
    provider = FakeProvider(text(answer))
    io = start(FakeIO(), "judge")
    await make_runtime(provider, STRUCTURED).run_stream(io)
    (error,) = io.of(ErrorEvent)
    assert error.code == "structured_output_mismatch"
    assert detail in error.error
    assert io.of(StreamStopped)[-1].reason == "error"
    # What the model said is kept.
    assert io.messages()[-1].message.content == answer


async def test_the_session_thinking_toggle_and_the_signature_reach_the_model() -> None:
    signed = Step(
        deltas=[],
        response=ModelResponse(
            content="a", reasoning="r", thinking_signature="sig", usage=Usage(1, 1)
        ),
    )
    provider = FakeProvider(signed)
    io = start(FakeIO(attrs.evolve(Session.new(), thinking=False)), "one")
    await make_runtime(provider, "agents:\n  root:\n    model: openai/gpt-5\n").run_stream(io)
    assert provider.requests[0].thinking is False
    stored = io.messages()[-1].message
    assert (stored.reasoning_content, stored.thinking_signature) == ("r", "sig")


async def test_fallback_retries_and_the_model_keys_reach_the_request() -> None:
    provider = FakeProvider(text('{"ok": false}'))
    io = start(FakeIO(), "x")
    await make_runtime(provider, MODEL_KEYS).run_stream(io)
    request = provider.requests[0]
    assert request.thinking is True
    # -1: no retries; with fallback models a rate limit moves on at once.
    assert (request.retries, request.retry_rate_limited) == (-1, False)
    assert (request.model.thinking_budget, request.model.top_p) == ("low", 0.9)


def test_the_thinking_signature_is_stored_with_the_message_and_omitted_when_empty() -> None:
    chat = ChatMessage(role="assistant", content="a", reasoning_content="r", thinking_signature="s")
    stored = item_to_json(Message(chat, agent_name="root"))
    assert stored["message"]["message"]["thinking_signature"] == "s"
    assert item_from_json(stored) == Message(chat, agent_name="root")
    plain = item_to_json(Message(ChatMessage(role="assistant", content="a")))
    assert "thinking_signature" not in plain["message"]["message"]
