"""The operations on a session's record: create, read, fork and delete it (one, or a batch across a
cluster), export it, change its settings, and add or replace its messages and summaries.

Each handler takes the :class:`Context` and a parsed :class:`Request` and returns a
:class:`Reply`; the registry does the work.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

import attrs
import trio

from greenroom.domain import (
    Approval,
    Message,
    Session,
    Summary,
    batch_export,
    format_datetime,
    recovery_export,
    to_json,
    visible_messages,
)
from greenroom.errors import GreenroomError, InvalidRequest, OwnedElsewhere

from . import _bodies as b
from ._context import Context, Reply, Request
from ._forward import ClaimHere
from ._listing import summaries_json
from ._workdir import validate_working_dir


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
        "agent_file": session.agent_file,  # decision 0019: the agent the session runs
        "agent_name": session.agent_name,
    }


def _session_id(req: Request) -> str:
    return req.params["session_id"]


async def list_sessions(ctx: Context, req: Request) -> Reply:
    return Reply(summaries_json(await ctx.registry.list_sessions()))


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


async def toggle_thinking(ctx: Context, req: Request) -> Reply:
    await ctx.registry.session(_session_id(req)).toggle_thinking()
    return Reply(None)


async def toggle_tools(ctx: Context, req: Request) -> Reply:
    who = ctx.config.auth_label if ctx.config.auth_token else req.client
    await ctx.registry.session(_session_id(req)).toggle_tool_approval(who)
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


async def approvals(ctx: Context, req: Request) -> Reply:
    session = await ctx.registry.get(_session_id(req))
    return Reply([to_json(a, Approval) for a in session.approvals])


async def recovery(ctx: Context, req: Request) -> Reply:
    return Reply(recovery_export(await ctx.registry.get(_session_id(req))))
