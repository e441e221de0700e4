"""AnthropicProvider against a fake Anthropic Messages server over real HTTP.

Rules: the fake server runs in the test's nursery on 127.0.0.1 port 0; these tests use the real
clock (network I/O), so each is bounded by ``trio.fail_after`` and backoff is made tiny.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from functools import partial

import pytest
import trio

from greenroom.agents.providers import (
    AnthropicProvider,
    Backoff,
    ModelConfig,
    ModelRequest,
    ReasoningDelta,
    TextDelta,
    ToolSpec,
)
from greenroom.domain import ChatMessage, FunctionCall, ImageURL, MessagePart, ToolCall, Usage
from greenroom.errors import (
    ModelContextOverflow,
    ModelError,
    ModelKeyMissing,
    ModelRateLimited,
    ModelStreamMalformed,
    ModelTimeout,
)
from tests.slowness import slow

from .fake_anthropic import (
    FakeAnthropic,
    context_overflow_reply,
    error_event,
    error_reply,
    message_end,
    message_start,
    stream_reply,
    text_block,
    text_reply,
    tool_use_block,
)
from .provider_support import Deltas, cancel_once_streaming

FAST = Backoff(attempts=3, base=0.01, cap=0.02)
ENV = {"ANTHROPIC_API_KEY": "sk-ant-test"}
LIMIT = slow(10)  # seconds (real clock) for any one test


@pytest.fixture
async def fake(nursery: trio.Nursery) -> AsyncIterator[FakeAnthropic]:
    server: FakeAnthropic = await nursery.start(FakeAnthropic().serve)
    yield server
    server.stop()


def config(fake: FakeAnthropic, token_key: str = "") -> ModelConfig:
    return ModelConfig(
        name="m", provider="anthropic", model="fake-claude", base_url=fake.url, token_key=token_key
    )


def provider(
    fake: FakeAnthropic, *, env: Mapping[str, str] = ENV, token_key: str = ""
) -> AnthropicProvider:
    return AnthropicProvider(config(fake, token_key), env=env, backoff=FAST)


def request(
    fake: FakeAnthropic, *messages: ChatMessage, tools: tuple[ToolSpec, ...] = ()
) -> ModelRequest:
    messages = messages or (ChatMessage(role="user", content="hi"),)
    return ModelRequest(model=config(fake), messages=messages, tools=tools)


async def test_text_is_streamed_delta_by_delta_in_order(fake: FakeAnthropic) -> None:
    fake.script(text_reply("Hel", "lo", " world"))
    deltas = Deltas()
    with trio.fail_after(LIMIT):
        response = await provider(fake).complete(request(fake), deltas)
    assert deltas.got == [TextDelta("Hel"), TextDelta("lo"), TextDelta(" world")]
    assert response.content == "Hello world"
    assert response.stop_reason == "stop"
    assert response.model == "fake-claude"
    sent = fake.requests[0]
    assert (sent.method, sent.path) == ("POST", "/v1/messages")
    # This SDK release sends the key as a bearer token; older ones used x-api-key.
    credentials = sent.headers.get("x-api-key", "") + sent.headers.get("authorization", "")
    assert "sk-ant-test" in credentials
    assert sent.json["stream"] is True
    assert sent.json["model"] == "fake-claude"
    assert sent.json["max_tokens"] == 8192


async def test_thinking_becomes_reasoning_deltas(fake: FakeAnthropic) -> None:
    fake.script(text_reply("42", thinking=["Let me ", "think."]))
    deltas = Deltas()
    with trio.fail_after(LIMIT):
        response = await provider(fake).complete(request(fake), deltas)
    assert deltas.got == [ReasoningDelta("Let me "), ReasoningDelta("think."), TextDelta("42")]
    assert (response.reasoning, response.content) == ("Let me think.", "42")


async def test_tool_use_input_is_assembled_from_json_deltas(fake: FakeAnthropic) -> None:
    fake.script(
        stream_reply(
            [
                message_start(),
                *text_block(0, ["Looking."]),
                *tool_use_block(1, "toolu_a", "shell", ['{"cmd', '": "l', 's"}']),
                *tool_use_block(2, "toolu_b", "read_file", ['{"path": ', '"x.txt"}']),
                *tool_use_block(3, "toolu_c", "now", []),
                *message_end("tool_use", 30),
            ]
        )
    )
    tool = ToolSpec("shell", "run a command", {"type": "object", "properties": {}})
    deltas = Deltas()
    with trio.fail_after(LIMIT):
        response = await provider(fake).complete(request(fake, tools=(tool,)), deltas)
    assert response.tool_calls == (
        ToolCall("toolu_a", FunctionCall("shell", '{"cmd": "ls"}')),
        ToolCall("toolu_b", FunctionCall("read_file", '{"path": "x.txt"}')),
        ToolCall("toolu_c", FunctionCall("now", "{}")),
    )
    assert response.stop_reason == "tool_calls"
    assert deltas.got == [TextDelta("Looking.")]
    assert fake.requests[0].json["tools"] == [
        {
            "name": "shell",
            "description": "run a command",
            "input_schema": {"type": "object", "properties": {}},
        }
    ]


async def test_usage_is_reported(fake: FakeAnthropic) -> None:
    fake.script(
        stream_reply(
            [
                message_start(60, cache_read=40, cache_write=10),
                *text_block(0, ["ok"]),
                *message_end("end_turn", 21),
            ]
        )
    )
    with trio.fail_after(LIMIT):
        response = await provider(fake).complete(request(fake), Deltas())
    assert response.usage == Usage(
        input_tokens=60, output_tokens=21, cached_input_tokens=40, cached_write_tokens=10
    )


async def test_max_tokens_stop_is_reported_as_length(fake: FakeAnthropic) -> None:
    fake.script(
        stream_reply([message_start(), *text_block(0, ["cut"]), *message_end("max_tokens")])
    )
    with trio.fail_after(LIMIT):
        response = await provider(fake).complete(request(fake), Deltas())
    assert response.stop_reason == "length"


async def test_rate_limit_then_success_is_retried(fake: FakeAnthropic) -> None:
    fake.script(error_reply(429, "slow down", type="rate_limit_error"), text_reply("ok"))
    deltas = Deltas()
    with trio.fail_after(LIMIT):
        response = await provider(fake).complete(request(fake), deltas)
    assert response.content == "ok"
    assert deltas.got == [TextDelta("ok")]
    assert len(fake.requests) == 2


async def test_server_errors_until_the_budget_ends(fake: FakeAnthropic) -> None:
    fake.script(
        error_reply(500, "boom"),
        error_reply(529, "Overloaded", type="overloaded_error"),
        error_reply(500, "boom again"),
        text_reply("too late"),
    )
    with trio.fail_after(LIMIT), pytest.raises(ModelError) as caught:
        await provider(fake).complete(request(fake), Deltas())
    assert type(caught.value) is ModelError
    assert caught.value.code == "model_error"
    assert "HTTP 500" in caught.value.message
    assert "boom again" in caught.value.message
    assert "3 attempts" in caught.value.message
    assert len(fake.requests) == 3


async def test_rate_limit_until_the_budget_ends(fake: FakeAnthropic) -> None:
    fake.script(*[error_reply(429, "slow down", type="rate_limit_error")] * 3)
    with trio.fail_after(LIMIT), pytest.raises(ModelRateLimited) as caught:
        await provider(fake).complete(request(fake), Deltas())
    assert caught.value.code == "rate_limited"
    assert len(fake.requests) == 3


async def test_error_event_before_any_text_is_retried(fake: FakeAnthropic) -> None:
    fake.script(
        stream_reply([message_start(), error_event("overloaded_error", "Overloaded")]),
        text_reply("ok"),
    )
    deltas = Deltas()
    with trio.fail_after(LIMIT):
        response = await provider(fake).complete(request(fake), deltas)
    assert response.content == "ok"
    assert len(fake.requests) == 2


async def test_error_event_after_text_is_not_retried(fake: FakeAnthropic) -> None:
    fake.script(
        stream_reply(
            [message_start(), *text_block(0, ["par"]), error_event("overloaded_error", "Over")]
        ),
        text_reply("a retry would get this"),
    )
    deltas = Deltas()
    with trio.fail_after(LIMIT), pytest.raises(ModelError) as caught:
        await provider(fake).complete(request(fake), deltas)
    assert "Over" in caught.value.message
    assert deltas.got == [TextDelta("par")]
    assert len(fake.requests) == 1


async def test_client_errors_are_not_retried(fake: FakeAnthropic) -> None:
    fake.script(error_reply(401, "invalid x-api-key", type="authentication_error"))
    with trio.fail_after(LIMIT), pytest.raises(ModelError) as caught:
        await provider(fake).complete(request(fake), Deltas())
    assert "HTTP 401" in caught.value.message
    assert "ANTHROPIC_API_KEY" in caught.value.message
    assert len(fake.requests) == 1


async def test_stream_cut_mid_way_is_malformed(fake: FakeAnthropic) -> None:
    fake.script(
        stream_reply([message_start(), *text_block(0, ["one"])], ending="abort"),
        text_reply("a retry would get this"),
    )
    deltas = Deltas()
    with trio.fail_after(LIMIT), pytest.raises(ModelStreamMalformed) as caught:
        await provider(fake).complete(request(fake), deltas)
    assert "cut" in caught.value.message
    assert deltas.got == [TextDelta("one")]
    assert len(fake.requests) == 1


async def test_stream_ending_before_message_stop_is_malformed(fake: FakeAnthropic) -> None:
    fake.script(stream_reply([message_start(), *text_block(0, ["one"])]))
    with trio.fail_after(LIMIT), pytest.raises(ModelStreamMalformed) as caught:
        await provider(fake).complete(request(fake), Deltas())
    assert "message_stop" in caught.value.message


async def test_invalid_json_in_the_stream_is_malformed(fake: FakeAnthropic) -> None:
    bad = b"event: content_block_delta\ndata: {not json\n\n"
    fake.script(stream_reply([message_start(), bad, *message_end()]))
    with trio.fail_after(LIMIT), pytest.raises(ModelStreamMalformed):
        await provider(fake).complete(request(fake), Deltas())


async def test_silent_stream_hits_the_idle_limit(fake: FakeAnthropic) -> None:
    fake.script(stream_reply([message_start()], ending="stall"))
    quick = provider(fake)
    quick.idle = 1.0  # the stream stalls for good: any limit shows it; 1 s leaves a busy CPU room
    with trio.fail_after(LIMIT), pytest.raises(ModelTimeout):
        await quick.complete(request(fake), Deltas())
    with trio.fail_after(LIMIT):
        await fake.requests[0].done.wait()
    assert fake.requests[0].disconnected


async def test_caller_cancels_a_slow_stream(fake: FakeAnthropic) -> None:
    tokens = [f"t{i} " for i in range(50)]
    fake.script(text_reply(*tokens, delay=0.1))  # real clock: 5 s in all
    deltas = Deltas()
    with trio.fail_after(LIMIT):
        await cancel_once_streaming(partial(provider(fake).complete, request(fake)), deltas)
        assert 1 <= len(deltas.got) < len(tokens)
        # The server saw the client leave: nothing is left streaming.
        await fake.requests[0].done.wait()
    assert fake.requests[0].disconnected


async def test_missing_key_fails_before_any_request(fake: FakeAnthropic) -> None:
    with trio.fail_after(LIMIT), pytest.raises(ModelKeyMissing) as caught:
        await provider(fake, env={}).complete(request(fake), Deltas())
    assert "ANTHROPIC_API_KEY" in caught.value.message
    with pytest.raises(ModelKeyMissing) as caught:
        await provider(fake, env=ENV, token_key="TEAM_CLAUDE_KEY").complete(request(fake), Deltas())
    assert "TEAM_CLAUDE_KEY" in caught.value.message
    assert fake.requests == []


async def test_messages_are_converted_to_the_messages_format(fake: FakeAnthropic) -> None:
    fake.script(text_reply("ok"))
    image = MessagePart(type="image_url", image_url=ImageURL("data:image/png;base64,iVBORw0K"))
    history = (
        ChatMessage(role="system", content="Be brief."),
        ChatMessage(role="user", multi_content=(MessagePart(type="text", text="What?"), image)),
        ChatMessage(
            role="assistant",
            content="Let me look.",
            reasoning_content="not sent back",
            tool_calls=(
                ToolCall("toolu_1", FunctionCall("look", '{"at": "cat"}')),
                ToolCall("toolu_2", FunctionCall("size", "")),
            ),
        ),
        ChatMessage(role="tool", content="a cat", tool_call_id="toolu_1"),
        ChatMessage(role="tool", content="no size", tool_call_id="toolu_2", is_error=True),
        ChatMessage(role="user", content="And?"),
        ChatMessage(role="system", content="Answer in English."),
        ChatMessage(role="assistant", content="A cat."),
        ChatMessage(role="user", content="Thanks"),
    )
    cfg = ModelConfig(name="m", provider="anthropic", model="fake-claude", max_tokens=100)
    req = ModelRequest(model=cfg, messages=history)
    with trio.fail_after(LIMIT):
        await provider(fake).complete(req, Deltas())
    sent = fake.requests[0].json
    assert sent["system"] == "Be brief.\n\nAnswer in English."
    assert sent["max_tokens"] == 100
    assert sent["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What?"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0K"},
                },
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_1", "name": "look", "input": {"at": "cat"}},
                {"type": "tool_use", "id": "toolu_2", "name": "size", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a cat"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": "no size",
                    "is_error": True,
                },
                {"type": "text", "text": "And?"},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]},
        {"role": "user", "content": [{"type": "text", "text": "Thanks"}]},
    ]
    assert "tools" not in sent


async def test_temperature_is_sent_when_set(fake: FakeAnthropic) -> None:
    fake.script(text_reply("ok"), text_reply("ok"))
    warm = ModelConfig(name="m", provider="anthropic", model="fake-claude", temperature=0.3)
    message = (ChatMessage(role="user", content="hi"),)
    with trio.fail_after(LIMIT):
        await provider(fake).complete(ModelRequest(model=warm, messages=message), Deltas())
        await provider(fake).complete(request(fake), Deltas())
    assert fake.requests[0].json["temperature"] == 0.3
    assert "temperature" not in fake.requests[1].json


async def test_a_context_overflow_is_recognised_and_not_retried(fake: FakeAnthropic) -> None:
    fake.script(context_overflow_reply(210000, 200000))
    with trio.fail_after(LIMIT), pytest.raises(ModelContextOverflow) as caught:
        await provider(fake).complete(request(fake), Deltas())
    assert "prompt is too long: 210000 tokens > 200000 maximum" in caught.value.message
    assert len(fake.requests) == 1
