"""Structured output through a tool, for APIs without a JSON-schema response format.

Anthropic and Bedrock (Converse) get the agent's ``structured_output`` as one more tool whose
input schema is the output schema; the model is made to call a tool (that one when it has no
other), and the input of its call to it becomes the answer's text. Pure, apart from handing the
answer to ``on_delta`` (its JSON arrives as tool-input fragments, which clients do not see).
"""

from __future__ import annotations

import attrs

from ._base import ModelResponse, OnDelta, StructuredOutput, TextDelta, ToolSpec, thaw


def output_tool(output: StructuredOutput) -> ToolSpec:
    description = output.description or f"Give the final answer as {output.name}."
    return ToolSpec(name=output.name, description=description, parameters=thaw(output.schema))


def forced_choice(output: StructuredOutput, tools: tuple[ToolSpec, ...]) -> str:
    """The tool the model must call: the output tool's name, or ``""`` for any tool."""
    return "" if tools else output.name


async def take_output(
    response: ModelResponse, output: StructuredOutput, on_delta: OnDelta
) -> ModelResponse:
    """``response`` with its call to the output tool turned into the answer (other calls are
    dropped: the answer is final); unchanged when the model called only other tools."""
    call = next((c for c in response.tool_calls if c.function.name == output.name), None)
    if call is None:
        return response
    text = call.function.arguments
    await on_delta(TextDelta(text))
    return attrs.evolve(
        response, content=response.content + text, tool_calls=(), stop_reason="stop"
    )
