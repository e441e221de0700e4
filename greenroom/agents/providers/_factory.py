"""Choosing a provider for a model config, and what the ``auto`` model ref means.

The providers are a registry keyed by API name (:data:`PROVIDER_FACTORIES`): each factory
imports its provider module, and so its vendor SDK, when it is first called, so a server whose
agents use the echo model never loads the OpenAI, Anthropic, Gemini or Bedrock SDKs. Adding a
provider is one factory function and one entry in the registry (and its API name in
``_catalog.py``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from greenroom.errors import InvalidRequest

from ._base import ModelConfig, Provider
from ._catalog import VENDORS, Vendor, api_of, expand_env

if TYPE_CHECKING:
    from ._clients import ModelClients

AUTO_OPENAI_MODEL = "gpt-5-mini"
AUTO_ANTHROPIC_MODEL = "claude-sonnet-4-5"

DMR_DEFAULT_URL = "http://localhost:12434/engines/v1"

PROVIDERS = tuple(VENDORS)


@attrs.frozen
class ProviderArgs:
    """What a provider factory is given: the model (its ``base_url`` already expanded), its
    vendor (None for a custom provider), the environment, the directory relative script paths
    start from, and the server's pooled HTTP clients (None: each call opens its own)."""

    config: ModelConfig
    vendor: Vendor | None
    env: Mapping[str, str]
    base_dir: Path | None
    clients: ModelClients | None


ProviderFactory = Callable[[ProviderArgs], Provider]


def _anthropic(args: ProviderArgs) -> Provider:
    from ._anthropic_provider import AnthropicProvider

    return AnthropicProvider(args.config, env=args.env, clients=args.clients)


def _google(args: ProviderArgs) -> Provider:
    from ._google_provider import GoogleProvider

    return GoogleProvider(args.config, env=args.env, clients=args.clients)


def _bedrock(args: ProviderArgs) -> Provider:
    from ._bedrock_provider import BedrockProvider

    return BedrockProvider(args.config, env=args.env, clients=args.clients)


def _echo(args: ProviderArgs) -> Provider:
    from ._echo import EchoProvider

    return EchoProvider.from_options(args.config.provider_opts)


def _scripted(args: ProviderArgs) -> Provider:
    from ._scripted import ScriptedProvider

    path = Path(args.config.model).expanduser()
    if not path.is_absolute():
        path = (args.base_dir or Path.cwd()) / path
    return ScriptedProvider.from_file(path)


PROVIDER_FACTORIES: dict[str, ProviderFactory] = {
    "openai": lambda args: _openai_compatible(args.config, args.vendor, args.env, args.clients),
    "anthropic": _anthropic,
    "google": _google,
    "bedrock": _bedrock,
    "echo": _echo,
    "scripted": _scripted,
}
"""The provider of each API (``_catalog.api_of``), built on first use of that API."""


def make_provider(
    config: ModelConfig,
    *,
    env: Mapping[str, str] = os.environ,
    base_dir: Path | None = None,
    clients: ModelClients | None = None,
) -> Provider:
    """The provider serving ``config`` (by its ``api_type``, else ``config.provider``).

    A model of a custom provider must have been resolved first
    (:func:`~greenroom.agents.providers._catalog.apply_custom_provider`): it then carries its
    ``api_type``, endpoint and key variable.

    Args:
        config: the model; its endpoint and key variable are fixed for the provider's life.
        env: where API keys, ``*_BASE_URL`` variables and ``${VAR}`` references in endpoints
            (``base_url: ${MY_GATEWAY}/v1``) are read (keys when each call starts, endpoints
            now).
        base_dir: resolves a relative ``scripted`` script path (default: the working
            directory).
        clients: the server's pooled HTTP clients, shared by every provider it makes (None:
            each model call opens and closes a client of its own).

    Raises:
        InvalidRequest: the provider is unknown or unsupported, an endpoint variable is unset,
            or a ``scripted`` script is missing or bad.
    """
    api = api_of(config)
    vendor = VENDORS.get(config.provider)
    if "${" in config.base_url:
        expanded = expand_env(config.base_url, env, what=f"model {config.name!r} base_url")
        config = attrs.evolve(config, base_url=expanded)
    if api is None:
        raise InvalidRequest(
            f"model {config.name!r} names an unknown provider {config.provider!r} "
            f"(known: {', '.join(sorted(PROVIDERS))}, or a name from the file's providers)",
            path=f"$.models.{config.name}.provider",
        )
    if vendor is not None and vendor.unsupported and not config.api_type:
        raise InvalidRequest(
            f"model {config.name!r}: provider {config.provider!r} is not supported by "
            f"greenroom: {vendor.unsupported}",
            path=f"$.models.{config.name}.provider",
        )
    factory = PROVIDER_FACTORIES.get(api)
    if factory is None:
        raise InvalidRequest(
            f"model {config.name!r}: API {api!r} has no provider in this build",
            path=f"$.models.{config.name}.provider",
        )
    return factory(ProviderArgs(config, vendor, env, base_dir, clients))


def _openai_compatible(
    config: ModelConfig, vendor: Vendor | None, env: Mapping[str, str], clients: ModelClients | None
) -> Provider:
    from ._openai_provider import OpenAIProvider

    cls = OpenAIProvider
    api_type = config.api_type or config.provider_opts.get("api_type", "")
    if api_type == "openai_responses":
        from ._responses_provider import ResponsesProvider

        cls = ResponsesProvider
    if config.api_type or vendor is None or vendor.name == "openai":
        # ``openai`` and custom providers: a custom endpoint (the model's or OPENAI_BASE_URL)
        # without a token_key may run without a key.
        return cls(config, env=env, clients=clients)
    base_url = config.base_url or vendor.base_url
    if vendor.name == "dmr" and not base_url:
        base_url = _dmr_url(env)
    if not base_url:
        raise InvalidRequest(
            f"model {config.name!r}: provider {vendor.name!r} has no default endpoint; "
            "set base_url",
            path=f"$.models.{config.name}.base_url",
        )
    config = attrs.evolve(
        config, base_url=expand_env(base_url, env, what=f"model {config.name!r} base_url")
    )
    provider = cls(
        config,
        env=env,
        clients=clients,
        require_key=bool(vendor.key_var or config.token_key),
        default_key_var=vendor.key_var,
    )
    if vendor.name == "dmr":
        from ._dmr import DmrProvider

        return DmrProvider(provider, config, clients)
    return provider


def _dmr_url(env: Mapping[str, str]) -> str:
    """Docker Model Runner's endpoint: ``MODEL_RUNNER_HOST``, else the local default.

    (docker-agent also probes Docker Desktop's in-container addresses; set ``base_url`` or
    ``MODEL_RUNNER_HOST`` for those.)
    """
    host = env.get("MODEL_RUNNER_HOST", "").strip().rstrip("/")
    return f"{host}/engines/v1" if host else DMR_DEFAULT_URL


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
