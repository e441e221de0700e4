"""Scripted agents for tests: what the model says, turn by turn, and tools written in Python.

A :class:`ScriptedAgent` becomes a real agent file whose model is greenroom's ``scripted``
provider, so the server under test runs its real agent loop: tool calls, confirmations,
elicitations, steer and follow-up queues, titles, the event log.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from greenroom.agents import ElicitationAnswer, ToolResult
from greenroom.agents.providers import script_from_data
from greenroom.agents.tools import ToolHost


@attrs.define
class ToolCallContext:
    """What a test tool gets: the call's arguments and a way to ask the user."""

    arguments: Mapping[str, Any]
    _host: ToolHost | None = None

    async def elicit(
        self, message: str, schema: Mapping[str, Any] | None = None
    ) -> ElicitationAnswer:
        """Ask the user (an ``elicitation_request`` event) and wait for the answer."""
        if self._host is None:
            raise RuntimeError("no runtime to elicit through")
        return await self._host.elicit(message, schema=dict(schema) if schema else None)


ToolHandler = Callable[[ToolCallContext], Awaitable[str | ToolResult]]


async def _ok(ctx: ToolCallContext) -> str:
    return "ok"


@attrs.frozen
class Tool:
    """A tool of a scripted agent.

    Args:
        name: the name the script's ``tool_call`` steps use.
        handler: ``async def handler(ctx) -> str``; ``ctx.arguments`` are the call's
            arguments and ``await ctx.elicit(message, schema)`` asks the user.
        confirm: the call waits for the user's approval (``tool_call_confirmation``).
        description, parameters: what the model would see (JSON schema).
    """

    name: str
    handler: ToolHandler = _ok
    confirm: bool = False
    description: str = ""
    parameters: Mapping[str, Any] = attrs.field(
        factory=lambda: {"type": "object", "properties": {}}
    )


@attrs.frozen
class ScriptedAgent:
    """An agent whose model replays ``turns``, one per model call.

    Args:
        turns: the scripted model's turns, in the format of
            :mod:`greenroom.agents.providers._scripted` (a string is one text reply; a list
            holds steps such as ``{"text": ...}``, ``{"reasoning": ...}``,
            ``{"tool_call": {"name": ..., "arguments": {...}}}``, ``{"delay": 1.5}``,
            ``{"error": "rate_limited"}``, ``{"usage": {...}}``). A turn that calls a tool is
            followed by the next turn once the tool answered.
        tools: Python tools the script may call.
        toolsets: built-in toolsets (``think``).
        loop: start the script over when the turns run out (else the model call fails).
        title: the title generated for new sessions.
        name, description, instruction, welcome_message, max_iterations: the agent's own
            fields (``max_iterations`` 0: the agent file's default).
    """

    turns: Sequence[Any]
    tools: Sequence[Tool] = ()
    toolsets: Sequence[str] = ()
    loop: bool = False
    title: str = "Scripted session"
    name: str = "root"
    description: str = "A scripted test agent"
    instruction: str = "You are a test agent."
    welcome_message: str = ""
    max_iterations: int = 0

    def write(self, directory: Path, source: str) -> Path:
        """Write the agent file ``<source>.yaml`` and its scripts into ``directory``.

        Raises:
            InvalidRequest: a turn is not valid script (the error names the entry).
        """
        script = {"turns": list(self.turns), "loop": self.loop}
        script_from_data(script, source=f"{source} script")  # fail here, not in a turn
        (directory / f"{source}.script.json").write_text(json.dumps(script))
        titles = {"turns": [self.title or "Scripted session"], "loop": True}
        (directory / f"{source}.titles.json").write_text(json.dumps(titles))
        agent: dict[str, Any] = {
            "model": "main",
            "description": self.description,
            "instruction": self.instruction,
        }
        if self.welcome_message:
            agent["welcome_message"] = self.welcome_message
        if self.max_iterations:
            agent["max_iterations"] = self.max_iterations
        if self.toolsets:
            agent["toolsets"] = [{"type": kind} for kind in self.toolsets]
        config = {
            "version": "2",
            "agents": {self.name: agent},
            "models": {
                "main": {
                    "provider": "scripted",
                    "model": f"{source}.script.json",
                    "title_model": "titles",
                },
                "titles": {"provider": "scripted", "model": f"{source}.titles.json"},
            },
        }
        path = directory / f"{source}.yaml"
        path.write_text(json.dumps(config, indent=2))  # JSON is YAML
        return path
