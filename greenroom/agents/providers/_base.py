"""The provider contract: one streaming model call, whatever the vendor.

A provider turns a :class:`ModelRequest` into a :class:`ModelResponse`, calling ``on_delta`` for
each text or reasoning fragment as it arrives (that is what clients see token by token). Tool
calls split across stream chunks are assembled by the provider; the response carries whole ones.
Failures raise :class:`~greenroom.errors.ModelError` subclasses (retries are the provider's job).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, TypeAlias

import attrs

from greenroom.domain import ChatMessage, ToolCall, Usage


@attrs.frozen
class ModelConfig:
    """One entry of an agent file's ``models`` (or an inline ``provider/model`` ref)."""

    name: str
    provider: str
    model: str
    base_url: str = ""
    token_key: str = ""
    temperature: float | None = None
    max_tokens: int | None = None
    title_model: str = ""

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
class ModelRequest:
    model: ModelConfig
    messages: tuple[ChatMessage, ...]
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int | None = None


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


class Provider(Protocol):
    async def complete(self, request: ModelRequest, on_delta: OnDelta) -> ModelResponse:
        """Stream one model call; raise a ModelError subclass when it fails for good."""
