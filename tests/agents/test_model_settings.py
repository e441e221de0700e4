"""The model keys of an agent file as each vendor's fake server receives them.

``thinking_budget`` (and the session's thinking toggle), ``structured_output``, ``top_p``,
the penalties, ``parallel_tool_calls`` and ``track_usage``: the exact request shapes, over real
HTTP against the fakes (real clock, each call bounded by ``trio.fail_after``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import attrs
import pytest
import trio
from botocore.credentials import ReadOnlyCredentials

from greenroom.agents.providers import (
    AnthropicProvider,
    Backoff,
    BedrockProvider,
    GoogleProvider,
    ModelConfig,
    ModelRequest,
    OpenAIProvider,
    StructuredOutput,
    TextDelta,
    ToolSpec,
)
from greenroom.domain import ChatMessage, FunctionCall, ToolCall
from greenroom.errors import InvalidRequest, ModelError, ModelRateLimited

from . import fake_anthropic, fake_bedrock, fake_gemini, fake_openai
from .provider_support import Deltas

FAST = Backoff(attempts=1, base=0.01, cap=0.02)
LIMIT = 10
HI = (ChatMessage(role="user", content="hi"),)
TOOL = ToolSpec(name="lookup", description="looks up", parameters={"type": "object"})
OUTPUT = StructuredOutput(
    name="verdict",
    description="The verdict",
    schema={
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
    },
    strict=True,
)


@pytest.fixture
async def openai_fake(nursery: trio.Nursery) -> AsyncIterator[fake_openai.FakeOpenAI]:
    server: fake_openai.FakeOpenAI = await nursery.start(fake_openai.FakeOpenAI().serve)
    yield server
    server.stop()


@pytest.fixture
async def anthropic_fake(nursery: trio.Nursery) -> AsyncIterator[fake_anthropic.FakeAnthropic]:
    server: fake_anthropic.FakeAnthropic = await nursery.start(fake_anthropic.FakeAnthropic().serve)
    yield server
    server.stop()


@pytest.fixture
async def gemini_fake(nursery: trio.Nursery) -> AsyncIterator[fake_gemini.FakeGemini]:
    server: fake_gemini.FakeGemini = await nursery.start(fake_gemini.FakeGemini().serve)
    yield server
    server.stop()


@pytest.fixture
async def bedrock_fake(nursery: trio.Nursery) -> AsyncIterator[fake_bedrock.FakeBedrock]:
    server: fake_bedrock.FakeBedrock = await nursery.start(fake_bedrock.FakeBedrock().serve)
    yield server
    server.stop()


# --- OpenAI Chat Completions -----------------------------------------------------------------


def openai_model(fake: fake_openai.FakeOpenAI, **kw: Any) -> ModelConfig:
    return ModelConfig(
        name="m", provider="openai", model="gpt-5-mini", base_url=fake.base_url, **kw
    )


async def openai_call(
    fake: fake_openai.FakeOpenAI, model: ModelConfig, **kw: Any
) -> dict[str, Any]:
    fake.script(fake_openai.text_reply('{"ok": true}'))
    provider = OpenAIProvider(model, env={"OPENAI_API_KEY": "k"}, backoff=FAST)
    with trio.fail_after(LIMIT):
        await provider.complete(ModelRequest(model=model, messages=HI, **kw), Deltas())
    body: dict[str, Any] = fake.requests[-1].json
    return body


async def test_openai_gets_reasoning_effort_sampling_and_tool_settings(
    openai_fake: fake_openai.FakeOpenAI,
) -> None:
    model = openai_model(
        openai_fake,
        thinking_budget="low",
        top_p=0.9,
        frequency_penalty=0.5,
        presence_penalty=-0.25,
        parallel_tool_calls=False,
        track_usage=False,
    )
    body = await openai_call(openai_fake, model, tools=(TOOL,))
    assert body["reasoning_effort"] == "low"
    assert (body["top_p"], body["frequency_penalty"], body["presence_penalty"]) == (
        0.9,
        0.5,
        -0.25,
    )
    assert body["parallel_tool_calls"] is False
    assert body["stream_options"] == {"include_usage": False}
    assert "response_format" not in body


async def test_openai_thinking_toggle_off_and_disabled_budgets_send_no_effort(
    openai_fake: fake_openai.FakeOpenAI,
) -> None:
    body = await openai_call(openai_fake, openai_model(openai_fake, thinking_budget="high"))
    assert body["reasoning_effort"] == "high"
    off = await openai_call(
        openai_fake, openai_model(openai_fake, thinking_budget="high"), thinking=False
    )
    assert "reasoning_effort" not in off
    none = await openai_call(openai_fake, openai_model(openai_fake, thinking_budget="none"))
    assert "reasoning_effort" not in none
    # Not a reasoning model: docker-agent ignores the budget.
    plain = attrs.evolve(openai_model(openai_fake, thinking_budget="low"), model="gpt-4o")
    assert "reasoning_effort" not in await openai_call(openai_fake, plain)
    # parallel_tool_calls goes only with tools
    assert "parallel_tool_calls" not in await openai_call(
        openai_fake, openai_model(openai_fake, parallel_tool_calls=True)
    )


async def test_openai_token_budget_is_refused_for_a_reasoning_model(
    openai_fake: fake_openai.FakeOpenAI,
) -> None:
    model = openai_model(openai_fake, thinking_budget=2048)
    provider = OpenAIProvider(model, env={"OPENAI_API_KEY": "k"}, backoff=FAST)
    with pytest.raises(InvalidRequest, match="minimal, low, medium or high"):
        await provider.complete(ModelRequest(model=model, messages=HI), Deltas())
    assert openai_fake.requests == []


async def test_openai_structured_output_is_a_json_schema_response_format(
    openai_fake: fake_openai.FakeOpenAI,
) -> None:
    body = await openai_call(openai_fake, openai_model(openai_fake), structured_output=OUTPUT)
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {
            "name": "verdict",
            "description": "The verdict",
            "strict": True,
            "schema": {
                "type": "object",
                "properties": {"ok": {"type": "boolean"}},
                "required": ["ok"],
            },
        },
    }


# --- Anthropic -------------------------------------------------------------------------------


def anthropic_model(fake: fake_anthropic.FakeAnthropic, **kw: Any) -> ModelConfig:
    return ModelConfig(name="m", provider="anthropic", model="claude", base_url=fake.url, **kw)


def anthropic_provider(model: ModelConfig) -> AnthropicProvider:
    return AnthropicProvider(model, env={"ANTHROPIC_API_KEY": "k"}, backoff=FAST)


async def test_anthropic_thinking_block_beta_header_and_signature_round_trip(
    anthropic_fake: fake_anthropic.FakeAnthropic,
) -> None:
    model = anthropic_model(
        anthropic_fake,
        thinking_budget=2048,
        temperature=0.3,
        top_p=0.8,
        provider_opts={"interleaved_thinking": True},
    )
    anthropic_fake.script(fake_anthropic.text_reply("ok", thinking=["hm"]))
    with trio.fail_after(LIMIT):
        response = await anthropic_provider(model).complete(
            ModelRequest(model=model, messages=HI), Deltas()
        )
    sent = anthropic_fake.requests[-1]
    assert sent.json["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert sent.json["max_tokens"] == 2048 + 8192  # room for the budget and the answer
    assert "temperature" not in sent.json and "top_p" not in sent.json
    assert sent.headers["anthropic-beta"] == "interleaved-thinking-2025-05-14"
    assert response.thinking_signature == "c2lnbmF0dXJl"

    # The next call sends the reasoning back, signed, before the tool call it led to.
    history = (
        *HI,
        ChatMessage(
            role="assistant",
            reasoning_content="hm",
            thinking_signature=response.thinking_signature,
            tool_calls=(ToolCall(id="t1", function=FunctionCall("lookup", "{}")),),
        ),
        ChatMessage(role="tool", content="found", tool_call_id="t1"),
    )
    anthropic_fake.script(fake_anthropic.text_reply("done"))
    with trio.fail_after(LIMIT):
        await anthropic_provider(model).complete(
            ModelRequest(model=model, messages=history, tools=(TOOL,)), Deltas()
        )
    assistant = anthropic_fake.requests[-1].json["messages"][1]
    assert assistant["content"][0] == {
        "type": "thinking",
        "thinking": "hm",
        "signature": "c2lnbmF0dXJl",
    }
    assert assistant["content"][1]["type"] == "tool_use"


async def test_anthropic_thinking_toggle_off_drops_thinking_and_the_beta(
    anthropic_fake: fake_anthropic.FakeAnthropic,
) -> None:
    model = anthropic_model(
        anthropic_fake,
        thinking_budget=2048,
        top_p=0.8,
        provider_opts={"interleaved_thinking": True},
    )
    anthropic_fake.script(fake_anthropic.text_reply("ok"))
    with trio.fail_after(LIMIT):
        await anthropic_provider(model).complete(
            ModelRequest(model=model, messages=HI, thinking=False), Deltas()
        )
    sent = anthropic_fake.requests[-1]
    assert "thinking" not in sent.json
    assert sent.json["top_p"] == 0.8
    assert "anthropic-beta" not in sent.headers
    assert sent.json["max_tokens"] == 8192


async def test_anthropic_max_tokens_below_the_budget_is_refused(
    anthropic_fake: fake_anthropic.FakeAnthropic,
) -> None:
    model = anthropic_model(anthropic_fake, thinking_budget=4096, max_tokens=2000)
    with pytest.raises(InvalidRequest, match="greater than thinking_budget"):
        await anthropic_provider(model).complete(ModelRequest(model=model, messages=HI), Deltas())
    assert anthropic_fake.requests == []


async def test_anthropic_structured_output_is_a_forced_tool_whose_input_is_the_answer(
    anthropic_fake: fake_anthropic.FakeAnthropic,
) -> None:
    model = anthropic_model(anthropic_fake, thinking_budget=2048)
    payloads = [fake_anthropic.message_start()]
    payloads += fake_anthropic.tool_use_block(0, "tu1", "verdict", ['{"ok":', " true}"])
    payloads += fake_anthropic.message_end("tool_use")
    anthropic_fake.script(fake_anthropic.stream_reply(payloads))
    deltas = Deltas()
    with trio.fail_after(LIMIT):
        response = await anthropic_provider(model).complete(
            ModelRequest(model=model, messages=HI, structured_output=OUTPUT), deltas
        )
    body = anthropic_fake.requests[-1].json
    assert body["tool_choice"] == {"type": "tool", "name": "verdict"}
    assert body["tools"] == [
        {
            "name": "verdict",
            "description": "The verdict",
            "input_schema": dict(json.loads(json.dumps(dict(OUTPUT.schema), default=dict))),
        }
    ]
    assert "thinking" not in body  # Anthropic refuses thinking with a forced tool
    assert (response.content, response.tool_calls, response.stop_reason) == (
        '{"ok": true}',
        (),
        "stop",
    )
    assert deltas.got == [TextDelta('{"ok": true}')]

    # With tools of its own the agent may call them first: any tool is required.
    anthropic_fake.script(fake_anthropic.text_reply("x"))
    with trio.fail_after(LIMIT):
        await anthropic_provider(model).complete(
            ModelRequest(model=model, messages=HI, tools=(TOOL,), structured_output=OUTPUT),
            Deltas(),
        )
    body = anthropic_fake.requests[-1].json
    assert body["tool_choice"] == {"type": "any"}
    assert [t["name"] for t in body["tools"]] == ["lookup", "verdict"]


# --- Gemini ----------------------------------------------------------------------------------


def gemini_model(fake: fake_gemini.FakeGemini, name: str = "gemini-2.5-flash", **kw: Any) -> Any:
    return ModelConfig(name="m", provider="google", model=name, base_url=fake.url, **kw)


async def gemini_call(fake: fake_gemini.FakeGemini, model: ModelConfig, **kw: Any) -> Any:
    fake.script(fake_gemini.text_reply("ok"))
    provider = GoogleProvider(model, env={"GOOGLE_API_KEY": "g"}, backoff=FAST)
    with trio.fail_after(LIMIT):
        await provider.complete(ModelRequest(model=model, messages=HI, **kw), Deltas())
    return fake.requests[-1].json["generationConfig"]


async def test_gemini_thinking_config_sampling_and_json_schema(
    gemini_fake: fake_gemini.FakeGemini,
) -> None:
    model = gemini_model(
        gemini_fake, thinking_budget=1024, top_p=0.7, frequency_penalty=0.1, presence_penalty=0.2
    )
    config = await gemini_call(gemini_fake, model, structured_output=OUTPUT)
    # The SDK sends thinkingConfig's fields in snake case (the API takes both spellings).
    assert config["thinkingConfig"] == {"include_thoughts": True, "thinking_budget": 1024}
    assert (config["topP"], config["frequencyPenalty"], config["presencePenalty"]) == (
        0.7,
        0.1,
        0.2,
    )
    assert config["responseMimeType"] == "application/json"
    assert config["responseJsonSchema"]["required"] == ["ok"]

    dynamic = await gemini_call(gemini_fake, gemini_model(gemini_fake, thinking_budget=-1))
    assert dynamic["thinkingConfig"] == {"include_thoughts": True, "thinking_budget": -1}
    off = await gemini_call(gemini_fake, gemini_model(gemini_fake), thinking=False)
    assert off["thinkingConfig"] == {"include_thoughts": False, "thinking_budget": 0}
    level = await gemini_call(
        gemini_fake, gemini_model(gemini_fake, "gemini-3-pro-preview", thinking_budget="medium")
    )
    assert level["thinkingConfig"] == {"include_thoughts": True, "thinking_level": "MEDIUM"}
    assert "thinkingConfig" not in await gemini_call(gemini_fake, gemini_model(gemini_fake))


# --- Bedrock ---------------------------------------------------------------------------------


def no_chain(profile: str) -> ReadOnlyCredentials | None:
    return None


def bedrock_model(fake: fake_bedrock.FakeBedrock, **kw: Any) -> ModelConfig:
    opts = {"endpoint_url": fake.url, "region": "eu-west-3", **kw.pop("opts", {})}
    return ModelConfig(
        name="m",
        provider="amazon-bedrock",
        model="anthropic.claude-sonnet-4-v1:0",
        provider_opts=opts,
        **kw,
    )


async def bedrock_call(
    fake: fake_bedrock.FakeBedrock, model: ModelConfig, reply: Any = None, **kw: Any
) -> tuple[dict[str, Any], Any]:
    fake.script(reply or fake_bedrock.text_reply("ok"))
    env = {"AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "s"}
    provider = BedrockProvider(model, env=env, backoff=FAST, chain=no_chain)
    with trio.fail_after(LIMIT):
        response = await provider.complete(ModelRequest(model=model, messages=HI, **kw), Deltas())
    return json.loads(fake.requests[-1].body), response


async def test_bedrock_reasoning_config_and_interleaved_beta(
    bedrock_fake: fake_bedrock.FakeBedrock,
) -> None:
    model = bedrock_model(
        bedrock_fake,
        thinking_budget=4096,
        max_tokens=16000,
        temperature=0.2,
        top_p=0.5,
        opts={"interleaved_thinking": True},
    )
    body, _ = await bedrock_call(bedrock_fake, model)
    assert body["additionalModelRequestFields"] == {
        "thinking": {"type": "enabled", "budget_tokens": 4096},
        "anthropic_beta": ["interleaved-thinking-2025-05-14"],
    }
    assert body["inferenceConfig"] == {"maxTokens": 16000}
    off, _ = await bedrock_call(bedrock_fake, model, thinking=False)
    assert "additionalModelRequestFields" not in off
    assert off["inferenceConfig"] == {"maxTokens": 16000, "temperature": 0.2, "topP": 0.5}


async def test_bedrock_structured_output_is_a_forced_tool(
    bedrock_fake: fake_bedrock.FakeBedrock,
) -> None:
    frames = [fake_bedrock.event("messageStart", {"role": "assistant"})]
    frames += fake_bedrock.tool_block(0, "tu1", "verdict", ['{"ok": false}'])
    reply = fake_bedrock.stream_reply([*frames, *fake_bedrock.ending("tool_use")])
    body, response = await bedrock_call(
        bedrock_fake, bedrock_model(bedrock_fake), reply, structured_output=OUTPUT
    )
    assert body["toolConfig"]["toolChoice"] == {"tool": {"name": "verdict"}}
    spec = body["toolConfig"]["tools"][0]["toolSpec"]
    assert (spec["name"], spec["inputSchema"]["json"]["required"]) == ("verdict", ["ok"])
    assert (response.content, response.tool_calls) == ('{"ok": false}', ())


# --- fallback.retries ------------------------------------------------------------------------


async def test_request_retries_bound_the_attempts_and_rate_limits_can_skip_them(
    openai_fake: fake_openai.FakeOpenAI,
) -> None:
    model = openai_model(openai_fake)
    provider = OpenAIProvider(
        model, env={"OPENAI_API_KEY": "k"}, backoff=Backoff(attempts=3, base=0.001, cap=0.002)
    )
    # retries: 1 → two attempts for a 5xx (the provider's own policy would make three)
    openai_fake.script(*(fake_openai.error_reply(500, "boom") for _ in range(3)))
    with trio.fail_after(LIMIT), pytest.raises(ModelError, match="gave up after 2 attempts"):
        await provider.complete(ModelRequest(model=model, messages=HI, retries=1), Deltas())
    assert len(openai_fake.requests) == 2
    # -1 → one attempt
    with trio.fail_after(LIMIT), pytest.raises(ModelError, match="boom"):
        await provider.complete(ModelRequest(model=model, messages=HI, retries=-1), Deltas())
    assert len(openai_fake.requests) == 3
    # A rate limit with a fallback model waiting: no retry at all.
    openai_fake.script(*(fake_openai.error_reply(429, "slow down") for _ in range(3)))
    request = ModelRequest(model=model, messages=HI, retry_rate_limited=False)
    with trio.fail_after(LIMIT), pytest.raises(ModelRateLimited):
        await provider.complete(request, Deltas())
    assert len(openai_fake.requests) == 4


async def test_anthropic_interleaved_thinking_without_a_budget_thinks_16384_tokens(
    anthropic_fake: fake_anthropic.FakeAnthropic,
) -> None:
    model = anthropic_model(anthropic_fake, provider_opts={"interleaved_thinking": True})
    anthropic_fake.script(fake_anthropic.text_reply("ok"))
    with trio.fail_after(LIMIT):
        await anthropic_provider(model).complete(ModelRequest(model=model, messages=HI), Deltas())
    sent = anthropic_fake.requests[-1].json
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 16384}
    assert sent["max_tokens"] == 16384 + 8192
