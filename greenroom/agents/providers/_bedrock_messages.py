"""Chat history and tools in Amazon Bedrock's Converse format (pure functions).

Converse wants the conversation to start with a user turn and the roles to alternate, so
consecutive messages of one role (a tool result followed by a user message, ...) are merged
into one turn; empty text blocks are left out (the API refuses them). Reasoning of earlier
turns is not sent back.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping
from typing import Any

from greenroom.domain import ChatMessage, MessagePart

from ._base import ToolSpec

_IMAGE_FORMATS = {
    "image/png": "png",
    "image/jpeg": "jpeg",
    "image/gif": "gif",
    "image/webp": "webp",
}


def to_converse(
    messages: Iterable[ChatMessage], *, thinking: bool = False
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The ``system`` blocks and the ``messages`` of a Converse request (with ``thinking``,
    earlier reasoning that carries its signature goes back as ``reasoningContent``)."""
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            if message.content:
                system.append({"text": message.content})
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message)
        if thinking and message.thinking_signature and message.reasoning_content:
            text = {"text": message.reasoning_content, "signature": message.thinking_signature}
            blocks.insert(0, {"reasoningContent": {"reasoningText": text}})
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    if turns and turns[0]["role"] != "user":
        turns.insert(0, {"role": "user", "content": [{"text": "(conversation continues)"}]})
    return system, turns


def to_tool_config(tools: Iterable[ToolSpec]) -> dict[str, Any] | None:
    specs = []
    for tool in tools:
        spec: dict[str, Any] = {"name": tool.name, "inputSchema": {"json": dict(tool.parameters)}}
        if tool.description:
            spec["description"] = tool.description
        specs.append({"toolSpec": spec})
    return {"tools": specs} if specs else None


def _blocks(message: ChatMessage) -> list[dict[str, Any]]:
    match message.role:
        case "tool":
            result: dict[str, Any] = {
                "toolUseId": message.tool_call_id,
                "content": [{"text": message.content or "(no output)"}],
            }
            if message.is_error:
                result["status"] = "error"
            return [{"toolResult": result}]
        case "assistant":
            blocks: list[dict[str, Any]] = []
            if message.content:
                blocks.append({"text": message.content})
            for call in message.tool_calls:
                blocks.append(
                    {
                        "toolUse": {
                            "toolUseId": call.id,
                            "name": call.function.name,
                            "input": _arguments(call.function.arguments),
                        }
                    }
                )
            return blocks
        case _:
            if message.multi_content:
                return [b for b in (_part(p) for p in message.multi_content) if b]
            return [{"text": message.content}] if message.content else []


def _part(part: MessagePart) -> dict[str, Any] | None:
    if part.image_url is None:
        return {"text": part.text} if part.text else None
    url = part.image_url.url
    header, _, data = url.partition(",")
    mime = header.removeprefix("data:").split(";")[0]
    if url.startswith("data:") and mime in _IMAGE_FORMATS:
        try:
            base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            return {"text": f"[an image that could not be decoded: {mime}]"}
        return {"image": {"format": _IMAGE_FORMATS[mime], "source": {"bytes": data}}}
    return {"text": f"[image: {url}]"}


def _arguments(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {"arguments": text}
    return dict(value) if isinstance(value, Mapping) else {"value": value}
