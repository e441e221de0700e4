"""LocalRuntime: runs the turns of one session with the agents of one agent file.

The loop itself is in ``_loop.py``; delegation (``transfer_task``, ``handoff``) in
``_delegation.py``; background agent tasks in ``_background.py``. This class owns what those
share: the current agent, the models, each agent's tools, the steer and follow-up queues, the
one pending confirmation, the pending elicitations, and the runtime's *services*.

Services are long-lived tasks the runtime runs on behalf of its session — MCP server
connections and background agent tasks. They are children of :meth:`LocalRuntime.serve`, which
the session actor runs as its own child (so they outlive a turn but never the session), and
they stop when it is cancelled. At the start of ``serve`` the starting agent's MCP servers are
started, so a session's runtime is *built* only once they answered (or failed, or timed out).
"""

from __future__ import annotations

import datetime as dt
import logging
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import attrs
import trio

from greenroom.domain import AgentInfo, Event, ToolCall, utcnow
from greenroom.errors import AgentNotFound

from . import _background_tools  # noqa: F401  (registers the background_agents builder)
from ._background import BackgroundAgents
from ._config import AgentConfig, AgentFile, ToolsetConfig
from ._confirm import Confirmations
from ._delegation import Delegation
from ._elicitation import ElicitationAnswer, Elicitations
from ._environment import prompt_context
from ._frame import AgentSlot, Frame
from ._loop import INTERRUPTED_NOTE, AgentLoop, Notices, failed_toolsets
from ._models import ModelTable, ProviderFor
from ._queue import MessageQueue
from ._runtime import (
    Command,
    CurrentAgent,
    ElicitationSink,
    ModelChoice,
    QueuedMessage,
    QueueStatus,
    RecallHandler,
    ResumeRequest,
    TurnIO,
)
from ._toolcalls import ToolCalls
from .providers._base import ModelConfig
from .tools import AgentTools, ToolContext, ToolResult, ToolsFor, default_tools_for
from .tools._base import ServicesUnavailable
from .tools._registry import Toolset

log = logging.getLogger(__name__)

STEER_CAPACITY = 16
FOLLOWUP_CAPACITY = 16
SERVICES_STOP_BUDGET = 10.0
"""Seconds the services get to stop (MCP servers are closed, then killed)."""

__all__ = ["INTERRUPTED_NOTE", "LocalRuntime"]


