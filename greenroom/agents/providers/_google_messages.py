"""Chat history and tools in the Gemini ``generateContent`` format (pure functions).

System messages become the ``system_instruction``; the assistant is the ``model`` role; tool
results go back as ``function_response`` parts of a user turn (consecutive results in one turn),
named after the call they answer. Reasoning of earlier turns is not sent back.

Gemini 3 wants the thought signature it gave with a function call to come back with that call.
greenroom's history does not keep signatures, so a replayed call carries Google's documented
placeholder that skips the check (see docs/decisions/0006-google-and-bedrock-providers.md).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping
from typing import Any

from google.genai import types

from greenroom.domain import ChatMessage, MessagePart

from ._base import ToolSpec

SKIP_SIGNATURE = b"skip_thought_signature_validator"


def to_gemini(messages: Iterable[ChatMessage]) -> tuple[str, list[types.Content]]:
    """The system instruction and the contents for ``messages``."""
    system: list[str] = []
    contents: list[types.Content] = []
    names: dict[str, str] = {}
    for message in messages:
        match message.role:
            case "system":
                if message.content:
                    system.append(message.content)
            case "user":
                contents.append(types.Content(role="user", parts=_user_parts(message)))
            case "assistant":
                parts = _assistant_parts(message, names)
                if parts:
                    contents.append(types.Content(role="model", parts=parts))
            case "tool":
                part = _tool_result(message, names)
                last = contents[-1] if contents else None
                if last is not None and last.role == "user" and _all_results(last):
                    last.parts = [*(last.parts or []), part]
                else:
                    contents.append(types.Content(role="user", parts=[part]))
    return "\n\n".join(system), contents


def to_gemini_tools(tools: Iterable[ToolSpec]) -> list[types.Tool]:
    declarations = [
        types.FunctionDeclaration(
            name=tool.name,
            description=tool.description or None,
            parameters_json_schema=dict(tool.parameters),
        )
        for tool in tools
    ]
    return [types.Tool(function_declarations=declarations)] if declarations else []


def _user_parts(message: ChatMessage) -> list[types.Part]:
    if not message.multi_content:
        return [types.Part(text=message.content)]
    return [_part(part) for part in message.multi_content]


def _part(part: MessagePart) -> types.Part:
    if part.image_url is None:
        return types.Part(text=part.text)
    url = part.image_url.url
    if url.startswith("data:") and "," in url:
        header, _, data = url.partition(",")
        mime = header.removeprefix("data:").split(";")[0] or "application/octet-stream"
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            return types.Part(text=f"[an image that could not be decoded: {mime}]")
        return types.Part(inline_data=types.Blob(mime_type=mime, data=raw))
    return types.Part(file_data=types.FileData(file_uri=url, mime_type=_mime_of(url)))


def _mime_of(url: str) -> str:
    lowered = url.lower().split("?")[0]
    for suffix, mime in ((".png", "image/png"), (".gif", "image/gif"), (".webp", "image/webp")):
        if lowered.endswith(suffix):
            return mime
    return "image/jpeg"


def _assistant_parts(message: ChatMessage, names: dict[str, str]) -> list[types.Part]:
    parts = [types.Part(text=message.content)] if message.content else []
    for index, call in enumerate(message.tool_calls):
        names[call.id] = call.function.name
        parts.append(
            types.Part(
                function_call=types.FunctionCall(
                    id=call.id, name=call.function.name, args=_arguments(call.function.arguments)
                ),
                thought_signature=SKIP_SIGNATURE if index == 0 else None,
            )
        )
    return parts


def _arguments(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {"arguments": text}
    return dict(value) if isinstance(value, Mapping) else {"value": value}


def _tool_result(message: ChatMessage, names: Mapping[str, str]) -> types.Part:
    key = "error" if message.is_error else "result"
    return types.Part(
        function_response=types.FunctionResponse(
            id=message.tool_call_id or None,
            name=names.get(message.tool_call_id, message.tool_call_id or "tool"),
            response={key: message.content},
        )
    )


def _all_results(content: types.Content) -> bool:
    return bool(content.parts) and all(p.function_response is not None for p in content.parts or [])
