"""The models of one runtime: per-agent overrides, custom refs, and one provider per model.

An agent's model ref may be an alloy (``"a,b"``): :meth:`ModelTable.begin_turn` draws one of its
models for the turn. An agent with ``fallback`` models is served by a
:class:`~greenroom.agents._fallback.FallbackChain` over its model and those.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable

import attrs
import trio

from greenroom.errors import GreenroomError

from ._config import AgentConfig, AgentFile
from ._fallback import FallbackChain, Stickiness
from ._runtime import ModelChoice
from .providers._base import ModelConfig, Provider
from .providers._facts import ModelFacts, facts_for
from .providers._routing import RoutingProvider

ProviderFor = Callable[[ModelConfig], Provider]
"""Makes the provider that serves a model (the factory wraps ``providers.make_provider``)."""

_SHARED_RNG = random.Random()
"""Draws alloy picks for every table not given its own (a Random per session costs 2.5 KB)."""

CLOSE_BUDGET = 5.0
"""Seconds closing the providers may take (shielded)."""


class ModelTable:
    """Which model each agent uses now, and the providers made so far (one per model)."""

    def __init__(
        self,
        config: AgentFile,
        provider_for: ProviderFor,
        *,
        auto: ModelConfig | None = None,
        custom_models: Iterable[str] = (),
        rng: random.Random | None = None,
    ) -> None:
        self._config = config
        self._provider_for = provider_for
        self._auto = auto
        self._overrides: dict[str, str] = {}
        self._custom: list[str] = list(dict.fromkeys(custom_models))
        self._providers: dict[ModelConfig, Provider] = {}
        self._rng = rng or _SHARED_RNG
        self._picks: dict[str, ModelConfig] = {}
        self._sticky: dict[str, Stickiness] = {}

    def begin_turn(self) -> None:
        """Forget this turn's alloy picks: the next :meth:`model_of` draws again."""
        self._picks.clear()

    def ref_of(self, agent: AgentConfig) -> str:
        """The agent's override if it has one, else its own model ref."""
        return self._overrides.get(agent.name, agent.model)

    def model_of(self, agent: AgentConfig) -> ModelConfig:
        """The model the agent uses this turn (drawn from an alloy). Raises InvalidRequest."""
        picked = self._picks.get(agent.name)
        if picked is None:
            choices = self._config.model_choices(self.ref_of(agent))
            ref = choices[0] if len(choices) == 1 else self._rng.choice(choices)
            picked = self._picks[agent.name] = self._config.model_config(ref, auto=self._auto)
        return picked

    def provider_of(self, agent: AgentConfig) -> Provider:
        """What serves the agent this turn: its model's provider, or a chain with fallbacks."""
        model = self.model_of(agent)
        fallback = agent.fallback
        if fallback is None:
            return self.provider(model)
        models = [model]
        for ref in fallback.models:
            models += [
                self._config.model_config(r, auto=self._auto)
                for r in self._config.model_choices(ref)
            ]
        sticky = self._sticky.setdefault(agent.name, Stickiness())
        return FallbackChain(
            models,
            self.provider,
            cooldown=fallback.cooldown,
            sticky=sticky,
            retries=fallback.retries,
        )

    def facts(self, model: ModelConfig) -> ModelFacts:
        """What is known of ``model``: its file's ``limit``/``cost`` over models.dev's."""
        return facts_for(model.provider, model.model, model.facts)

    def resolve(self, ref: str) -> ModelConfig:
        """The model ``ref`` names (an alloy's first part). Raises InvalidRequest."""
        choices = self._config.model_choices(ref)
        return self._config.model_config(choices[0], auto=self._auto)

    def provider(self, model: ModelConfig) -> Provider:
        provider = self._providers.get(model)
        if provider is None:
            if model.routing:
                provider = self._router(model)
            else:
                provider = self._provider_for(model)
            self._providers[model] = provider
        return provider

    def _router(self, model: ModelConfig) -> Provider:
        """A model with ``routing``: its rules' models, and itself for what matches none."""
        routes = []
        for rule in model.routing:
            target = attrs.evolve(self.resolve(rule.model), routing=())
            routes.append((target, self.provider(target)))
        fallback = attrs.evolve(model, routing=())
        examples = [rule.examples for rule in model.routing]
        return RoutingProvider(routes, examples, (fallback, self.provider(fallback)))

    def set(self, agent: str, ref: str) -> None:
        """Use ``ref`` for ``agent`` ("" clears); the provider is made now, so a bad one fails.

        Raises:
            InvalidRequest: ``ref`` names no model (or its provider cannot be made).
        """
        self._picks.pop(agent, None)
        if not ref:
            self._overrides.pop(agent, None)
            return
        for part in self._config.model_choices(ref):
            self.provider(self._config.model_config(part, auto=self._auto))
        self._overrides[agent] = ref
        if ref not in self._config.models and "/" in ref and ref not in self._custom:
            self._custom.append(ref)

    def choices(self, agent: AgentConfig) -> list[ModelChoice]:
        """The file's models, the agent's own, custom refs; the override (or default) is current."""
        override = self._overrides.get(agent.name)
        current = override if override is not None else agent.model
        refs = [*self._config.models, agent.model, *self._custom]
        if override is not None:
            refs.append(override)
        choices = []
        for ref in dict.fromkeys(refs):
            try:
                model = self._config.model_config(ref, auto=self._auto)
            except GreenroomError:  # an alloy, or a ref that names no model
                model = ModelConfig(name=ref, provider="", model="")
            choices.append(
                ModelChoice(
                    name=ref,
                    ref=ref,
                    provider=model.provider,
                    model=model.model,
                    is_default=ref == agent.model,
                    is_current=ref == current,
                    is_custom=ref not in self._config.models and ref != agent.model,
                )
            )
        return choices

    def title_models(self, agent: AgentConfig) -> list[ModelConfig]:
        """The agent's current model's ``title_model`` (if any), then that model."""
        model = self.model_of(agent)
        if not model.title_model:
            return [model]
        return [self._config.model_config(model.title_model, auto=self._auto), model]

    async def aclose(self) -> None:
        """Close the providers that can be closed."""
        providers, self._providers = list(self._providers.values()), {}
        for provider in providers:
            close = getattr(provider, "aclose", None)
            if close is not None:
                with trio.move_on_after(CLOSE_BUDGET, shield=True):
                    await close()
