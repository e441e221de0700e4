"""Tools an agent can call, and the registry that builds them from an agent's ``toolsets``.

A :class:`Tool` has a :class:`ToolSpec` (what the model sees), says whether a call needs the
user's confirmation by default, and runs with the call's decoded JSON arguments. Toolset types
map to builders in :data:`TOOLSET_BUILDERS`; types without a builder yet are reported, not fatal.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

import attrs

from ._config import AgentConfig, ToolsetConfig
from .providers._base import ToolSpec


@attrs.frozen
class ToolResult:
    output: str
    is_error: bool = False


class Tool(Protocol):
    @property
    def spec(self) -> ToolSpec: ...

    @property
    def needs_confirmation(self) -> bool:
        """Whether a call waits for the user's approval unless permissions say otherwise."""

    async def call(self, arguments: Mapping[str, Any]) -> ToolResult:
        """Run the tool; raise or return an error result when it fails."""


ToolHandler = Callable[[Mapping[str, Any]], Awaitable[ToolResult | str]]


@attrs.frozen
class FunctionTool:
    """A tool backed by an async function returning the output (or a :class:`ToolResult`)."""

    spec: ToolSpec
    handler: ToolHandler
    needs_confirmation: bool = False

    async def call(self, arguments: Mapping[str, Any]) -> ToolResult:
        result = await self.handler(arguments)
        return result if isinstance(result, ToolResult) else ToolResult(result)


def tool_definition(spec: ToolSpec) -> dict[str, Any]:
    """The JSON ``tool_definition`` carried by tool events."""
    return {"name": spec.name, "description": spec.description, "parameters": dict(spec.parameters)}


# --- think -------------------------------------------------------------------------------------

THINK_SPEC = ToolSpec(
    name="think",
    description=(
        "Think something through: plan the next steps, weigh options or check an answer. "
        "Nothing is looked up or changed; the thought is only noted down."
    ),
    parameters={
        "type": "object",
        "properties": {"thought": {"type": "string", "description": "The thought to note."}},
        "required": ["thought"],
    },
)


async def _think(arguments: Mapping[str, Any]) -> ToolResult:
    thought = arguments.get("thought")
    if not isinstance(thought, str) or not thought.strip():
        return ToolResult("think needs a non-empty 'thought' string", is_error=True)
    return ToolResult("Thought noted.")


def _think_toolset(_: ToolsetConfig) -> list[Tool]:
    return [FunctionTool(THINK_SPEC, _think)]


ToolsetBuilder = Callable[[ToolsetConfig], Sequence[Tool]]

TOOLSET_BUILDERS: dict[str, ToolsetBuilder] = {"think": _think_toolset}
"""Toolset ``type`` → builder. Later toolsets (shell, filesystem, mcp, ...) register here."""


@attrs.frozen
class AgentTools:
    """The tools of one agent by name, and the toolsets that could not be built."""

    tools: Mapping[str, Tool]
    unavailable: tuple[str, ...] = ()

    @property
    def specs(self) -> tuple[ToolSpec, ...]:
        return tuple(tool.spec for tool in self.tools.values())


def build_tools(
    toolsets: Iterable[ToolsetConfig], builders: Mapping[str, ToolsetBuilder] | None = None
) -> AgentTools:
    """The tools of ``toolsets``; a type without a builder lands in ``unavailable``."""
    table = TOOLSET_BUILDERS if builders is None else builders
    tools: dict[str, Tool] = {}
    unavailable: list[str] = []
    for toolset in toolsets:
        builder = table.get(toolset.type)
        if builder is None:
            unavailable.append(toolset.type)
            continue
        for tool in builder(toolset):
            tools.setdefault(tool.spec.name, tool)
    return AgentTools(tools, tuple(unavailable))


ToolsFor = Callable[[AgentConfig], AgentTools]
"""How a runtime gets an agent's tools (tests and embedders can add their own)."""


def default_tools_for(agent: AgentConfig) -> AgentTools:
    return build_tools(agent.toolsets)
