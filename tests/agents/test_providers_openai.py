"""OpenAIProvider against a fake OpenAI-compatible server over real HTTP.

Rules: the fake server runs in the test's nursery on 127.0.0.1 port 0; these tests use the real
clock (network I/O), so each is bounded by ``trio.fail_after`` and backoff is made tiny.
"""

from __future__ import annotations

import gzip
import socket
from collections.abc import AsyncIterator, Mapping
from functools import partial

import attrs
import pytest
import trio

from greenroom.agents.providers import (
    KEYLESS_PLACEHOLDER,
    Backoff,
    Delta,
    ModelConfig,
    ModelRequest,
    OpenAIProvider,
    ReasoningDelta,
    TextDelta,
    ToolSpec,
    make_provider,
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

from .fake_openai import (
    FakeOpenAI,
    ToolCallScript,
    chunk,
    context_overflow_reply,
    error_reply,
    stream_reply,
    text_reply,
    tool_call_reply,
    usage_chunk,
)
from .provider_support import Deltas, cancel_once_streaming

FAST = Backoff(attempts=3, base=0.01, cap=0.02)
ENV = {"OPENAI_API_KEY": "sk-test"}
LIMIT = slow(10)  # seconds (real clock) for any one test


@pytest.fixture
async def fake(nursery: trio.Nursery) -> AsyncIterator[FakeOpenAI]:
    server: FakeOpenAI = await nursery.start(FakeOpenAI().serve)
    yield server
    server.stop()


def config(fake: FakeOpenAI, token_key: str = "") -> ModelConfig:
    return ModelConfig(
        name="m", provider="openai", model="fake-gpt", base_url=fake.base_url, token_key=token_key
    )


def provider(
    fake: FakeOpenAI, *, env: Mapping[str, str] = ENV, token_key: str = ""
) -> OpenAIProvider:
    return OpenAIProvider(config(fake, token_key), env=env, backoff=FAST)


def request(
    fake: FakeOpenAI, *messages: ChatMessage, tools: tuple[ToolSpec, ...] = ()
) -> ModelRequest:
    messages = messages or (ChatMessage(role="user", content="hi"),)
    return ModelRequest(model=config(fake), messages=messages, tools=tools)


async def test_text_is_streamed_delta_by_delta_in_order(fake: FakeOpenAI) -> None:
    fake.script(text_reply("Hel", "lo", " world"))
    deltas = Deltas()
    with trio.fail_after(LIMIT):
        response = await provider(fake).complete(request(fake), deltas)
    assert deltas.got == [TextDelta("Hel"), TextDelta("lo"), TextDelta(" world")]
    assert response.content == "Hello world"
    assert response.stop_reason == "stop"
    assert response.model == "fake-gpt"
    assert response.tool_calls == ()
    sent = fake.requests[0]
    assert (sent.method, sent.path) == ("POST", "/v1/chat/completions")
    assert sent.headers["authorization"] == "Bearer sk-test"
    assert sent.json["stream"] is True
    assert sent.json["stream_options"] == {"include_usage": True}
    assert sent.json["model"] == "fake-gpt"


async def test_a_gzip_coded_stream_is_decoded(fake: FakeOpenAI) -> None:
    plain = text_reply("Hel", "lo")
    coded = gzip.compress(b"".join(plain.events))
    fake.script(attrs.evolve(plain, events=(coded,), headers=(("content-encoding", "gzip"),)))
    deltas = Deltas()
    with trio.fail_after(LIMIT):
        response = await provider(fake).complete(request(fake), deltas)
    assert deltas.got == [TextDelta("Hel"), TextDelta("lo")]
    assert response.content == "Hello" and response.stop_reason == "stop"


async def test_deltas_reach_the_caller_before_the_stream_ends(fake: FakeOpenAI) -> None:
    # The server sends two tokens, then nothing until the client leaves.
    fake.script(stream_reply([chunk({"content": "a"}), chunk({"content": "b"})], ending="stall"))
    seen = trio.Event()
    deltas: list[Delta] = []

    async def on_delta(delta: Delta) -> None:
        deltas.append(delta)
        if len(deltas) == 2:
            seen.set()

    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(provider(fake).complete, request(fake), on_delta)
            await seen.wait()
            nursery.cancel_scope.cancel()
    assert deltas == [TextDelta("a"), TextDelta("b")]


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_reasoning_fields_become_reasoning_deltas(fake: FakeOpenAI, field: str) -> None:
    fake.script(text_reply("42", reasoning=["Let me ", "think."], reasoning_field=field))
    deltas = Deltas()
    with trio.fail_after(LIMIT):
        response = await provider(fake).complete(request(fake), deltas)
    assert deltas.got == [ReasoningDelta("Let me "), ReasoningDelta("think."), TextDelta("42")]
    assert (response.reasoning, response.content) == ("Let me think.", "42")


async def test_tool_calls_are_assembled_from_fragments(fake: FakeOpenAI) -> None:
    fake.script(
        tool_call_reply(
            ToolCallScript("call_a", "shell", ['{"cmd', '": "l', 's"}']),
            ToolCallScript("call_b", "read_file", ['{"path": ', '"x.txt"}']),
        )
    )
    deltas = Deltas()
    tool = ToolSpec("shell", "run a command", {"type": "object", "properties": {}})
    with trio.fail_after(LIMIT):
        response = await provider(fake).complete(request(fake, tools=(tool,)), deltas)
    assert response.tool_calls == (
        ToolCall("call_a", FunctionCall("shell", '{"cmd": "ls"}')),
        ToolCall("call_b", FunctionCall("read_file", '{"path": "x.txt"}')),
    )
    assert response.stop_reason == "tool_calls"
    assert deltas.got == []
    assert fake.requests[0].json["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "shell",
                "description": "run a command",
                "parameters": {"type": "object", "properties": {}},
            },
        }
    ]


