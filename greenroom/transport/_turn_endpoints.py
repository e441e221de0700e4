"""The operations on a session's turns: start one, follow the event log, steer or queue messages,
answer its questions, cancel it, read its live status, and decide the tool calls a crash left in
doubt.

Each handler takes the :class:`Context` and a parsed :class:`Request` and returns a
:class:`Reply`, or, for the streaming operations, the stream each transport delivers its own
way (``Operation.stream``).
"""

from __future__ import annotations

from typing import Any

import trio

from greenroom.actors import Subscription
from greenroom.agents import QueuedMessage, ResumeRequest
from greenroom.domain import ChatMessage, format_datetime, to_json
from greenroom.errors import InvalidRequest, OwnedElsewhere, SessionNotRunning, WaitTimedOut
from greenroom.persistence import ToolCallRecord

from . import _bodies as b
from ._context import Context, Reply, Request
from ._run_endpoints import run_result, run_webhook, wants_json


def _queued(messages: tuple[b.APIMessage, ...]) -> tuple[QueuedMessage, ...]:
    if not messages:
        raise InvalidRequest("$.messages: at least one message is required", path="$.messages")
    return tuple(QueuedMessage(m.content, m.multi_content) for m in messages)


def _session_id(req: Request) -> str:
    return req.params["session_id"]


async def session_status(ctx: Context, req: Request) -> Reply:
    handle = ctx.registry.session(_session_id(req))
    wait: float | None = req.query.get("wait")
    if wait is None:
        status = await handle.status()
    else:
        status = None
        with trio.move_on_after(wait):
            while status is None:
                try:
                    status = await handle.status()
                except SessionNotRunning:
                    await trio.sleep(0.02)
        if status is None:
            raise WaitTimedOut("session not attached within wait")
    return Reply(to_json(status))


async def start_run(ctx: Context, req: Request) -> Any:
    """Start a turn; returns the RunStream (each transport streams it its own way)."""
    body: b.RunBody = req.body
    policy = req.query.get("on_disconnect", "cancel")
    # Every run names its agent: an unknown source or agent name is 404 even on a session whose
    # runtime was built before (which would otherwise run its first agent for any name).
    ctx.agents.check_agent(req.params["agent"], req.params.get("agent_name", ""))
    webhook = run_webhook(ctx, body.webhook)  # 400 naming $.webhook unless allowed
    messages = tuple(ChatMessage(m.role, m.content, m.multi_content) for m in body.messages)
    stream = await ctx.registry.session(_session_id(req)).run(
        req.params["agent"],
        messages,
        agent_name=req.params.get("agent_name", ""),
        model=body.model,
        on_disconnect=policy,
        webhook=webhook,
    )
    if wants_json(req.query, req.headers):  # a client that cannot read a stream
        return await run_result(ctx, _session_id(req), stream)
    return stream


async def subscribe_events(ctx: Context, req: Request) -> Any:
    """Subscribe to the session's event log after ``since`` (or the ``Last-Event-ID``)."""
    since = req.query.get("since", req.headers.get("last-event-id"))
    return await subscribe(ctx, _session_id(req), since)


async def subscribe(ctx: Context, session_id: str, since: int | None) -> Subscription:
    """The session's log: its local one, or (a session another node owns) its mirror,
    served from the database on this node."""
    try:
        return await ctx.registry.subscribe(session_id, since)
    except OwnedElsewhere:
        if ctx.mirrors is None:
            raise
        return await ctx.mirrors.subscribe(session_id, since)


async def answer_elicitation(ctx: Context, req: Request) -> Reply:
    body: b.ElicitationBody = req.body
    handle = ctx.registry.session(_session_id(req))
    await handle.answer_elicitation(body.action, body.content, body.elicitation_id)
    return Reply(None)


async def cancel_turn(ctx: Context, req: Request) -> Reply:
    cancelled = await ctx.registry.session(_session_id(req)).cancel_turn()
    return Reply({"cancelled": cancelled})


async def compact(ctx: Context, req: Request) -> Reply:
    body: b.CompactBody = req.body or b.CompactBody()
    handle = ctx.registry.session(_session_id(req))
    await handle.compact(body.agent, body.agent_name, body.instructions)
    return Reply({"status": "compacting"}, 202)


async def steer(ctx: Context, req: Request) -> Reply:
    body: b.QueueBody = req.body
    await ctx.registry.session(_session_id(req)).steer(_queued(body.messages))
    return Reply({"status": "queued"}, 202)


async def follow_up(ctx: Context, req: Request) -> Reply:
    body: b.QueueBody = req.body
    key = req.headers.get("idempotency-key", "") or req.params.get("idempotency_key", "")
    result = await ctx.registry.session(_session_id(req)).follow_up(_queued(body.messages), key)
    return Reply({"status": result.status, "duplicate": result.duplicate}, 202)


async def resume(ctx: Context, req: Request) -> Reply:
    body: b.ResumeBody = req.body
    kind = b.normalize_confirmation(body.confirmation)
    expires_in = body.expires_in
    decided_by = ctx.config.auth_label if ctx.config.auth_token else ""
    request = ResumeRequest(kind, body.reason, body.tool_name, expires_in, decided_by)
    await ctx.registry.session(_session_id(req)).resume(request)
    return Reply({"message": "session resumed"})


async def queue_depth(ctx: Context, req: Request) -> Reply:
    q = await ctx.registry.session(_session_id(req)).queue_depth()
    return Reply(
        {
            "steer": {"depth": q.steer_depth, "capacity": q.steer_capacity},
            "followup": {"depth": q.followup_depth, "capacity": q.followup_capacity},
        }
    )


async def list_models(ctx: Context, req: Request) -> Reply:
    agent, current, models = await ctx.registry.session(_session_id(req)).models()
    return Reply({"agent": agent, "current_model_ref": current, "models": to_json(models)})


def _in_doubt(call: ToolCallRecord) -> dict[str, Any]:
    return {
        "tool_call_id": call.tool_call_id,
        "name": call.name,
        "arguments": call.arguments,
        "agent_name": call.agent_name,
        "turn_id": call.turn_id,
        "started_at": format_datetime(call.started_at),
    }


async def pending_decisions(ctx: Context, req: Request) -> Reply:
    calls = await ctx.registry.session(_session_id(req)).pending_decisions()
    state = "needs_decision" if calls else "idle"
    return Reply({"state": state, "in_doubt": [_in_doubt(call) for call in calls]})


async def decide(ctx: Context, req: Request) -> Reply:
    body: b.DecisionBody = req.body
    handle = ctx.registry.session(_session_id(req))
    # Who: as the person says; else the token's label when a token is required (as approvals
    # record it), else the transport and the client's address.
    who = body.decided_by or (ctx.config.auth_label if ctx.config.auth_token else req.client)
    outcome = await handle.decide(body.tool_call_id, body.action, body.result, who)
    return Reply(
        {
            "tool_call_id": outcome.tool_call_id,
            "action": outcome.action,
            "result": outcome.result,
            "is_error": outcome.is_error,
            "decided_by": outcome.decided_by,
            "decided_at": format_datetime(outcome.decided_at),
            "pending": outcome.pending,
        }
    )
