"""A fake Anthropic Messages API server (live HTTP, streaming SSE) for tests.

Point a client at ``server.url`` (the SDK adds ``/v1/messages``). Script answers with the
builders here::

    server = await nursery.start(FakeAnthropic().serve)
    server.script(
        error_reply(529, "Overloaded", type="overloaded_error"),
        text_reply("Hel", "lo", thinking=["hmm"]),
        stream_reply([
            message_start(),
            *tool_use_block(0, "toolu_1", "shell", ['{"cmd"', ': "ls"}']),
            *message_end("tool_use", 9),
        ]),
    )

An unscripted request gets a 400 whose message says so.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from .fake_sse import Ending, FakeSSEServer, Recorded, Reply

__all__ = [
    "MODEL",
    "FakeAnthropic",
    "Recorded",
    "Reply",
    "context_overflow_reply",
    "error_event",
    "error_reply",
    "event",
    "message_end",
    "message_start",
    "stream_reply",
    "text_block",
    "text_reply",
    "thinking_block",
    "tool_use_block",
]

MODEL = "fake-claude"


class FakeAnthropic(FakeSSEServer):
    def __init__(self) -> None:
        message = "fake Anthropic server: no reply scripted for this request"
        super().__init__(error_reply(400, message, type="invalid_request_error"))


def event(payload: dict[str, Any]) -> bytes:
    """One SSE frame: ``event: <type>`` and the payload as JSON."""
    return f"event: {payload['type']}\ndata: {json.dumps(payload)}\n\n".encode()


def message_start(
    input_tokens: int = 25, *, cache_read: int = 0, cache_write: int = 0
) -> dict[str, Any]:
    usage = {
        "input_tokens": input_tokens,
        "output_tokens": 1,
        "cache_read_input_tokens": cache_read,
        "cache_creation_input_tokens": cache_write,
    }
    message: dict[str, Any] = {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    return {"type": "message_start", "message": message}


def _block(
    index: int, start: dict[str, Any], deltas: Iterable[dict[str, Any]]
) -> list[dict[str, Any]]:
    return [
        {"type": "content_block_start", "index": index, "content_block": start},
        *({"type": "content_block_delta", "index": index, "delta": d} for d in deltas),
        {"type": "content_block_stop", "index": index},
    ]


def text_block(index: int, tokens: Iterable[str]) -> list[dict[str, Any]]:
    deltas = ({"type": "text_delta", "text": token} for token in tokens)
    return _block(index, {"type": "text", "text": ""}, deltas)


def thinking_block(index: int, tokens: Iterable[str]) -> list[dict[str, Any]]:
    deltas: list[dict[str, Any]] = [{"type": "thinking_delta", "thinking": t} for t in tokens]
    deltas.append({"type": "signature_delta", "signature": "c2lnbmF0dXJl"})
    return _block(index, {"type": "thinking", "thinking": "", "signature": ""}, deltas)


def tool_use_block(
    index: int, call_id: str, name: str, fragments: Iterable[str]
) -> list[dict[str, Any]]:
    deltas = ({"type": "input_json_delta", "partial_json": part} for part in fragments)
    return _block(index, {"type": "tool_use", "id": call_id, "name": name, "input": {}}, deltas)


def message_end(stop_reason: str = "end_turn", output_tokens: int = 7) -> list[dict[str, Any]]:
    return [
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": output_tokens},
        },
        {"type": "message_stop"},
    ]


def error_event(type: str, message: str) -> dict[str, Any]:
    """An ``error`` event sent inside a 200 stream."""
    return {"type": "error", "error": {"type": type, "message": message}}


def stream_reply(
    payloads: Iterable[dict[str, Any] | bytes], *, delay: float = 0.0, ending: Ending = "close"
) -> Reply:
    """A 200 stream of ``payloads`` (dicts become events, bytes go as they are)."""
    frames = tuple(p if isinstance(p, bytes) else event(p) for p in payloads)
    return Reply(events=frames, delay=delay, ending=ending)


def text_reply(
    *tokens: str,
    thinking: Sequence[str] = (),
    delay: float = 0.0,
    ending: Ending = "close",
) -> Reply:
    """A streamed answer: message_start, a thinking block if any, a text block, the end."""
    payloads = [message_start()]
    if thinking:
        payloads += thinking_block(0, thinking)
    payloads += text_block(1 if thinking else 0, tokens)
    payloads += message_end()
    return stream_reply(payloads, delay=delay, ending=ending)


def error_reply(status: int, message: str, *, type: str = "api_error") -> Reply:
    """An HTTP error with Anthropic's error body."""
    return Reply(status=status, body={"type": "error", "error": {"type": type, "message": message}})


def context_overflow_reply(tokens: int = 210000, limit: int = 200000) -> Reply:
    """Anthropic's refusal of a prompt longer than the model's context window (HTTP 400)."""
    message = f"prompt is too long: {tokens} tokens > {limit} maximum"
    return error_reply(400, message, type="invalid_request_error")