class LocalRuntime:
    """Runs the turns of one session with the agents of one agent file.

    Args:
        config: the parsed agent file.
        provider_for: makes the provider of a model (cached per model here).
        agent: the starting agent ("" = ``root``, else the first declared).
        auto_model: what the ``auto`` model ref stands for (None: ``auto`` cannot be used).
        tools_for: the tools of an agent (default: built from its ``toolsets``).
        tool_context: where the tools work (working and data directory, environment).
        confirmation_timeout: seconds a tool confirmation waits before it is rejected
            (None: it waits until answered or the turn ends).
        custom_models: custom ``provider/model`` refs used before (listed by available_models).
        today: the date for agents with ``add_date``.
        now: the clock approvals are stamped and expired with.
        rng: draws a model from an alloy at each turn (default: a fresh ``random.Random``).

    Raises:
        AgentNotFound: ``agent`` is not in the file.
    """

    mirrors_elicitation_on_run_stream = True

    def __init__(
        self,
        config: AgentFile,
        *,
        provider_for: ProviderFor,
        agent: str = "",
        auto_model: ModelConfig | None = None,
        tools_for: ToolsFor = default_tools_for,
        tool_context: ToolContext | None = None,
        confirmation_timeout: float | None = None,
        custom_models: Iterable[str] = (),
        steer_capacity: int = STEER_CAPACITY,
        followup_capacity: int = FOLLOWUP_CAPACITY,
        today: Callable[[], dt.date] = dt.date.today,
        now: Callable[[], dt.datetime] = utcnow,
        rng: random.Random | None = None,
    ) -> None:
        self._config = config
        self._slot = AgentSlot(config.agent(agent))
        self._models = ModelTable(
            config, provider_for, auto=auto_model, custom_models=custom_models, rng=rng
        )
        self._tools_for = tools_for
        self._tool_context = tool_context if tool_context is not None else ToolContext()
        self._tools: dict[str, AgentTools] = {}
        self._steers = MessageQueue("steer", steer_capacity)
        self._followups = MessageQueue("follow-up", followup_capacity)
        self._confirmations = Confirmations()
        self._elicitations = Elicitations()
        self._notices = Notices()
        self._loop = AgentLoop(
            agents=config.agents,
            models=self._models,
            tools_of=self._tools_of,
            tool_calls=ToolCalls(
                self._confirmations, config.permissions, confirmation_timeout, now
            ),
            steers=self._steers,
            followups=self._followups,
            notices=self._notices,
            today=today,
            prompt_context=self._prompt_context,
        )
        self._delegation = Delegation(config.agents, self._models, self._loop.run)
        self.background = BackgroundAgents(
            config.agents, self._loop.run, self.start_service, lambda: self._recall
        )
        self._recall: RecallHandler | None = None
        self._services: trio.Nursery | None = None
        self._io: TurnIO | None = None
        self._closed = False

    @property
    def _agent(self) -> AgentConfig:
        return self._slot.agent

    async def _prompt_context(self, agent: AgentConfig) -> list[str]:
        if not (agent.add_environment_info or agent.add_prompt_files):
            return []
        return await prompt_context(
            self._tool_context.working_dir,
            environment=agent.add_environment_info,
            prompt_files=agent.add_prompt_files,
            today=self._loop.today(),
        )

    # --- services ------------------------------------------------------------------------

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the runtime's services until cancelled (see the module docstring).

        Reports started once the starting agent's MCP servers answered, failed or timed out;
        their warnings are shown at the start of the first turn.
        """
        try:
            async with trio.open_nursery() as nursery:
                self._services = nursery
                warnings = await self._tools_of(self._agent).start_live()
                self._tools_of(self._agent).refresh()
                if warnings:
                    self._notices.notify(failed_toolsets(self._agent.name, warnings))
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._services = None

    def start_service(self, fn: Callable[[], Awaitable[None]]) -> None:
        """Run ``fn`` as a service. Raises ServicesUnavailable when not served."""
        if self._services is None:
            raise ServicesUnavailable("the runtime is not served")
        self._services.start_soon(fn)

    def notify(self, event: Event) -> None:
        """An event from outside any tool call: for the running turn, else the event log."""
        self._notices.notify(event)

    @property
    def busy(self) -> bool:
        """Whether a background task still runs (the session must stay live)."""
        return self.background.running > 0

    def set_recall_handler(self, handler: RecallHandler | None) -> None:
        self._recall = handler

    # --- the run stream ----------------------------------------------------------------------

    async def run_stream(self, io: TurnIO) -> None:
        """Run one turn plus queued follow-ups, reporting through ``io``; see ``_loop.py``."""
        if self._closed:
            raise RuntimeError("the runtime is closed")
        if self._io is not None:
            raise RuntimeError("a turn is already running on this runtime")
        self._io = io
        self._models.begin_turn()
        self._notices.turn_running = True
        try:
            for asked in self._elicitations.pending_events():
                await io.emit(asked)  # asked before this turn: show it on this stream too
            await self._loop.run(Frame(io, self._slot))
        finally:
            self._io = None
            self._notices.turn_running = False
            for event in self._notices.drain():
                self._notices.notify(event)

    # --- queues, confirmations, elicitations ---------------------------------------------------

    async def steer(self, message: QueuedMessage) -> None:
        """Queue ``message`` for the next model call. Raises QueueFull."""
        self._steers.put(message)

    async def follow_up(self, message: QueuedMessage) -> None:
        """Queue ``message`` for the end of the turn. Raises QueueFull."""
        self._followups.put(message)

    def queue_status(self) -> QueueStatus:
        return QueueStatus(
            steer_depth=self._steers.depth,
            steer_capacity=self._steers.capacity,
            followup_depth=self._followups.depth,
            followup_capacity=self._followups.capacity,
        )

    async def resume(self, request: ResumeRequest) -> None:
        """Answer the pending tool confirmation. Raises NoPendingRequest when there is none."""
        self._confirmations.answer(request)

    def on_elicitation_request(self, sink: ElicitationSink | None) -> None:
        self._elicitations.set_sink(sink)
        self._notices.sink = sink

    async def resume_elicitation(
        self, action: str, content: Mapping[str, Any] | None, elicitation_id: str = ""
    ) -> None:
        self._elicitations.answer(action, content, elicitation_id)

    async def elicit(
        self,
        message: str,
        *,
        schema: Any = None,
        meta: Mapping[str, Any] | None = None,
        mode: str = "form",
        url: str = "",
    ) -> ElicitationAnswer:
        """Ask the user for input (for tools): via the sink, and on the run stream if any."""
        io = self._io
        return await self._elicitations.request(
            message,
            session_id=io.session.id if io is not None else "",
            schema=schema,
            mode=mode,
            url=url,
            meta=dict(meta) if meta else None,
            emit=io.emit if io is not None else None,
        )

    # --- the model picker of this runtime's tools --------------------------------------------

    async def change_model(self, ref: str) -> str:
        """The model picker: use ``ref`` for the current agent (this runtime only)."""
        await self.set_agent_model(self._agent.name, ref)
        await self._announce_model()
        return self._models.model_of(self._agent).ref

    async def revert_model(self) -> None:
        await self.set_agent_model(self._agent.name, "")
        await self._announce_model()

    async def _announce_model(self) -> None:
        io, agent = self._io, self._agent
        if io is not None:
            model = self._models.model_of(agent)
            info = AgentInfo(
                agent_name=agent.name,
                model=model.ref,
                description=agent.description,
                welcome_message=agent.welcome_message,
            )
            await io.emit(info)

    # --- agents and models ---------------------------------------------------------------------

    def current_agent(self) -> CurrentAgent:
        agent = self._agent
        commands: dict[str, Command] = dict(agent.commands)
        return CurrentAgent(name=agent.name, description=agent.description, commands=commands)

    async def set_current_agent(self, name: str) -> None:
        """Switch to agent ``name``. Raises AgentNotFound."""
        if name not in self._config.agents:
            raise AgentNotFound(f"agent not found: {name}")
        self._slot.agent = self._config.agents[name]

    def supports_model_switching(self) -> bool:
        return True

    async def set_agent_model(self, agent: str, ref: str) -> None:
        """Use model ``ref`` (a models name, ``auto`` or ``provider/model``) for ``agent``.

        An empty ``ref`` restores the agent's own model.

        Raises:
            AgentNotFound: no such agent.
            InvalidRequest: ``ref`` names no model.
        """
        if agent not in self._config.agents:
            raise AgentNotFound(f"agent not found: {agent}")
        self._models.set(agent, ref)

    async def available_models(self) -> list[ModelChoice]:
        """The models of the file, the agent's own, and custom refs; one of them is current."""
        return self._models.choices(self._agent)

    def title_models(self) -> list[ModelConfig]:
        """Models for titles: the current agent's model's ``title_model`` (if any), then it."""
        return self._models.title_models(self._agent)

    async def rerun_tool(self, call: ToolCall, agent_name: str) -> ToolResult:
        """Run ``call`` again after a crash left it in doubt and a person chose ``rerun`` (that
        decision stands for the approval). The caller has recorded the intent. A delegation
        tool (``transfer_task``, ...) cannot run outside a turn: its rerun is a tool error."""
        agent = self._config.agents.get(agent_name, self._agent)
        return await self._loop.tool_calls.rerun(self._tools_of(agent), call)

    @property
    def tool_context(self) -> ToolContext:
        """What this runtime's tools are given (working directory, environment, ...)."""
        return self._tool_context

    def tools_of(self, agent: AgentConfig | None = None) -> AgentTools:
        """The tools ``agent`` (by default the current one) is offered, built on first use."""
        return self._tools_of(agent or self._agent)

    def _tools_of(self, agent: AgentConfig) -> AgentTools:
        tools = self._tools.get(agent.name)
        if tools is None:
            context = attrs.evolve(
                self._tool_context,
                agent_name=agent.name,
                agent_file=self._tool_context.agent_file or self._config.path,
                host=self,
            )
            tools = self._tools[agent.name] = self._tools_for(agent, context)
            delegation = self._delegation.tools_for(agent)
            if delegation:
                tools.add(ToolsetConfig(type="delegation"), Toolset(list(delegation)))
        return tools

    async def aclose(self) -> None:
        """Refuse further turns, decline waiting confirmations and elicitations."""
        self._closed = True
        self._confirmations.close()
        self._elicitations.close()
        for tools in self._tools.values():
            tools.close()
        await self._models.aclose()
