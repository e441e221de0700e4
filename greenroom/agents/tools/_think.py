"""``think``: a scratchpad. Each call adds a thought; the result lists every thought so far."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._config import ToolsetConfig
from ..providers._base import ToolSpec
from ._base import FunctionTool, ToolAnnotations, ToolContext, ToolResult, schema, string
from ._registry import Toolset, register

THINK_SPEC = ToolSpec(
    name="think",
    description=(
        "Use the tool to think about something. It will not obtain new information or change "
        "anything, but just append the thought to the log. Use it when complex reasoning or "
        "some cache memory is needed."
    ),
    parameters=schema({"thought": string("The thought to think about")}, ("thought",)),
)

INSTRUCTIONS = (
    "## Using the think tool\n\n"
    "Before acting on a complex request or after receiving tool results, use the think tool "
    "as a scratchpad: list the rules that apply, check that all needed information is "
    "collected, and verify that the planned action is correct."
)


@register("think")
def think_toolset(_: ToolsetConfig, __: ToolContext) -> Toolset:
    thoughts: list[str] = []

    async def think(arguments: Mapping[str, Any]) -> ToolResult:
        thoughts.append(str(arguments.get("thought", "")))
        return ToolResult("Thoughts:\n" + "\n".join(thoughts))

    annotations = ToolAnnotations(title="Think", read_only=True)
    return Toolset([FunctionTool(THINK_SPEC, think, annotations, "think")], INSTRUCTIONS)
