"""``background_agents``: run a sub-agent on a task in the background, and list, read and stop
such tasks (spec §4.3). The runtime runs them (``_background.py``).

The toolset is registered in ``TOOLSET_BUILDERS`` like the built-in ones, but lives beside the
runtime, not in ``tools/``: its tools run with the calling :class:`Frame` and drive the host's
:class:`BackgroundAgents`, which the tools layer does not know (``_local.py`` imports this module,
so the builder is registered whenever the runtime is).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from ._background import BackgroundAgents
from ._config import ToolsetConfig
from ._frame import Frame, FrameTool
from .providers._base import ToolSpec
from .tools._base import ToolAnnotations, ToolContext, ToolResult, error, schema, string
from .tools._registry import Toolset, register

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


@runtime_checkable
class RunsBackgroundAgents(Protocol):
    """A tool host that runs background agent tasks (``LocalRuntime``)."""

    background: BackgroundAgents


@register("background_agents")
def background_agents_toolset(_: ToolsetConfig, ctx: ToolContext) -> Toolset:
    def manager() -> BackgroundAgents | None:
        host: object = ctx.host  # a ToolHost, which may also run background agents
        return host.background if isinstance(host, RunsBackgroundAgents) else None

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
