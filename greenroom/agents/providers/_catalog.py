"""The provider names an agent file may use, and what each one means.

docker-agent knows five provider types (``openai``, ``anthropic``, ``google``, ``dmr``,
``amazon-bedrock``) plus OpenAI-compatible vendors by name, each with its default endpoint and
API-key variable. greenroom adds ``scripted`` and ``echo``. A model may also name a custom
provider of its file's ``providers:`` section; :func:`apply_custom_provider` resolves those.

Pure data and lookups: no SDK is imported here, so ``greenroom validate`` can use it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Literal

import attrs

from greenroom.errors import InvalidRequest

from ._base import ModelConfig

Api = Literal["openai", "anthropic", "google", "bedrock", "scripted", "echo"]


@attrs.frozen
class Vendor:
    """A provider name: the API it speaks, its default endpoint and key variable.

    ``base_url`` may hold ``${VAR}`` references, filled from the environment when the provider
    is made. ``key_var`` is ``""`` for a keyless local server. ``unsupported`` says why
    greenroom cannot serve a provider docker-agent knows (``""``: it can).
    """

    name: str
    api: Api
    base_url: str = ""
    key_var: str = ""
    unsupported: str = ""


def _compatible(name: str, base_url: str, key_var: str) -> Vendor:
    return Vendor(name, "openai", base_url, key_var)


VENDORS: Mapping[str, Vendor] = {
    vendor.name: vendor
    for vendor in (
        Vendor("openai", "openai", "", "OPENAI_API_KEY"),
        Vendor("anthropic", "anthropic", "", "ANTHROPIC_API_KEY"),
        Vendor("google", "google", "", "GOOGLE_API_KEY"),
        Vendor("amazon-bedrock", "bedrock", "", "AWS_BEARER_TOKEN_BEDROCK"),
        Vendor("dmr", "openai", "", ""),
        Vendor("scripted", "scripted"),
        Vendor("echo", "echo"),
        # OpenAI-compatible vendors known to docker-agent, with their endpoints.
        _compatible("ollama", "http://localhost:11434/v1", ""),
        _compatible("mistral", "https://api.mistral.ai/v1", "MISTRAL_API_KEY"),
        _compatible("xai", "https://api.x.ai/v1", "XAI_API_KEY"),
        _compatible("nebius", "https://api.studio.nebius.com/v1", "NEBIUS_API_KEY"),
        _compatible("requesty", "https://router.requesty.ai/v1", "REQUESTY_API_KEY"),
        _compatible("azure", "", "AZURE_API_KEY"),
        _compatible("nvidia", "https://integrate.api.nvidia.com/v1", "NVIDIA_API_KEY"),
        _compatible("openrouter", "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"),
        _compatible("atlascloud", "https://api.atlascloud.ai/v1", "ATLASCLOUD_API_KEY"),
        _compatible("minimax", "https://api.minimax.io/v1", "MINIMAX_API_KEY"),
        _compatible("baseten", "https://inference.baseten.co/v1", "BASETEN_API_KEY"),
        _compatible(
            "ovhcloud",
            "https://oai.endpoints.kepler.ai.cloud.ovh.net/v1",
            "OVH_AI_ENDPOINTS_ACCESS_TOKEN",
        ),
        _compatible("groq", "https://api.groq.com/openai/v1", "GROQ_API_KEY"),
        _compatible("fireworks", "https://api.fireworks.ai/inference/v1", "FIREWORKS_API_KEY"),
        _compatible("deepseek", "https://api.deepseek.com/v1", "DEEPSEEK_API_KEY"),
        _compatible("cerebras", "https://api.cerebras.ai/v1", "CEREBRAS_API_KEY"),
        _compatible("together", "https://api.together.xyz/v1", "TOGETHER_API_KEY"),
        _compatible("huggingface", "https://router.huggingface.co/v1", "HF_TOKEN"),
        _compatible("moonshot", "https://api.moonshot.ai/v1", "MOONSHOT_API_KEY"),
        _compatible("vercel", "https://ai-gateway.vercel.sh/v1", "AI_GATEWAY_API_KEY"),
        _compatible(
            "cloudflare-workers-ai",
            "https://api.cloudflare.com/client/v4/accounts/${CLOUDFLARE_ACCOUNT_ID}/ai/v1",
            "CLOUDFLARE_API_TOKEN",
        ),
        _compatible(
            "cloudflare-ai-gateway",
            "https://gateway.ai.cloudflare.com/v1/${CLOUDFLARE_ACCOUNT_ID}"
            "/${CLOUDFLARE_GATEWAY_ID}/compat",
            "CLOUDFLARE_API_TOKEN",
        ),
        Vendor(
            "github-copilot",
            "openai",
            "https://api.githubcopilot.com",
            "GITHUB_TOKEN",
            unsupported="GitHub Copilot needs its own sign-in headers",
        ),
        Vendor(
            "chatgpt",
            "openai",
            "",
            "",
            unsupported="the chatgpt provider needs docker-agent's ChatGPT sign-in",
        ),
    )
}
"""Every provider name greenroom recognises, by name."""

API_TYPES: Mapping[str, Api] = {
    "openai_chatcompletions": "openai",
    "openai_responses": "openai",
    "openai": "openai",
    "anthropic": "anthropic",
    "google": "google",
}
"""``api_type`` values a custom provider (or a model's ``provider_opts.api_type``) may name."""

API_TYPE_NOTES: Mapping[str, str] = {}
"""What greenroom does differently for some ``api_type`` values (reported by validate)."""

DEFAULT_API_TYPE = "openai_chatcompletions"


@attrs.frozen
class CustomProvider:
    """An entry of a file's top-level ``providers:`` section."""

    name: str
    base_url: str = ""
    token_key: str = ""
    api_type: str = DEFAULT_API_TYPE


def apply_custom_provider(model: ModelConfig, custom: CustomProvider) -> ModelConfig:
    """``model`` with the custom provider's endpoint and key variable as defaults."""
    api_type = model.api_type or str(model.provider_opts.get("api_type", "")) or custom.api_type
    return attrs.evolve(
        model,
        base_url=model.base_url or custom.base_url,
        token_key=model.token_key or custom.token_key,
        api_type=api_type or DEFAULT_API_TYPE,
    )


def api_of(model: ModelConfig) -> Api | None:
    """The API ``model``'s endpoint speaks (None: the provider name is unknown)."""
    api_type = model.api_type or model.provider_opts.get("api_type", "")
    if isinstance(api_type, str) and api_type in API_TYPES:
        return API_TYPES[api_type]
    vendor = VENDORS.get(model.provider)
    return vendor.api if vendor is not None else None


_VAR = re.compile(r"\$\{(?:env\.)?([A-Za-z_][A-Za-z0-9_]*)\}")


def expand_env(text: str, env: Mapping[str, str] = os.environ, *, what: str = "") -> str:
    """``text`` with each ``${VAR}`` (or ``${env.VAR}``) replaced by its value in ``env``.

    Raises:
        InvalidRequest: a variable is unset or empty; ``what`` names the setting.
    """

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        found = env.get(name, "")
        if not found:
            raise InvalidRequest(f"{what or text}: set the environment variable {name}")
        return found

    return _VAR.sub(value, text)
