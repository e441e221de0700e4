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

from greenroom.domain import AgentInfo, Event, ToolCall, Warning, utcnow
from greenroom.errors import AgentNotFound

from . import _background_tools  # noqa: F401  (registers the background_agents builder)
from ._background import BackgroundAgents
from ._codemode import code_mode
from ._config import AgentConfig, AgentFile, ToolsetConfig
from ._confirm import Confirmations
from ._delegation import Delegation
from ._elicitation import ElicitationAnswer, Elicitations
from ._environment import prompt_context
from ._frame import AgentSlot, Frame
from ._hooks import Hooks, failure_warning
from ._js_sandbox import Limits
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
from .tools._environment import scrubbed
from .tools._registry import Toolset

log = logging.getLogger(__name__)

STEER_CAPACITY = 16
FOLLOWUP_CAPACITY = 16
SERVICES_STOP_BUDGET = 10.0
"""Seconds the services get to stop (MCP servers are closed, then killed)."""
SESSION_END_BUDGET = 10.0
"""Seconds the ``session_end`` hooks get when the runtime closes (each within its timeout)."""

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
        code_mode_limits: what a code-mode script may use (default: ``Limits()``).

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
        max_session_cost: float = 0.0,
        code_mode_limits: Limits | None = None,
    ) -> None:
        self._config = config
        self._slot = AgentSlot(config.agent(agent))
        self._models = ModelTable(
            config, provider_for, auto=auto_model, custom_models=custom_models, rng=rng
        )
        self._tools_for = tools_for
        self._tool_context = tool_context if tool_context is not None else ToolContext()
        self._tools: dict[str, AgentTools] = {}
        self._code_mode_limits = code_mode_limits
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
                self._confirmations,
                config.permissions,
                confirmation_timeout,
                now,
                hooks_of=self._hooks_of,
            ),
            steers=self._steers,
            followups=self._followups,
            notices=self._notices,
            today=today,
            max_session_cost=max_session_cost,
            prompt_context=self._prompt_context,
        )
        self._delegation = Delegation(config.agents, self._models, self._loop.run)
        self.background = BackgroundAgents(
            config.agents, self._loop.run, self.start_service, lambda: self._recall
        )
        self._recall: RecallHandler | None = None
        self._hooks: dict[str, Hooks | None] = {}
        self._session_id = ""
        self._started = False
        self._start_context = ""
        self._services: trio.Nursery | None = None
        self._io: TurnIO | None = None
        self._closed = False

    @property
    def _agent(self) -> AgentConfig:
        return self._slot.agent

    async def _prompt_context(self, agent: AgentConfig) -> list[str]:
        start = [self._start_context] if self._start_context else []
        if not (agent.add_environment_info or agent.add_prompt_files):
            return start
        parts = await prompt_context(
            self._tool_context.working_dir,
            environment=agent.add_environment_info,
            prompt_files=agent.add_prompt_files,
            today=self._loop.today(),
        )
        return parts + start

    # --- hooks ---------------------------------------------------------------------------------

    def _hooks_of(self, agent_name: str) -> Hooks | None:
        if agent_name not in self._hooks:
            agent = self._config.agents.get(agent_name)
            config = agent.hooks if agent is not None else None
            ctx = self._tool_context
            self._hooks[agent_name] = (
                Hooks(
                    config,
                    ctx.working_dir,
                    scrubbed(ctx.env, ctx.secret_env),
                    processes=ctx.processes,
                    file_permissions=self._config.permissions,
                )
                if config is not None
                else None
            )
        return self._hooks[agent_name]

    async def _user_input_hooks(self, io: TurnIO | None) -> None:
        """``on_user_input``: the user is asked something, or the turn is over."""
        hooks = self._hooks_of(self._agent.name)
        if hooks is None or not hooks.has("on_user_input"):
            return
        perms = io.session.permissions if io is not None else None
        outcome = await hooks.run(
            "on_user_input", {"session_id": self._session_id}, permissions=perms
        )
        await self._hook_warnings(io, failure_warning(outcome))

    async def _session_start_hooks(self, io: TurnIO) -> None:
        """``session_start`` before the runtime's first turn; its context joins the prompt."""
        self._started = True
        hooks = self._hooks_of(self._agent.name)
        if hooks is None or not hooks.has("session_start"):
            return
        source = "resume" if len(io.session.items) > 1 else "startup"
        fields = {"session_id": io.session.id, "source": source}
        outcome = await hooks.run("session_start", fields, permissions=io.session.permissions)
        self._start_context = outcome.additional_context
        await self._hook_warnings(io, outcome.system_message, failure_warning(outcome))

    async def _hook_warnings(self, io: TurnIO | None, *texts: str) -> None:
        for text in texts:
            if not text:
                continue
            log.warning("session %s: %s", self._session_id, text)
            if io is not None:
                await io.emit(Warning(message=text, agent_name=self._agent.name))

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
        self._session_id = io.session.id
        self._models.begin_turn()
        self._notices.turn_running = True
        try:
            for asked in self._elicitations.pending_events():
                await io.emit(asked)  # asked before this turn: show it on this stream too
            if not self._started:
                await self._session_start_hooks(io)
            await self._loop.run(Frame(io, self._slot))
            await self._user_input_hooks(io)
        finally:
            self._io = None
            self._notices.turn_running = False
            for event in self._notices.drain():
                self._notices.notify(event)

    async def compact(self, io: TurnIO, additional: str = "") -> None:
        """Compact the session's history now, between turns (``POST .../compact``)."""
        if self._io is not None:
            raise RuntimeError("a turn is running on this runtime")
        self._io = io
        self._models.begin_turn()
        try:
            await self._loop.compact(Frame(io, self._slot), additional=additional)
        finally:
            self._io = None

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
        await self._user_input_hooks(io)
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
            if agent.code_mode_tools:
                ledger = self._tool_context.processes
                calls = self._loop.tool_calls
                tools.wrap_in_code_mode(code_mode(calls, self._code_mode_limits, ledger))
        return tools

    async def aclose(self) -> None:
        """Refuse further turns, decline waiting confirmations and elicitations; run the
        ``session_end`` hooks (shielded, at most :data:`SESSION_END_BUDGET` seconds)."""
        if not self._closed and self._started:
            hooks = self._hooks_of(self._agent.name)
            if hooks is not None and hooks.has("session_end"):
                with trio.move_on_after(SESSION_END_BUDGET, shield=True):
                    fields = {"session_id": self._session_id, "reason": "other"}
                    outcome = await hooks.run("session_end", fields)
                    await self._hook_warnings(None, failure_warning(outcome))
        self._closed = True
        self._confirmations.close()
        self._elicitations.close()
        for tools in self._tools.values():
            tools.close()
        await self._models.aclose()
