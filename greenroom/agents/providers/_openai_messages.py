"""Chat history and tools in the OpenAI Chat Completions request format (pure functions).

Reasoning text of earlier assistant turns is not sent back: the official API has no field for it
and some compatible servers reject unknown ones.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from openai.types.chat import (
    ChatCompletionContentPartParam,
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageFunctionToolCallParam,
    ChatCompletionMessageParam,
)
from openai.types.chat.chat_completion_content_part_image_param import ImageURL

from greenroom.domain import ChatMessage, MessagePart

from ._base import ModelConfig, StructuredOutput, ToolSpec, thaw


def to_openai_messages(messages: Iterable[ChatMessage]) -> list[ChatCompletionMessageParam]:
    return [_message(m) for m in messages]


def to_openai_tools(tools: Iterable[ToolSpec]) -> list[ChatCompletionFunctionToolParam]:
    out: list[ChatCompletionFunctionToolParam] = []
    for tool in tools:
        function: dict[str, Any] = {"name": tool.name, "parameters": dict(tool.parameters)}
        if tool.description:
            function["description"] = tool.description
        out.append({"type": "function", "function": cast(Any, function)})
    return out


def _message(message: ChatMessage) -> ChatCompletionMessageParam:
    match message.role:
        case "system":
            return {"role": "system", "content": message.content}
        case "user":
            if message.multi_content:
                return {"role": "user", "content": _parts(message.multi_content)}
            return {"role": "user", "content": message.content}
        case "tool":
            return {
                "role": "tool",
                "tool_call_id": message.tool_call_id,
                "content": message.content,
            }
        case "assistant":
            calls: list[ChatCompletionMessageFunctionToolCallParam] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.function.name, "arguments": call.function.arguments},
                }
                for call in message.tool_calls
            ]
            if not calls:
                return {"role": "assistant", "content": message.content}
            return {"role": "assistant", "content": message.content or None, "tool_calls": calls}


def _parts(parts: Iterable[MessagePart]) -> list[ChatCompletionContentPartParam]:
    out: list[ChatCompletionContentPartParam] = []
    for part in parts:
        if part.image_url is not None:
            image: dict[str, str] = {"url": part.image_url.url}
            if part.image_url.detail:
                image["detail"] = part.image_url.detail
            out.append({"type": "image_url", "image_url": cast(ImageURL, image)})
        else:
            out.append({"type": "text", "text": part.text})
    return out


def sampling(model: ModelConfig) -> dict[str, float]:
    """The sampling settings a model sets (temperature, top_p, penalties)."""
    values = {
        "temperature": model.temperature,
        "top_p": model.top_p,
        "frequency_penalty": model.frequency_penalty,
        "presence_penalty": model.presence_penalty,
    }
    return {key: value for key, value in values.items() if value is not None}


def response_format(output: StructuredOutput) -> dict[str, Any]:
    """Chat Completions' ``response_format`` for an agent's ``structured_output``."""
    schema: dict[str, Any] = {
        "name": output.name,
        "schema": thaw(output.schema),
        "strict": output.strict,
    }
    if output.description:
        schema["description"] = output.description
    return {"type": "json_schema", "json_schema": schema}
