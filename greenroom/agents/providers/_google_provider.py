"""Google's Gemini API through the official ``google-genai`` SDK.

One :meth:`GoogleProvider.complete` is one ``models/{model}:streamGenerateContent?alt=sse`` call.
The SDK keeps one connection pool per asyncio loop unless it is handed an HTTP client, so the
provider hands it the endpoint's pooled ``httpx2.AsyncClient`` (:class:`ModelClients`): that
way it runs under trio (checked: streaming, errors and cancellation). The SDK's retries are
off (``attempts=1``); ours apply.

Text parts become :class:`TextDelta`, ``thought`` parts :class:`ReasoningDelta`; each
``function_call`` part is a whole tool call (Gemini does not split them). Usage follows
Anthropic's convention: ``input_tokens`` excludes cached tokens, ``output_tokens`` includes the
thinking tokens.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import AsyncIterator, Mapping

import httpx2
from google import genai
from google.genai import errors as genai_errors, types

from greenroom.domain import Usage
from greenroom.errors import ModelError, ModelKeyMissing, ModelStreamMalformed

from ._base import ModelConfig, ModelRequest, ModelResponse, OnDelta, thaw
from ._clients import ModelClients, lease
from ._google_messages import to_gemini, to_gemini_tools
from ._reasoning import gemini_thinking
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

KEY_VARS = ("GOOGLE_API_KEY", "GEMINI_API_KEY")
"""Read in this order (docker-agent's order) when the model names no ``token_key``."""
BASE_URL_VAR = "GOOGLE_GEMINI_BASE_URL"
DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com/"
DEFAULT_IDLE = 300.0

_STOP_REASONS = {"STOP": "stop", "MAX_TOKENS": "length"}


class GoogleProvider:
    """Streams Gemini answers from ``config``'s endpoint (see the module docstring).

    Keys: ``config.token_key`` names the key variable, else ``GOOGLE_API_KEY``, else
    ``GEMINI_API_KEY``; read when :meth:`complete` starts, so a missing key fails the call
    with :class:`~greenroom.errors.ModelKeyMissing` before any request. The endpoint is
    ``config.base_url``, else ``GOOGLE_GEMINI_BASE_URL``, else Google's. Vertex AI (the
    ``project``/``location`` options or ``GOOGLE_GENAI_USE_VERTEXAI``) is not supported.
    Clients: ``clients`` is the server's pool; without one, each call has a client of its own.

    Attributes:
        backoff: the retry policy for HTTP 429, 5xx and connection errors.
        idle: seconds without data before the call fails with ModelTimeout (None: no limit).
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
        self._clients = clients
        self.key_vars = (config.token_key,) if config.token_key else KEY_VARS
        self.vertex = bool({"project", "location"} & set(config.provider_opts)) or bool(
            env.get("GOOGLE_GENAI_USE_VERTEXAI", "").strip()
        )
        self.backoff = backoff
        self.idle = idle
        self._env = env

    def _key(self, ref: str) -> str:
        if self.vertex:
            raise ModelError(
                f"{ref}: Vertex AI is not supported by greenroom; use the Gemini API "
                f"with {' or '.join(KEY_VARS)}"
            )
        for var in self.key_vars:
            key = self._env.get(var, "").strip()
            if key:
                return key
        raise ModelKeyMissing(
            f"model {ref} needs an API key: set the environment variable "
            f"{' or '.join(self.key_vars)}"
        )

    async def complete(self, request: ModelRequest, on_delta: OnDelta) -> ModelResponse:
        """Stream one answer; see the class docstring for keys, retries and limits.

        Raises:
            ModelKeyMissing: no key variable is set.
            ModelRateLimited: still HTTP 429 after the last attempt.
            ModelStreamMalformed: the stream was cut or ended without a finish reason.
            ModelTimeout: the server went silent for ``idle`` seconds.
            ModelError: any other failure (HTTP status, connection, a blocked prompt).
        """
        key = self._key(request.model.ref)
        async with lease(self._clients, lambda c: c.google(self.base_url, key)) as client:
            backoff = for_request(self.backoff, request.retries, request.retry_rate_limited)
            return await with_retries(backoff, lambda: self._attempt(client, request, on_delta))

    async def _attempt(
        self, client: genai.Client, request: ModelRequest, on_delta: OnDelta
    ) -> ModelResponse:
        ref = request.model.ref
        asm = StreamAssembly(on_delta)
        state = _State(asm)
        try:
            stream = await self._open(client, request)
        except genai_errors.APIError as exc:
            raise self._status(exc, ref, emitted=False) from exc
        except httpx2.TransportError as exc:
            raise connection_failure(
                ref,
                self.base_url,
                repr(exc),
                timed_out=isinstance(exc, httpx2.TimeoutException),
                started=False,
                emitted=False,
            ) from exc
        try:
            while True:
                try:
                    chunk = await next_within(stream, self.idle, ref)
                except genai_errors.APIError as exc:
                    raise self._status(exc, ref, emitted=asm.emitted) from exc
                except httpx2.TransportError as exc:
                    raise transport_failure(exc, ref, self.base_url, emitted=asm.emitted) from exc
                except ValueError as exc:  # JSON or schema validation of a chunk
                    raise ModelStreamMalformed(f"{ref}: unexpected stream chunk: {exc}") from exc
                if chunk is None:
                    break
                await state.read(chunk, ref)
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()
        if not asm.stop_reason:
            raise ModelStreamMalformed(f"{ref}: the stream ended before the model finished")
        return asm.response()

    async def _open(
        self, client: genai.Client, request: ModelRequest
    ) -> AsyncIterator[types.GenerateContentResponse]:
        model = request.model
        system, contents = to_gemini(request.messages)
        tools = to_gemini_tools(request.tools)
        thinking = gemini_thinking(request)
        output = request.structured_output
        config = types.GenerateContentConfig(
            system_instruction=system or None,
            tools=list(tools) or None,
            temperature=model.temperature,
            top_p=model.top_p,
            frequency_penalty=model.frequency_penalty,
            presence_penalty=model.presence_penalty,
            max_output_tokens=request.max_tokens or model.max_tokens,
            automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
            thinking_config=types.ThinkingConfig(**thinking) if thinking else None,
            response_mime_type="application/json" if output is not None else None,
            response_json_schema=thaw(output.schema) if output is not None else None,
        )
        with idle_limit(self.idle, model.ref):
            return await client.aio.models.generate_content_stream(
                model=model.model, contents=list(contents), config=config
            )
        raise AssertionError("unreachable: idle_limit raises when it cancels")

    def _status(
        self, exc: genai_errors.APIError, ref: str, *, emitted: bool
    ) -> ModelError | Retryable:
        return status_failure(
            ref,
            exc.code or 500,
            exc.message or str(exc),
            key_var=" or ".join(self.key_vars),
            emitted=emitted,
            rate_limited=exc.status == "RESOURCE_EXHAUSTED",
        )


class _State:
    """One attempt's stream: the assembly plus Gemini's per-chunk bookkeeping."""

    def __init__(self, asm: StreamAssembly) -> None:
        self.asm = asm
        self.calls = 0

    async def read(self, chunk: types.GenerateContentResponse, ref: str) -> None:
        asm = self.asm
        if chunk.model_version:
            asm.model = chunk.model_version
        if chunk.usage_metadata is not None:
            asm.usage = _usage(chunk.usage_metadata)
        if not chunk.candidates:
            feedback = chunk.prompt_feedback
            if feedback is not None and feedback.block_reason:
                raise ModelError(f"{ref}: the prompt was blocked ({feedback.block_reason})")
            return
        candidate = chunk.candidates[0]
        for part in (candidate.content.parts if candidate.content else None) or []:
            if part.function_call is not None:
                call = part.function_call
                asm.tool_fragment(
                    self.calls,
                    call_id=call.id or f"call_{secrets.token_hex(8)}",
                    name=call.name or "",
                    arguments=_json(call.args),
                )
                self.calls += 1
            elif part.text and part.thought:
                await asm.reasoning(part.text)
            elif part.text:
                await asm.text(part.text)
        if candidate.finish_reason:
            reason = str(candidate.finish_reason.value)
            stop = _STOP_REASONS.get(reason, reason.lower())
            asm.stop_reason = "tool_calls" if self.calls and stop == "stop" else stop


def _json(args: object) -> str:
    return json.dumps(args or {})


def _usage(meta: types.GenerateContentResponseUsageMetadata) -> Usage:
    cached = meta.cached_content_token_count or 0
    thoughts = meta.thoughts_token_count or 0
    return Usage(
        input_tokens=max((meta.prompt_token_count or 0) - cached, 0),
        output_tokens=(meta.candidates_token_count or 0) + thoughts,
        cached_input_tokens=cached,
        reasoning_tokens=thoughts,
    )