async def test_tool_calls_from_lax_servers(fake: FakeOpenAI) -> None:
    # Whole calls all at index 0 (told apart by id), one without an index, a null delta.
    def call(call_id: str, name: str, **index: int) -> dict[str, object]:
        function = {"name": name, "arguments": "{}"}
        return {"id": call_id, "type": "function", "function": function, **index}

    fake.script(
        stream_reply(
            [
                chunk({"tool_calls": [call("c1", "one", index=0)]}),
                chunk({"tool_calls": [call("c2", "two", index=0)]}),
                {**chunk(), "choices": [{"index": 0, "delta": None, "finish_reason": None}]},
                chunk({"tool_calls": [call("c3", "three")]}),
                chunk(finish_reason="tool_calls"),
            ]
        )
    )
    with trio.fail_after(LIMIT):
        response = await provider(fake).complete(request(fake), Deltas())
    names = [(c.id, c.function.name) for c in response.tool_calls]
    assert names == [("c1", "one"), ("c2", "two"), ("c3", "three")]


async def test_usage_is_reported(fake: FakeOpenAI) -> None:
    fake.script(
        stream_reply(
            [
                chunk({"content": "ok"}),
                chunk(finish_reason="stop"),
                usage_chunk(100, 20, cached=40, reasoning=5),
            ]
        )
    )
    with trio.fail_after(LIMIT):
        response = await provider(fake).complete(request(fake), Deltas())
    assert response.usage == Usage(
        input_tokens=60, output_tokens=20, cached_input_tokens=40, reasoning_tokens=5
    )


async def test_rate_limit_then_success_is_retried(fake: FakeOpenAI) -> None:
    fake.script(error_reply(429, "slow down", type="rate_limit_error"), text_reply("ok"))
    deltas = Deltas()
    with trio.fail_after(LIMIT):
        response = await provider(fake).complete(request(fake), deltas)
    assert response.content == "ok"
    assert deltas.got == [TextDelta("ok")]
    assert len(fake.requests) == 2


async def test_server_errors_until_the_budget_ends(fake: FakeOpenAI) -> None:
    fake.script(*[error_reply(500, "boom")] * 3, text_reply("too late"))
    with trio.fail_after(LIMIT), pytest.raises(ModelError) as caught:
        await provider(fake).complete(request(fake), Deltas())
    assert type(caught.value) is ModelError
    assert caught.value.code == "model_error"
    assert "HTTP 500" in caught.value.message
    assert "boom" in caught.value.message
    assert "3 attempts" in caught.value.message
    assert len(fake.requests) == 3


async def test_rate_limit_until_the_budget_ends(fake: FakeOpenAI) -> None:
    fake.script(*[error_reply(429, "slow down")] * 3)
    with trio.fail_after(LIMIT), pytest.raises(ModelRateLimited) as caught:
        await provider(fake).complete(request(fake), Deltas())
    assert caught.value.code == "rate_limited"
    assert len(fake.requests) == 3


