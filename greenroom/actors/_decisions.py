"""Deciding a tool call left in doubt by a crash: ``rerun``, ``done`` or ``skip``.

Each decision replaces the call's placeholder result in the history and is stored with who
made it and when; once every call of the session is decided, it runs again. ``rerun`` records
the intent first (a crash during the rerun leaves the call in doubt again), then runs the tool
in a child task of the actor, which holds the session busy meanwhile.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import trio

from greenroom.agents import Runtime, ToolResult, supports_tool_rerun
from greenroom.domain import (
    MAX_NAME,
    ChatMessage,
    FunctionCall,
    Message,
    ToolCall,
    ToolCallDecided,
    utcnow,
)
from greenroom.errors import (
    GreenroomError,
    InvalidRequest,
    RerunNotSupported,
    SessionGone,
    ToolCallNotFound,
)
from greenroom.persistence import DECISION_ACTIONS, Decision, DecisionAction, ToolCallRecord

from . import _commands as c
from ._turn import Turn

if TYPE_CHECKING:
    from ._session import SessionActor

log = logging.getLogger(__name__)

DONE_UNKNOWN = "The tool call completed before the interruption; its result was not recorded."
SKIPPED = "The tool call was interrupted by a server restart and was not run again."
MAX_DECIDED_BY = MAX_NAME  # as the API's body allows

EnsureRuntime = Callable[["SessionActor", str, str], Awaitable[Runtime]]


async def decide(
    actor: SessionActor, cmd: c.Decide, ensure_runtime: EnsureRuntime
) -> c.PendingDecision:
    """Check the decision and carry it out (a rerun: start it). Runs inside the Decide command."""
    if cmd.action not in DECISION_ACTIONS:
        raise InvalidRequest(
            f"$.action: expected one of {', '.join(DECISION_ACTIONS)}, got {cmd.action!r}",
            path="$.action",
        )
    if cmd.result is not None and cmd.action != "done":
        raise InvalidRequest("$.result: only a 'done' decision takes a result", path="$.result")
    if len(cmd.decided_by) > MAX_DECIDED_BY:
        raise InvalidRequest(
            f"$.decided_by: at most {MAX_DECIDED_BY} characters", path="$.decided_by"
        )
    call = actor.in_doubt.get(cmd.tool_call_id)
    if call is None:
        raise ToolCallNotFound(
            f"no tool call {cmd.tool_call_id!r} is in doubt in session {actor.id}"
        )
    pending = c.PendingDecision()
    if cmd.action == "rerun":
        runtime = await _rerun_runtime(actor, call, ensure_runtime)
        turn = Turn(trio.CancelScope(), None, "continue")
        await actor.writer.begin_rerun(actor.lease, actor.id, call.tool_call_id)
        actor.start_turn(turn)
        assert actor.nursery is not None
        actor.nursery.start_soon(_rerun, actor, turn, runtime, call, cmd.decided_by, pending)
        return pending
    text = (cmd.result or DONE_UNKNOWN) if cmd.action == "done" else SKIPPED
    result = ToolResult(text, is_error=cmd.action == "skip")
    pending.finish(await _record(actor, call, cmd.action, result, cmd.decided_by))  # type: ignore[arg-type]
    return pending


async def _rerun_runtime(
    actor: SessionActor, call: ToolCallRecord, ensure_runtime: EnsureRuntime
) -> Runtime:
    runtime = actor.runtime
    if runtime is None:  # after a restart: build it from the agent the turn ran with
        turns = await actor.registry.persistence.events.turns(actor.id, ("interrupted", "running"))
        turn = next((t for t in turns if t.turn_id == call.turn_id), None)
        if turn is None or not turn.source:
            raise RerunNotSupported(f"the agent that made tool call {call.tool_call_id} is unknown")
        runtime = await ensure_runtime(actor, turn.source, turn.agent_name)
    if not supports_tool_rerun(runtime):
        raise RerunNotSupported()
    return runtime


async def _rerun(
    actor: SessionActor,
    turn: Turn,
    runtime: Runtime,
    call: ToolCallRecord,
    decided_by: str,
    pending: c.PendingDecision,
) -> None:
    try:
        with turn.scope:
            tool_call = ToolCall(call.tool_call_id, FunctionCall(call.name, call.arguments))
            try:
                result: ToolResult = await runtime.rerun_tool(tool_call, call.agent_name)  # type: ignore[attr-defined]
            except Exception as exc:
                log.warning("rerun of tool call %s failed", call.tool_call_id, exc_info=True)
                result = ToolResult(f"Tool {call.name!r} failed: {exc}", is_error=True)
            pending.finish(await _record(actor, call, "rerun", result, decided_by))
    except GreenroomError as exc:
        pending.finish(None, exc)
    finally:
        # Cancelled (deleted, shutting down): the call stays started, so in doubt once more
        # after a restart; nobody waits for a verdict that will not come.
        pending.finish(None, SessionGone("the rerun was interrupted"))
        actor.end_turn(turn)


async def _record(
    actor: SessionActor,
    call: ToolCallRecord,
    action: DecisionAction,
    result: ToolResult,
    decided_by: str,
) -> c.DecisionOutcome:
    """Store the decision with the result replacing the placeholder, then tell the log."""
    decided_at = utcnow()
    chat = ChatMessage(
        "tool",
        result.output,
        tool_call_id=call.tool_call_id,
        is_error=result.is_error,
        created_at=decided_at,
    )
    message = Message(chat, agent_name=call.agent_name)
    decision = Decision(actor.id, call.tool_call_id, action, decided_by, decided_at, message)
    remaining = await actor.writer.decide(decision)
    actor.replace_placeholder(call.placeholder_id, message)
    actor.in_doubt.pop(call.tool_call_id, None)
    event = ToolCallDecided(call.tool_call_id, action, result.output, decided_by, actor.id)
    actor.log_event(event)
    return c.DecisionOutcome(
        call.tool_call_id,
        action,
        result.output,
        result.is_error,
        decided_by,
        decided_at,
        remaining,
    )
