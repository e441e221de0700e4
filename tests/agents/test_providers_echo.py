"""The echo provider and the provider factory (``make_provider``, ``resolve_auto``).

Rules: no sockets here; tests that sleep take ``autojump_clock``.
"""

from __future__ import annotations

import pytest
import trio

from greenroom.agents.providers import (
    AnthropicProvider,
    Delta,
    EchoProvider,
    ModelConfig,
    ModelRequest,
    OpenAIProvider,
    TextDelta,
    make_provider,
    resolve_auto,
)
from greenroom.agents.providers._dmr import DmrProvider
from greenroom.domain import ChatMessage, MessagePart
from greenroom.errors import InvalidRequest

ECHO = ModelConfig(name="e", provider="echo", model="echo")


class Deltas:
    def __init__(self) -> None:
        self.got: list[Delta] = []

    async def __call__(self, delta: Delta) -> None:
        self.got.append(delta)


def ask(*messages: ChatMessage) -> ModelRequest:
    return ModelRequest(model=ECHO, messages=messages)


async def test_echo_streams_the_last_user_message_word_by_word() -> None:
    deltas = Deltas()
    request = ask(
        ChatMessage(role="system", content="You are helpful."),
        ChatMessage(role="user", content="first question"),
        ChatMessage(role="assistant", content="Echo: first question"),
        ChatMessage(role="user", content="  what  is trio? "),
    )
    response = await EchoProvider().complete(request, deltas)
    assert deltas.got == [
        TextDelta("Echo:"),
        TextDelta(" what"),
        TextDelta(" is"),
        TextDelta(" trio?"),
    ]
    assert response.content == "Echo: what is trio?"
    assert response.stop_reason == "stop"
    assert response.model == "echo"
    assert response.usage.output_tokens == 4
    # 4 messages, ~70 characters: a plausible prompt size.
    assert 20 <= response.usage.input_tokens <= 60


async def test_echo_cuts_long_messages() -> None:
    deltas = Deltas()
    words = " ".join(f"w{i}" for i in range(40))
    response = await EchoProvider().complete(ask(ChatMessage(role="user", content=words)), deltas)
    assert len(deltas.got) == 1 + 12 + 1
    assert response.content.endswith(" w11 …")


async def test_echo_reads_text_parts_and_handles_nothing() -> None:
    parts = (MessagePart(type="text", text="from parts"),)
    response = await EchoProvider().complete(
        ask(ChatMessage(role="user", multi_content=parts)), Deltas()
    )
    assert response.content == "Echo: from parts"
    response = await EchoProvider().complete(ask(), Deltas())
    assert response.content == "Echo: (nothing to echo)"


async def test_echo_token_delay(autojump_clock: trio.testing.MockClock) -> None:
    start = trio.current_time()
    await EchoProvider(token_delay=0.5).complete(
        ask(ChatMessage(role="user", content="a b")), Deltas()
    )
    assert trio.current_time() - start == pytest.approx(1.5)


def test_make_provider_picks_by_provider_name() -> None:
    def build(provider: str, base_url: str = "", token_key: str = "") -> object:
        config = ModelConfig("m", provider, "x", base_url=base_url, token_key=token_key)
        return make_provider(config, env={})

    assert isinstance(build("echo"), EchoProvider)
    assert isinstance(build("anthropic"), AnthropicProvider)
    openai = build("openai")
    assert isinstance(openai, OpenAIProvider)
    assert openai.base_url == "https://api.openai.com/v1"
    assert (openai.key_var, openai.require_key) == ("OPENAI_API_KEY", True)
    local = build("openai", base_url="http://localhost:8000/v1")
    assert isinstance(local, OpenAIProvider)
    assert not local.require_key
    named = build("openai", base_url="http://localhost:8000/v1", token_key="VLLM_KEY")
    assert isinstance(named, OpenAIProvider)
    assert (named.key_var, named.require_key) == ("VLLM_KEY", True)
    runner = build("dmr")
    assert isinstance(runner, DmrProvider)  # configures the runner before the first call
    dmr = runner.inner
    assert isinstance(dmr, OpenAIProvider)
    assert dmr.base_url == "http://localhost:12434/engines/v1"
    assert not dmr.require_key
    ollama = build("ollama", base_url="http://gpu-box:11434/v1")
    assert isinstance(ollama, OpenAIProvider)
    assert ollama.base_url == "http://gpu-box:11434/v1"
    mistral = build("mistral")
    assert isinstance(mistral, OpenAIProvider)
    assert (mistral.key_var, mistral.require_key) == ("MISTRAL_API_KEY", True)


def test_unknown_provider_is_an_invalid_request() -> None:
    config = ModelConfig(name="brain", provider="skynet", model="t-800")
    with pytest.raises(InvalidRequest) as caught:
        make_provider(config)
    assert "skynet" in caught.value.message
    assert "brain" in caught.value.message


@pytest.mark.parametrize(
    ("env", "ref", "because"),
    [
        ({"OPENAI_API_KEY": "sk", "ANTHROPIC_API_KEY": "a"}, "openai/gpt-5-mini", "OPENAI_API_KEY"),
        ({"ANTHROPIC_API_KEY": "a"}, "anthropic/claude-sonnet-4-5", "ANTHROPIC_API_KEY"),
        ({"OPENAI_API_KEY": " ", "ANTHROPIC_API_KEY": ""}, "echo/echo", "echo model"),
        ({}, "echo/echo", "echo model"),
    ],
)
def test_resolve_auto(env: dict[str, str], ref: str, because: str) -> None:
    config, why = resolve_auto(env)
    assert config.ref == ref
    assert config.name == "auto"
    assert because in why
    assert "\n" not in why
    assert isinstance(make_provider(config, env=env), EchoProvider) == (ref == "echo/echo")
