"""Any OpenAI-compatible Chat Completions endpoint, through the official ``openai`` SDK.

One :meth:`OpenAIProvider.complete` is one streamed ``POST {base_url}/chat/completions`` (with
``stream_options.include_usage``) on the endpoint's pooled client (:class:`ModelClients`). The
SDK sends the request and turns HTTP and connection failures into its exceptions; the stream's
body is decoded here (``_openai_stream``, msgspec), not by the SDK's per-chunk pydantic models.
Content deltas become :class:`TextDelta`; a ``reasoning_content`` or ``reasoning`` field on a
delta (DeepSeek, vLLM, Ollama, OpenRouter) becomes :class:`ReasoningDelta`; tool-call fragments
are joined by their ``index``.

Usage follows Anthropic's convention: ``input_tokens`` excludes cached prompt tokens, which are
counted in ``cached_input_tokens``; ``output_tokens`` includes ``reasoning_tokens``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx2
import openai
import trio

from greenroom.domain import Usage
from greenroom.errors import ModelError, ModelStreamMalformed

from ._base import ModelConfig, ModelRequest, ModelResponse, OnDelta
from ._clients import ModelClients, lease
from ._keys import read_key
from ._openai_messages import response_format, sampling, to_openai_messages, to_openai_tools
from ._openai_stream import Chunk, ChunkReader, ChunkUsage, StreamMalformed, body_pieces
from ._reasoning import openai_effort
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
from ._stream import StreamAssembly, idle_limit, idle_watch

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_KEY_VAR = "OPENAI_API_KEY"
BASE_URL_VAR = "OPENAI_BASE_URL"
DEFAULT_IDLE = 300.0
"""Seconds a stream may stay silent (also while waiting for the response headers)."""
CLOSE_BUDGET = 5.0
"""Seconds closing a response may take (shielded: a cancelled call still lets go of it)."""
DRAIN = 0.1
"""Seconds spent reading what follows ``[DONE]`` (the body's end, so the kept-alive connection
can serve the next call); a server still sending after it costs that connection, not the call."""


class OpenAIProvider:
    """Streams Chat Completions from ``config``'s endpoint.

    The endpoint (``base_url``, key variable) comes from the ``config`` given here; the model
    name, temperature and max tokens of each call come from ``request.model`` (and
    ``request.max_tokens``, which wins).

    Keys: the key is read from the variable ``config.token_key`` names (default
    ``OPENAI_API_KEY``) when :meth:`complete` starts, so a missing key fails the call with
    :class:`~greenroom.errors.ModelKeyMissing` and sends nothing. A local server needs no key:
    when ``config.base_url`` is set and ``config.token_key`` is not, a missing key is replaced
    by a placeholder (a server that does want one then answers 401, reported as a ModelError
    naming the variable). ``require_key`` overrides this rule; ``default_key_var`` replaces
    ``OPENAI_API_KEY`` (``""``: no variable, for servers that never take a key).

    Endpoint: ``config.base_url``, else the environment's ``OPENAI_BASE_URL`` (as the official
    SDKs do: it points a whole team at a gateway or a local server), else OpenAI's API. An
    endpoint from ``OPENAI_BASE_URL`` counts as custom for the key rule above.

    Clients: ``clients`` is the server's pool (one client per endpoint and key, kept alive
    across calls); without one, each call opens and closes a client of its own.

    Attributes:
        backoff: the retry policy for HTTP 429, 5xx and connection errors.
        idle: seconds without any data from the server before the call fails with
            ModelTimeout (None: no limit; the caller's deadline still applies).
    """

    def __init__(
        self,
        config: ModelConfig,
        *,
        env: Mapping[str, str] = os.environ,
        clients: ModelClients | None = None,
        require_key: bool | None = None,
        default_key_var: str = DEFAULT_KEY_VAR,
        backoff: Backoff = DEFAULT_BACKOFF,
        idle: float | None = DEFAULT_IDLE,
    ) -> None:
        self.config = config
        custom_url = config.base_url or env.get(BASE_URL_VAR, "").strip()
        self.base_url = custom_url or DEFAULT_BASE_URL
        self.key_var = config.token_key or default_key_var
        if require_key is None:
            require_key = not (custom_url and not config.token_key)
        self.require_key = require_key
        self.backoff = backoff
        self.idle = idle
        self._env = env
        self._clients = clients

    async def complete(self, request: ModelRequest, on_delta: OnDelta) -> ModelResponse:
        """Stream one answer; see the class docstring for keys, retries and limits.

        Raises:
            ModelKeyMissing: the key variable is unset (and a key is required).
            ModelRateLimited: still HTTP 429 after the last attempt.
            ModelStreamMalformed: the stream was cut, ended early or did not parse.
            ModelTimeout: the server went silent for ``idle`` seconds.
            ModelError: any other failure (HTTP status, connection, error in the stream).
        """
        ref = request.model.ref
        key = read_key(self._env, self.key_var, required=self.require_key, ref=ref)
        async with lease(self._clients, lambda c: c.openai(self.base_url, key)) as client:
            backoff = for_request(self.backoff, request.retries, request.retry_rate_limited)
            return await with_retries(backoff, lambda: self._attempt(client, request, on_delta))

    async def _attempt(
        self, client: openai.AsyncOpenAI, request: ModelRequest, on_delta: OnDelta
    ) -> ModelResponse:
        ref = request.model.ref
        asm = StreamAssembly(on_delta)
        try:
            response = await self._open(client, request)
        except openai.APIError as exc:
            raise self._failure(exc, ref, started=False, emitted=False) from exc
        reader = ChunkReader()
        try:
            pieces = body_pieces(response)
            with idle_watch(self.idle, ref) as clock:
                while not reader.done:
                    try:
                        data = await anext(pieces, None)
                    except httpx2.TransportError as exc:
                        emitted = asm.emitted
                        raise transport_failure(exc, ref, self.base_url, emitted=emitted) from exc
                    if data is None:
                        break
                    clock.pause()
                    try:
                        chunks = reader.feed(data)
                    except StreamMalformed as exc:
                        raise ModelStreamMalformed(f"{ref}: a stream event is not JSON") from exc
                    for chunk in chunks:
                        await _apply(chunk, asm, ref)
                    clock.restart()
            if reader.done:
                await _drain(pieces)
        finally:
            with trio.move_on_after(CLOSE_BUDGET, shield=True):
                await response.aclose()
        if not asm.stop_reason:
            raise ModelStreamMalformed(f"{ref}: the stream ended before the model finished")
        return asm.response()

    async def _open(self, client: openai.AsyncOpenAI, request: ModelRequest) -> httpx2.Response:
        """Send the request; the SDK has checked the status when this returns (its exceptions
        for an error status or a failed connection), and the body is unread."""
        model = request.model
        max_tokens = request.max_tokens or model.max_tokens
        body: dict[str, Any] = {
            "model": model.model,
            "messages": to_openai_messages(request.messages),
            "stream": True,
            "stream_options": {"include_usage": model.track_usage is not False},
        }
        tools = to_openai_tools(request.tools)
        if tools:
            body["tools"] = tools
            if model.parallel_tool_calls is not None:
                body["parallel_tool_calls"] = model.parallel_tool_calls
        body.update(sampling(model))
        effort = openai_effort(request)
        if effort:
            body["reasoning_effort"] = effort
        if request.structured_output is not None:
            body["response_format"] = response_format(request.structured_output)
        if max_tokens:
            # The official API wants max_completion_tokens (o-series refuse max_tokens);
            # compatible servers mostly know only max_tokens.
            official = self.base_url == DEFAULT_BASE_URL
            body["max_completion_tokens" if official else "max_tokens"] = max_tokens
        streaming: bool = True  # with cast_to=httpx2.Response: the raw, unread response
        with idle_limit(self.idle, model.ref):
            response = await client.post(
                "/chat/completions", body=body, cast_to=httpx2.Response, stream=streaming
            )
            assert isinstance(response, httpx2.Response)
            return response
        raise AssertionError("unreachable: idle_limit raises when it cancels")

    def _failure(
        self, exc: openai.APIError, ref: str, *, started: bool, emitted: bool
    ) -> ModelError | Retryable:
        """Our error for an SDK failure, wrapped in Retryable when another attempt may help."""
        if isinstance(exc, openai.APIStatusError):
            return status_failure(ref, exc.status_code, _detail(exc), key_var=self.key_var)
        if isinstance(exc, openai.APIConnectionError):
            return connection_failure(
                ref,
                self.base_url,
                f"{exc.message} {exc.__cause__!r}" if exc.__cause__ else exc.message,
                timed_out=isinstance(exc, openai.APITimeoutError),
                started=started,
                emitted=emitted,
            )
        # An error object sent inside the stream (OpenRouter and others do this).
        return ModelError(f"{ref}: {_detail(exc)}")


async def _apply(chunk: Chunk, asm: StreamAssembly, ref: str) -> None:
    if chunk.error is not None:  # an error object sent inside the stream (OpenRouter, ...)
        raise ModelError(f"{ref}: {_stream_error(chunk.error)}")
    try:
        reasoning, text = _read_chunk(chunk, asm)
    except (AttributeError, TypeError, ValueError) as exc:
        raise ModelStreamMalformed(f"{ref}: unexpected stream chunk: {exc}") from exc
    if reasoning:
        await asm.reasoning(reasoning)
    if text:
        await asm.text(text)


def _read_chunk(chunk: Chunk, asm: StreamAssembly) -> tuple[str, str]:
    """Record the chunk's tool calls, usage and finish reason; return its reasoning and text."""
    if chunk.model:
        asm.model = chunk.model
    if chunk.usage is not None:
        asm.usage = _usage(chunk.usage)
    reasoning = text = ""
    for choice in chunk.choices or ():
        if choice.index not in (0, None):  # only one choice is asked for (n=1)
            continue
        if choice.finish_reason:
            asm.stop_reason = choice.finish_reason
        delta = choice.delta  # some servers send "delta": null
        if delta is None:
            continue
        for position, call in enumerate(delta.tool_calls or ()):
            function = call.function
            index = call.index  # a few servers leave it out
            arguments = function.arguments if function is not None else None
            asm.tool_fragment(
                index if isinstance(index, int) else position,
                call_id=call.id if isinstance(call.id, str) else None,
                name=function.name if function is not None and function.name else None,
                arguments=arguments if isinstance(arguments, str) else "",
            )
        for value in (delta.reasoning_content, delta.reasoning):
            if isinstance(value, str) and value:
                reasoning += value
                break
        if delta.content:
            text += delta.content
    return reasoning, text


def _usage(usage: ChunkUsage) -> Usage:
    prompt = usage.prompt_tokens_details
    completion = usage.completion_tokens_details
    cached = (prompt.cached_tokens or 0) if prompt else 0
    return Usage(
        input_tokens=max(usage.prompt_tokens - cached, 0),
        output_tokens=usage.completion_tokens,
        cached_input_tokens=cached,
        cached_write_tokens=(prompt.cache_write_tokens or 0) if prompt else 0,
        reasoning_tokens=(completion.reasoning_tokens or 0) if completion else 0,
    )


def _stream_error(error: Any) -> str:
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    return "An error occurred during streaming"


async def _drain(pieces: AsyncIterator[bytes]) -> None:
    """Read the body's end after ``[DONE]`` so the connection can be kept (bounded)."""
    with trio.move_on_after(DRAIN):
        try:
            async for _ in pieces:
                pass
        except httpx2.TransportError:
            pass  # the answer is complete; only the connection is lost


def _detail(exc: openai.APIError) -> str:
    """The server's own error message when the body has one."""
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
    return exc.message
