"""Chat history, tools and settings as an OpenAI Responses API request (pure functions).

The ``input`` list follows docker-agent's conversion: user and system turns are messages (with
``input_text``/``input_image`` parts when they have several), an assistant's tool calls become
``function_call`` items (its text then is not sent), tool results ``function_call_output``
items; empty assistant turns are left out. Reasoning of earlier turns is not sent back.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from greenroom.domain import ChatMessage, MessagePart

from ._base import ModelRequest, StructuredOutput, ToolSpec, thaw
from ._reasoning import is_openai_reasoning_model, openai_effort


def responses_body(request: ModelRequest, max_tokens: int | None) -> dict[str, Any]:
    """The JSON body of a streamed ``POST /responses`` for ``request``."""
    model = request.model
    body: dict[str, Any] = {
        "model": model.model,
        "input": to_responses_input(request.messages),
        "stream": True,
        "store": False,
    }
    tools = to_responses_tools(request.tools)
    if tools:
        body["tools"] = tools
        if model.parallel_tool_calls is not None:
            body["parallel_tool_calls"] = model.parallel_tool_calls
    if model.temperature is not None:
        body["temperature"] = model.temperature
    if model.top_p is not None:
        body["top_p"] = model.top_p
    if max_tokens:
        body["max_output_tokens"] = max_tokens
    if request.thinking and is_openai_reasoning_model(model.model):
        # docker-agent asks reasoning models for a detailed summary (streamed as reasoning).
        reasoning: dict[str, Any] = {"summary": "detailed"}
        effort = openai_effort(request)
        if effort:
            reasoning["effort"] = effort
        body["reasoning"] = reasoning
    if request.structured_output is not None:
        body["text"] = {"format": text_format(request.structured_output)}
    return body


def text_format(output: StructuredOutput) -> dict[str, Any]:
    fmt: dict[str, Any] = {
        "type": "json_schema",
        "name": output.name,
        "schema": thaw(output.schema),
        "strict": output.strict,
    }
    if output.description:
        fmt["description"] = output.description
    return fmt


def to_responses_tools(tools: Iterable[ToolSpec]) -> list[dict[str, Any]]:
    out = []
    for tool in tools:
        spec: dict[str, Any] = {
            "type": "function",
            "name": tool.name,
            "parameters": thaw(tool.parameters),
            "strict": False,
        }
        if tool.description:
            spec["description"] = tool.description
        out.append(spec)
    return out


def to_responses_input(messages: Iterable[ChatMessage]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for message in messages:
        match message.role:
            case "tool":
                items.append(
                    {
                        "type": "function_call_output",
                        "call_id": message.tool_call_id,
                        "output": message.content,
                    }
                )
            case "assistant":
                if message.tool_calls:
                    items += [
                        {
                            "type": "function_call",
                            "call_id": call.id,
                            "name": call.function.name,
                            "arguments": call.function.arguments,
                        }
                        for call in message.tool_calls
                    ]
                elif message.content.strip():
                    items.append({"role": "assistant", "content": message.content})
            case _:
                role = "system" if message.role == "system" else "user"
                if message.multi_content:
                    parts = [_part(p) for p in message.multi_content]
                    items.append({"type": "message", "role": role, "content": parts})
                elif role == "system":
                    text = [{"type": "input_text", "text": message.content}]
                    items.append({"type": "message", "role": role, "content": text})
                else:
                    items.append({"role": role, "content": message.content})
    return items


def _part(part: MessagePart) -> dict[str, Any]:
    if part.image_url is None:
        return {"type": "input_text", "text": part.text}
    detail = part.image_url.detail if part.image_url.detail in ("low", "high") else "auto"
    return {"type": "input_image", "image_url": part.image_url.url, "detail": detail}
