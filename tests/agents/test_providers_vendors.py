"""Provider names: env base URLs, OpenAI-compatible vendors, custom providers of a file.

Live fake servers on 127.0.0.1 port 0 (real clock, bounded by ``trio.fail_after``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio

from greenroom.agents import parse_agent_file
from greenroom.agents.providers import (
    AnthropicProvider,
    Delta,
    EchoProvider,
    ModelConfig,
    ModelRequest,
    OpenAIProvider,
    make_provider,
)
from greenroom.agents.providers._catalog import VENDORS, expand_env
from greenroom.agents.providers._dmr import DmrProvider
from greenroom.domain import ChatMessage
from greenroom.errors import InvalidRequest, ModelKeyMissing
from tests.slowness import slow

from . import fake_anthropic
from .fake_openai import FakeOpenAI, text_reply

LIMIT = slow(10)  # seconds (real clock) for any one test


@pytest.fixture
async def fake(nursery: trio.Nursery) -> AsyncIterator[FakeOpenAI]:
    server: FakeOpenAI = await nursery.start(FakeOpenAI().serve)
    yield server
    server.stop()


async def _ignore(_: Delta) -> None:
    pass


def ask(model: ModelConfig) -> ModelRequest:
    return ModelRequest(model=model, messages=(ChatMessage(role="user", content="hi"),))


async def test_openai_base_url_from_the_environment(fake: FakeOpenAI) -> None:
    fake.script(text_reply("via the gateway"))
    model = ModelConfig(name="m", provider="openai", model="gpt-4o")
    env = {"OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-env"}
    provider = make_provider(model, env=env)
    with trio.fail_after(LIMIT):
        response = await provider.complete(ask(model), _ignore)
    assert response.content == "via the gateway"
    assert fake.requests[0].headers["authorization"] == "Bearer sk-env"


async def test_model_base_url_wins_over_the_environment(fake: FakeOpenAI) -> None:
    model = ModelConfig(name="m", provider="openai", model="x", base_url=fake.base_url)
    provider = OpenAIProvider(model, env={"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})
    assert provider.base_url == fake.base_url


async def test_an_env_endpoint_needs_no_key_like_any_custom_endpoint(fake: FakeOpenAI) -> None:
    fake.script(text_reply("local"))
    model = ModelConfig(name="m", provider="openai", model="llama")
    provider = make_provider(model, env={"OPENAI_BASE_URL": fake.base_url})
    with trio.fail_after(LIMIT):
        assert (await provider.complete(ask(model), _ignore)).content == "local"


async def test_anthropic_base_url_from_the_environment(nursery: trio.Nursery) -> None:
    server = await nursery.start(fake_anthropic.FakeAnthropic().serve)
    server.script(fake_anthropic.text_reply("claude", "!"))
    model = ModelConfig(name="m", provider="anthropic", model="claude-x")
    env = {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "ak"}
    provider = make_provider(model, env=env)
    assert isinstance(provider, AnthropicProvider)
    with trio.fail_after(LIMIT):
        response = await provider.complete(ask(model), _ignore)
    assert response.content == "claude!"
    assert server.requests[0].path == "/v1/messages"
    server.stop()


@pytest.mark.parametrize(
    ("name", "base_url", "key_var"),
    [
        ("nebius", "https://api.studio.nebius.com/v1", "NEBIUS_API_KEY"),
        ("mistral", "https://api.mistral.ai/v1", "MISTRAL_API_KEY"),
        ("xai", "https://api.x.ai/v1", "XAI_API_KEY"),
        ("groq", "https://api.groq.com/openai/v1", "GROQ_API_KEY"),
        ("openrouter", "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"),
        ("ollama", "http://localhost:11434/v1", ""),
        ("dmr", "http://localhost:12434/engines/v1", ""),
    ],
)
def test_vendors_have_their_endpoints_and_key_variables(
    name: str, base_url: str, key_var: str
) -> None:
    provider = make_provider(ModelConfig(name="m", provider=name, model="x"), env={})
    if isinstance(provider, DmrProvider):  # Model Runner's is configured before its first call
        provider = provider.inner
    assert isinstance(provider, OpenAIProvider)
    assert (provider.base_url, provider.key_var, provider.require_key) == (
        base_url,
        key_var,
        bool(key_var),
    )


async def test_a_vendor_key_is_read_from_its_variable(fake: FakeOpenAI) -> None:
    fake.script(text_reply("bonjour"))
    model = ModelConfig(name="m", provider="mistral", model="mistral-small", base_url=fake.base_url)
    provider = make_provider(model, env={"MISTRAL_API_KEY": "mk", "OPENAI_API_KEY": "nope"})
    with trio.fail_after(LIMIT):
        assert (await provider.complete(ask(model), _ignore)).content == "bonjour"
    assert fake.requests[0].headers["authorization"] == "Bearer mk"


async def test_a_vendor_without_its_key_fails_before_any_request(fake: FakeOpenAI) -> None:
    model = ModelConfig(name="m", provider="xai", model="grok", base_url=fake.base_url)
    with trio.fail_after(LIMIT), pytest.raises(ModelKeyMissing, match="XAI_API_KEY"):
        await make_provider(model, env={}).complete(ask(model), _ignore)
    assert fake.requests == []


def test_dmr_follows_model_runner_host() -> None:
    model = ModelConfig(name="m", provider="dmr", model="ai/qwen3")
    runner = make_provider(model, env={"MODEL_RUNNER_HOST": "http://127.0.0.1:12435/"})
    assert isinstance(runner, DmrProvider)
    provider = runner.inner
    assert isinstance(provider, OpenAIProvider)
    assert provider.base_url == "http://127.0.0.1:12435/engines/v1"


def test_templated_endpoints_are_filled_from_the_environment() -> None:
    model = ModelConfig(name="m", provider="cloudflare-workers-ai", model="llama")
    env = {"CLOUDFLARE_ACCOUNT_ID": "acc42", "CLOUDFLARE_API_TOKEN": "t"}
    provider = make_provider(model, env=env)
    assert isinstance(provider, OpenAIProvider)
    assert provider.base_url == "https://api.cloudflare.com/client/v4/accounts/acc42/ai/v1"
    with pytest.raises(InvalidRequest, match="CLOUDFLARE_ACCOUNT_ID"):
        make_provider(model, env={})
    assert expand_env("${env.A}-${B}", {"A": "1", "B": "2"}) == "1-2"


def test_unknown_unsupported_and_endpointless_providers_are_refused() -> None:
    with pytest.raises(InvalidRequest, match="unknown provider 'opanai'"):
        make_provider(ModelConfig(name="m", provider="opanai", model="x"), env={})
    with pytest.raises(InvalidRequest, match="not supported by greenroom"):
        make_provider(ModelConfig(name="m", provider="chatgpt", model="x"), env={})
    with pytest.raises(InvalidRequest, match="set base_url"):
        make_provider(ModelConfig(name="m", provider="azure", model="x"), env={})
    assert all(vendor.name == name for name, vendor in VENDORS.items())


def test_echo_options() -> None:
    echo = make_provider(
        ModelConfig(name="m", provider="echo", model="echo", provider_opts={"token_delay": 0.25}),
        env={},
    )
    assert isinstance(echo, EchoProvider)
    assert echo.token_delay == 0.25
    with pytest.raises(InvalidRequest, match="token_delay"):
        EchoProvider.from_options({"token_delay": -1})
    with pytest.raises(InvalidRequest, match="unknown provider_opts"):
        EchoProvider.from_options({"speed": 2})


CUSTOM = """\
providers:
  gateway:
    api_type: openai_chatcompletions
    base_url: {url}
    token_key: GATEWAY_KEY
