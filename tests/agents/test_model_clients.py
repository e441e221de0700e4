"""ModelClients: one pooled, kept-alive HTTP client per model endpoint, shared by every call.

Rules: fake model servers (real HTTP, the vendors' wire formats) run in the test's nursery on
127.0.0.1 port 0; real clock (network I/O), each test bounded by ``trio.fail_after``. A
connection shows up at the fake server as one client port, so "kept alive" is checked as "the
same port served several requests".
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio
from botocore.credentials import ReadOnlyCredentials

from greenroom.agents.providers import (
    AnthropicProvider,
    Backoff,
    BedrockProvider,
    Delta,
    GoogleProvider,
    ModelClients,
    ModelConfig,
    ModelRequest,
    OpenAIProvider,
    TextDelta,
    make_provider,
    open_model_clients,
)
from greenroom.domain import ChatMessage
from greenroom.errors import ModelError
from tests.slowness import slow

from . import fake_anthropic, fake_bedrock, fake_gemini
from .fake_openai import FakeOpenAI, text_reply

FAST = Backoff(attempts=3, base=0.01, cap=0.02)
LIMIT = slow(20)  # seconds (real clock) for any one test
TOKENS = [f" t{n}" for n in range(12)]
HI = (ChatMessage(role="user", content="hi"),)


@pytest.fixture
async def fake(nursery: trio.Nursery) -> AsyncIterator[FakeOpenAI]:
    server: FakeOpenAI = await nursery.start(FakeOpenAI().serve)
    yield server
    server.stop()


@pytest.fixture
async def clients() -> AsyncIterator[ModelClients]:
    async with open_model_clients() as pool:
        yield pool


def openai_model(fake: FakeOpenAI, name: str = "m") -> ModelConfig:
    return ModelConfig(name=name, provider="openai", model="fake-gpt", base_url=fake.base_url)


def ports(fake: FakeOpenAI) -> set[tuple[str, int] | None]:
    return {recorded.client for recorded in fake.requests}


async def test_sequential_calls_share_one_client_and_one_connection(
    fake: FakeOpenAI, clients: ModelClients
) -> None:
    fake.default = text_reply("ok")
    env = {"OPENAI_API_KEY": "sk-1"}
    with trio.fail_after(LIMIT):
        for n in range(5):
            # A provider per call, as the title generator makes them: the pool is what's shared.
            provider = make_provider(openai_model(fake, f"m{n}"), env=env, clients=clients)
            response = await provider.complete(ModelRequest(openai_model(fake), HI), _ignore)
            assert response.content == "ok"
    assert len(fake.requests) == 5
    assert len(ports(fake)) == 1, "every call after the first reused the kept-alive connection"
    stats = clients.statistics()
    assert (stats.http_clients_built, stats.sdk_clients_built) == (1, 1)
    assert (stats.endpoints, stats.leases) == (1, 0)


async def test_many_concurrent_turns_on_one_client_some_cancelled(
    fake: FakeOpenAI, clients: ModelClients
) -> None:
    # Every answer streams 12 tokens, 5 ms apart, so the 40 calls overlap on the one client.
    fake.default = text_reply(*TOKENS, delay=0.005)
    provider = OpenAIProvider(openai_model(fake), env={"OPENAI_API_KEY": "k"}, clients=clients)
    calls = 40
    cancel = {n for n in range(calls) if n % 3 == 0}  # cancelled after their third token
    got: dict[int, list[str]] = {n: [] for n in range(calls)}
    finished: dict[int, str] = {}

    async def one(n: int) -> None:
        with trio.CancelScope() as scope:

            async def on_delta(delta: Delta) -> None:
                assert isinstance(delta, TextDelta)
                got[n].append(delta.text)
                if n in cancel and len(got[n]) == 3:
                    scope.cancel()

            response = await provider.complete(ModelRequest(openai_model(fake), HI), on_delta)
            finished[n] = response.content

    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            for n in range(calls):
                nursery.start_soon(one, n)
        assert clients.statistics().leases == 0
        for n in range(calls):
            if n in cancel:
                assert got[n] == TOKENS[:3] and n not in finished
            else:
                assert got[n] == TOKENS and finished[n] == "".join(TOKENS), f"call {n}"
        # The client is still sound: a second wave runs on it, and reuses connections.
        fake.default = text_reply("after")
        before = len(fake.requests)
        async with trio.open_nursery() as nursery:
            for _ in range(10):
                nursery.start_soon(provider.complete, ModelRequest(openai_model(fake), HI), _ignore)
    second_wave = {r.client for r in fake.requests[before:]}
    assert len(fake.requests) == before + 10
    assert second_wave <= ports(fake) and len(ports(fake)) <= calls
    stats = clients.statistics()
    assert (stats.http_clients_built, stats.sdk_clients_built, stats.leases) == (1, 1, 0)


async def test_a_new_key_gets_its_own_sdk_client_over_the_same_connections(
    fake: FakeOpenAI, clients: ModelClients
) -> None:
    fake.default = text_reply("ok")
    env = {"OPENAI_API_KEY": "first"}
    provider = OpenAIProvider(openai_model(fake), env=env, clients=clients)
    with trio.fail_after(LIMIT):
        await provider.complete(ModelRequest(openai_model(fake), HI), _ignore)
        env["OPENAI_API_KEY"] = "second"  # keys are read when each call starts
        await provider.complete(ModelRequest(openai_model(fake), HI), _ignore)
    assert [r.headers["authorization"] for r in fake.requests] == ["Bearer first", "Bearer second"]
    assert len(ports(fake)) == 1
    stats = clients.statistics()
    assert (stats.http_clients_built, stats.sdk_clients_built) == (1, 2)


async def test_endpoints_are_bounded_and_an_evicted_one_closes_after_its_last_call(
    nursery: trio.Nursery,
) -> None:
    first: FakeOpenAI = await nursery.start(FakeOpenAI().serve)
    second: FakeOpenAI = await nursery.start(FakeOpenAI().serve)
    first.default = text_reply(*TOKENS, delay=0.01)
    second.default = text_reply("ok")
    env = {"OPENAI_API_KEY": "k"}
    async with open_model_clients(max_endpoints=1) as clients:
        slow = OpenAIProvider(openai_model(first), env=env, clients=clients)
        quick = OpenAIProvider(openai_model(second), env=env, clients=clients)
        streaming = trio.Event()
        results: list[str] = []

        async def on_first(delta: Delta) -> None:
            streaming.set()

        async def long_call() -> None:
            response = await slow.complete(ModelRequest(openai_model(first), HI), on_first)
            results.append(response.content)

        with trio.fail_after(LIMIT):
            async with trio.open_nursery() as calls:
                calls.start_soon(long_call)
                await streaming.wait()
                # The second endpoint evicts the first while its call still streams.
                await quick.complete(ModelRequest(openai_model(second), HI), _ignore)
                assert clients.statistics().endpoints == 1
        assert results == ["".join(TOKENS)], "the evicted endpoint's call finished unharmed"
        with trio.fail_after(LIMIT):
            await slow.complete(ModelRequest(openai_model(first), HI), _ignore)
        stats = clients.statistics()
        assert (stats.endpoints, stats.http_clients_built, stats.leases) == (1, 3, 0)
    second.stop()
    first.stop()


async def test_a_closed_pool_refuses_new_calls(fake: FakeOpenAI) -> None:
    async with open_model_clients() as clients:
        pass
    assert clients.statistics().closed
    provider = OpenAIProvider(openai_model(fake), env={"OPENAI_API_KEY": "k"}, clients=clients)
    with trio.fail_after(LIMIT), pytest.raises(ModelError, match="shutting down"):
        await provider.complete(ModelRequest(openai_model(fake), HI), _ignore)
    assert fake.requests == []


async def test_a_call_in_flight_when_the_pool_closes_finishes(fake: FakeOpenAI) -> None:
    fake.default = text_reply(*TOKENS, delay=0.01)
    provider_clients = ModelClients()
    provider = OpenAIProvider(
        openai_model(fake), env={"OPENAI_API_KEY": "k"}, clients=provider_clients
    )
    streaming = trio.Event()

    async def on_delta(delta: Delta) -> None:
        streaming.set()

    results: list[str] = []

    async def call() -> None:
        results.append(
            (await provider.complete(ModelRequest(openai_model(fake), HI), on_delta)).content
        )

    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            await streaming.wait()
            await provider_clients.aclose()
    assert results == ["".join(TOKENS)]
    assert provider_clients.statistics() == provider_clients.statistics().__class__(
        endpoints=0, leases=0, http_clients_built=1, sdk_clients_built=1, closed=True
    )


async def test_anthropic_shares_the_pool(nursery: trio.Nursery, clients: ModelClients) -> None:
    fake: fake_anthropic.FakeAnthropic = await nursery.start(fake_anthropic.FakeAnthropic().serve)
    fake.default = fake_anthropic.text_reply("ok")
    model = ModelConfig(name="a", provider="anthropic", model="claude", base_url=fake.url)
    provider = AnthropicProvider(model, env={"ANTHROPIC_API_KEY": "k"}, clients=clients)
    with trio.fail_after(LIMIT):
        for _ in range(3):
            assert (await provider.complete(ModelRequest(model, HI), _ignore)).content == "ok"
    assert len({r.client for r in fake.requests}) == 1
    assert clients.statistics().http_clients_built == 1
    fake.stop()


async def test_google_shares_the_pool(nursery: trio.Nursery, clients: ModelClients) -> None:
    fake: fake_gemini.FakeGemini = await nursery.start(fake_gemini.FakeGemini().serve)
    fake.default = fake_gemini.text_reply("ok")
    model = ModelConfig(name="g", provider="google", model="gemini", base_url=fake.url)
    provider = GoogleProvider(model, env={"GOOGLE_API_KEY": "k"}, clients=clients)
    with trio.fail_after(LIMIT):
        for _ in range(3):
            assert (await provider.complete(ModelRequest(model, HI), _ignore)).content == "ok"
    assert len({r.client for r in fake.requests}) == 1
    stats = clients.statistics()
    assert (stats.http_clients_built, stats.sdk_clients_built) == (1, 1)
    fake.stop()


async def test_bedrock_shares_the_pool(nursery: trio.Nursery, clients: ModelClients) -> None:
    fake: fake_bedrock.FakeBedrock = await nursery.start(fake_bedrock.FakeBedrock().serve)
    fake.default = fake_bedrock.text_reply("ok")
    model = ModelConfig(
        name="b",
        provider="amazon-bedrock",
        model="anthropic.claude",
        provider_opts={"endpoint_url": fake.url, "region": "eu-west-3"},
    )
    keys = {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret"}
    provider = BedrockProvider(model, env=keys, clients=clients, chain=_no_chain, backoff=FAST)
    with trio.fail_after(LIMIT):
        for _ in range(3):
            assert (await provider.complete(ModelRequest(model, HI), _ignore)).content == "ok"
    assert len({r.client for r in fake.requests}) == 1
    assert clients.statistics().http_clients_built == 1
    fake.stop()


async def _ignore(_: Delta) -> None:
    pass


def _no_chain(profile: str) -> ReadOnlyCredentials | None:
    return None
