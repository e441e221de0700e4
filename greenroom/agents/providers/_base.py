"""The provider contract: one streaming model call, whatever the vendor.

A provider turns a :class:`ModelRequest` into a :class:`ModelResponse`, calling ``on_delta`` for
each text or reasoning fragment as it arrives (that is what clients see token by token). Tool
calls split across stream chunks are assembled by the provider; the response carries whole ones.
Failures raise :class:`~greenroom.errors.ModelError` subclasses (retries are the provider's job).
"""

from __future__ import annotations

import types
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, TypeAlias

import attrs

from greenroom.domain import ChatMessage, ToolCall, Usage

from ._facts import ModelFacts


def freeze_options(value: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    """A read-only copy of ``value`` (nested mappings and lists frozen too)."""

    def freeze(item: Any) -> Any:
        if isinstance(item, Mapping):
            return types.MappingProxyType({str(k): freeze(v) for k, v in item.items()})
        if isinstance(item, list | tuple):
            return tuple(freeze(v) for v in item)
        return item

    frozen: Mapping[str, Any] = freeze(dict(value or {}))
    return frozen


def thaw(value: Any) -> Any:
    """A plain (JSON-ready) copy of a value made by :func:`freeze_options`."""
    if isinstance(value, Mapping):
        return {str(k): thaw(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [thaw(v) for v in value]
    return value


@attrs.frozen
class RoutingRule:
    """One ``routing`` rule of a model: calls like ``examples`` go to model ``model``."""

    model: str
    examples: tuple[str, ...] = ()


@attrs.frozen
class ModelConfig:
    """One entry of an agent file's ``models`` (or an inline ``provider/model`` ref).

    ``api_type`` is set for a model of a custom provider (the file's ``providers:`` section):
    which API its endpoint speaks (``openai_chatcompletions``). ``provider_opts`` holds the
    provider-specific options; it takes no part in equality or hashing (a model is known by
    its name within a file). ``facts`` are the file's ``limit`` / ``cost`` overrides (see
    ``_facts.py``); they take no part either.
    """

    name: str
    provider: str
    model: str
    base_url: str = ""
    token_key: str = ""
    temperature: float | None = None
    max_tokens: int | None = None
    title_model: str = ""
    api_type: str = ""
    thinking_budget: str | int | None = None
    """Reasoning: an effort (``minimal``/``low``/``medium``/``high``, ``none``) or tokens
    (``0`` disables, ``-1`` is Gemini's dynamic budget); see ``_reasoning``."""
    top_p: float | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    parallel_tool_calls: bool | None = None
    track_usage: bool | None = None
    """False: the call asks for no usage figures (OpenAI's ``stream_options``)."""
    provider_opts: Mapping[str, Any] = attrs.field(
        factory=freeze_options, converter=freeze_options, eq=False, repr=False
    )
    facts: ModelFacts | None = attrs.field(default=None, eq=False, repr=False)
    routing: tuple[RoutingRule, ...] = ()
    """Rule-based routing (``providers/_routing.py``): this model is then a router whose
    ``provider``/``model`` serve the calls no rule matches."""

    @property
    def ref(self) -> str:
        return f"{self.provider}/{self.model}"


@attrs.frozen
class ToolSpec:
    """A tool offered to the model: name, description and JSON-schema parameters."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = attrs.field(
        factory=lambda: {"type": "object", "properties": {}}
    )


@attrs.frozen
class StructuredOutput:
    """An agent's ``structured_output``: the JSON schema its final answer must match."""

    name: str
    schema: Mapping[str, Any] = attrs.field(factory=freeze_options, converter=freeze_options)
    description: str = ""
    strict: bool = False


@attrs.frozen
class ModelRequest:
    """One model call.

    ``thinking`` is the session's thinking toggle (off: no reasoning is asked for, whatever
    the model's ``thinking_budget``). ``retries`` overrides the provider's retries for
    retryable failures (an agent's ``fallback.retries``; ``-1``: none), and
    ``retry_rate_limited`` false makes a rate limit fail at once (a fallback model follows).
    """

    model: ModelConfig
    messages: tuple[ChatMessage, ...]
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int | None = None
    thinking: bool = True
    structured_output: StructuredOutput | None = None
    retries: int | None = None
    retry_rate_limited: bool = True


@attrs.frozen
class TextDelta:
    text: str


@attrs.frozen
class ReasoningDelta:
    text: str


Delta: TypeAlias = TextDelta | ReasoningDelta
OnDelta = Callable[[Delta], Awaitable[None]]


@attrs.frozen
class ModelResponse:
    content: str = ""
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = attrs.field(factory=Usage)
    stop_reason: str = "stop"
    model: str = ""
    thinking_signature: str = ""
    """Anthropic's signature of the reasoning (sent back with it on the next call)."""
    answered_by: ModelConfig | None = None
    """The model that answered, set by a provider that chooses among several (a fallback
    chain, a router); None: the request's own model. Its facts price the call."""


class Provider(Protocol):
    async def complete(self, request: ModelRequest, on_delta: OnDelta) -> ModelResponse:
        """Stream one model call; raise a ModelError subclass when it fails for good."""
