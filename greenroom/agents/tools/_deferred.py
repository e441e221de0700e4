"""Deferred tools (implicit): ``search_tool`` finds tools kept out of the model's list, and
``add_tool`` offers one from the next model call on (spec §2.15)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..providers._base import ToolSpec
from ._base import FunctionTool, Tool, ToolAnnotations, ToolResult, error, schema, string

if TYPE_CHECKING:
    from ._registry import AgentTools

SEARCH_SPEC = ToolSpec(
    name="search_tool",
    description=(
        "Search the deferred tools by name or description (case-insensitive). Use add_tool "
        "to make a found tool available."
    ),
    parameters=schema(
        {"query": string("Text to look for in tool names and descriptions")}, ("query",)
    ),
)
ADD_SPEC = ToolSpec(
    name="add_tool",
    description="Activate a deferred tool by its exact name so that it can be called.",
    parameters=schema({"name": string("The name of the tool to activate")}, ("name",)),
)


def deferred_tools(tools: AgentTools) -> list[Tool]:
    async def search(arguments: Mapping[str, Any]) -> ToolResult:
        query = str(arguments.get("query", ""))
        needle = query.lower()
        found = [
            {"name": name, "description": tool.spec.description}
            for name, tool in tools.deferred.items()
            if needle in name.lower() or needle in tool.spec.description.lower()
        ]
        if not found:
            return error(f"No deferred tools found matching '{query}'")
        return ToolResult(f"Found {len(found)} deferred tool(s):\n{json.dumps(found)}")

    async def add(arguments: Mapping[str, Any]) -> ToolResult:
        name = str(arguments.get("name", ""))
        if name in tools.tools:
            return ToolResult(f"Tool '{name}' is already active")
        tool = tools.activate(name)
        if tool is None:
            return error(f"Tool '{name}' not found.")
        return ToolResult(
            f"Tool '{name}' has been activated and is now available for use.\n\n"
            f"Description: {tool.spec.description}"
        )

    read_only = ToolAnnotations(read_only=True)
    return [
        FunctionTool(SEARCH_SPEC, search, read_only, "deferred"),
        FunctionTool(ADD_SPEC, add, read_only, "deferred"),
    ]
