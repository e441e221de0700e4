"""``background_agents``: run a sub-agent on a task in the background, and list, read and stop
such tasks (spec §4.3). The runtime runs them (``agents/_background.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._config import ToolsetConfig
from ..providers._base import ToolSpec
from ._base import ToolAnnotations, ToolContext, ToolResult, error, schema, string
from ._registry import Toolset, register

if TYPE_CHECKING:
    from .._background import BackgroundAgents
    from .._frame import Frame

INSTRUCTIONS = (
    "## Background agents\n\n"
    "run_background_agent starts one of your sub-agents on a task and returns at once with a "
    "task ID; keep working meanwhile. When the task finishes you are told its result. Use "
    "list_background_agents and view_background_agent to check on tasks, and "
    "stop_background_agent to end one."
)
TASK_ID = {"task_id": string("The ID of the background agent task")}
SPECS = {
    "run_background_agent": ToolSpec(
        "run_background_agent",
        "Start a sub-agent on a task in the background; returns the task's ID at once.",
        schema(
            {
                "agent": string("The name of the sub-agent to run"),
                "task": string("A clear and concise description of the task"),
                "expected_output": string("The expected output (optional)"),
            },
            ("agent", "task"),
        ),
    ),
    "list_background_agents": ToolSpec(
        "list_background_agents", "List the background agent tasks and their status.", schema({})
    ),
    "view_background_agent": ToolSpec(
        "view_background_agent",
        "Show a background agent task's status and its output so far.",
        schema(TASK_ID, ("task_id",)),
    ),
    "stop_background_agent": ToolSpec(
        "stop_background_agent",
        "Stop a running background agent task.",
        schema(TASK_ID, ("task_id",)),
    ),
}
TITLES = {
    "run_background_agent": ("Run Background Agent", False),
    "list_background_agents": ("List Background Agents", True),
    "view_background_agent": ("View Background Agent", True),
    "stop_background_agent": ("Stop Background Agent", False),
}


@register("background_agents")
def background_agents_toolset(_: ToolsetConfig, ctx: ToolContext) -> Toolset:
    from .._frame import FrameTool  # not at import time: _frame imports this package

    def manager() -> BackgroundAgents | None:
        return getattr(ctx.host, "background", None)

    async def handle(name: str, frame: Frame, args: Mapping[str, Any]) -> ToolResult:
        agents = manager()
        if agents is None:
            return error(f"{name} needs a runtime that runs background agents")
        if name == "run_background_agent":
            return await agents.start(frame, args)
        if name == "list_background_agents":
            return agents.list()
        if name == "view_background_agent":
            return agents.view(str(args.get("task_id", "")))
        return agents.stop(str(args.get("task_id", "")))

    def bound(name: str) -> Any:
        async def call(frame: Frame, args: Mapping[str, Any]) -> ToolResult:
            return await handle(name, frame, args)

        return call

    tools = [
        FrameTool(
            spec,
            bound(name),
            ToolAnnotations(title=TITLES[name][0], read_only=TITLES[name][1]),
            "transfer",
        )
        for name, spec in SPECS.items()
    ]
    return Toolset(list(tools), INSTRUCTIONS)
