"""Amazon Bedrock's ConverseStream API: botocore signs, httpx2 streams, botocore decodes.

One :meth:`BedrockProvider.complete` is one ``POST {endpoint}/model/{model}/converse-stream``.
The answer is an AWS event stream (binary frames); botocore's decoder splits it into events:
``contentBlockDelta`` text becomes :class:`TextDelta`, ``reasoningContent`` becomes
:class:`ReasoningDelta`, a ``toolUse`` block's ``input`` fragments are joined into one tool
call; ``messageStop`` gives the stop reason and ``metadata`` the usage. Why botocore plus an
async HTTP client rather than boto3 in a thread:
docs/decisions/0006-google-and-bedrock-providers.md.

Authentication, as docker-agent does it: a Bedrock API key (``AWS_BEARER_TOKEN_BEDROCK``, or
the variable ``token_key`` names) is sent as a bearer token; without one, the request is signed
with SigV4 using the AWS credentials found in ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``
(``AWS_SESSION_TOKEN``), else botocore's credential chain (profiles, SSO, container and
instance roles), resolved in a worker thread. Region: ``provider_opts.region``, else
``AWS_REGION``, else ``AWS_DEFAULT_REGION``, else ``us-east-1``. Endpoint:
``provider_opts.endpoint_url``, else ``base_url``, else the AWS SDKs' variables
``AWS_ENDPOINT_URL_BEDROCK_RUNTIME`` and ``AWS_ENDPOINT_URL``, else the region's Bedrock
runtime.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

import attrs
import httpx2
import trio
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import ReadOnlyCredentials
from botocore.eventstream import EventStreamBuffer, ParserError
from botocore.session import Session as BotocoreSession

from greenroom.domain import Usage
from greenroom.errors import ModelError, ModelKeyMissing, ModelStreamMalformed

from ._base import ModelConfig, ModelRequest, ModelResponse, OnDelta, ReasoningDelta, TextDelta
from ._bedrock_messages import to_converse, to_tool_config
from ._clients import ModelClients, lease
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

TOKEN_VAR = "AWS_BEARER_TOKEN_BEDROCK"
DEFAULT_REGION = "us-east-1"
SERVICE = "bedrock"
DEFAULT_IDLE = 300.0
EVENT_STREAM = "application/vnd.amazon.eventstream"

CredentialChain = Callable[[str], ReadOnlyCredentials | None]
"""Resolves AWS credentials for a profile ("" = the default); blocking, run in a thread."""

_STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
}
_EXCEPTION_STATUS = {
    "throttlingException": 429,
    "serviceUnavailableException": 503,
    "internalServerException": 500,
    "modelStreamErrorException": 500,
    "modelTimeoutException": 504,
    "validationException": 400,
    "accessDeniedException": 403,
}


def botocore_chain(profile: str) -> ReadOnlyCredentials | None:
    """AWS credentials from botocore's default chain (reads files, may ask the network)."""
    credentials = BotocoreSession(profile=profile or None).get_credentials()
    return credentials.get_frozen_credentials() if credentials is not None else None


@attrs.frozen
class _Auth:
    bearer: str = ""
    credentials: ReadOnlyCredentials | None = None