async def test_backoff_waits_between_attempts(fake: FakeOpenAI) -> None:
    fake.script(*[error_reply(503, "busy")] * 3)
    slow = OpenAIProvider(config(fake), env=ENV, backoff=Backoff(attempts=3, base=0.2, cap=0.3))
    start = trio.current_time()
    with trio.fail_after(LIMIT), pytest.raises(ModelError):
        await slow.complete(request(fake), Deltas())
    # 0.2 s then min(0.4, cap 0.3) s of backoff, real clock.
    assert trio.current_time() - start >= 0.5


async def test_client_errors_are_not_retried(fake: FakeOpenAI) -> None:
    fake.script(error_reply(401, "bad key", type="invalid_api_key"))
    with trio.fail_after(LIMIT), pytest.raises(ModelError) as caught:
        await provider(fake, env={"MY_KEY": "k"}, token_key="MY_KEY").complete(
            request(fake), Deltas()
        )
    assert "HTTP 401" in caught.value.message
    assert "MY_KEY" in caught.value.message
    assert len(fake.requests) == 1


async def test_connection_refused_is_retried_then_reported() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # Nothing listens on the port now.
    cfg = ModelConfig(
        name="m", provider="openai", model="x", base_url=f"http://127.0.0.1:{port}/v1"
    )
    req = ModelRequest(model=cfg, messages=(ChatMessage(role="user", content="hi"),))
    with trio.fail_after(LIMIT), pytest.raises(ModelError) as caught:
        await OpenAIProvider(cfg, env=ENV, backoff=FAST).complete(req, Deltas())
    assert type(caught.value) is ModelError
    assert "cannot reach" in caught.value.message
    assert "3 attempts" in caught.value.message


async def test_stream_cut_mid_way_is_malformed(fake: FakeOpenAI) -> None:
    fake.script(
        stream_reply([chunk({"content": "one"})], done=False, ending="abort"),
        text_reply("a retry would get this"),
    )
    deltas = Deltas()
    with trio.fail_after(LIMIT), pytest.raises(ModelStreamMalformed) as caught:
        await provider(fake).complete(request(fake), deltas)
    assert "cut" in caught.value.message
    assert deltas.got == [TextDelta("one")]
    assert len(fake.requests) == 1  # text already reached the caller: no retry


async def test_stream_ending_before_finish_is_malformed(fake: FakeOpenAI) -> None:
    fake.script(stream_reply([chunk({"content": "one"})], done=False))
    with trio.fail_after(LIMIT), pytest.raises(ModelStreamMalformed) as caught:
        await provider(fake).complete(request(fake), Deltas())
    assert "before the model finished" in caught.value.message


async def test_invalid_json_in_the_stream_is_malformed(fake: FakeOpenAI) -> None:
    fake.script(stream_reply([chunk({"content": "one"}), b"data: {not json\n\n"]))
    with trio.fail_after(LIMIT), pytest.raises(ModelStreamMalformed):
        await provider(fake).complete(request(fake), Deltas())


async def test_error_object_in_the_stream_is_a_model_error(fake: FakeOpenAI) -> None:
    fake.script(stream_reply([chunk({"content": "one"}), {"error": {"message": "upstream died"}}]))
    with trio.fail_after(LIMIT), pytest.raises(ModelError) as caught:
        await provider(fake).complete(request(fake), Deltas())
    assert "upstream died" in caught.value.message


async def test_silent_stream_hits_the_idle_limit(fake: FakeOpenAI) -> None:
    fake.script(stream_reply([chunk({"content": "one"})], done=False, ending="stall"))
    quick = provider(fake)
    quick.idle = 1.0  # the stream stalls for good: any limit shows it; 1 s leaves a busy CPU room
    with trio.fail_after(LIMIT), pytest.raises(ModelTimeout):
        await quick.complete(request(fake), Deltas())
    with trio.fail_after(LIMIT):
        await fake.requests[0].done.wait()
    assert fake.requests[0].disconnected


