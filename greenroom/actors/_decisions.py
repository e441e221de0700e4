"""Deciding a tool call left in doubt by a crash: ``rerun``, ``done`` or ``skip``.

Each decision replaces the call's placeholder result in the history and is stored with who
made it and when; once every call of the session is decided, it runs again. ``rerun`` records
the intent first (a crash during the rerun leaves the call in doubt again), then runs the tool
in a child task of the actor, which holds the session busy meanwhile.
"""

from __future__ import annotations

import logging

import trio

from greenroom.agents import SupportsToolRerun, ToolResult, supports_tool_rerun
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

from ._commands import Decide, Turn
from ._context import ActorContext, runtime_for
from ._results import DecisionOutcome, PendingDecision

log = logging.getLogger(__name__)

DONE_UNKNOWN = "The tool call completed before the interruption; its result was not recorded."
SKIPPED = "The tool call was interrupted by a server restart and was not run again."
MAX_DECIDED_BY = MAX_NAME  # as the API's body allows


async def decide(ctx: ActorContext, cmd: Decide) -> PendingDecision:
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
    call = ctx.in_doubt.get(cmd.tool_call_id)
    if call is None:
        raise ToolCallNotFound(f"no tool call {cmd.tool_call_id!r} is in doubt in session {ctx.id}")
    pending = PendingDecision()
    if cmd.action == "rerun":
        runtime = await _rerun_runtime(ctx, call)
        turn = Turn(trio.CancelScope(), None, "continue")
        await ctx.writer.begin_rerun(ctx.lease, ctx.id, call.tool_call_id)
        decided_by = cmd.decided_by
        ctx.start_turn(turn, lambda: _rerun(ctx, turn, runtime, call, decided_by, pending))
        return pending
    action: DecisionAction = "done" if cmd.action == "done" else "skip"
    text = (cmd.result or DONE_UNKNOWN) if action == "done" else SKIPPED
    result = ToolResult(text, is_error=action == "skip")
    pending.finish(await _record(ctx, call, action, result, cmd.decided_by))
    return pending


async def _rerun_runtime(ctx: ActorContext, call: ToolCallRecord) -> SupportsToolRerun:
    runtime = ctx.runtime
    if runtime is None:  # after a restart: build it from the agent the turn ran with
        turns = await ctx.events.turns(ctx.id, ("interrupted", "running"))
        turn = next((t for t in turns if t.turn_id == call.turn_id), None)
        if turn is None or not turn.source:
            raise RerunNotSupported(f"the agent that made tool call {call.tool_call_id} is unknown")
        runtime = runtime_for(ctx, turn.source, turn.agent_name)
    if not supports_tool_rerun(runtime):
        raise RerunNotSupported()
    return runtime


async def _rerun(
    ctx: ActorContext,
    turn: Turn,
    runtime: SupportsToolRerun,
    call: ToolCallRecord,
    decided_by: str,
    pending: PendingDecision,
) -> None:
    try:
        with turn.scope:
            tool_call = ToolCall(call.tool_call_id, FunctionCall(call.name, call.arguments))
            try:
                result = await runtime.rerun_tool(tool_call, call.agent_name)
            except Exception as exc:
                log.warning("rerun of tool call %s failed", call.tool_call_id, exc_info=True)
                result = ToolResult(f"Tool {call.name!r} failed: {exc}", is_error=True)
            pending.finish(await _record(ctx, call, "rerun", result, decided_by))
    except GreenroomError as exc:
        pending.finish(None, exc)
    finally:
        # Cancelled (deleted, shutting down): the call stays started, so in doubt once more
        # after a restart; nobody waits for a verdict that will not come.
        pending.finish(None, SessionGone("the rerun was interrupted"))
        ctx.end_turn(turn)


async def _record(
    ctx: ActorContext,
    call: ToolCallRecord,
    action: DecisionAction,
    result: ToolResult,
    decided_by: str,
) -> DecisionOutcome:
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
    decision = Decision(ctx.id, call.tool_call_id, action, decided_by, decided_at, message)
    remaining = await ctx.writer.decide(decision)
    ctx.live.replace_message(call.placeholder_id, message, or_append=True)
    ctx.decided(call.tool_call_id)
    event = ToolCallDecided(call.tool_call_id, action, result.output, decided_by, ctx.id)
    ctx.log_event(event)
    return DecisionOutcome(
        call.tool_call_id,
        action,
        result.output,
        result.is_error,
        decided_by,
        decided_at,
        remaining,
    )
