"""Choosing a provider for a model config, and what the ``auto`` model ref means."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import attrs

from greenroom.errors import InvalidRequest

from ._base import ModelConfig, Provider
from .anthropic_provider import AnthropicProvider
from .echo import EchoProvider
from .openai_provider import OpenAIProvider
from .scripted import ScriptedProvider

AUTO_OPENAI_MODEL = "gpt-5-mini"
AUTO_ANTHROPIC_MODEL = "claude-sonnet-4-5"


@attrs.frozen
class _Compatible:
    """An OpenAI-compatible provider name: its endpoint and key variable ("" for keyless)."""

    base_url: str
    key_var: str


OPENAI_COMPATIBLE: Mapping[str, _Compatible] = {
    "openai": _Compatible("", "OPENAI_API_KEY"),
    "dmr": _Compatible("http://localhost:12434/engines/v1", ""),
    "ollama": _Compatible("http://localhost:11434/v1", ""),
    "mistral": _Compatible("https://api.mistral.ai/v1", "MISTRAL_API_KEY"),
    "xai": _Compatible("https://api.x.ai/v1", "XAI_API_KEY"),
}
"""docker-agent provider names served by :class:`OpenAIProvider` (``openai`` keeps its rule:
a custom ``base_url`` without ``token_key`` may run without a key)."""

PROVIDERS = (*OPENAI_COMPATIBLE, "anthropic", "scripted", "echo")


def make_provider(
    config: ModelConfig, *, env: Mapping[str, str] = os.environ, base_dir: Path | None = None
) -> Provider:
    """The provider serving ``config`` (by ``config.provider``).

    Args:
        config: the model; its endpoint and key variable are fixed for the provider's life.
        env: where API keys are read, when each call starts.
        base_dir: resolves a relative ``scripted`` script path (default: the working
            directory).

    Raises:
        InvalidRequest: the provider is unknown, or a ``scripted`` script is missing or bad.
    """
    name = config.provider
    if name == "anthropic":
        return AnthropicProvider(config, env=env)
    if name == "echo":
        return EchoProvider()
    if name == "scripted":
        path = Path(config.model).expanduser()
        if not path.is_absolute():
            path = (base_dir or Path.cwd()) / path
        return ScriptedProvider.from_file(path)
    compatible = OPENAI_COMPATIBLE.get(name)
    if compatible is None:
        raise InvalidRequest(
            f"model {config.name!r} names an unknown provider {name!r} "
            f"(known: {', '.join(PROVIDERS)})",
            path=f"$.models.{config.name}.provider",
        )
    if name == "openai":
        return OpenAIProvider(config, env=env)
    config = attrs.evolve(config, base_url=config.base_url or compatible.base_url)
    return OpenAIProvider(
        config,
        env=env,
        require_key=bool(compatible.key_var or config.token_key),
        default_key_var=compatible.key_var,
    )


def resolve_auto(env: Mapping[str, str] = os.environ) -> tuple[ModelConfig, str]:
    """The model ``auto`` stands for in ``env``, and a one-line explanation of the choice.

    OpenAI when ``OPENAI_API_KEY`` is set, else Anthropic when ``ANTHROPIC_API_KEY`` is set,
    else the echo model.
    """
    if env.get("OPENAI_API_KEY", "").strip():
        config = ModelConfig(name="auto", provider="openai", model=AUTO_OPENAI_MODEL)
        return config, f"auto model: OPENAI_API_KEY is set, using {config.ref}"
    if env.get("ANTHROPIC_API_KEY", "").strip():
        config = ModelConfig(name="auto", provider="anthropic", model=AUTO_ANTHROPIC_MODEL)
        return config, f"auto model: ANTHROPIC_API_KEY is set, using {config.ref}"
    config = ModelConfig(name="auto", provider="echo", model="echo")
    return config, (
        "auto model: neither OPENAI_API_KEY nor ANTHROPIC_API_KEY is set, "
        "using the echo model (it repeats your message)"
    )
