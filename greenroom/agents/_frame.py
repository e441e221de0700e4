"""A frame: one agent loop running on one session.

The root turn of a session is a frame; so is each sub-session a ``transfer_task`` runs (nested
inside the parent's tool call) and each background agent task (a service of the runtime). A
frame knows its :class:`~greenroom.agents.TurnIO`, the agent it runs now (its :class:`AgentSlot`;
the root frame shares the runtime's, so a handoff or transfer shows in the session's status), how
deep it is nested, and what the model streamed that is not stored yet.

Tools the runtime manages (delegation) get the frame of the loop that called them
(:class:`FrameTool`); ordinary tools get only their arguments.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, runtime_checkable

import attrs

from greenroom.domain import ToolCall

from ._config import AgentConfig
from ._runtime import TurnIO
from .providers._base import ToolSpec
from .tools._base import ToolAnnotations, ToolResult, error


@attrs.define(eq=False)
class AgentSlot:
    """The agent a loop runs now (changed by a handoff, or for the span of a transfer)."""

    agent: AgentConfig


@attrs.define(eq=False)
class Frame:
    """One agent loop on one session (see the module docstring).

    Args:
        io: where the loop reports (the actor's turn, a sub-session's record, a background
            task's record).
        slot: the agent it runs now.
        depth: 0 for a session's own turn, +1 per nested sub-session.
        root: the session's own turn (it takes steer and follow-up messages).
        task_prompt: added to the system prompt (a sub-session's task).
        background: a background agent task (its tool calls never ask: see decision 0006).
    """

    io: TurnIO
    slot: AgentSlot
    depth: int = 0
    root: bool = True
    task_prompt: str = ""
    background: bool = False
    agent_name: str = ""  # the agent of the model call in flight
    text: list[str] = attrs.field(factory=list)
    reasoning: list[str] = attrs.field(factory=list)
    open_calls: list[ToolCall] = attrs.field(factory=list)
    prepared: set[str] = attrs.field(factory=set)  # agents whose live toolsets this turn read

    @property
    def agent(self) -> AgentConfig:
        return self.slot.agent


@runtime_checkable
class ManagedTool(Protocol):
    """A tool the runtime runs with the frame of the loop that called it."""

    async def call_in(self, frame: Frame, arguments: Mapping[str, Any]) -> ToolResult: ...


FrameHandler = Callable[[Frame, Mapping[str, Any]], Awaitable[ToolResult]]


@attrs.frozen
class FrameTool:
    """A :class:`ManagedTool` backed by an async function of the frame and the arguments."""

    spec: ToolSpec
    handler: FrameHandler
    annotations: ToolAnnotations = attrs.field(factory=ToolAnnotations)
    category: str = ""

    async def call(self, arguments: Mapping[str, Any]) -> ToolResult:
        del arguments
        return error(f"{self.spec.name} can only run inside an agent's turn")

    async def call_in(self, frame: Frame, arguments: Mapping[str, Any]) -> ToolResult:
        return await self.handler(frame, arguments)
