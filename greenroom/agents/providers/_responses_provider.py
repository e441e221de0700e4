"""OpenAI's Responses API (``api_type: openai_responses``), streamed.

One :meth:`ResponsesProvider.complete` is one ``POST {base_url}/responses`` with
``stream: true`` on the endpoint's pooled ``openai`` client; keys, endpoint, retries and
failures are the Chat Completions provider's (:class:`OpenAIProvider`), only the request
(``_responses_messages``) and the event stream (``_responses_stream``) differ.
"""

from __future__ import annotations

from typing import Any

import httpx2
import openai
import trio

from greenroom.domain import Usage
from greenroom.errors import ModelStreamMalformed

from ._base import ModelRequest, ModelResponse, OnDelta
from ._openai_provider import CLOSE_BUDGET, OpenAIProvider
from ._openai_stream import body_pieces
from ._responses_messages import responses_body
from ._responses_stream import ResponsesState, SSELines
from ._retry import transport_failure
from ._stream import StreamAssembly, idle_limit, idle_watch


class ResponsesProvider(OpenAIProvider):
    """Streams Responses API answers; see :class:`OpenAIProvider` for keys and limits."""

    async def _attempt(
        self, client: openai.AsyncOpenAI, request: ModelRequest, on_delta: OnDelta
    ) -> ModelResponse:
        ref = request.model.ref
        state = ResponsesState(StreamAssembly(on_delta), ref)
        try:
            response = await self._post(client, request)
        except openai.APIError as exc:
            raise self._failure(exc, ref, started=False, emitted=False) from exc
        lines = SSELines()
        try:
            pieces = body_pieces(response)
            with idle_watch(self.idle, ref) as clock:
                while not state.done:
                    try:
                        data = await anext(pieces, None)
                    except httpx2.TransportError as exc:
                        emitted = state.asm.emitted
                        raise transport_failure(exc, ref, self.base_url, emitted=emitted) from exc
                    if data is None:
                        break
                    clock.pause()
                    try:
                        for event in lines.feed(data):
                            await state.apply(event)
                    except ModelStreamMalformed as exc:
                        raise ModelStreamMalformed(f"{ref}: {exc.message}") from exc
                    except (KeyError, TypeError, ValueError) as exc:
                        raise ModelStreamMalformed(
                            f"{ref}: unexpected stream event: {exc}"
                        ) from exc
                    clock.restart()
        finally:
            with trio.move_on_after(CLOSE_BUDGET, shield=True):
                await response.aclose()
        if not state.done:
            raise ModelStreamMalformed(f"{ref}: the stream ended before response.completed")
        if request.model.track_usage is False:
            state.asm.usage = Usage()
        return state.asm.response()

    async def _post(self, client: openai.AsyncOpenAI, request: ModelRequest) -> httpx2.Response:
        model = request.model
        body: dict[str, Any] = responses_body(request, request.max_tokens or model.max_tokens)
        streaming: bool = True  # with cast_to=httpx2.Response: the raw, unread response
        with idle_limit(self.idle, model.ref):
            response = await client.post(
                "/responses", body=body, cast_to=httpx2.Response, stream=streaming
            )
            assert isinstance(response, httpx2.Response)
            return response
        raise AssertionError("unreachable: idle_limit raises when it cancels")
