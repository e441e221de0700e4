"""A fake Gemini API server (live HTTP, ``streamGenerateContent?alt=sse``) for tests.

Point the Google provider at ``server.url`` (as ``base_url``). Each streamed frame is one
``GenerateContentResponse`` JSON; errors are Google's ``{"error": {code, message, status}}``::

    server = await nursery.start(FakeGemini().serve)
    server.script(
        error_reply(429, "quota", status="RESOURCE_EXHAUSTED"),
        text_reply("Hel", "lo", thoughts=["hmm"]),
        stream_reply([candidate([function_call("shell", {"cmd": "ls"})], finish="STOP")]),
    )

An unscripted request gets a 400 whose message says so.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from .fake_sse import Ending, FakeSSEServer, Reply

MODEL = "gemini-fake"


class FakeGemini(FakeSSEServer):
    def __init__(self) -> None:
        super().__init__(error_reply(400, "fake Gemini server: no reply scripted"))


def frame(payload: Any) -> bytes:
    return f"data: {json.dumps(payload)}\r\n\r\n".encode()


def text_part(text: str, *, thought: bool = False) -> dict[str, Any]:
    part: dict[str, Any] = {"text": text}
    if thought:
        part["thought"] = True
    return part


def function_call(name: str, args: dict[str, Any], call_id: str = "") -> dict[str, Any]:
    call: dict[str, Any] = {"name": name, "args": args}
    if call_id:
        call["id"] = call_id
    return {"functionCall": call}


def candidate(
    parts: Sequence[dict[str, Any]], *, finish: str = "", usage: tuple[int, int] | None = None
) -> dict[str, Any]:
    """One response chunk with one candidate (and usage on the last one)."""
    cand: dict[str, Any] = {"content": {"role": "model", "parts": list(parts)}, "index": 0}
    if finish:
        cand["finishReason"] = finish
    payload: dict[str, Any] = {"candidates": [cand], "modelVersion": MODEL}
    if usage is not None:
        payload["usageMetadata"] = {
            "promptTokenCount": usage[0],
            "candidatesTokenCount": usage[1],
            "totalTokenCount": sum(usage),
        }
    return payload


def stream_reply(
    payloads: Iterable[dict[str, Any] | bytes], *, delay: float = 0.0, ending: Ending = "close"
) -> Reply:
    frames = tuple(p if isinstance(p, bytes) else frame(p) for p in payloads)
    return Reply(events=frames, delay=delay, ending=ending)


def text_reply(
    *tokens: str, thoughts: Sequence[str] = (), usage: tuple[int, int] = (11, 4)
) -> Reply:
    chunks = [candidate([text_part(t, thought=True)]) for t in thoughts]
    chunks += [candidate([text_part(t)]) for t in tokens[:-1]]
    chunks.append(candidate([text_part(tokens[-1])], finish="STOP", usage=usage))
    return stream_reply(chunks)


def error_reply(code: int, message: str, *, status: str = "INVALID_ARGUMENT") -> Reply:
    return Reply(status=code, body={"error": {"code": code, "message": message, "status": status}})


def context_overflow_reply(tokens: int = 1200000, limit: int = 1048576) -> Reply:
    """Gemini's refusal of a prompt longer than the model's context window (HTTP 400)."""
    message = (
        f"The input token count ({tokens}) exceeds the maximum number of tokens allowed ({limit})."
    )
    return error_reply(400, message)
