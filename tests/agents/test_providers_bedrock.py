"""BedrockProvider against a fake Bedrock runtime speaking ConverseStream's event stream.

Live HTTP on 127.0.0.1 port 0, real clock, each test bounded by ``trio.fail_after``. The
credential chain is replaced by a function so no test reads AWS files or the network.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from functools import partial

import pytest
import trio
from botocore.credentials import ReadOnlyCredentials

from greenroom.agents.providers import (
    Backoff,
    BedrockProvider,
    ModelConfig,
    ModelRequest,
    ReasoningDelta,
    TextDelta,
    ToolSpec,
    make_provider,
)
from greenroom.domain import ChatMessage, FunctionCall, ToolCall, Usage
from greenroom.errors import (
    ModelContextOverflow,
    ModelError,
    ModelKeyMissing,
    ModelRateLimited,
    ModelStreamMalformed,
)
from tests.slowness import slow

from .fake_bedrock import (
    FakeBedrock,
    context_overflow_reply,
    ending,
    error_reply,
    event,
    exception,
    signature_matches,
    stream_reply,
    text_block,
    text_reply,
    tool_block,
)
from .provider_support import Deltas, cancel_once_streaming

FAST = Backoff(attempts=3, base=0.01, cap=0.02)
MODEL_ID = "anthropic.claude-3-5-sonnet-20240620-v1:0"
KEYS = {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret-example"}
LIMIT = slow(10)  # seconds (real clock) for any one test


@pytest.fixture
async def fake(nursery: trio.Nursery) -> AsyncIterator[FakeBedrock]:
    server: FakeBedrock = await nursery.start(FakeBedrock().serve)
    yield server
    server.stop()


def no_chain(profile: str) -> ReadOnlyCredentials | None:
    return None


def config(fake: FakeBedrock, *, token_key: str = "", region: str = "eu-west-3") -> ModelConfig:
    return ModelConfig(
        name="m",
        provider="amazon-bedrock",
        model=MODEL_ID,
        token_key=token_key,
        provider_opts={"endpoint_url": fake.url, "region": region},
    )


def provider(fake: FakeBedrock, env: Mapping[str, str] = KEYS, **kw: str) -> BedrockProvider:
    return BedrockProvider(config(fake, **kw), env=env, backoff=FAST, chain=no_chain)


def request(
    fake: FakeBedrock, *messages: ChatMessage, tools: tuple[ToolSpec, ...] = ()
) -> ModelRequest:
    messages = messages or (ChatMessage(role="user", content="hi"),)
    return ModelRequest(model=config(fake), messages=messages, tools=tools)


async def test_text_streams_and_the_request_is_signed(fake: FakeBedrock) -> None:
    fake.script(text_reply("Hel", "lo", reasoning=["thinking"]))
    deltas = Deltas()
    bedrock = provider(fake)
    with trio.fail_after(LIMIT):
        response = await bedrock.complete(request(fake), deltas)
    assert deltas.got == [ReasoningDelta("thinking"), TextDelta("Hel"), TextDelta("lo")]
    assert (response.content, response.reasoning, response.stop_reason) == (
        "Hello",
        "thinking",
        "stop",
    )
    assert response.usage == Usage(input_tokens=9, output_tokens=3)
    sent = fake.requests[0]
    assert sent.path == f"/model/{MODEL_ID}/converse-stream"
    assert sent.json["messages"] == [{"role": "user", "content": [{"text": "hi"}]}]
    credentials = ReadOnlyCredentials("AKIDEXAMPLE", "secret-example", None)
    url = bedrock.url(MODEL_ID)
    assert "%3A0" in url  # the model id is one path segment
    assert signature_matches(sent, url, credentials, "eu-west-3")
    wrong = ReadOnlyCredentials("AKIDEXAMPLE", "another-secret", None)
    assert not signature_matches(sent, url, wrong, "eu-west-3")


async def test_a_bedrock_api_key_is_sent_as_a_bearer_token(fake: FakeBedrock) -> None:
    fake.script(text_reply("ok"))
    env = {"AWS_BEARER_TOKEN_BEDROCK": "brk-key", **KEYS}
    with trio.fail_after(LIMIT):
        await provider(fake, env).complete(request(fake), Deltas())
    assert fake.requests[0].headers["authorization"] == "Bearer brk-key"


async def test_tool_calls_are_assembled_and_history_is_converted(fake: FakeBedrock) -> None:
    fake.script(
        stream_reply(
            [
                event("messageStart", {"role": "assistant"}),
                *text_block(0, "Let me look."),
                *tool_block(1, "tu-1", "shell", ['{"cmd"', ': "ls"}']),
                *ending("tool_use", usage=(40, 12), cached=30),
            ]
        )
    )
    call = ToolCall(id="tu-0", function=FunctionCall("think", '{"thought": "x"}'))
    messages = (
        ChatMessage(role="system", content="Be brief."),
        ChatMessage(role="user", content="list files"),
        ChatMessage(role="assistant", tool_calls=(call,)),
        ChatMessage(role="tool", content="noted", tool_call_id="tu-0", is_error=True),
        ChatMessage(role="user", content="go on"),
    )
    shell = ToolSpec("shell", "Run a command", {"type": "object", "properties": {}})
    with trio.fail_after(LIMIT):
        response = await provider(fake).complete(request(fake, *messages, tools=(shell,)), Deltas())
    assert response.stop_reason == "tool_calls"
    [tool] = response.tool_calls
    assert (tool.id, tool.function.name, tool.function.arguments) == (
        "tu-1",
        "shell",
        '{"cmd": "ls"}',
    )
    assert response.usage == Usage(input_tokens=40, output_tokens=12, cached_input_tokens=30)
    body = fake.requests[0].json
    assert body["system"] == [{"text": "Be brief."}]
    assert body["toolConfig"]["tools"][0]["toolSpec"]["inputSchema"] == {
        "json": {"type": "object", "properties": {}}
    }
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][1]["content"] == [
        {"toolUse": {"toolUseId": "tu-0", "name": "think", "input": {"thought": "x"}}}
    ]
    assert body["messages"][2]["content"] == [
        {"toolResult": {"toolUseId": "tu-0", "content": [{"text": "noted"}], "status": "error"}},
        {"text": "go on"},
    ]


async def test_throttling_is_retried_then_reported(fake: FakeBedrock) -> None:
    fake.script(error_reply(429, "ThrottlingException", "Too many requests"), text_reply("ok"))
    with trio.fail_after(LIMIT):
        assert (await provider(fake).complete(request(fake), Deltas())).content == "ok"
    fake.script(*[error_reply(429, "ThrottlingException", "Too many requests")] * 3)
    with trio.fail_after(LIMIT), pytest.raises(ModelRateLimited, match="ThrottlingException"):
        await provider(fake).complete(request(fake), Deltas())


async def test_refused_credentials_are_reported_at_once(fake: FakeBedrock) -> None:
    fake.script(error_reply(403, "UnrecognizedClientException", "The security token is invalid"))
    with trio.fail_after(LIMIT), pytest.raises(ModelError) as caught:
        await provider(fake).complete(request(fake), Deltas())
    assert "HTTP 403" in caught.value.message
    assert "security token is invalid" in caught.value.message
    assert len(fake.requests) == 1


async def test_an_exception_event_mid_stream(fake: FakeBedrock) -> None:
    fake.script(
        stream_reply([*text_block(0, "partial"), exception("modelStreamErrorException", "boom")])
    )
    deltas = Deltas()
    with trio.fail_after(LIMIT), pytest.raises(ModelError, match="modelStreamErrorException"):
        await provider(fake).complete(request(fake), deltas)
    assert deltas.got == [TextDelta("partial")]
    assert len(fake.requests) == 1  # text reached the caller: no retry
    fake.script(stream_reply([exception("throttlingException", "slow")]), text_reply("second"))
    with trio.fail_after(LIMIT):  # nothing had reached the caller: retried
        assert (await provider(fake).complete(request(fake), Deltas())).content == "second"


async def test_a_corrupt_or_short_stream_is_malformed(fake: FakeBedrock) -> None:
    good = event("messageStart", {"role": "assistant"})
    corrupt = good[:-1] + bytes([good[-1] ^ 0xFF])  # wrong message CRC
    fake.script(stream_reply([corrupt]))
    with trio.fail_after(LIMIT), pytest.raises(ModelStreamMalformed, match="did not decode"):
        await provider(fake).complete(request(fake), Deltas())
    fake.script(stream_reply(text_block(0, "no stop")))
    with trio.fail_after(LIMIT), pytest.raises(ModelStreamMalformed, match="messageStop"):
        await provider(fake).complete(request(fake), Deltas())


async def test_caller_cancels_a_slow_stream(fake: FakeBedrock) -> None:
    fake.script(stream_reply(text_block(0, *[f"t{i} " for i in range(50)]), delay=0.1))
    deltas = Deltas()
    with trio.fail_after(LIMIT):
        await cancel_once_streaming(partial(provider(fake).complete, request(fake)), deltas)
        assert 1 <= len(deltas.got) < 50
        await fake.requests[0].done.wait()
    assert fake.requests[0].disconnected


async def test_missing_credentials_fail_before_any_request(fake: FakeBedrock) -> None:
    with trio.fail_after(LIMIT), pytest.raises(ModelKeyMissing) as caught:
        await provider(fake, {}).complete(request(fake), Deltas())
    assert "AWS_BEARER_TOKEN_BEDROCK" in caught.value.message
    assert "AWS_ACCESS_KEY_ID" in caught.value.message
    assert fake.requests == []


async def test_the_credential_chain_is_asked_when_the_environment_has_none(
    fake: FakeBedrock,
) -> None:
    asked: list[str] = []

    def chain(profile: str) -> ReadOnlyCredentials:
        asked.append(profile)
        return ReadOnlyCredentials("AKIDCHAIN", "chain-secret", "session-token")

    fake.script(text_reply("ok"))
    model = ModelConfig(
        name="m",
        provider="amazon-bedrock",
        model=MODEL_ID,
        provider_opts={"endpoint_url": fake.url, "profile": "work"},
    )
    bedrock = BedrockProvider(model, env={"AWS_REGION": "ap-south-1"}, chain=chain)
    assert bedrock.region == "ap-south-1"
    with trio.fail_after(LIMIT):
        await bedrock.complete(ModelRequest(model, request(fake).messages), Deltas())
    assert asked == ["work"]
    sent = fake.requests[0]
    assert sent.headers["x-amz-security-token"] == "session-token"
    credentials = ReadOnlyCredentials("AKIDCHAIN", "chain-secret", "session-token")
    assert signature_matches(sent, bedrock.url(MODEL_ID), credentials, "ap-south-1")


def test_region_and_endpoint_defaults() -> None:
    model = ModelConfig(name="m", provider="amazon-bedrock", model="amazon.nova-pro-v1:0")
    bedrock = make_provider(model, env={"AWS_DEFAULT_REGION": "us-west-2"})
    assert isinstance(bedrock, BedrockProvider)
    assert bedrock.endpoint == "https://bedrock-runtime.us-west-2.amazonaws.com"
    assert BedrockProvider(model, env={}).region == "us-east-1"


async def test_a_context_overflow_is_recognised_and_not_retried(fake: FakeBedrock) -> None:
    fake.script(context_overflow_reply())
    with trio.fail_after(LIMIT), pytest.raises(ModelContextOverflow) as caught:
        await provider(fake).complete(request(fake), Deltas())
    assert "Input is too long for requested model" in caught.value.message
    assert len(fake.requests) == 1