class BedrockProvider:
    """Streams Converse answers (see the module docstring for auth, region and endpoint).

    Clients: ``clients`` is the server's pool (the endpoint's HTTP client, kept alive across
    calls); without one, each call has a client of its own.

    Attributes:
        backoff: the retry policy for throttling, 5xx and connection errors.
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
        chain: CredentialChain = botocore_chain,
    ) -> None:
        options = config.provider_opts
        self.config = config
        self._clients = clients
        self.region = (
            str(options.get("region") or "")
            or env.get("AWS_REGION", "").strip()
            or env.get("AWS_DEFAULT_REGION", "").strip()
            or DEFAULT_REGION
        )
        self.endpoint = (
            str(options.get("endpoint_url") or "")
            or config.base_url
            or env.get("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", "").strip()
            or env.get("AWS_ENDPOINT_URL", "").strip()
            or f"https://bedrock-runtime.{self.region}.amazonaws.com"
        ).rstrip("/")
        self.profile = str(options.get("profile") or "")
        self.token_var = config.token_key or TOKEN_VAR
        self.backoff = backoff
        self.idle = idle
        self._env = env
        self._chain = chain

    async def auth(self, ref: str) -> _Auth:
        """The bearer token or AWS credentials to call with (also RAG's embeddings).

        Raises:
            ModelKeyMissing: neither a Bedrock API key nor AWS credentials.
        """
        env = self._env
        token = env.get(self.token_var, "").strip()
        if token:
            return _Auth(bearer=token)
        key_id = env.get("AWS_ACCESS_KEY_ID", "").strip()
        secret = env.get("AWS_SECRET_ACCESS_KEY", "").strip()
        if key_id and secret and not self.profile:
            session_token = env.get("AWS_SESSION_TOKEN", "").strip() or None
            return _Auth(credentials=ReadOnlyCredentials(key_id, secret, session_token))
        try:
            found = await trio.to_thread.run_sync(self._chain, self.profile, abandon_on_cancel=True)
        except Exception as exc:  # botocore's many credential errors (bad profile, SSO, ...)
            raise ModelKeyMissing(
                f"model {ref}: AWS credentials could not be loaded: {exc}"
            ) from exc
        if found is None or not found.access_key:
            raise ModelKeyMissing(
                f"model {ref} needs AWS credentials: set {self.token_var} (a Bedrock API key), "
                "or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or configure an AWS profile"
            )
        return _Auth(credentials=found)

    def url(self, model: str) -> str:
        return f"{self.endpoint}/model/{quote(model, safe='')}/converse-stream"

    def headers(
        self, auth: _Auth, url: str, body: bytes, *, accept: str = EVENT_STREAM
    ) -> dict[str, str]:
        """The headers of a JSON ``POST url``: a bearer token, or signed with SigV4."""
        headers = {"content-type": "application/json", "accept": accept}
        if auth.bearer:
            return {**headers, "authorization": f"Bearer {auth.bearer}"}
        signed = AWSRequest(method="POST", url=url, data=body, headers=headers)
        SigV4Auth(auth.credentials, SERVICE, self.region).add_auth(signed)
        return {str(k): str(v) for k, v in signed.headers.items()}

    async def complete(self, request: ModelRequest, on_delta: OnDelta) -> ModelResponse:
        """Stream one answer.

        Raises:
            ModelKeyMissing: no Bedrock API key and no AWS credentials.
            ModelRateLimited: still throttled after the last attempt.
            ModelStreamMalformed: the stream was cut, did not decode or ended early.
            ModelTimeout: the server went silent for ``idle`` seconds.
            ModelError: any other failure (HTTP status, exception event, connection).
        """
        ref = request.model.ref
        auth = await self.auth(ref)
        async with lease(self._clients, lambda c: c.http(self.endpoint)) as client:
            backoff = for_request(self.backoff, request.retries, request.retry_rate_limited)
            return await with_retries(
                backoff, lambda: self._attempt(client, auth, request, on_delta)
            )

    def _body(self, request: ModelRequest) -> bytes:
        model = request.model
        output = request.structured_output
        max_tokens = request.max_tokens or model.max_tokens
        budget = None
        if output is None:  # a forced tool choice excludes extended thinking
            max_tokens = anthropic_max_tokens(request, 0) or None
            budget = anthropic_thinking(request, max_tokens or 0)
        system, messages = to_converse(request.messages, thinking=budget is not None)
        body: dict[str, Any] = {"messages": messages}
        if system:
            body["system"] = system
        inference: dict[str, Any] = {}
        if max_tokens:
            inference["maxTokens"] = max_tokens
        if budget is None:  # Claude takes no temperature or top_p while it thinks
            if model.temperature is not None:
                inference["temperature"] = model.temperature
            if model.top_p is not None:
                inference["topP"] = model.top_p
        if inference:
            body["inferenceConfig"] = inference
        if budget is not None:
            fields: dict[str, Any] = {"thinking": {"type": "enabled", "budget_tokens": budget}}
            if interleaved(request):
                fields["anthropic_beta"] = [INTERLEAVED_BETA]
            body["additionalModelRequestFields"] = fields
        specs = request.tools
        if output is not None:
            specs = (*specs, output_tool(output))
        tools = to_tool_config(specs)
        if tools and output is not None:
            forced = forced_choice(output, request.tools)
            tools["toolChoice"] = {"tool": {"name": forced}} if forced else {"any": {}}
        if tools:
            body["toolConfig"] = tools
        return json.dumps(body).encode()

    async def _attempt(
        self, client: httpx2.AsyncClient, auth: _Auth, request: ModelRequest, on_delta: OnDelta
    ) -> ModelResponse:
        ref = request.model.ref
        url = self.url(request.model.model)
        body = self._body(request)
        http = client.build_request(
            "POST", url, content=body, headers=self.headers(auth, url, body)
        )
        state = _State(StreamAssembly(on_delta), ref)
        state.asm.model = request.model.model
        try:
            with idle_limit(self.idle, ref):
                response = await client.send(http, stream=True)
        except httpx2.TransportError as exc:
            raise connection_failure(
                ref,
                self.endpoint,
                repr(exc),
                timed_out=isinstance(exc, httpx2.TimeoutException),
                started=False,
                emitted=False,
            ) from exc
        try:
            if response.status_code != 200:
                await response.aread()
                raise self._http_failure(response, ref)
            chunks = aiter(response.aiter_bytes())
            while True:
                try:
                    data = await next_within(chunks, self.idle, ref)
                except httpx2.TransportError as exc:
                    raise transport_failure(
                        exc, ref, self.endpoint, emitted=state.asm.emitted
                    ) from exc
                if data is None:
                    break
                await state.feed(data, self)
        finally:
            await response.aclose()
        if not state.stopped:
            raise ModelStreamMalformed(f"{ref}: the stream ended before messageStop")
        answer = state.asm.response()
        if request.structured_output is not None:
            return await take_output(answer, request.structured_output, on_delta)
        return answer

    def _http_failure(self, response: httpx2.Response, ref: str) -> ModelError | Retryable:
        kind = response.headers.get("x-amzn-errortype", "").split(":")[0]
        try:
            detail = str(response.json().get("message") or response.text)
        except (ValueError, AttributeError):
            detail = response.text[:500]
        if kind:
            detail = f"{kind}: {detail}"
        return status_failure(
            ref,
            response.status_code,
            detail,
            key_var=f"{self.token_var} or your AWS credentials",
            rate_limited=kind == "ThrottlingException",
        )

    def exception_failure(
        self, kind: str, payload: bytes, ref: str, *, emitted: bool
    ) -> ModelError | Retryable:
        """Our error for an ``exception`` message inside the stream."""
        try:
            message = str(json.loads(payload).get("message", ""))
        except (ValueError, AttributeError):
            message = payload.decode(errors="replace")[:500]
        status = _EXCEPTION_STATUS.get(kind, 500)
        return status_failure(
            ref,
            status,
            f"{kind}: {message}",
            key_var=f"{self.token_var} or your AWS credentials",
            emitted=emitted,
        )


class _State:
    """One attempt's event stream: the decoder, the assembly, the stop."""

    def __init__(self, asm: StreamAssembly, ref: str) -> None:
        self.asm = asm
        self.ref = ref
        self.buffer = EventStreamBuffer()
        self.stopped = False

    async def feed(self, data: bytes, provider: BedrockProvider) -> None:
        self.buffer.add_data(data)
        try:
            messages = list(self.buffer)
        except ParserError as exc:
            raise ModelStreamMalformed(
                f"{self.ref}: the event stream did not decode: {exc}"
            ) from exc
        for message in messages:
            headers = message.headers
            if headers.get(":message-type") != "event":
                kind = str(headers.get(":exception-type") or headers.get(":error-code") or "error")
                raise provider.exception_failure(
                    kind, message.payload, self.ref, emitted=self.asm.emitted
                )
            try:
                payload = json.loads(message.payload or b"{}")
                await self._event(str(headers.get(":event-type", "")), payload)
            except (ValueError, AttributeError, TypeError, KeyError) as exc:
                raise ModelStreamMalformed(f"{self.ref}: unexpected stream event: {exc}") from exc

    async def _event(self, kind: str, payload: dict[str, Any]) -> None:
        asm = self.asm
        match kind:
            case "contentBlockStart":
                tool = payload.get("start", {}).get("toolUse")
                if tool is not None:
                    asm.tool_fragment(
                        int(payload["contentBlockIndex"]),
                        call_id=tool["toolUseId"],
                        name=tool["name"],
                    )
            case "contentBlockDelta":
                delta = payload["delta"]
                if "text" in delta:
                    await asm.forward(TextDelta(str(delta["text"])))
                elif "reasoningContent" in delta:
                    reasoning = delta["reasoningContent"]
                    asm.signature += str(reasoning.get("signature", ""))
                    await asm.forward(ReasoningDelta(str(reasoning.get("text", ""))))
                elif "toolUse" in delta:
                    asm.tool_fragment(
                        int(payload["contentBlockIndex"]), arguments=str(delta["toolUse"]["input"])
                    )
            case "messageStop":
                reason = str(payload.get("stopReason", "end_turn"))
                asm.stop_reason = _STOP_REASONS.get(reason, reason)
                self.stopped = True
            case "metadata":
                usage = payload.get("usage") or {}
                asm.usage = Usage(
                    input_tokens=int(usage.get("inputTokens", 0)),
                    output_tokens=int(usage.get("outputTokens", 0)),
                    cached_input_tokens=int(usage.get("cacheReadInputTokens", 0)),
                    cached_write_tokens=int(usage.get("cacheWriteInputTokens", 0)),
                )
