"""Docker Model Runner: configuring the model before its first call, as docker-agent does.

A ``dmr`` model is served through Model Runner's OpenAI-compatible endpoint. Before the first
call of a provider, docker-agent POSTs the model's runtime configuration to the runner's
``_configure`` endpoint (the base URL with its ``/v1`` replaced: ``.../engines/v1`` →
``.../engines/_configure``):

- ``context-size``: the model's ``max_tokens``;
- ``runtime-flags``: llama.cpp flags derived from the model's sampling settings (``--temp``,
  ``--top-p``, ``--frequency-penalty``, ``--presence-penalty``), then ``provider_opts.
  runtime_flags`` (a list, or one string split on spaces and commas), whose flags win over
  derived ones of the same name;
- ``speculative``: ``{draft_model, num_tokens, min_acceptance_rate}`` from
  ``provider_opts.speculative_draft_model``, ``speculative_num_tokens`` and
  ``speculative_acceptance_rate`` (speculative decoding with a small draft model).

The runner answers 202; any other answer or a failure is logged and the call goes on (as
upstream). greenroom sends the request only when there is something to configure.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import trio

from ._base import ModelConfig, ModelRequest, ModelResponse, OnDelta, Provider
from ._clients import ModelClients, lease

log = logging.getLogger(__name__)

CONFIGURE_BUDGET = 10.0
"""Seconds the configure request may take (upstream's)."""
DMR_OPTIONS = frozenset(
    {
        "runtime_flags",
        "speculative_draft_model",
        "speculative_num_tokens",
        "speculative_acceptance_rate",
    }
)
"""The ``provider_opts`` keys of a ``dmr`` model."""


def configure_url(base_url: str) -> str:
    parts = urlsplit(base_url)
    path = parts.path.rstrip("/").removesuffix("/v1")
    return urlunsplit((parts.scheme, parts.netloc, path + "/_configure", "", ""))


def user_flags(options: Mapping[str, Any]) -> list[str]:
    value = options.get("runtime_flags")
    if isinstance(value, str):
        return value.replace(",", " ").split()
    if isinstance(value, list | tuple):
        return [str(item) for item in value]
    return []


def derived_flags(config: ModelConfig) -> list[str]:
    flags: list[str] = []
    for flag, field in (
        ("--temp", "temperature"),
        ("--top-p", "top_p"),
        ("--frequency-penalty", "frequency_penalty"),
        ("--presence-penalty", "presence_penalty"),
    ):
        value = getattr(config, field, None)
        if isinstance(value, int | float) and not isinstance(value, bool):
            flags += [flag, f"{float(value):g}"]
    return flags


def _split(args: Sequence[str]) -> list[tuple[str, list[str]]]:
    """Flags as ``(key, tokens)``: ``--k=v``, ``--k v`` and bare tokens."""
    out: list[tuple[str, list[str]]] = []
    index = 0
    while index < len(args):
        token = args[index]
        if not token.startswith("-"):
            out.append((token, [token]))
        elif "=" in token:
            out.append((token.split("=", 1)[0], [token]))
        elif index + 1 < len(args) and not args[index + 1].startswith("-"):
            out.append((token, [token, args[index + 1]]))
            index += 1
        else:
            out.append((token, [token]))
        index += 1
    return out


def merge_flags(derived: Sequence[str], user: Sequence[str]) -> list[str]:
    """The derived flags the user does not set, then the user's."""
    users = _split(user)
    taken = {key for key, _ in users if key.startswith("-")}
    merged = [t for key, tokens in _split(derived) if key not in taken for t in tokens]
    return merged + [t for _, tokens in users for t in tokens]


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def speculative(options: Mapping[str, Any]) -> dict[str, Any] | None:
    out: dict[str, Any] = {}
    draft = options.get("speculative_draft_model")
    if isinstance(draft, str) and draft:
        out["draft_model"] = draft
    tokens = _number(options.get("speculative_num_tokens"))
    if tokens is not None:
        out["num_tokens"] = int(tokens)
    rate = _number(options.get("speculative_acceptance_rate"))
    if rate is not None:
        out["min_acceptance_rate"] = rate
    return out or None


def configure_body(config: ModelConfig) -> dict[str, Any] | None:
    """The ``_configure`` request for ``config``; None when there is nothing to configure."""
    options = config.provider_opts
    flags = merge_flags(derived_flags(config), user_flags(options))
    spec = speculative(options)
    if not (flags or spec or config.max_tokens):
        return None
    body: dict[str, Any] = {"model": config.model}
    if config.max_tokens:
        body["context-size"] = config.max_tokens
    if flags:
        body["runtime-flags"] = flags
    if spec:
        body["speculative"] = spec
    return body


class DmrProvider:
    """``inner`` (the OpenAI-compatible provider) after one configure request."""

    def __init__(self, inner: Provider, config: ModelConfig, clients: ModelClients | None) -> None:
        self.inner = inner
        self.config = config
        self._clients = clients
        self._configured = False

    async def configure(self) -> None:
        body = configure_body(self.config)
        if body is None:
            return
        url = configure_url(self.config.base_url)
        try:
            with trio.fail_after(CONFIGURE_BUDGET):
                async with lease(self._clients, lambda c: c.http(url)) as client:
                    answer = await client.post(url, json=body)
        except Exception as exc:  # as upstream: the model is used as the runner has it
            log.info("Model Runner configure of %s skipped: %s", self.config.model, exc)
            return
        if answer.status_code != 202:
            log.info(
                "Model Runner configure of %s answered %d: %s",
                self.config.model,
                answer.status_code,
                answer.text[:500],
            )

    async def complete(self, request: ModelRequest, on_delta: OnDelta) -> ModelResponse:
        if not self._configured:
            self._configured = True
            await self.configure()
        return await self.inner.complete(request, on_delta)

    async def aclose(self) -> None:
        close = getattr(self.inner, "aclose", None)
        if close is not None:
            await close()
