"""A fake OpenAI-compatible Chat Completions server (live HTTP, streaming SSE) for tests.

Point a client at ``server.base_url`` (``<url>/v1``). Script answers with the builders here::

    server = await nursery.start(FakeOpenAI().serve)
    server.script(
        error_reply(429, "slow down"),
        text_reply("Hel", "lo", reasoning=["hmm"]),
        tool_call_reply(ToolCallScript("call_1", "shell", ['{"cmd"', ': "ls"}'])),
    )

An unscripted request gets a 400 whose message says so.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from .fake_sse import Ending, FakeSSEServer, Recorded, Reply

__all__ = [
    "DONE",
    "MODEL",
    "FakeOpenAI",
    "Recorded",
    "Reply",
    "ToolCallScript",
    "chunk",
    "context_overflow_reply",
    "error_reply",
    "frame",
    "stream_reply",
    "text_reply",
    "tool_call_reply",
    "usage_chunk",
]

MODEL = "fake-gpt"
DONE = b"data: [DONE]\n\n"


class FakeOpenAI(FakeSSEServer):
    def __init__(self) -> None:
        super().__init__(error_reply(400, "fake OpenAI server: no reply scripted for this request"))

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"


def frame(payload: Any) -> bytes:
    """One SSE ``data:`` frame holding ``payload`` as JSON."""
    return f"data: {json.dumps(payload)}\n\n".encode()


def chunk(
    delta: dict[str, Any] | None = None, *, finish_reason: str | None = None
) -> dict[str, Any]:
    """A ``chat.completion.chunk`` with one choice."""
    choice = {"index": 0, "delta": delta or {}, "finish_reason": finish_reason}
    return _chunk([choice])


def usage_chunk(
    prompt: int, completion: int, *, cached: int = 0, reasoning: int = 0
) -> dict[str, Any]:
    """The last chunk of an ``include_usage`` stream: no choices, only usage."""
    payload = _chunk([])
    payload["usage"] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }
    return payload


def _chunk(choices: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": MODEL,
        "choices": choices,
    }


def stream_reply(
    payloads: Iterable[dict[str, Any] | bytes],
    *,
    done: bool = True,
    delay: float = 0.0,
    ending: Ending = "close",
) -> Reply:
    """A 200 stream of ``payloads`` (dicts become frames, bytes go as they are), then [DONE]."""
    frames = [p if isinstance(p, bytes) else frame(p) for p in payloads]
    if done:
        frames.append(DONE)
    return Reply(events=tuple(frames), delay=delay, ending=ending)


def text_reply(
    *tokens: str,
    reasoning: Sequence[str] = (),
    reasoning_field: str = "reasoning_content",
    usage: tuple[int, int] = (12, 5),
    delay: float = 0.0,
    ending: Ending = "close",
) -> Reply:
    """A streamed answer: a role chunk, reasoning then content chunks, finish, usage."""
    payloads = [chunk({"role": "assistant", "content": ""})]
    payloads += [chunk({reasoning_field: token}) for token in reasoning]
    payloads += [chunk({"content": token}) for token in tokens]
    payloads += [chunk(finish_reason="stop"), usage_chunk(*usage)]
    return stream_reply(payloads, delay=delay, ending=ending)


@attrs.frozen
class ToolCallScript:
    """A tool call to stream: its arguments are sent in the given fragments."""

    id: str
    name: str
    fragments: Sequence[str] = ()


def tool_call_reply(*calls: ToolCallScript, interleave: bool = True) -> Reply:
    """Tool calls streamed as fragments: id and name first, then argument pieces.

    With ``interleave`` the calls' fragments alternate (call 0, call 1, call 0, ...), as
    parallel tool calls do.
    """
    per_call: list[list[dict[str, Any]]] = []
    for index, call in enumerate(calls):
        first = {
            "index": index,
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        rest = [{"index": index, "function": {"arguments": part}} for part in call.fragments]
        per_call.append([first, *rest])
    if interleave:
        longest = max(len(parts) for parts in per_call)
        order = [parts[i] for i in range(longest) for parts in per_call if i < len(parts)]
    else:
        order = [part for parts in per_call for part in parts]
    payloads = [chunk({"role": "assistant", "content": None})]
    payloads += [chunk({"tool_calls": [part]}) for part in order]
    payloads += [chunk(finish_reason="tool_calls"), usage_chunk(30, 10)]
    return stream_reply(payloads)


def error_reply(status: int, message: str, *, type: str = "server_error") -> Reply:
    """An HTTP error with OpenAI's error body."""
    return Reply(status=status, body={"error": {"message": message, "type": type, "code": None}})


def context_overflow_reply(limit: int = 128000, tokens: int = 130000) -> Reply:
    """OpenAI's refusal of a prompt longer than the model's context window (HTTP 400)."""
    message = (
        f"This model's maximum context length is {limit} tokens. However, your messages "
        f"resulted in {tokens} tokens. Please reduce the length of the messages."
    )
    body = {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }
    return Reply(status=400, body=body)
