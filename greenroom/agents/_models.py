"""The models of one runtime: per-agent overrides, custom refs, and one provider per model."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import trio

from greenroom.errors import GreenroomError

from ._config import AgentConfig, AgentFile
from ._runtime import ModelChoice
from .providers._base import ModelConfig, Provider

ProviderFor = Callable[[ModelConfig], Provider]
"""Makes the provider that serves a model (the factory wraps ``providers.make_provider``)."""

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
    ) -> None:
        self._config = config
        self._provider_for = provider_for
        self._auto = auto
        self._overrides: dict[str, tuple[str, ModelConfig]] = {}
        self._custom: list[str] = list(dict.fromkeys(custom_models))
        self._providers: dict[ModelConfig, Provider] = {}

    def model_of(self, agent: AgentConfig) -> ModelConfig:
        """The agent's override if it has one, else its own model. Raises InvalidRequest."""
        override = self._overrides.get(agent.name)
        if override is not None:
            return override[1]
        return self._config.model_config(agent.model, auto=self._auto)

    def provider(self, model: ModelConfig) -> Provider:
        provider = self._providers.get(model)
        if provider is None:
            provider = self._providers[model] = self._provider_for(model)
        return provider

    def set(self, agent: str, ref: str) -> None:
        """Use ``ref`` for ``agent`` ("" clears); the provider is made now, so a bad one fails.

        Raises:
            InvalidRequest: ``ref`` names no model (or its provider cannot be made).
        """
        if not ref:
            self._overrides.pop(agent, None)
            return
        model = self._config.model_config(ref, auto=self._auto)
        self.provider(model)
        self._overrides[agent] = (ref, model)
        if ref not in self._config.models and "/" in ref and ref not in self._custom:
            self._custom.append(ref)

    def choices(self, agent: AgentConfig) -> list[ModelChoice]:
        """The file's models, the agent's own, custom refs; the override (or default) is current."""
        override = self._overrides.get(agent.name)
        current = override[0] if override is not None else agent.model
        refs = [*self._config.models, agent.model, *self._custom]
        if override is not None:
            refs.append(override[0])
        choices = []
        for ref in dict.fromkeys(refs):
            try:
                model = self._config.model_config(ref, auto=self._auto)
            except GreenroomError:
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
