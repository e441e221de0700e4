"""Alloy models (one of several drawn per turn) and fallback models (the next on an early error).

The models are served by fake providers that record which model each call was for; time is
trio's autojump clock (for the fallback cooldown).
"""

from __future__ import annotations

import random

import attrs
import pytest
import trio

from greenroom.agents import LocalRuntime, parse_agent_file
from greenroom.agents._fallback import FallbackChain, Stickiness
from greenroom.agents.providers import (
    ModelConfig,
    ModelRequest,
    ModelResponse,
    OnDelta,
    Provider,
    TextDelta,
)
from greenroom.domain import AgentInfo, ChatMessage, ErrorEvent, TokenUsage, Usage
from greenroom.errors import InvalidRequest, ModelError, ModelRateLimited

from .loop_support import FakeIO, start


class PerModel:
    """Providers by model name: each answers with its name, or fails as told."""

    def __init__(self, failing: dict[str, Exception] | None = None, *, stream_first: bool = False):
        self.failing = failing or {}
        self.calls: list[str] = []
        self.stream_first = stream_first

    def provider_for(self, model: ModelConfig) -> Provider:
        if model.model == "unmakeable":
            raise InvalidRequest("cannot make this one")
        table = self

        class One:
            async def complete(self, request: ModelRequest, on_delta: OnDelta) -> ModelResponse:
                name = request.model.model
                table.calls.append(name)
                await trio.lowlevel.checkpoint()
                error = table.failing.get(name)
                if error is not None:
                    if table.stream_first:
                        await on_delta(TextDelta("partial "))
                    raise error
                await on_delta(TextDelta(f"from {name}"))
                return ModelResponse(content=f"from {name}", model=name)

        return One()


ALLOY = """\
agents:
  root:
    model: openai/first,team
models:
  team:
    model: anthropic/second, anthropic/third
"""


async def test_an_alloy_draws_one_model_per_turn() -> None:
    config = parse_agent_file(ALLOY, "agent.yaml")
    assert config.model_choices("openai/first,team") == [
        "openai/first",
        "anthropic/second",
        "anthropic/third",
    ]
    served = PerModel()
    runtime = LocalRuntime(config, provider_for=served.provider_for, rng=random.Random(7))
    announced = []
    for n in range(12):
        io = start(FakeIO(), f"question {n}")
        await runtime.run_stream(io)
        [info] = io.of(AgentInfo)
        announced.append(info.model.split("/")[1])
    assert served.calls == announced  # the announced model is the one that answered
    assert set(served.calls) == {"first", "second", "third"}


async def test_an_alloy_override_is_drawn_from_too() -> None:
    config = parse_agent_file("agents:\n  root: {model: openai/a}\n", "agent.yaml")
    served = PerModel()
    runtime = LocalRuntime(config, provider_for=served.provider_for, rng=random.Random(1))
    await runtime.set_agent_model("root", "openai/b,openai/c")
    for n in range(8):
        await runtime.run_stream(start(FakeIO(), f"q{n}"))
    assert set(served.calls) == {"b", "c"}


FALLBACK = """\
agents:
  root:
    model: openai/primary
    fallback:
      models: [backup, anthropic/last]
      cooldown: 1m
models:
  backup: {provider: openai, model: backup}
"""


async def test_fallback_takes_over_when_the_primary_fails_early() -> None:
    served = PerModel({"primary": ModelRateLimited("slow down")})
    config = parse_agent_file(FALLBACK, "agent.yaml")
    runtime = LocalRuntime(config, provider_for=served.provider_for)
    io = start(FakeIO(), "hello")
    await runtime.run_stream(io)
    assert served.calls == ["primary", "backup"]
    assert io.messages()[-1].message.content == "from backup"
    assert io.messages()[-1].message.model == "backup"
    assert io.of(ErrorEvent) == []


async def test_every_model_failing_reports_the_last_error() -> None:
    failing: dict[str, Exception] = {
        name: ModelError(f"{name} is down") for name in ("primary", "backup", "last")
    }
    served = PerModel(failing)
    runtime = LocalRuntime(
        parse_agent_file(FALLBACK, "agent.yaml"), provider_for=served.provider_for
    )
    io = start(FakeIO(), "hello")
    await runtime.run_stream(io)
    assert served.calls == ["primary", "backup", "last"]
    [error] = io.of(ErrorEvent)
    assert error.error == "last is down"