async def test_caller_cancels_a_slow_stream(fake: FakeOpenAI) -> None:
    tokens = [f"t{i} " for i in range(50)]
    fake.script(text_reply(*tokens, delay=0.1))  # real clock: 5 s in all
    deltas = Deltas()
    with trio.fail_after(LIMIT):
        await cancel_once_streaming(partial(provider(fake).complete, request(fake)), deltas)
        assert 1 <= len(deltas.got) < len(tokens)
        # The server saw the client leave: nothing is left streaming.
        await fake.requests[0].done.wait()
    assert fake.requests[0].disconnected


async def test_missing_key_fails_before_any_request(fake: FakeOpenAI) -> None:
    with trio.fail_after(LIMIT), pytest.raises(ModelKeyMissing) as caught:
        await provider(fake, env={}, token_key="GREENROOM_NO_SUCH_KEY").complete(
            request(fake), Deltas()
        )
    assert "GREENROOM_NO_SUCH_KEY" in caught.value.message
    assert caught.value.code == "missing_api_key"
    assert fake.requests == []


async def test_missing_default_key_without_base_url_fails() -> None:
    cfg = ModelConfig(name="m", provider="openai", model="gpt")
    req = ModelRequest(model=cfg, messages=(ChatMessage(role="user", content="hi"),))
    with pytest.raises(ModelKeyMissing) as caught:
        await OpenAIProvider(cfg, env={}).complete(req, Deltas())
    assert "OPENAI_API_KEY" in caught.value.message


async def test_local_server_runs_without_a_key(fake: FakeOpenAI) -> None:
    fake.script(text_reply("ok"))
    with trio.fail_after(LIMIT):
        response = await provider(fake, env={}).complete(request(fake), Deltas())
    assert response.content == "ok"
    assert fake.requests[0].headers["authorization"] == f"Bearer {KEYLESS_PLACEHOLDER}"


async def test_dmr_never_sends_the_openai_key(fake: FakeOpenAI) -> None:
    fake.script(text_reply("ok"))
    cfg = ModelConfig(name="m", provider="dmr", model="ai/qwen3", base_url=fake.base_url)
    dmr = make_provider(cfg, env={"OPENAI_API_KEY": "sk-secret"})
    with trio.fail_after(LIMIT):
        await dmr.complete(ModelRequest(model=cfg, messages=request(fake).messages), Deltas())
    assert fake.requests[0].headers["authorization"] == f"Bearer {KEYLESS_PLACEHOLDER}"


async def test_messages_are_converted_to_the_chat_format(fake: FakeOpenAI) -> None:
    fake.script(text_reply("ok"))
    image = MessagePart(type="image_url", image_url=ImageURL("https://x/cat.png", "low"))
    history = (
        ChatMessage(role="system", content="Be brief."),
        ChatMessage(role="user", multi_content=(MessagePart(type="text", text="What?"), image)),
        ChatMessage(
            role="assistant",
            reasoning_content="not sent back",
            tool_calls=(ToolCall("call_1", FunctionCall("look", '{"at": "cat"}')),),
        ),
        ChatMessage(role="tool", content="a cat", tool_call_id="call_1"),
        ChatMessage(role="assistant", content="A cat."),
        ChatMessage(role="user", content="Thanks"),
    )
    cfg = ModelConfig(
        name="m", provider="openai", model="fake-gpt", temperature=0.2, max_tokens=100
    )
    req = ModelRequest(model=cfg, messages=history)
    with trio.fail_after(LIMIT):
        await provider(fake).complete(req, Deltas())
    sent = fake.requests[0].json
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What?"},
                {"type": "image_url", "image_url": {"url": "https://x/cat.png", "detail": "low"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "look", "arguments": '{"at": "cat"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "a cat"},
        {"role": "assistant", "content": "A cat."},
        {"role": "user", "content": "Thanks"},
    ]
    assert sent["temperature"] == 0.2
    assert sent["max_tokens"] == 100  # a compatible server: max_tokens, not max_completion_tokens
    assert "max_completion_tokens" not in sent
    assert "tools" not in sent


async def test_a_context_overflow_is_recognised_and_not_retried(fake: FakeOpenAI) -> None:
    fake.script(context_overflow_reply(128000, 130001))
    with trio.fail_after(LIMIT), pytest.raises(ModelContextOverflow) as caught:
        await provider(fake).complete(request(fake), Deltas())
    assert caught.value.code == "context_exceeded"
    assert "maximum context length is 128000 tokens" in caught.value.message
    assert len(fake.requests) == 1
