"""A fake OpenAI Responses API server (live HTTP, streaming SSE) for tests.

Point a client at ``server.base_url`` (``<url>/v1``); it records each ``POST /v1/responses``
and answers with the scripted event streams built here, in the API's own event shapes::

    server.script(text_reply("Hel", "lo", reasoning=["hmm"]), call_reply("c1", "shell", ...))
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from .fake_openai import error_reply
from .fake_sse import FakeSSEServer, Reply

MODEL = "fake-gpt-responses"


class FakeResponses(FakeSSEServer):
    def __init__(self) -> None:
        super().__init__(error_reply(400, "fake Responses server: no reply scripted"))

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"


def event(payload: dict[str, Any]) -> bytes:
    """One SSE frame: ``event: <type>`` and the payload as JSON (as OpenAI sends them)."""
    return f"event: {payload['type']}\ndata: {json.dumps(payload)}\n\n".encode()


def created() -> dict[str, Any]:
    response = {"id": "resp_1", "object": "response", "status": "in_progress", "model": MODEL}
    return {"type": "response.created", "sequence_number": 0, "response": response}


def completed(
    usage: tuple[int, int] = (30, 8), *, cached: int = 0, reasoning: int = 0
) -> dict[str, Any]:
    response = {
        "id": "resp_1",
        "object": "response",
        "status": "completed",
        "model": MODEL,
        "usage": {
            "input_tokens": usage[0],
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": usage[1],
            "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": sum(usage),
        },
    }
    return {"type": "response.completed", "response": response}


def reasoning_item(index: int, parts: Iterable[str]) -> list[dict[str, Any]]:
    item = {"id": f"rs_{index}", "type": "reasoning", "summary": []}
    return [
        {"type": "response.output_item.added", "output_index": index, "item": item},
        *(
            {
                "type": "response.reasoning_summary_text.delta",
                "item_id": f"rs_{index}",
                "output_index": index,
                "summary_index": 0,
                "delta": part,
            }
            for part in parts
        ),
        {"type": "response.output_item.done", "output_index": index, "item": item},
    ]


def message_item(index: int, tokens: Iterable[str]) -> list[dict[str, Any]]:
    item = {"id": f"msg_{index}", "type": "message", "role": "assistant", "content": []}
    return [
        {"type": "response.output_item.added", "output_index": index, "item": item},
        *(
            {
                "type": "response.output_text.delta",
                "item_id": f"msg_{index}",
                "output_index": index,
                "content_index": 0,
                "delta": token,
            }
            for token in tokens
        ),
        {"type": "response.output_item.done", "output_index": index, "item": item},
    ]


def call_item(
    index: int, call_id: str, name: str, fragments: Iterable[str]
) -> list[dict[str, Any]]:
    item = {
        "id": f"fc_{index}",
        "type": "function_call",
        "call_id": call_id,
        "name": name,
        "arguments": "",
        "status": "in_progress",
    }
    fragments = list(fragments)
    return [
        {"type": "response.output_item.added", "output_index": index, "item": item},
        *(
            {
                "type": "response.function_call_arguments.delta",
                "item_id": f"fc_{index}",
                "output_index": index,
                "delta": part,
            }
            for part in fragments
        ),
        {
            "type": "response.function_call_arguments.done",
            "item_id": f"fc_{index}",
            "output_index": index,
            "arguments": "".join(fragments),
        },
        {"type": "response.output_item.done", "output_index": index, "item": item},
    ]


def stream_reply(payloads: Iterable[dict[str, Any]]) -> Reply:
    return Reply(events=tuple(event(p) for p in payloads))


def text_reply(*tokens: str, reasoning: Sequence[str] = ()) -> Reply:
    payloads = [created()]
    if reasoning:
        payloads += reasoning_item(0, reasoning)
    payloads += message_item(1 if reasoning else 0, tokens)
    payloads.append(completed())
    return stream_reply(payloads)


def call_reply(call_id: str, name: str, fragments: Sequence[str], *, say: str = "") -> Reply:
    payloads = [created()]
    if say:
        payloads += message_item(0, [say])
    payloads += call_item(1 if say else 0, call_id, name, fragments)
    payloads.append(completed())
    return stream_reply(payloads)


def failed_reply(message: str) -> Reply:
    response = {"id": "resp_1", "status": "failed", "error": {"code": "x", "message": message}}
    return stream_reply([created(), {"type": "response.failed", "response": response}])
