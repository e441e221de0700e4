"""The handlers of the operation table: parse nothing, forward to the registry, shape replies.

Each takes the :class:`Context` and a parsed :class:`Request` and returns a :class:`Reply`
(or, for streaming operations, the stream each transport delivers its own way).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

import attrs
import trio

from greenroom import __version__
from greenroom.actors import Subscription
from greenroom.agents import QueuedMessage, Redirect, ResumeRequest
from greenroom.domain import (
    Approval,
    ChatMessage,
    Message,
    Session,
    SessionSummary,
    Summary,
    batch_export,
    format_datetime,
    recovery_export,
    to_json,
    visible_messages,
)
from greenroom.errors import (
    GreenroomError,
    InvalidRequest,
    OwnedElsewhere,
    SessionNotRunning,
    WaitTimedOut,
)
from greenroom.persistence import ToolCallRecord

from . import _bodies as b
from ._context import Context, Reply, Request
from ._forward import ClaimHere
from ._workdir import validate_working_dir

# --- helpers ---------------------------------------------------------------------------------


def session_response(session: Session) -> dict[str, Any]:
    return {
        "id": session.id,
        "title": session.title,
        "messages": [to_json(m, Message) for m in visible_messages(session.items)],
        "created_at": format_datetime(session.created_at),
        "tools_approved": session.tools_approved,
        "safety_policy": session.safety_policy,
        "input_tokens": session.input_tokens,
        "output_tokens": session.output_tokens,
        "working_dir": session.working_dir,
        "permissions": to_json(session.permissions),
        "thinking": session.thinking,
        "hide_tool_results": session.hide_tool_results,
    }


def _queued(messages: tuple[b.APIMessage, ...]) -> tuple[QueuedMessage, ...]:
    if not messages:
        raise InvalidRequest("$.messages: at least one message is required", path="$.messages")
    return tuple(QueuedMessage(m.content, m.multi_content) for m in messages)


def _session_id(req: Request) -> str:
    return req.params["session_id"]


CLUSTER_PING = 1.0  # seconds the database has to answer a readiness probe's ping

# --- handlers --------------------------------------------------------------------------------


async def health(ctx: Context, req: Request) -> Reply:
    await trio.lowlevel.checkpoint()
    return Reply({"status": "ok", "version": __version__})


async def ready(ctx: Context, req: Request) -> Reply:
    count, connected = 0, False
    with trio.move_on_after(0.1) as scope:
        try:
            count = await ctx.registry.store.count_sessions()
            connected = True
        except GreenroomError:
            connected = False
    if scope.cancelled_caught:
        connected = True  # slow, not down: the query timed out
    body: dict[str, Any] = {}
    membership = ctx.registry.persistence.membership
    if membership is not None:  # a cluster node: the database must answer, the lease be held
        connected = False
        with trio.move_on_after(CLUSTER_PING):
            try:
                await membership.ping()
                connected = True
            except GreenroomError:
                pass
        body = {"node_id": membership.node_id, "fenced": ctx.registry.fenced}
        connected = connected and not ctx.registry.fenced
    draining = ctx.draining.is_set()
    ok = connected and not ctx.shutting_down.is_set() and not draining
    body = {"ready": ok, "active_sessions": count, "store_connected": connected, **body}
    if draining:  # load balancers send new clients elsewhere while running turns finish
        body["draining"] = True
    return Reply(body, 200 if ok else 503)


async def ping(ctx: Context, req: Request) -> Reply:
    await trio.lowlevel.checkpoint()
    return Reply({"status": "ok"})


async def api_ready(ctx: Context, req: Request) -> Reply:
    timeout = req.query.get("timeout", 30.0)
    with trio.move_on_after(timeout):
        await ctx.registry.ready.wait()
        return Reply({"status": "ready"})
    raise WaitTimedOut("no sessions registered within timeout")


async def list_agents(ctx: Context, req: Request) -> Reply:
    await trio.lowlevel.checkpoint()
    return Reply(ctx.agents.list_agents())


async def get_agent(ctx: Context, req: Request) -> Reply:
    await trio.lowlevel.checkpoint()
    return Reply(ctx.agents.agent_config(req.params["agent_id"]))


async def agent_tool_count(ctx: Context, req: Request) -> Reply:
    count = await ctx.agents.tool_count(req.params["agent_id"], req.params["agent_name"])
    return Reply({"available_tools": count})


def _summary(s: SessionSummary) -> dict[str, Any]:
    return to_json(s, SessionSummary)  # type: ignore[no-any-return]


async def list_sessions(ctx: Context, req: Request) -> Reply:
    return Reply([_summary(s) for s in await ctx.registry.list_sessions()])


async def create_session(ctx: Context, req: Request) -> Reply:
    t: b.SessionTemplate = req.body
    working_dir = ""
    if t.working_dir.strip():
        working_dir = await trio.to_thread.run_sync(
            validate_working_dir, t.working_dir, ctx.config.working_dir_root
        )
    session = Session.new(
        title=t.title.strip(),
        tools_approved=t.tools_approved or t.safety_policy == "autonomous",
        safety_policy=t.safety_policy,
        working_dir=working_dir,
        permissions=t.permissions,
        max_iterations=t.max_iterations,
        max_tool_result_tokens=t.max_tool_result_tokens,
        attributes=t.attributes,
        thinking=t.thinking,
        hide_tool_results=t.hide_tool_results,
        agent_model_overrides=t.agent_model_overrides,
        custom_models_used=t.custom_models_used,
    )
    created = await ctx.registry.create(session)
    return Reply(to_json(created, Session))


async def get_session(ctx: Context, req: Request) -> Reply:
    return Reply(session_response(await ctx.registry.get(_session_id(req))))


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


async def snapshot(ctx: Context, req: Request) -> Reply:
    snap = await ctx.registry.session(_session_id(req)).snapshot()
    s = snap.session
    body = session_response(s)
    body.update(
        streaming=snap.streaming,
        agent=snap.agent,
        last_event_seq=snap.last_event_seq,
        cost=s.cost,
    )
    return Reply(body)


async def fork(ctx: Context, req: Request) -> Reply:
    body: b.ForkBody = req.body
    index = body.message_index if body.message_index is not None else body.user_message_index
    if index is None:
        raise InvalidRequest("$.message_index: required field missing", path="$.message_index")
    forked = await ctx.registry.fork(_session_id(req), index)
    return Reply(session_response(forked))


async def delete_session(ctx: Context, req: Request) -> Reply:
    session_id = _session_id(req)
    wait = req.query.get("wait", False)
    timeout = req.query.get("timeout", 10.0)
    await ctx.registry.delete(session_id)
    if wait:
        with trio.move_on_after(timeout):
            await ctx.registry.wait_stopped(session_id)
            return Reply({"message": "session deleted"})
        return Reply({"message": "session deleted, stop still in progress"}, 202)
    return Reply({"message": "session deleted"})


async def start_run(ctx: Context, req: Request) -> Any:
    """Start a turn; returns the RunStream (each transport streams it its own way)."""
    body: b.RunBody = req.body
    policy = req.query.get("on_disconnect", "cancel")
    # Every run names its agent: an unknown source or agent name is 404 even on a session whose
    # runtime was built before (which would otherwise run its first agent for any name).
    ctx.agents.check_agent(req.params["agent"], req.params.get("agent_name", ""))
    messages = tuple(ChatMessage(m.role, m.content, m.multi_content) for m in body.messages)
    return await ctx.registry.session(_session_id(req)).run(
        req.params["agent"],
        messages,
        agent_name=req.params.get("agent_name", ""),
        model=body.model,
        on_disconnect=policy,
    )


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


async def mcp_oauth_callback(ctx: Context, req: Request) -> Reply:
    """Hand an OAuth redirect (``state`` and ``code``, or ``error``) to the flow waiting for it."""
    state = req.query.get("state", "")
    if not state:
        raise InvalidRequest("query.state: is required", path="query.state")
    redirect = Redirect(
        code=req.query.get("code", ""),
        error=req.query.get("error", ""),
        error_description=req.query.get("error_description", ""),
    )
    ctx.oauth.deliver(state, redirect)
    return Reply(None)


async def mcp_oauth_landing(ctx: Context, req: Request) -> Reply:
    """The browser's landing after authorizing (the default redirect URI): the same as
    :func:`mcp_oauth_callback`, for a browser that comes back here directly."""
    await mcp_oauth_callback(ctx, req)
    return Reply({"message": "authorization received; you can close this page"})


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


async def toggle_thinking(ctx: Context, req: Request) -> Reply:
    await ctx.registry.session(_session_id(req)).toggle_thinking()
    return Reply(None)


async def toggle_tools(ctx: Context, req: Request) -> Reply:
    await ctx.registry.session(_session_id(req)).toggle_tool_approval()
    return Reply(None)


async def set_safety_policy(ctx: Context, req: Request) -> Reply:
    body: b.SafetyPolicyBody = req.body
    await ctx.registry.session(_session_id(req)).set_safety_policy(body.safety_policy)
    return Reply({"message": "session safety policy updated"})


async def set_permissions(ctx: Context, req: Request) -> Reply:
    body: b.PermissionsBody = req.body
    await ctx.registry.session(_session_id(req)).set_permissions(body.permissions)
    return Reply({"message": "session permissions updated"})


async def set_title(ctx: Context, req: Request) -> Reply:
    body: b.TitleBody = req.body
    title = body.title.strip()
    await ctx.registry.session(_session_id(req)).set_title(title)
    return Reply({"id": _session_id(req), "title": title})


async def set_tokens(ctx: Context, req: Request) -> Reply:
    body: b.TokensBody = req.body
    if body.input_tokens < 0 or body.output_tokens < 0 or (body.cost or 0) < 0:
        raise InvalidRequest("token counts and cost cannot be negative")
    handle = ctx.registry.session(_session_id(req))
    await handle.set_tokens(body.input_tokens, body.output_tokens, body.cost)
    return Reply({"status": "updated"})


async def set_starred(ctx: Context, req: Request) -> Reply:
    body: b.StarredBody = req.body
    await ctx.registry.session(_session_id(req)).set_starred(body.starred)
    return Reply({"status": "updated"})


async def list_models(ctx: Context, req: Request) -> Reply:
    agent, current, models = await ctx.registry.session(_session_id(req)).models()
    return Reply({"agent": agent, "current_model_ref": current, "models": to_json(models)})


def _message(body: b.MessageBody) -> Message:
    if body.message is None:
        raise InvalidRequest("$.message: message is required", path="$.message")
    return body.message


async def add_message(ctx: Context, req: Request) -> Reply:
    message_id = await ctx.registry.session(_session_id(req)).add_message(_message(req.body))
    return Reply({"status": "added", "id": message_id}, 201)


async def update_message(ctx: Context, req: Request) -> Reply:
    handle = ctx.registry.session(_session_id(req))
    await handle.update_message(req.params["message_id"], _message(req.body))
    return Reply({"status": "updated"})


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


async def add_summary(ctx: Context, req: Request) -> Reply:
    body: b.SummaryBody = req.body
    if not body.summary.strip():
        raise InvalidRequest("$.summary: summary is required", path="$.summary")
    if len(body.model) > 256 or _CONTROL.search(body.model):
        raise InvalidRequest(
            "$.model: at most 256 characters, no control characters", path="$.model"
        )
    usage = body.usage
    if usage is not None:
        if min(attrs.astuple(usage)) < 0:
            raise InvalidRequest("$.usage: token counts cannot be negative", path="$.usage")
        if not any(attrs.astuple(usage)):
            usage = None
    if body.cost < 0 or body.first_kept_entry < 0 or body.tokens < 0:
        raise InvalidRequest("cost and first_kept_entry cannot be negative")
    summary = Summary(
        body.summary, body.first_kept_entry or body.tokens, body.cost, body.model, usage
    )
    await ctx.registry.session(_session_id(req)).add_summary(summary)
    return Reply({"status": "added"}, 201)


async def queue_depth(ctx: Context, req: Request) -> Reply:
    q = await ctx.registry.session(_session_id(req)).queue_depth()
    return Reply(
        {
            "steer": {"depth": q.steer_depth, "capacity": q.steer_capacity},
            "followup": {"depth": q.followup_depth, "capacity": q.followup_capacity},
        }
    )


async def approvals(ctx: Context, req: Request) -> Reply:
    session = await ctx.registry.get(_session_id(req))
    return Reply([to_json(a, Approval) for a in session.approvals])


async def recovery(ctx: Context, req: Request) -> Reply:
    return Reply(recovery_export(await ctx.registry.get(_session_id(req))))


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


def _ids(body: b.BatchBody) -> list[str]:
    if not body.session_ids:
        raise InvalidRequest("$.session_ids: at least one id is required", path="$.session_ids")
    return list(body.session_ids)


async def batch_delete(ctx: Context, req: Request) -> Reply:
    if ctx.forwarder is None:
        deleted, failed = await ctx.registry.batch_delete(_ids(req.body))
    else:
        deleted, failed = await _batch_delete_everywhere(ctx, _ids(req.body))
    body: dict[str, Any] = {"deleted_count": deleted, "failed_count": len(failed)}
    if failed:
        body["failed_ids"] = failed
    return Reply(body)


async def _batch_delete_everywhere(ctx: Context, session_ids: list[str]) -> tuple[int, list[str]]:
    """A cluster: each session is deleted by its owner (a DELETE forwarded there), or here."""
    forwarder = ctx.forwarder
    assert forwarder is not None
    deleted, failed = 0, []
    for session_id in session_ids:
        try:
            try:
                await ctx.registry.delete(session_id)
            except OwnedElsewhere as exc:
                target = f"/api/sessions/{quote(session_id, safe='')}"
                try:
                    upstream = await forwarder.send(session_id, exc, "DELETE", target, {}, b"")
                except ClaimHere:
                    await ctx.registry.delete(session_id)
                else:
                    await upstream.read(forwarder.answer_timeout)
                    if not 200 <= upstream.status < 300:
                        failed.append(session_id)
                        continue
        except GreenroomError:
            failed.append(session_id)
        else:
            deleted += 1
    return deleted, failed


async def batch_export_sessions(ctx: Context, req: Request) -> Reply:
    return Reply(batch_export(await ctx.registry.export(_ids(req.body))))
