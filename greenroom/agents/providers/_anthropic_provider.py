"""Anthropic's Messages API through the official ``anthropic`` SDK.

One :meth:`AnthropicProvider.complete` is one streamed ``POST {base_url}/v1/messages`` on the
endpoint's pooled client (:class:`ModelClients`; without a pool, a client per call).
``text_delta`` becomes :class:`TextDelta`, ``thinking_delta`` :class:`ReasoningDelta`, and each
``tool_use`` block's ``input_json_delta`` fragments are joined into one tool call. Stop reasons
are given in the OpenAI vocabulary the loop uses (``end_turn`` → ``stop``, ``tool_use`` →
``tool_calls``, ``max_tokens`` → ``length``).
Usage: ``input_tokens`` excludes cache reads (``cached_input_tokens``) and cache writes
(``cached_write_tokens``), as Anthropic reports them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import anthropic
import attrs
import httpx2
from anthropic import types as at

from greenroom.domain import Usage
from greenroom.errors import ModelError, ModelStreamMalformed

from ._anthropic_messages import to_anthropic_messages, to_anthropic_tools
from ._base import (
    Delta,
    ModelConfig,
    ModelRequest,
    ModelResponse,
    OnDelta,
    ReasoningDelta,
    TextDelta,
)
from ._clients import ModelClients, lease
from ._keys import read_key
from ._reasoning import INTERLEAVED_BETA, anthropic_max_tokens, anthropic_thinking, interleaved
from ._retry import (
    DEFAULT_BACKOFF,
    Backoff,
    Retryable,
    connection_failure,
    for_request,
    status_failure,
    transport_failure,
    with_retries,
)
from ._stream import StreamAssembly, idle_limit, next_within
from ._structured import forced_choice, output_tool, take_output

DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_KEY_VAR = "ANTHROPIC_API_KEY"
BASE_URL_VAR = "ANTHROPIC_BASE_URL"
DEFAULT_MAX_TOKENS = 8192
"""Sent when neither the request nor the model config sets max tokens (the API requires it)."""
DEFAULT_IDLE = 300.0

_STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
}


class AnthropicProvider:
    """Streams Messages API answers from ``config``'s endpoint.

    The endpoint (``base_url``, key variable) comes from the ``config`` given here; the model
    name, temperature and max tokens of each call from ``request.model`` (and
    ``request.max_tokens``, which wins). The key is always required: it is read from the
    variable ``config.token_key`` names (default ``ANTHROPIC_API_KEY``) when :meth:`complete`
    starts, and a missing one raises :class:`~greenroom.errors.ModelKeyMissing` before any
    request. The endpoint is ``config.base_url``, else the environment's
    ``ANTHROPIC_BASE_URL`` (as the official SDKs do), else Anthropic's API. Extended thinking is
    asked for by the model's ``thinking_budget`` (tokens, at least 1024) and sent back with
    its signature on later calls; ``provider_opts.interleaved_thinking`` adds the beta header.
    ``structured_output`` is a forced tool (``_structured``).

    Attributes:
        backoff: the retry policy for HTTP 429, 5xx (529 overloaded included), connection
            errors, and error events that arrive before any text reached the caller.
        idle: seconds without any data from the server before the call fails with
            ModelTimeout (None: no limit; the caller's deadline still applies).
    """

    def __init__(
        self,
        config: ModelConfig,
        *,
        env: Mapping[str, str] = os.environ,
        clients: ModelClients | None = None,
        backoff: Backoff = DEFAULT_BACKOFF,
        idle: float | None = DEFAULT_IDLE,
    ) -> None:
        self.config = config
        self.base_url = config.base_url or env.get(BASE_URL_VAR, "").strip() or DEFAULT_BASE_URL
        self.key_var = config.token_key or DEFAULT_KEY_VAR
        self.backoff = backoff
        self.idle = idle
        self._env = env
        self._clients = clients

    async def complete(self, request: ModelRequest, on_delta: OnDelta) -> ModelResponse:
        """Stream one answer; see the class docstring for keys, retries and limits.

        Raises:
            ModelKeyMissing: the key variable is unset.
            ModelRateLimited: still rate-limited after the last attempt.
            ModelStreamMalformed: the stream was cut, ended early or did not parse.
            ModelTimeout: the server went silent for ``idle`` seconds.
            ModelError: any other failure (HTTP status, connection, error event).
        """
        key = read_key(self._env, self.key_var, required=True, ref=request.model.ref)
        async with lease(self._clients, lambda c: c.anthropic(self.base_url, key)) as client:
            backoff = for_request(self.backoff, request.retries, request.retry_rate_limited)
            return await with_retries(backoff, lambda: self._attempt(client, request, on_delta))

    async def _attempt(
        self, client: anthropic.AsyncAnthropic, request: ModelRequest, on_delta: OnDelta
    ) -> ModelResponse:
        ref = request.model.ref
        state = _State(StreamAssembly(on_delta))
        try:
            stream = await self._open(client, request)
        except anthropic.APIError as exc:
            raise self._failure(exc, ref, started=False, emitted=False) from exc
        async with stream:
            events = aiter(stream)
            while True:
                try:
                    event = await next_within(events, self.idle, ref)
                except anthropic.APIError as exc:
                    emitted = state.asm.emitted
                    raise self._failure(exc, ref, started=True, emitted=emitted) from exc
                except httpx2.TransportError as exc:
                    # The SDK leaves some mid-stream network errors unwrapped.
                    raise transport_failure(
                        exc, ref, self.base_url, emitted=state.asm.emitted
                    ) from exc
                except json.JSONDecodeError as exc:
                    raise ModelStreamMalformed(f"{ref}: a stream event is not JSON") from exc
                if event is None:
                    break
                try:
                    delta = state.read(event)
                except (AttributeError, TypeError, ValueError) as exc:
                    raise ModelStreamMalformed(f"{ref}: unexpected stream event: {exc}") from exc
                await state.asm.forward(delta)
        if not state.stopped:
            raise ModelStreamMalformed(f"{ref}: the stream ended before message_stop")
        response = state.asm.response()
        if request.structured_output is not None:
            return await take_output(response, request.structured_output, on_delta)
        return response

    async def _open(
        self, client: anthropic.AsyncAnthropic, request: ModelRequest
    ) -> anthropic.AsyncStream[at.RawMessageStreamEvent]:
        model = request.model
        max_tokens = anthropic_max_tokens(request, DEFAULT_MAX_TOKENS)
        output = request.structured_output
        # A forced tool choice and extended thinking exclude each other (Anthropic refuses both).
        budget = None if output is not None else anthropic_thinking(request, max_tokens)
        system, messages = to_anthropic_messages(request.messages, thinking=budget is not None)
        specs = request.tools
        choice: Any = anthropic.omit
        if output is not None:
            forced = forced_choice(output, specs)
            choice = {"type": "tool", "name": forced} if forced else {"type": "any"}
            specs = (*specs, output_tool(output))
        tools = to_anthropic_tools(specs)
        extra: dict[str, Any] = {}
        if budget is None:
            # This SDK release has no temperature or top_p argument; the API takes them, but
            # not with extended thinking.
            extra = {
                key: value
                for key, value in (("temperature", model.temperature), ("top_p", model.top_p))
                if value is not None
            }
        headers = {"anthropic-beta": INTERLEAVED_BETA} if interleaved(request) else None
        with idle_limit(self.idle, model.ref):
            return await client.messages.create(
                model=model.model,
                messages=messages,
                max_tokens=max_tokens,
                stream=True,
                system=system if system else anthropic.omit,
                tools=tools if tools else anthropic.omit,
                tool_choice=choice,
                thinking={"type": "enabled", "budget_tokens": budget}
                if budget is not None
                else anthropic.omit,
                extra_headers=headers,
                extra_body=extra or None,
            )

    def _failure(
        self, exc: anthropic.APIError, ref: str, *, started: bool, emitted: bool
    ) -> ModelError | Retryable:
        """Our error for an SDK failure, wrapped in Retryable when another attempt may help."""
        if isinstance(exc, anthropic.APIStatusError):
            # An error event inside a 200 stream arrives as an APIStatusError too.
            return status_failure(
                ref,
                exc.status_code,
                exc.api_message or exc.message,
                key_var=self.key_var,
                emitted=emitted,
                rate_limited=exc.type == "rate_limit_error",
                overloaded=exc.type in ("overloaded_error", "api_error"),
            )
        if isinstance(exc, anthropic.APIConnectionError):
            return connection_failure(
                ref,
                self.base_url,
                f"{exc.message} {exc.__cause__!r}" if exc.__cause__ else exc.message,
                timed_out=isinstance(exc, anthropic.APITimeoutError),
                started=started,
                emitted=emitted,
            )
        return ModelError(f"{ref}: {exc.message}")


@attrs.define
class _State:
    """One attempt's stream: the assembly plus what only Anthropic's events need."""

    asm: StreamAssembly
    stopped: bool = False
    tool_blocks: set[int] = attrs.Factory(set)
    # A tool_use block's input from content_block_start, used when no input_json_delta follows.
    start_inputs: dict[int, str] = attrs.Factory(dict)

    def read(self, event: at.RawMessageStreamEvent) -> Delta | None:
        """Record what ``event`` says; return the text or reasoning it carries, if any."""
        asm = self.asm
        if isinstance(event, at.RawContentBlockDeltaEvent):
            delta = event.delta
            if isinstance(delta, at.TextDelta):
                return TextDelta(delta.text)
            if isinstance(delta, at.ThinkingDelta):
                return ReasoningDelta(delta.thinking)
            if isinstance(delta, at.SignatureDelta):
                asm.signature += delta.signature
            if isinstance(delta, at.InputJSONDelta) and event.index in self.tool_blocks:
                self.start_inputs.pop(event.index, None)
                asm.tool_fragment(event.index, arguments=delta.partial_json)
        elif isinstance(event, at.RawContentBlockStartEvent):
            block = event.content_block
            if isinstance(block, at.ToolUseBlock):
                self.tool_blocks.add(event.index)
                asm.tool_fragment(event.index, call_id=block.id, name=block.name)
                if block.input:
                    self.start_inputs[event.index] = json.dumps(block.input)
            elif isinstance(block, at.TextBlock):
                return TextDelta(block.text)
            elif isinstance(block, at.ThinkingBlock):
                asm.signature += block.signature or ""
                return ReasoningDelta(block.thinking)
        elif isinstance(event, at.RawContentBlockStopEvent):
            if (start_input := self.start_inputs.pop(event.index, None)) is not None:
                asm.tool_fragment(event.index, arguments=start_input)
        elif isinstance(event, at.RawMessageStartEvent):
            asm.model = event.message.model
            asm.usage = _usage(asm.usage, event.message.usage)
        elif isinstance(event, at.RawMessageDeltaEvent):
            if event.delta.stop_reason:
                reason = event.delta.stop_reason
                asm.stop_reason = _STOP_REASONS.get(reason, reason)
            asm.usage = _usage(asm.usage, event.usage)
        elif isinstance(event, at.RawMessageStopEvent):
            self.stopped = True
        return None


def _usage(usage: Usage, reported: at.Usage | at.MessageDeltaUsage) -> Usage:
    """``usage`` updated with the figures ``reported`` carries (message_delta omits some)."""
    details = reported.output_tokens_details
    return Usage(
        input_tokens=_or(reported.input_tokens, usage.input_tokens),
        output_tokens=reported.output_tokens,
        cached_input_tokens=_or(reported.cache_read_input_tokens, usage.cached_input_tokens),
        cached_write_tokens=_or(reported.cache_creation_input_tokens, usage.cached_write_tokens),
        reasoning_tokens=details.thinking_tokens if details else usage.reasoning_tokens,
    )


def _or(value: int | None, default: int) -> int:
    return default if value is None else value
