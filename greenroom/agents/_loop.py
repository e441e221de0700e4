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
from collections.abc import Awaitable, Callable, Mapping

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
    Summary,
    TokenUsage,
    ToolCall,
    ToolsetInfo,
    UserMessage,
    Warning,
    utcnow,
)
from greenroom.errors import (
    GreenroomError,
    ModelContextOverflow,
    ModelError,
    ToolCallLoop,
)
from greenroom.observe import FirstToken, model_call, model_call_span, record_model_response

from ._answer_schema import check_answer
from ._compaction import compact
from ._config import AgentConfig
from ._confirm import is_approval
from ._frame import Frame
from ._models import ModelTable
from ._prompt import build_messages
from ._queue import MessageQueue
from ._runtime import ElicitationSink, QueuedMessage, ResumeRequest
from ._spending import Repeats, check_budget, usage_info, worth_compacting
from ._tokens import MAX_OLD_TOOL_CALL_TOKENS, estimate_tokens, should_compact
from ._toolcalls import CANCELLED, ToolCalls
from .providers._base import Delta, ModelConfig, ModelRequest, ModelResponse, TextDelta
from .tools import AgentTools

log = logging.getLogger(__name__)

SAVE_BUDGET = 5.0
"""Seconds a cancelled turn may spend storing what it streamed (shielded)."""
STOP_EVENT_BUDGET = 1.0
"""Seconds a cancelled turn may spend delivering its ``stream_stopped`` event (shielded)."""
INTERRUPTED_NOTE = "[response interrupted]"
OVERFLOW_NOTE = (
    "The conversation has exceeded the model's context window. "
    "Automatically compacting the conversation history..."
)
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
    max_session_cost: float = 0.0
    """USD a session may spend (0: no budget); an agent's ``max_cost`` may be lower."""
    prompt_context: Callable[[AgentConfig], Awaitable[list[str]]] | None = None
    """Environment info and prompt files of an agent's system prompt (``_environment.py``)."""

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
        repeats = Repeats()
        routed = ("", "")  # (agent, model): a toolset's ``model`` for the next call only
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
            override = routed[1] if routed[0] == frame.agent.name else ""
            response = await self._call_model(frame, override)
            routed = ("", "")
            if response.tool_calls:
                repeat_limit = frame.agent.max_consecutive_tool_calls
                if repeats.seen(response.tool_calls) > repeat_limit > 0:
                    name = response.tool_calls[0].function.name
                    raise ToolCallLoop(
                        f"the model made the same tool call ({name}) {repeats.count} times "
                        f"in a row (max_consecutive_tool_calls: {repeat_limit})"
                    )
                tools = self.tools_of(self.agents.get(frame.agent_name) or frame.agent)
                called = [call.function.name for call in response.tool_calls]
                routed = (frame.agent_name, tools.model_after(called))
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

    async def _request(self, frame: Frame, model: ModelConfig) -> ModelRequest:
        agent = frame.agent
        session = frame.io.session
        cap = session.max_tool_result_tokens or agent.max_tool_result_tokens
        tools = self.tools_of(agent)
        instructions = tools.instructions
        if frame.task_prompt:
            instructions = [*instructions, frame.task_prompt]
        context = await self.prompt_context(agent) if self.prompt_context is not None else []
        messages = build_messages(
            session,
            agent,
            max_tool_result_tokens=cap,
            today=self.today(),
            instructions=instructions,
            num_history_items=agent.num_history_items,
            max_old_tool_call_tokens=agent.max_old_tool_call_tokens or MAX_OLD_TOOL_CALL_TOKENS,
            context=context,
        )
        return ModelRequest(
            model=model,
            messages=messages,
            tools=tools.specs,
            max_tokens=model.max_tokens,
            thinking=session.thinking,
            structured_output=agent.structured_output,
        )

    async def compact(
        self, frame: Frame, *, additional: str = "", model: ModelConfig | None = None
    ) -> Summary | None:
        """Compact the frame's session with its agent's model (see ``_compaction``)."""
        agent = frame.agent
        model = model or self.models.model_of(agent)
        provider = self.models.provider_of(agent)
        return await compact(
            frame.io, agent.name, model, provider, self.models.facts(model), additional=additional
        )

    async def _call_model(self, frame: Frame, override: str = "") -> ModelResponse:
        """One model call; ``override`` is a model ref used instead of the agent's (the model a
        toolset routes its results to), falling back to the agent's when it does not resolve.
        Compaction (proactive, or on an overflow) always uses the agent's own model."""
        io = frame.io
        agent = frame.agent
        model = self.models.model_of(agent)
        provider = None
        if override:
            try:
                model = self.models.resolve(override)
                provider = self.models.provider(model)
            except GreenroomError as exc:
                log.warning("toolset model %r not used: %s", override, exc)
                model, provider = self.models.model_of(agent), None
        facts = self.models.facts(model)
        session = io.session
        request = await self._request(frame, model)
        estimate = estimate_tokens(request.messages, request.tools)
        check_budget(frame.agent, self.max_session_cost, io, facts, estimate)
        compacted = False
        if should_compact(estimate, facts.context) and worth_compacting(request, facts):
            compacted = True
            try:
                if await self.compact(frame) is not None:
                    request = await self._request(frame, model)
            except ModelError as exc:  # the turn goes on uncompacted; the model may refuse it
                log.warning("proactive compaction of %s failed: %s", session.id, exc.message)
                await io.emit(Warning(f"compaction failed: {exc.message}", agent.name))
        frame.agent_name = agent.name
        first_token = FirstToken()

        async def on_delta(delta: Delta) -> None:
            call.first_token()
            first_token()
            if isinstance(delta, TextDelta):
                frame.text.append(delta.text)
                await io.emit(AgentChoice(delta.text, agent.name, session.id))
            else:
                frame.reasoning.append(delta.text)
                await io.emit(AgentChoiceReasoning(delta.text, agent.name, session.id))

        provider = provider or self.models.provider_of(agent)
        traced = model_call_span(model.provider, model.model, agent.name, model.max_tokens)
        with (
            model_call(model.provider, model.model) as call,  # counted and timed (metrics)
            traced as first_token.span,
        ):
            try:
                response = await provider.complete(request, on_delta)
            except ModelContextOverflow:
                if compacted or frame.text or frame.reasoning:
                    raise
                await io.emit(Warning(OVERFLOW_NOTE, agent.name))
                if await self.compact(frame) is None:
                    raise
                response = await provider.complete(await self._request(frame, model), on_delta)
            record_model_response(first_token.span, response)
        # A fallback (or a routed model) may have answered: its own prices and window count.
        answered = response.answered_by or model
        if answered is not model:
            facts = self.models.facts(answered)
        cost = facts.cost(response.usage)
        chat = ChatMessage(
            role="assistant",
            content=response.content or "".join(frame.text),
            reasoning_content=response.reasoning or "".join(frame.reasoning),
            thinking_signature=response.thinking_signature,
            tool_calls=response.tool_calls,
            usage=response.usage,
            model=response.model or answered.ref,
            created_at=utcnow(),
            cost=cost,
        )
        if chat.content or chat.reasoning_content or chat.tool_calls:
            await io.add_message(Message(chat, agent_name=agent.name))
        frame.text.clear()
        frame.reasoning.clear()
        frame.open_calls = list(response.tool_calls)
        usage = response.usage
        io.add_usage(usage.input_tokens, usage.output_tokens, cost or 0.0)
        call.usage(usage.input_tokens, usage.output_tokens, cost or 0.0)
        info = usage_info(io.session, usage, cost, facts, chat.model)
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
