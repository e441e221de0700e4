"""Reading an OpenAI Responses API event stream into a :class:`StreamAssembly`.

The stream is server-sent events whose JSON data carries its ``type``: text arrives as
``response.output_text.delta``, reasoning as ``response.reasoning_summary_text.delta`` (or
``response.reasoning_text.delta``), a function call as an ``output_item.added`` of type
``function_call`` followed by ``function_call_arguments.delta`` fragments (keyed by its
``output_index``). ``response.completed`` (or ``response.incomplete``) ends the answer with its
usage; ``response.failed`` and ``error`` events are model errors.
"""

from __future__ import annotations

import json
from typing import Any

from greenroom.domain import Usage
from greenroom.errors import ModelError, ModelStreamMalformed

from ._stream import StreamAssembly


class SSELines:
    """Splits bytes as they arrive into the data of whole events (JSON, one dict each)."""

    def __init__(self) -> None:
        self._pending = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[dict[str, Any]]:
        """The events ``chunk`` completes. Raises ModelStreamMalformed for data that is not a
        JSON object."""
        lines = (self._pending + chunk).split(b"\n")
        self._pending = lines.pop()
        events: list[dict[str, Any]] = []
        for line in lines:
            line = line.removesuffix(b"\r")
            if not line:
                if self._data:
                    data, self._data = b"\n".join(self._data), []
                    if data.strip() == b"[DONE]":
                        continue
                    try:
                        value = json.loads(data)
                    except ValueError as exc:
                        raise ModelStreamMalformed("a stream event is not JSON") from exc
                    if not isinstance(value, dict):
                        raise ModelStreamMalformed("a stream event is not a JSON object")
                    events.append(value)
            elif line.startswith(b"data:"):
                value_bytes = line[5:]
                self._data.append(value_bytes[1:] if value_bytes.startswith(b" ") else value_bytes)
        return events


class ResponsesState:
    """One attempt's stream: what only the Responses events need, around the assembly."""

    def __init__(self, asm: StreamAssembly, ref: str) -> None:
        self.asm = asm
        self.ref = ref
        self.done = False
        self._calls = 0

    async def apply(self, event: dict[str, Any]) -> None:
        """Record ``event``. Raises ModelError for a failed response or an error event."""
        asm = self.asm
        kind = event.get("type", "")
        match kind:
            case "response.output_text.delta":
                await asm.text(str(event.get("delta", "")))
            case "response.reasoning_summary_text.delta" | "response.reasoning_text.delta":
                await asm.reasoning(str(event.get("delta", "")))
            case "response.output_item.added":
                item = event.get("item") or {}
                if item.get("type") == "function_call":
                    asm.tool_fragment(
                        int(event["output_index"]),
                        call_id=str(item.get("call_id") or item.get("id") or ""),
                        name=str(item.get("name") or ""),
                        arguments=str(item.get("arguments") or ""),
                    )
                    self._calls += 1
            case "response.function_call_arguments.delta":
                asm.tool_fragment(int(event["output_index"]), arguments=str(event["delta"]))
            case "response.created" | "response.in_progress":
                self._model(event.get("response") or {})
            case "response.completed" | "response.incomplete":
                self._finish(event.get("response") or {}, kind)
            case "response.failed":
                error = (event.get("response") or {}).get("error") or {}
                raise ModelError(f"{self.ref}: {error.get('message') or 'the response failed'}")
            case "error":
                message = event.get("message") or (event.get("error") or {}).get("message")
                raise ModelError(f"{self.ref}: {message or 'an error event in the stream'}")

    def _model(self, response: dict[str, Any]) -> None:
        if isinstance(response.get("model"), str):
            self.asm.model = response["model"]

    def _finish(self, response: dict[str, Any], kind: str) -> None:
        self._model(response)
        self.done = True
        usage = response.get("usage")
        if isinstance(usage, dict):
            self.asm.usage = _usage(usage)
        if self._calls:
            self.asm.stop_reason = "tool_calls"
        elif kind == "response.incomplete":
            reason = (response.get("incomplete_details") or {}).get("reason", "")
            self.asm.stop_reason = "length" if reason == "max_output_tokens" else str(reason)
        else:
            self.asm.stop_reason = "stop"


def _usage(usage: dict[str, Any]) -> Usage:
    cached = int((usage.get("input_tokens_details") or {}).get("cached_tokens") or 0)
    reasoning = int((usage.get("output_tokens_details") or {}).get("reasoning_tokens") or 0)
    return Usage(
        input_tokens=max(int(usage.get("input_tokens") or 0) - cached, 0),
        output_tokens=int(usage.get("output_tokens") or 0),
        cached_input_tokens=cached,
        reasoning_tokens=reasoning,
    )
