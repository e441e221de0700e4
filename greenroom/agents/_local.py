"""LocalRuntime: the agent loop over an agent file, one model call and its tool calls at a time.

A turn: ``stream_started`` → model call (deltas streamed as ``agent_choice`` events) → assistant
message stored → ``token_usage`` → each tool call (``tool_call``, maybe a confirmation, the result
stored, ``tool_call_response``) → the next model call, until the model stops calling tools or the
iteration limit is hit. Steer messages are taken before each model call; at the end of a turn one
follow-up is taken and starts the next turn in the same stream. ``stream_stopped`` ends it.

A failing model call ends the stream with an ``error`` event; the runtime stays usable. When the
stream is cancelled, what the model streamed so far is stored as an assistant message marked
:data:`INTERRUPTED_NOTE`, and tool calls left without a result get an error result, inside a
shielded scope bounded by :data:`SAVE_BUDGET` seconds.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs
import trio

from greenroom.domain import (
    AgentChoice,
    AgentChoiceReasoning,
    AgentInfo,
    ChatMessage,
    ErrorEvent,
    ErrorItem,
    MaxIterationsReached,
    Message,
    StreamStarted,
    StreamStopped,
    TokenUsage,
    TokenUsageInfo,
    ToolCall,
    UserMessage,
    Warning,
    utcnow,
)
from greenroom.errors import AgentNotFound, GreenroomError

from ._config import AgentConfig, AgentFile
from ._confirm import Confirmations
from ._elicitation import ElicitationAnswer, Elicitations
from ._models import ModelTable, ProviderFor
from ._prompt import build_messages
from ._queue import MessageQueue
from ._runtime import (
    Command,
    CurrentAgent,
    ElicitationSink,
    ModelChoice,
    QueuedMessage,
    QueueStatus,
    ResumeRequest,
    TurnIO,
)
from ._toolcalls import CANCELLED, ToolCalls
from .providers._base import (
    Delta,
    ModelConfig,
    ModelRequest,
    ModelResponse,
    TextDelta,
)
from .tools import AgentTools, ToolContext, ToolResult, ToolsFor, default_tools_for

log = logging.getLogger(__name__)

STEER_CAPACITY = 16
FOLLOWUP_CAPACITY = 16
SAVE_BUDGET = 5.0
"""Seconds a cancelled turn may spend storing what it streamed (shielded)."""
STOP_EVENT_BUDGET = 1.0
"""Seconds a cancelled turn may spend delivering its ``stream_stopped`` event (shielded)."""
INTERRUPTED_NOTE = "[response interrupted]"
INTERRUPTED_TOOL = CANCELLED


def _cancelled(exc: BaseException) -> bool:
    """``exc`` is a cancellation, alone or as a group of them (concurrent tool calls)."""
    if isinstance(exc, trio.Cancelled):
        return True
    return isinstance(exc, BaseExceptionGroup) and exc.split(trio.Cancelled)[1] is None


@attrs.define
class _Turn:
    """What is not stored yet: the streamed text of the call in flight, calls without results."""

    agent_name: str = ""
    text: list[str] = attrs.field(factory=list)
    reasoning: list[str] = attrs.field(factory=list)
    open_calls: list[ToolCall] = attrs.field(factory=list)


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
        self._agent = config.agent(agent)
        self._models = ModelTable(
            config, provider_for, auto=auto_model, custom_models=custom_models, rng=rng
        )
        self._tools_for = tools_for
        self._tool_context = tool_context if tool_context is not None else ToolContext()
        self._today = today
        self._tools: dict[str, AgentTools] = {}
        self._steers = MessageQueue("steer", steer_capacity)
        self._followups = MessageQueue("follow-up", followup_capacity)
        self._confirmations = Confirmations()
        self._tool_calls = ToolCalls(
            self._confirmations, config.permissions, confirmation_timeout, now
        )
        self._elicitations = Elicitations()
        self._io: TurnIO | None = None
        self._closed = False

    # --- the run stream ----------------------------------------------------------------------

    async def run_stream(self, io: TurnIO) -> None:
        """Run one turn plus queued follow-ups, reporting through ``io``; see the module doc."""
        if self._closed:
            raise RuntimeError("the runtime is closed")
        if self._io is not None:
            raise RuntimeError("a turn is already running on this runtime")
        self._io = io
        self._models.begin_turn()
        turn = _Turn(agent_name=self._agent.name)
        try:
            await io.emit(StreamStarted(session_id=io.session.id, agent_name=self._agent.name))
            reason = await self._run_turns(io, turn)
            await io.emit(self._stopped(io, reason))
        except BaseException as exc:
            if not _cancelled(exc):
                raise
            with trio.move_on_after(SAVE_BUDGET, shield=True):
                await self._save_interrupted(io, turn)
            with trio.move_on_after(STOP_EVENT_BUDGET, shield=True):
                await io.emit(self._stopped(io, "canceled"))
            raise
        finally:
            self._io = None

    def _stopped(self, io: TurnIO, reason: str) -> StreamStopped:
        return StreamStopped(session_id=io.session.id, agent_name=self._agent.name, reason=reason)

    async def _run_turns(self, io: TurnIO, turn: _Turn) -> str:
        try:
            await self._announce(io)
            while True:
                await self._run_turn(io, turn)
                follow_up = self._followups.pop()
                if follow_up is None:
                    return "normal"
                await self._add_user_message(io, follow_up)
        except GreenroomError as exc:
            await self._fail(io, turn, exc.message, exc.code)
        except Exception as exc:
            log.exception("turn of session %s failed", io.session.id)
            await self._fail(io, turn, str(exc) or type(exc).__name__, "internal_error")
        return "error"

    async def _announce(self, io: TurnIO) -> None:
        agent = self._agent
        model = self._models.model_of(agent)
        info = AgentInfo(
            agent_name=agent.name,
            model=model.ref,
            description=agent.description,
            welcome_message=agent.welcome_message,
        )
        await io.emit(info)
        tools = self._tools_of(agent)
        details = [
            f"toolset {kind} is not supported by greenroom yet" for kind in tools.unavailable
        ]
        details += tools.warnings
        if details:
            lines = "\n".join(f"- {d}" for d in details)
            text = (
                f"Some toolsets failed to initialize for agent '{agent.name}'."
                f"\n\nDetails:\n\n{lines}"
            )
            await io.emit(Warning(message=text, agent_name=agent.name))

    async def _start_toolsets(self, io: TurnIO) -> None:
        """Start toolsets that list their tools with I/O (retried until they start)."""
        agent = self._agent
        failed = await self._tools_of(agent).start()
        if failed:
            lines = "\n".join(f"- {d}" for d in failed)
            text = (
                f"Some toolsets failed to initialize for agent '{agent.name}'."
                f"\n\nDetails:\n\n{lines}"
            )
            await io.emit(Warning(message=text, agent_name=agent.name))

    async def _run_turn(self, io: TurnIO, turn: _Turn) -> None:
        """Model calls and tool calls until the model stops or the iteration limit is hit."""
        limit = io.session.max_iterations or self._agent.max_iterations
        iterations = 0
        while True:
            await self._take_steers(io)
            if limit and iterations >= limit:
                await io.emit(MaxIterationsReached(max_iterations=limit, session_id=io.session.id))
                return
            iterations += 1
            await self._start_toolsets(io)
            response = await self._call_model(io, turn)
            if response.tool_calls:
                await self._run_tools(io, turn, response.tool_calls)
            elif not self._steers.depth:
                return

    async def _take_steers(self, io: TurnIO) -> None:
        while (message := self._steers.pop()) is not None:
            await self._add_user_message(io, message)

    async def _add_user_message(self, io: TurnIO, queued: QueuedMessage) -> None:
        position = len(io.session.items)
        chat = ChatMessage(
            role="user",
            content=queued.content,
            multi_content=queued.multi_content,
            created_at=utcnow(),
        )
        await io.add_message(Message(chat))
        event = UserMessage(
            message=queued.content, session_id=io.session.id, session_position=position
        )
        await io.emit(event)

    async def _call_model(self, io: TurnIO, turn: _Turn) -> ModelResponse:
        agent = self._agent
        model = self._models.model_of(agent)
        session = io.session
        cap = session.max_tool_result_tokens or agent.max_tool_result_tokens
        tools = self._tools_of(agent)
        request = ModelRequest(
            model=model,
            messages=build_messages(
                session,
                agent,
                max_tool_result_tokens=cap,
                today=self._today(),
                instructions=tools.instructions,
            ),
            tools=tools.specs,
            max_tokens=model.max_tokens,
        )
        turn.agent_name = agent.name

        async def on_delta(delta: Delta) -> None:
            if isinstance(delta, TextDelta):
                turn.text.append(delta.text)
                await io.emit(AgentChoice(delta.text, agent.name, session.id))
            else:
                turn.reasoning.append(delta.text)
                await io.emit(AgentChoiceReasoning(delta.text, agent.name, session.id))

        response = await self._models.provider_of(agent).complete(request, on_delta)
        chat = ChatMessage(
            role="assistant",
            content=response.content or "".join(turn.text),
            reasoning_content=response.reasoning or "".join(turn.reasoning),
            tool_calls=response.tool_calls,
            usage=response.usage,
            model=response.model or model.ref,
            created_at=utcnow(),
        )
        if chat.content or chat.reasoning_content or chat.tool_calls:
            await io.add_message(Message(chat, agent_name=agent.name))
        turn.text.clear()
        turn.reasoning.clear()
        turn.open_calls = list(response.tool_calls)
        usage = response.usage
        io.add_usage(usage.input_tokens, usage.output_tokens, 0.0)
        totals = io.session
        info = TokenUsageInfo(
            input_tokens=totals.input_tokens,
            output_tokens=totals.output_tokens,
            context_length=usage.input_tokens + usage.output_tokens,
            cost=totals.cost,
        )
        await io.emit(TokenUsage(info, session_id=session.id, agent_name=agent.name))
        return response

    # --- tools ---------------------------------------------------------------------------------

    async def _run_tools(self, io: TurnIO, turn: _Turn, calls: tuple[ToolCall, ...]) -> None:
        agent = self._config.agents[turn.agent_name]
        await self._tool_calls.run_batch(
            io, agent.name, self._tools_of(agent), calls, turn.open_calls.remove
        )

    async def rerun_tool(self, call: ToolCall, agent_name: str) -> ToolResult:
        """Run ``call`` again after a crash left it in doubt and a person chose ``rerun`` (that
        decision stands for the approval). The caller has recorded the intent."""
        agent = self._config.agents.get(agent_name, self._agent)
        return await self._tool_calls.rerun(self._tools_of(agent), call)

    # --- failure and interruption ------------------------------------------------------------

    async def _fail(self, io: TurnIO, turn: _Turn, message: str, code: str) -> None:
        await self._save_interrupted(io, turn)
        agent_name = turn.agent_name or self._agent.name
        item = ErrorItem(message=message, code=code, agent_name=agent_name, created_at=utcnow())
        await io.add_error(item)
        event = ErrorEvent(
            error=message, code=code, session_id=io.session.id, agent_name=agent_name
        )
        await io.emit(event)

    async def _save_interrupted(self, io: TurnIO, turn: _Turn) -> None:
        """Store what the model streamed before the stop, and results for unanswered calls."""
        text, reasoning = "".join(turn.text), "".join(turn.reasoning)
        turn.text.clear()
        turn.reasoning.clear()
        if text or reasoning:
            content = f"{text}\n\n{INTERRUPTED_NOTE}" if text else INTERRUPTED_NOTE
            chat = ChatMessage(
                role="assistant", content=content, reasoning_content=reasoning, created_at=utcnow()
            )
            await io.add_message(Message(chat, agent_name=turn.agent_name))
        calls, turn.open_calls = turn.open_calls, []
        for call in calls:
            chat = ChatMessage(
                role="tool",
                content=INTERRUPTED_TOOL,
                tool_call_id=call.id,
                is_error=True,
                created_at=utcnow(),
            )
            await io.add_message(Message(chat, agent_name=turn.agent_name))

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

    async def resume_elicitation(
        self, action: str, content: Mapping[str, Any] | None, elicitation_id: str = ""
    ) -> None:
        self._elicitations.answer(action, content, elicitation_id)

    async def elicit(
        self, message: str, *, schema: Any = None, meta: Mapping[str, Any] | None = None
    ) -> ElicitationAnswer:
        """Ask the user for input (for tools): via the sink, and on the run stream if any."""
        io = self._io
        return await self._elicitations.request(
            message,
            session_id=io.session.id if io is not None else "",
            schema=schema,
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
            info = AgentInfo(agent_name=agent.name, model=model.ref, description=agent.description)
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
        self._agent = self._config.agents[name]

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
        return tools

    async def aclose(self) -> None:
        """Refuse further turns, decline waiting confirmations and elicitations."""
        self._closed = True
        self._confirmations.close()
        self._elicitations.close()
        for tools in self._tools.values():
            tools.close()
        await self._models.aclose()