models:
  big:
    provider: gateway
    model: gpt-4o
    max_tokens: 100
agents:
  root:
    model: big
  helper:
    model: gateway/gpt-4o-mini
"""


async def test_custom_provider_models_use_its_endpoint_and_key(fake: FakeOpenAI) -> None:
    config = parse_agent_file(CUSTOM.format(url=fake.base_url), "agent.yaml")
    assert config.providers["gateway"].token_key == "GATEWAY_KEY"
    env = {"GATEWAY_KEY": "gw-secret"}
    fake.script(text_reply("named"), text_reply("inline"))
    for ref, expected in (("big", "named"), ("gateway/gpt-4o-mini", "inline")):
        model = config.model_config(ref)
        assert (model.base_url, model.token_key, model.api_type) == (
            fake.base_url,
            "GATEWAY_KEY",
            "openai_chatcompletions",
        )
        with trio.fail_after(LIMIT):
            response = await make_provider(model, env=env).complete(ask(model), _ignore)
        assert response.content == expected
    assert [r.json["model"] for r in fake.requests] == ["gpt-4o", "gpt-4o-mini"]
    assert {r.headers["authorization"] for r in fake.requests} == {"Bearer gw-secret"}
    model = config.model_config("big")
    with pytest.raises(ModelKeyMissing, match="GATEWAY_KEY"):
        await make_provider(model, env={}).complete(ask(model), _ignore)
