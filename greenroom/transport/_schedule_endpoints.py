"""The operations on scheduled runs (decision 0028): create, list, read, pause, resume and delete
a schedule. The scheduler (``actors/_scheduler.py``) stores them and fires their occurrences;
here the body is parsed and the agent it names is checked against the server's agents.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import attrs

from greenroom.actors import RemoteFire, ScheduleSpec
from greenroom.domain import Name, NonBlank, PlainName, Title
from greenroom.errors import (
    AgentNotFound,
    AgentSourceUnavailable,
    GreenroomError,
    InvalidRequest,
    OwnedElsewhere,
)
from greenroom.persistence import Schedule

from ._context import Context, Reply, Request
from ._forward import ClaimHere, Forwarder


@attrs.frozen
class ScheduleBody:
    """``POST /api/schedules``: run ``message`` with ``agent`` at each occurrence of ``cron``
    (read in ``timezone``), in a new session each time, or in ``session_id``."""

    cron: NonBlank
    agent: PlainName
    message: str
    timezone: Name = "UTC"
    agent_name: PlainName = ""
    session_id: PlainName = ""  # "" : a new session each time
    title: Title = ""


def _when(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def schedule_response(s: Schedule) -> dict[str, Any]:
    return {
        "id": s.id,
        "cron": s.cron,
        "timezone": s.timezone,
        "agent": s.agent,
        "agent_name": s.agent_name,
        "message": s.message,
        "target": "session" if s.session_id else "new_session",
        "session_id": s.session_id,
        "title": s.title,
        "paused": s.paused,
        "next_fire": None if s.paused else _when(s.next_fire),
        "created_at": _when(s.created_at),
        "fires": s.fires,
        "last_occurrence": _when(s.last_occurrence),
        "last_fired_at": _when(s.last_fired_at),
        "last_session_id": s.last_session_id,
        "last_error": s.last_error,
    }


def _check_agent(ctx: Context, source: str, agent_name: str) -> None:
    """400 naming ``$.agent`` (no such agent source) or ``$.agent_name``."""
    try:
        ctx.agents.check_agent(source, "")
    except (AgentNotFound, AgentSourceUnavailable) as exc:
        raise InvalidRequest(f"$.agent: {exc.message}", path="$.agent") from None
    if agent_name:
        try:
            ctx.agents.check_agent(source, agent_name)
        except (AgentNotFound, AgentSourceUnavailable) as exc:
            raise InvalidRequest(f"$.agent_name: {exc.message}", path="$.agent_name") from None


def _schedule_id(req: Request) -> str:
    return req.params["schedule_id"]


async def create_schedule(ctx: Context, req: Request) -> Reply:
    body: ScheduleBody = req.body
    _check_agent(ctx, body.agent, body.agent_name)
    spec = ScheduleSpec(
        cron=body.cron,
        timezone=body.timezone,
        agent=body.agent,
        message=body.message,
        agent_name=body.agent_name,
        session_id=body.session_id,
        title=body.title,
    )
    return Reply(schedule_response(await ctx.schedules.create(spec)), 201)


async def list_schedules(ctx: Context, req: Request) -> Reply:
    return Reply([schedule_response(s) for s in await ctx.schedules.list()])


async def get_schedule(ctx: Context, req: Request) -> Reply:
    return Reply(schedule_response(await ctx.schedules.get(_schedule_id(req))))


async def pause_schedule(ctx: Context, req: Request) -> Reply:
    return Reply(schedule_response(await ctx.schedules.pause(_schedule_id(req))))


async def resume_schedule(ctx: Context, req: Request) -> Reply:
    return Reply(schedule_response(await ctx.schedules.resume(_schedule_id(req))))


async def delete_schedule(ctx: Context, req: Request) -> Reply:
    await ctx.schedules.delete(_schedule_id(req))
    return Reply({"message": "schedule deleted"})


SCHEDULE = "/api/schedules/{schedule_id}"
SCHEDULE_OPERATIONS: tuple[tuple[tuple[Any, ...], dict[str, Any]], ...] = (
    # (name, method, path, handler, summary), then the Operation's other fields (_ops.py)
    (
        (
            "schedule_create",
            "POST",
            "/api/schedules",
            create_schedule,
            "Schedule runs: a cron expression in a time zone, an agent, a message, and a new "
            "session each time or one session (a follow-up while it is busy)",
        ),
        {"body": ScheduleBody, "success": 201, "errors": (400,)},
    ),
    (("schedule_list", "GET", "/api/schedules", list_schedules, "List schedules"), {}),
    (
        ("schedule_get", "GET", SCHEDULE, get_schedule, "A schedule and its last firing"),
        {"errors": (404,)},
    ),
    (
        (
            "schedule_pause",
            "POST",
            f"{SCHEDULE}/pause",
            pause_schedule,
            "Pause a schedule (nothing fires until it is resumed)",
        ),
        {"errors": (404,)},
    ),
    (
        (
            "schedule_resume",
            "POST",
            f"{SCHEDULE}/resume",
            resume_schedule,
            "Resume a schedule at its first occurrence from now (the missed ones do not fire)",
        ),
        {"errors": (404,)},
    ),
    (
        ("schedule_delete", "DELETE", SCHEDULE, delete_schedule, "Delete a schedule"),
        {"errors": (404,)},
    ),
)


def schedule_schema() -> dict[str, Any]:
    """The JSON schema of a schedule as the API answers it (the OpenAPI document)."""
    text, time, nullable_time = (
        {"type": "string"},
        {"type": "string", "format": "date-time"},
        {"type": ["string", "null"], "format": "date-time"},
    )
    return {
        "type": "object",
        "properties": {
            "id": text,
            "cron": text,
            "timezone": text,
            "agent": text,
            "agent_name": text,
            "message": text,
            "target": {"enum": ["new_session", "session"]},
            "session_id": text,
            "title": text,
            "paused": {"type": "boolean"},
            "next_fire": nullable_time,
            "created_at": time,
            "fires": {"type": "integer"},
            "last_occurrence": nullable_time,
            "last_fired_at": nullable_time,
            "last_session_id": text,
            "last_error": text,
        },
        "required": ["id", "cron", "timezone", "agent", "message", "paused", "next_fire"],
    }


def scheduled_forward(forwarder: Forwarder) -> RemoteFire:
    """A cluster's occurrence for a session another node owns: the run (or, while the session
    is busy, the follow-up) is sent to the owner as a client would send it. None: the owner
    is gone (its lease expired), so the occurrence is started here."""

    async def fire(schedule: Schedule, exc: OwnedElsewhere) -> str | None:
        session = quote(schedule.session_id, safe="")
        agent = quote(schedule.agent, safe="")
        if schedule.agent_name:
            agent += "/" + quote(schedule.agent_name, safe="")
        target = f"/api/sessions/{session}/agent/{agent}?on_disconnect=continue"
        run = {"messages": [{"role": "user", "content": schedule.message}]}
        try:
            status, body = await _send(forwarder, schedule.session_id, exc, target, run)
            if status == 409 and body.get("code") == "session_busy":
                target = f"/api/sessions/{session}/followup"
                follow_up = {"messages": [{"content": schedule.message}]}
                status, body = await _send(forwarder, schedule.session_id, exc, target, follow_up)
        except ClaimHere:
            return None
        if status >= 300:
            raise GreenroomError(f"the owning node answered {status}: {body.get('message', '')}")
        return schedule.session_id

    return fire


async def _send(
    forwarder: Forwarder, session_id: str, exc: OwnedElsewhere, target: str, body: Any
) -> tuple[int, dict[str, Any]]:
    headers = {"content-type": "application/json"}
    data = json.dumps(body).encode()
    upstream = await forwarder.send(session_id, exc, "POST", target, headers, data)
    if upstream.status == 200 and "agent/" in target:
        await upstream.aclose()  # the run started; it goes on without a reader (continue)
        return 200, {}
    raw = await upstream.read(forwarder.answer_timeout)
    try:
        answer = json.loads(raw) if raw.strip() else {}
    except ValueError:
        answer = {}
    return upstream.status, answer if isinstance(answer, dict) else {}