async def test_no_fallback_once_tokens_reached_the_client() -> None:
    served = PerModel({"primary": ModelError("cut mid-answer")}, stream_first=True)
    runtime = LocalRuntime(
        parse_agent_file(FALLBACK, "agent.yaml"), provider_for=served.provider_for
    )
    io = start(FakeIO(), "hello")
    await runtime.run_stream(io)
    assert served.calls == ["primary"]
    [error] = io.of(ErrorEvent)
    assert error.error == "cut mid-answer"


def _request(model: ModelConfig) -> ModelRequest:
    return ModelRequest(model=model, messages=(ChatMessage(role="user", content="hi"),))


async def _ignore(_: object) -> None:
    pass


async def test_the_chain_sticks_to_a_fallback_for_the_cooldown(autojump_clock: object) -> None:
    models = [ModelConfig(name=n, provider="openai", model=n) for n in ("a", "b", "c")]
    served = PerModel({"a": ModelError("down"), "x": ModelError("never")})
    sticky = Stickiness()
    chain = FallbackChain(models, served.provider_for, cooldown=60, sticky=sticky)
    assert (await chain.complete(_request(models[0]), _ignore)).content == "from b"
    assert (await chain.complete(_request(models[0]), _ignore)).content == "from b"
    assert served.calls == ["a", "b", "b"]  # the primary is left alone meanwhile
    await trio.sleep(61)  # virtual: the cooldown passes
    served.failing.clear()
    assert (await chain.complete(_request(models[0]), _ignore)).content == "from a"
    assert sticky.index == 0


async def test_a_model_whose_provider_cannot_be_made_is_skipped() -> None:
    models = [
        ModelConfig(name="bad", provider="openai", model="unmakeable"),
        ModelConfig(name="good", provider="openai", model="good"),
    ]
    chain = FallbackChain(models, PerModel().provider_for, cooldown=0, sticky=Stickiness())
    assert (await chain.complete(_request(models[0]), _ignore)).content == "from good"
    lone = FallbackChain(models[:1], PerModel().provider_for, cooldown=0, sticky=Stickiness())
    with pytest.raises(ModelError, match="cannot make this one"):
        await lone.complete(_request(models[0]), _ignore)


PRICED = """\
agents:
  root:
    model: primary
    fallback:
      models: [backup]
models:
  primary:
    provider: openai
    model: primary
    cost: {input: 10, output: 30}
    limit: {context: 100000}
  backup:
    provider: openai
    model: backup
    cost: {input: 1, output: 2}
    limit: {context: 200000}
"""
MILLION = 1_000_000


class Priced(PerModel):
    """Like :class:`PerModel`, each answer using a million input and a million output tokens."""

    def provider_for(self, model: ModelConfig) -> Provider:
        inner = super().provider_for(model)

        class WithUsage:
            async def complete(self, request: ModelRequest, on_delta: OnDelta) -> ModelResponse:
                response = await inner.complete(request, on_delta)
                return attrs.evolve(response, usage=Usage(MILLION, MILLION))

        return WithUsage()


@pytest.mark.parametrize(
    ("failing", "price", "limit"),
    [({}, 10 + 30, 100_000), ({"primary": ModelRateLimited("slow down")}, 1 + 2, 200_000)],
    ids=["primary", "fallback"],
)
async def test_a_call_is_priced_at_the_model_that_answered(
    failing: dict[str, Exception], price: float, limit: int
) -> None:
    served = Priced(failing)
    runtime = LocalRuntime(parse_agent_file(PRICED, "agent.yaml"), provider_for=served.provider_for)
    io = start(FakeIO(), "hello")
    await runtime.run_stream(io)
    assert io.of(ErrorEvent) == []
    message = io.messages()[-1].message
    assert message.cost == pytest.approx(price)
    [usage] = io.of(TokenUsage)
    assert usage.usage.cost == pytest.approx(price)
    assert usage.usage.context_limit == limit  # the answering model's window, too
    assert usage.usage.last_message is not None
    assert usage.usage.last_message.cost == pytest.approx(price)
    assert io.session.cost == pytest.approx(price)


async def test_the_chain_names_the_model_that_answered() -> None:
    models = [ModelConfig(name=n, provider="openai", model=n) for n in ("a", "b")]
    chain = FallbackChain(
        models, PerModel({"a": ModelError("down")}).provider_for, cooldown=0, sticky=Stickiness()
    )
    response = await chain.complete(_request(models[0]), _ignore)
    assert response.answered_by == models[1]
