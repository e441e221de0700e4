"""GoogleProvider (google-genai SDK under trio) against a fake Gemini server over real HTTP.

The fake server runs in the test's nursery on 127.0.0.1 port 0 and speaks Gemini's streaming
protocol (``streamGenerateContent?alt=sse``); real clock, each test bounded by ``fail_after``.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Mapping
from functools import partial

import pytest
import trio

from greenroom.agents.providers import (
    Backoff,
    Delta,
    GoogleProvider,
    ModelConfig,
    ModelRequest,
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
)
from tests.slowness import slow

from .fake_gemini import (
    FakeGemini,
    candidate,
    context_overflow_reply,
    error_reply,
    function_call,
    stream_reply,
    text_part,
    text_reply,
)
from .provider_support import Deltas, cancel_once_streaming

FAST = Backoff(attempts=3, base=0.01, cap=0.02)
ENV = {"GOOGLE_API_KEY": "g-key"}
LIMIT = slow(10)  # seconds (real clock) for any one test


@pytest.fixture
async def fake(nursery: trio.Nursery) -> AsyncIterator[FakeGemini]:
    server: FakeGemini = await nursery.start(FakeGemini().serve)
    yield server
    server.stop()


def config(fake: FakeGemini, provider_opts: Mapping[str, str] | None = None) -> ModelConfig:
    return ModelConfig(
        name="m",
        provider="google",
        model="gemini-fake",
        base_url=fake.url,
        provider_opts=provider_opts,
    )


def provider(fake: FakeGemini, *, env: Mapping[str, str] = ENV) -> GoogleProvider:
    return GoogleProvider(config(fake), env=env, backoff=FAST)


def request(
    fake: FakeGemini, *messages: ChatMessage, tools: tuple[ToolSpec, ...] = ()
) -> ModelRequest:
    messages = messages or (ChatMessage(role="user", content="hi"),)
    return ModelRequest(model=config(fake), messages=messages, tools=tools)


async def test_text_and_thoughts_are_streamed_in_order(fake: FakeGemini) -> None:
    fake.script(text_reply("Hel", "lo", thoughts=["let me see"], usage=(11, 4)))
    deltas = Deltas()
    with trio.fail_after(LIMIT):
        response = await provider(fake).complete(request(fake), deltas)
    assert deltas.got == [ReasoningDelta("let me see"), TextDelta("Hel"), TextDelta("lo")]
    assert (response.content, response.reasoning) == ("Hello", "let me see")
    assert (response.stop_reason, response.model) == ("stop", "gemini-fake")
    assert response.usage == Usage(input_tokens=11, output_tokens=4)
    sent = fake.requests[0]
    assert sent.method == "POST"
    assert sent.path.endswith("/models/gemini-fake:streamGenerateContent")
    assert "alt=sse" in sent.query
    assert sent.headers["x-goog-api-key"] == "g-key"


async def test_deltas_reach_the_caller_before_the_stream_ends(fake: FakeGemini) -> None:
    chunks = [candidate([text_part(f"t{i} ")]) for i in range(5)]
    fake.script(stream_reply([*chunks, candidate([text_part("end")], finish="STOP")], delay=0.2))
    seen_at: list[float] = []

    async def on_delta(_: Delta) -> None:
        seen_at.append(trio.current_time())

    with trio.fail_after(LIMIT):
        await provider(fake).complete(request(fake), on_delta)
    assert len(seen_at) == 6
    assert seen_at[-1] - seen_at[0] >= 0.8  # real clock: tokens arrived as they were sent


async def test_tool_calls_and_usage(fake: FakeGemini) -> None:
    fake.script(
        stream_reply(
            [
                candidate([text_part("Looking.")]),
                candidate(
                    [
                        function_call("shell", {"cmd": "ls"}, call_id="fc-1"),
                        function_call("think", {"thought": "x"}),
                    ],
                    finish="STOP",
                    usage=(30, 12),
                ),
            ]
        )
    )
    shell = ToolSpec("shell", "Run a command", {"type": "object", "properties": {}})
    with trio.fail_after(LIMIT):
        response = await provider(fake).complete(request(fake, tools=(shell,)), Deltas())
    assert response.stop_reason == "tool_calls"
    first, second = response.tool_calls
    assert (first.id, first.function.name, first.function.arguments) == (
        "fc-1",
        "shell",
        '{"cmd": "ls"}',
    )
    assert second.function.name == "think"
    assert second.id.startswith("call_") and second.id != first.id
    assert response.usage == Usage(input_tokens=30, output_tokens=12)
    declared = fake.requests[0].json["tools"][0]["functionDeclarations"][0]
    assert (declared["name"], declared["description"]) == ("shell", "Run a command")


async def test_history_is_converted_to_gemini_contents(fake: FakeGemini) -> None:
    fake.script(text_reply("ok"))
    png = base64.b64encode(b"\x89PNG").decode()
    call = ToolCall(id="fc-9", function=FunctionCall("shell", '{"cmd": "pwd"}'))
    messages = (
        ChatMessage(role="system", content="Be brief."),
        ChatMessage(
            role="user",
            multi_content=(
                MessagePart(type="text", text="what is this?"),
                MessagePart(type="image_url", image_url=ImageURL(f"data:image/png;base64,{png}")),
            ),
        ),
        ChatMessage(role="assistant", content="Checking.", tool_calls=(call,)),
        ChatMessage(role="tool", content="/home", tool_call_id="fc-9"),
        ChatMessage(role="user", content="thanks"),
    )
    with trio.fail_after(LIMIT):
        await provider(fake).complete(request(fake, *messages), Deltas())
    body = fake.requests[0].json
    assert body["systemInstruction"]["parts"] == [{"text": "Be brief."}]
    user, model, result, last = body["contents"]
    assert user["role"] == "user"
    inline = user["parts"][1]["inlineData"]
    assert inline["data"] == png
    assert inline.get("mimeType", inline.get("mime_type")) == "image/png"  # the API takes both
    assert model["role"] == "model"
    assert model["parts"][0] == {"text": "Checking."}
    assert model["parts"][1]["functionCall"] == {
        "id": "fc-9",
        "name": "shell",
        "args": {"cmd": "pwd"},
    }
    assert "thoughtSignature" in model["parts"][1]
    assert result["parts"] == [
        {"functionResponse": {"id": "fc-9", "name": "shell", "response": {"result": "/home"}}}
    ]
    assert last == {"role": "user", "parts": [{"text": "thanks"}]}


async def test_rate_limit_is_retried_then_succeeds(fake: FakeGemini) -> None:
    fake.script(error_reply(429, "quota", status="RESOURCE_EXHAUSTED"), text_reply("ok"))
    with trio.fail_after(LIMIT):
        response = await provider(fake).complete(request(fake), Deltas())
    assert response.content == "ok"
    assert len(fake.requests) == 2


async def test_rate_limit_until_the_budget_ends(fake: FakeGemini) -> None:
    fake.script(*[error_reply(429, "quota", status="RESOURCE_EXHAUSTED")] * 3)
    with trio.fail_after(LIMIT), pytest.raises(ModelRateLimited, match="3 attempts"):
        await provider(fake).complete(request(fake), Deltas())


async def test_client_errors_are_reported_at_once(fake: FakeGemini) -> None:
    fake.script(error_reply(403, "API key not valid", status="PERMISSION_DENIED"))
    with trio.fail_after(LIMIT), pytest.raises(ModelError) as caught:
        await provider(fake).complete(request(fake), Deltas())
    assert "HTTP 403" in caught.value.message
    assert "API key not valid" in caught.value.message
    assert "GOOGLE_API_KEY" in caught.value.message
    assert len(fake.requests) == 1


async def test_an_error_inside_the_stream_after_text_is_not_retried(fake: FakeGemini) -> None:
    fake.script(
        stream_reply(
            [
                candidate([text_part("partial")]),
                {"error": {"code": 500, "message": "backend died", "status": "INTERNAL"}},
            ]
        ),
        text_reply("never"),
    )
    with trio.fail_after(LIMIT), pytest.raises(ModelError, match="backend died"):
        await provider(fake).complete(request(fake), Deltas())
    assert len(fake.requests) == 1


async def test_stream_cut_or_ending_early_is_malformed(fake: FakeGemini) -> None:
    fake.script(stream_reply([candidate([text_part("one")])], ending="abort"))
    with trio.fail_after(LIMIT), pytest.raises(ModelStreamMalformed):
        await provider(fake).complete(request(fake), Deltas())
    fake.script(stream_reply([candidate([text_part("one")])]))
    with trio.fail_after(LIMIT), pytest.raises(ModelStreamMalformed, match="before the model"):
        await provider(fake).complete(request(fake), Deltas())


async def test_caller_cancels_a_slow_stream(fake: FakeGemini) -> None:
    chunks = [candidate([text_part(f"t{i} ")]) for i in range(50)]
    fake.script(stream_reply(chunks, delay=0.1))  # real clock: 5 s in all
    deltas = Deltas()
    with trio.fail_after(LIMIT):
        await cancel_once_streaming(partial(provider(fake).complete, request(fake)), deltas)
        assert 1 <= len(deltas.got) < 50
        await fake.requests[0].done.wait()
    assert fake.requests[0].disconnected


async def test_missing_key_fails_before_any_request(fake: FakeGemini) -> None:
    with trio.fail_after(LIMIT), pytest.raises(ModelKeyMissing) as caught:
        await provider(fake, env={}).complete(request(fake), Deltas())
    assert "GOOGLE_API_KEY or GEMINI_API_KEY" in caught.value.message
    assert fake.requests == []


async def test_gemini_key_and_base_url_from_the_environment(fake: FakeGemini) -> None:
    fake.script(text_reply("env"))
    model = ModelConfig(name="m", provider="google", model="gemini-fake")
    env = {"GEMINI_API_KEY": "gem", "GOOGLE_GEMINI_BASE_URL": fake.url}
    google = make_provider(model, env=env)
    assert isinstance(google, GoogleProvider)
    with trio.fail_after(LIMIT):
        response = await google.complete(ModelRequest(model, request(fake).messages), Deltas())
    assert response.content == "env"
    assert fake.requests[0].headers["x-goog-api-key"] == "gem"


async def test_vertex_ai_is_refused_with_a_clear_error(fake: FakeGemini) -> None:
    model = config(fake, provider_opts={"project": "p", "location": "l"})
    with pytest.raises(ModelError, match="Vertex AI is not supported"):
        await GoogleProvider(model, env=ENV).complete(request(fake), Deltas())
    assert fake.requests == []


async def test_a_context_overflow_is_recognised_and_not_retried(fake: FakeGemini) -> None:
    fake.script(context_overflow_reply(1200000, 1048576))
    with trio.fail_after(LIMIT), pytest.raises(ModelContextOverflow) as caught:
        await provider(fake).complete(request(fake), Deltas())
    assert "exceeds the maximum number of tokens allowed (1048576)" in caught.value.message
    assert len(fake.requests) == 1
