"""Chat history and tools in the Anthropic Messages request format (pure functions).

System messages are joined into the request's ``system`` text. Tool results become
``tool_result`` blocks in a user turn, and consecutive messages of one role are merged into a
single turn, since the API expects user and assistant turns to alternate. Reasoning of earlier
turns is sent back as a thinking block when it carries its signature and the call thinks
(Anthropic wants it before the tool calls it led to).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Literal, cast

from anthropic.types import (
    ContentBlockParam,
    ImageBlockParam,
    MessageParam,
    TextBlockParam,
    ToolParam,
    ToolResultBlockParam,
)

from greenroom.domain import ChatMessage, MessagePart

from ._base import ToolSpec

_IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")


def to_anthropic_messages(
    messages: Iterable[ChatMessage], *, thinking: bool = False
) -> tuple[str, list[MessageParam]]:
    """The ``system`` text and the ``messages`` list for ``messages``."""
    system: list[str] = []
    turns: list[tuple[Literal["user", "assistant"], list[ContentBlockParam]]] = []
    for message in messages:
        if message.role == "system":
            if message.content:
                system.append(message.content)
            continue
        role: Literal["user", "assistant"] = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message)
        if thinking and message.thinking_signature and message.reasoning_content:
            blocks.insert(
                0,
                {
                    "type": "thinking",
                    "thinking": message.reasoning_content,
                    "signature": message.thinking_signature,
                },
            )
        if not blocks:
            continue
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((role, blocks))
    return "\n\n".join(system), [_turn(role, blocks) for role, blocks in turns]


def _turn(role: Literal["user", "assistant"], blocks: list[ContentBlockParam]) -> MessageParam:
    if role == "user":
        return {"role": "user", "content": blocks}
    return {"role": "assistant", "content": blocks}


def to_anthropic_tools(tools: Iterable[ToolSpec]) -> list[ToolParam]:
    out: list[ToolParam] = []
    for tool in tools:
        param: ToolParam = {"name": tool.name, "input_schema": dict(tool.parameters)}
        if tool.description:
            param["description"] = tool.description
        out.append(param)
    return out


def _blocks(message: ChatMessage) -> list[ContentBlockParam]:
    if message.role == "tool":
        result: ToolResultBlockParam = {
            "type": "tool_result",
            "tool_use_id": message.tool_call_id,
            "content": message.content,
        }
        if message.is_error:
            result["is_error"] = True
        return [result]
    blocks: list[ContentBlockParam] = []
    if message.multi_content:
        blocks.extend(_part(part) for part in message.multi_content)
    elif message.content:
        blocks.append(_text(message.content))
    for call in message.tool_calls:
        blocks.append(
            {
                "type": "tool_use",
                "id": call.id,
                "name": call.function.name,
                "input": _arguments(call.function.arguments),
            }
        )
    return blocks


def _text(text: str) -> TextBlockParam:
    return {"type": "text", "text": text}


def _part(part: MessagePart) -> ContentBlockParam:
    if part.image_url is None:
        return _text(part.text)
    url = part.image_url.url
    header, comma, data = url.partition(",")
    media_type = header.removeprefix("data:").removesuffix(";base64")
    if url.startswith("data:") and comma and media_type in _IMAGE_TYPES:
        image: ImageBlockParam = {
            "type": "image",
            "source": {"type": "base64", "media_type": cast(Any, media_type), "data": data},
        }
        return image
    return {"type": "image", "source": {"type": "url", "url": url}}


def _arguments(arguments: str) -> dict[str, Any]:
    """A tool call's input object (``{}`` for empty or non-object arguments)."""
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}
