"""The agent loop: model call → tool calls → results → the next model call, for one frame.

A run: ``stream_started`` → (root frame) ``agent_info`` and toolset warnings → the agent's
toolsets are started (MCP servers: ``mcp_init_started`` … ``mcp_init_finished``, a changed tool
list: ``toolset_info``) → model calls (deltas streamed as ``agent_choice``), each followed by its
tool calls, until the model stops calling tools → ``stream_stopped``. At the iteration limit the
turn emits ``max_iterations_reached`` and waits for a resume (an approval: 10 more model calls;
otherwise it stops with a note). An agent's ``structured_output`` checks the final answer.
The root frame takes steer messages before each model call and one follow-up at the end of a
turn (starting the next turn in the same stream); events raised outside any tool call (an MCP
server died) are emitted at the start of each iteration.

A failing model call ends the run with an ``error`` event. When the run is cancelled, what the
model streamed so far is stored as an assistant message marked :data:`INTERRUPTED_NOTE`, and
tool calls left without a result get an error result, inside a shielded scope bounded by
:data:`SAVE_BUDGET` seconds.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
from collections.abc import Callable, Mapping

import attrs
import trio

from greenroom.domain import (
    AgentChoice,
    AgentChoiceReasoning,
    AgentInfo,
    ChatMessage,
    ErrorEvent,
    ErrorItem,
    Event,
    MaxIterationsReached,
    McpInitFinished,
    McpInitStarted,
    Message,
    StreamStarted,
    StreamStopped,
    TokenUsage,
    TokenUsageInfo,
    ToolCall,
    ToolsetInfo,
    UserMessage,
    Warning,
    utcnow,
)
from greenroom.errors import GreenroomError

from ._answer_schema import check_answer
from ._config import AgentConfig
from ._confirm import is_approval
from ._frame import Frame
from ._models import ModelTable
from ._prompt import build_messages
from ._queue import MessageQueue
from ._runtime import ElicitationSink, QueuedMessage, ResumeRequest
from ._toolcalls import CANCELLED, ToolCalls
from .providers._base import Delta, ModelRequest, ModelResponse, TextDelta
from .tools import AgentTools

log = logging.getLogger(__name__)

SAVE_BUDGET = 5.0
"""Seconds a cancelled turn may spend storing what it streamed (shielded)."""
STOP_EVENT_BUDGET = 1.0
"""Seconds a cancelled turn may spend delivering its ``stream_stopped`` event (shielded)."""
INTERRUPTED_NOTE = "[response interrupted]"
CONTINUE_ITERATIONS = 10
"""Model calls an approved ``max_iterations_reached`` adds (docker-agent's figure)."""
NOTICES_KEPT = 64
"""Out-of-turn events kept for the running turn; older ones are dropped first."""


def _cancelled(exc: BaseException) -> bool:
    """``exc`` is a cancellation, alone or as a group of them (concurrent tool calls)."""
    if isinstance(exc, trio.Cancelled):
        return True
    return isinstance(exc, BaseExceptionGroup) and exc.split(trio.Cancelled)[1] is None


def failed_toolsets(agent_name: str, details: list[str]) -> Warning:
    lines = "\n".join(f"- {d}" for d in details)
    text = f"Some toolsets failed to initialize for agent '{agent_name}'.\n\nDetails:\n\n{lines}"
    return Warning(message=text, agent_name=agent_name)


class Notices:
    """Events raised outside any tool call (a server died, an authorization finished).

    While a turn runs they wait for it (it emits them at the start of its next iteration);
    otherwise they go straight to the sink (the session's event log).
    """

    def __init__(self) -> None:
        self.sink: ElicitationSink | None = None
        self.turn_running = False
        self._pending: list[Event] = []

    def notify(self, event: Event) -> None:
        if self.turn_running:
            self._pending = [*self._pending, event][-NOTICES_KEPT:]
        elif self.sink is not None:
            self.sink(event)

    def drain(self) -> list[Event]:
        pending, self._pending = self._pending, []
        return pending


@attrs.define(eq=False)
class AgentLoop:
    """Runs frames (see the module docstring); one per runtime."""

    agents: Mapping[str, AgentConfig]
    models: ModelTable
    tools_of: Callable[[AgentConfig], AgentTools]
    tool_calls: ToolCalls
    steers: MessageQueue
    followups: MessageQueue
    notices: Notices
    today: Callable[[], dt.date]

    async def run(self, frame: Frame) -> str:
        """Run ``frame`` until done; returns why it stopped (``normal``, ``error``)."""
        io = frame.io
        await io.emit(StreamStarted(session_id=io.session.id, agent_name=frame.agent.name))
        try:
            reason = await self._run_turns(frame)
            await io.emit(self._stopped(frame, reason))
        except BaseException as exc:
            if not _cancelled(exc):
                raise
            with trio.move_on_after(SAVE_BUDGET, shield=True):
                await self.save_interrupted(frame)
            with trio.move_on_after(STOP_EVENT_BUDGET, shield=True):
                await io.emit(self._stopped(frame, "canceled"))
            raise
        return reason

    def _stopped(self, frame: Frame, reason: str) -> StreamStopped:
        return StreamStopped(
            session_id=frame.io.session.id, agent_name=frame.agent.name, reason=reason
        )

    async def _run_turns(self, frame: Frame) -> str:
        try:
            await self.announce(frame)
            while True:
                frame.prepared.clear()  # each turn reads the live toolsets again
                await self._run_turn(frame)
                follow_up = self.followups.pop() if frame.root else None
                if follow_up is None:
                    return "normal"
                await self._add_user_message(frame, follow_up)
        except GreenroomError as exc:
            await self._fail(frame, exc.message, exc.code)
        except Exception as exc:
            log.exception("turn of session %s failed", frame.io.session.id)
            await self._fail(frame, str(exc) or type(exc).__name__, "internal_error")
        return "error"

    async def announce(self, frame: Frame) -> None:
        """``agent_info`` for the frame's agent, and the toolsets that could not be built."""
        agent = frame.agent
        model = self.models.model_of(agent)
        info = AgentInfo(
            agent_name=agent.name,
            model=model.ref,
            description=agent.description,
            welcome_message=agent.welcome_message,
        )
        await frame.io.emit(info)
        tools = self.tools_of(agent)
        details = [
            f"toolset {kind} is not supported by greenroom yet" for kind in tools.unavailable
        ]
        details += tools.warnings
        if details:
            await frame.io.emit(failed_toolsets(agent.name, details))

    async def _prepare(self, frame: Frame) -> None:
        """Start the agent's live toolsets (MCP servers), then read their tools again."""
        agent = frame.agent
        frame.prepared.add(agent.name)
        tools = self.tools_of(agent)
        if not tools.has_live:
            return
        await frame.io.emit(McpInitStarted(agent_name=agent.name))
        warnings = await tools.start_live()
        await frame.io.emit(McpInitFinished(agent_name=agent.name))
        if warnings:
            await frame.io.emit(failed_toolsets(agent.name, warnings))
        if tools.refresh():
            await frame.io.emit(ToolsetInfo(len(tools.tools), agent_name=agent.name))

    async def _start_toolsets(self, frame: Frame) -> None:
        """Start toolsets that list their tools with I/O (retried until they start)."""
        agent = frame.agent
        failed = await self.tools_of(agent).start()
        if failed:
            await frame.io.emit(failed_toolsets(agent.name, failed))

    async def _run_turn(self, frame: Frame) -> None:
        """Model calls and tool calls until the model stops or the iteration limit is hit."""
        io = frame.io
        iterations = 0
        limit = io.session.max_iterations or frame.agent.max_iterations
        while True:
            if frame.root:
                await self._take_steers(frame)
            if not frame.background:
                for event in self.notices.drain():
                    await io.emit(event)
            if limit and iterations >= limit:
                if not await self._may_continue(frame, limit):
                    return
                limit = iterations + CONTINUE_ITERATIONS
            iterations += 1
            if frame.agent.name not in frame.prepared:  # this turn's first call, or a handoff
                await self._prepare(frame)
            await self._start_toolsets(frame)
            response = await self._call_model(frame)
            if response.tool_calls:
                await self._run_tools(frame, response.tool_calls)
            elif not (frame.root and self.steers.depth):
                output = frame.agent.structured_output
                if output is not None:
                    check_answer(output, response.content)
                return

    async def _may_continue(self, frame: Frame, limit: int) -> bool:
        """Emit ``max_iterations_reached`` and wait for the client (docker-agent's rule):
        an approval grants :data:`CONTINUE_ITERATIONS` more, anything else stops the turn with
        a note. A background frame has no one to ask: it stops."""
        io = frame.io
        event = MaxIterationsReached(max_iterations=limit, session_id=io.session.id)
        if frame.background:
            await io.emit(event)
            return False
        answer: ResumeRequest | None = None
        timeout = self.tool_calls.confirmation_timeout or math.inf
        with trio.move_on_after(timeout):
            answer = await self.tool_calls.confirmations.ask(lambda: io.emit(event))
        if answer is not None and is_approval(answer):
            return True
        note = f"Execution stopped after reaching the configured max_iterations limit ({limit})."
        chat = ChatMessage(role="assistant", content=note, created_at=utcnow())
        await io.add_message(Message(chat, agent_name=frame.agent.name))
        await io.emit(AgentChoice(note, frame.agent.name, io.session.id))
        return False

    async def _take_steers(self, frame: Frame) -> None:
        while (message := self.steers.pop()) is not None:
            await self._add_user_message(frame, message)

    async def _add_user_message(self, frame: Frame, queued: QueuedMessage) -> None:
        io = frame.io
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

    async def _call_model(self, frame: Frame) -> ModelResponse:
        io = frame.io
        agent = frame.agent
        model = self.models.model_of(agent)
        session = io.session
        cap = session.max_tool_result_tokens or agent.max_tool_result_tokens
        tools = self.tools_of(agent)
        instructions = tools.instructions
        if frame.task_prompt:
            instructions = [*instructions, frame.task_prompt]
        request = ModelRequest(
            model=model,
            messages=build_messages(
                session,
                agent,
                max_tool_result_tokens=cap,
                today=self.today(),
                instructions=instructions,
            ),
            tools=tools.specs,
            max_tokens=model.max_tokens,
            thinking=session.thinking,
            structured_output=agent.structured_output,
        )
        frame.agent_name = agent.name

        async def on_delta(delta: Delta) -> None:
            if isinstance(delta, TextDelta):
                frame.text.append(delta.text)
                await io.emit(AgentChoice(delta.text, agent.name, session.id))
            else:
                frame.reasoning.append(delta.text)
                await io.emit(AgentChoiceReasoning(delta.text, agent.name, session.id))

        response = await self.models.provider_of(agent).complete(request, on_delta)
        chat = ChatMessage(
            role="assistant",
            content=response.content or "".join(frame.text),
            reasoning_content=response.reasoning or "".join(frame.reasoning),
            thinking_signature=response.thinking_signature,
            tool_calls=response.tool_calls,
            usage=response.usage,
            model=response.model or model.ref,
            created_at=utcnow(),
        )
        if chat.content or chat.reasoning_content or chat.tool_calls:
            await io.add_message(Message(chat, agent_name=agent.name))
        frame.text.clear()
        frame.reasoning.clear()
        frame.open_calls = list(response.tool_calls)
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

    async def _run_tools(self, frame: Frame, calls: tuple[ToolCall, ...]) -> None:
        # The tools of the agent that made the calls (a handoff may have switched since).
        agent = self.agents.get(frame.agent_name) or frame.agent
        await self.tool_calls.run_batch(frame, self.tools_of(agent), calls, frame.open_calls.remove)

    async def _fail(self, frame: Frame, message: str, code: str) -> None:
        await self.save_interrupted(frame)
        io = frame.io
        agent_name = frame.agent_name or frame.agent.name
        item = ErrorItem(message=message, code=code, agent_name=agent_name, created_at=utcnow())
        await io.add_error(item)
        event = ErrorEvent(
            error=message, code=code, session_id=io.session.id, agent_name=agent_name
        )
        await io.emit(event)

    async def save_interrupted(self, frame: Frame) -> None:
        """Store what the model streamed before the stop, and results for unanswered calls."""
        io = frame.io
        text, reasoning = "".join(frame.text), "".join(frame.reasoning)
        frame.text.clear()
        frame.reasoning.clear()
        if text or reasoning:
            content = f"{text}\n\n{INTERRUPTED_NOTE}" if text else INTERRUPTED_NOTE
            chat = ChatMessage(
                role="assistant", content=content, reasoning_content=reasoning, created_at=utcnow()
            )
            await io.add_message(Message(chat, agent_name=frame.agent_name))
        calls, frame.open_calls = frame.open_calls, []
        for call in calls:
            chat = ChatMessage(
                role="tool",
                content=CANCELLED,
                tool_call_id=call.id,
                is_error=True,
                created_at=utcnow(),
            )
            await io.add_message(Message(chat, agent_name=frame.agent_name))
