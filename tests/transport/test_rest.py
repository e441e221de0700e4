"""The REST API through the quart test client: every route of the operation table with its
success status and body shape, and each documented error status.

The store is in memory and the runtime a FakeRuntime: the tests that wait (``?timeout=``,
``?wait=``) take the autojump clock (no thread offload, no sockets), so waits pass in virtual
time; the others need no clock at all.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing
from quart.testing import QuartClient as Client

from greenroom import __version__
from greenroom.actors import recover_session
from greenroom.agents import Redirect
from greenroom.domain import (
    AgentChoice,
    ChatMessage,
    FunctionCall,
    Message,
    StreamStarted,
    StreamStopped,
    ToolCall,
    utcnow,
)
from greenroom.persistence import ToolCallIntent, TurnMark, TurnStart
from greenroom.transport import OPERATIONS, AppConfig
from tests.fakes import drain, user, without_timestamp
from tests.transport.support import AGENT, UNAVAILABLE, Env, message_body, user_body

JSON_TYPE = {"Content-Type": "application/json"}

Response = Any  # quart's test response (a werkzeug Response with async body helpers)
SCRIPT = [StreamStarted(), AgentChoice("hello"), StreamStopped()]


@pytest.fixture
def runtime_options() -> dict[str, Any]:
    return {"script": list(SCRIPT)}


async def body_of(response: Response) -> Any:
    return json.loads(await response.get_data())


async def finish_turn(env: Env, sid: str, text: str = "hi") -> None:
    """Run one turn through the registry to its end: the session now has a runtime."""
    stream = await env.registry.session(sid).run(AGENT, (user(text),))
    with trio.fail_after(5):
        await drain(stream)


async def start_held_turn(env: Env, sid: str) -> Any:
    """Start a turn that holds until ``env.runtime.release()``; returns its run stream."""
    env.runtime.hold = True
    stream = await env.registry.session(sid).run(AGENT, (user("long"),))
    with trio.fail_after(5):
        await env.runtime.turn_started.wait()
    return stream


async def end_held_turn(env: Env, stream: Any) -> None:
    env.runtime.release()
    with trio.fail_after(5):
        await drain(stream)
    env.runtime.hold = False
    env.runtime.rearm()


async def add_message(client: Client, sid: str, role: str, content: str) -> int:
    r = await client.post(f"/api/sessions/{sid}/messages", json=message_body(role, content))
    assert r.status_code == 201, await r.get_data()
    message_id = (await body_of(r))["id"]
    assert isinstance(message_id, int)
    return message_id


def assert_error(body: Any, code: str, *, path: str | None = None) -> None:
    assert isinstance(body, dict)
    assert isinstance(body.get("message"), str) and body["message"], body
    assert body["code"] == code, body
    if path is not None:
        assert body.get("path") == path, body


def parse_sse(raw: bytes) -> list[tuple[int | None, Any]]:
    """(id, data JSON) of every data frame of an SSE body."""
    frames = []
    for block in raw.decode().split("\n\n"):
        ident, data = None, None
        for line in block.splitlines():
            if line.startswith("id: "):
                ident = int(line[4:])
            elif line.startswith("data: "):
                data = without_timestamp(json.loads(line[6:]))
        if data is not None:
            frames.append((ident, data))
    return frames


SESSION_KEYS = {
    "id",
    "title",
    "messages",
    "created_at",
    "tools_approved",
    "safety_policy",
    "input_tokens",
    "output_tokens",
    "working_dir",
    "permissions",
    "thinking",
    "hide_tool_results",
    "agent_file",
    "agent_name",
}


# --- every route: success status and body shape ----------------------------------------------

Case = Callable[[Client, Env, str], Awaitable[Any]]
CASES: dict[str, Case] = {}


def case(name: str) -> Callable[[Case], Case]:
    def register(fn: Case) -> Case:
        CASES[name] = fn
        return fn

    return register


@case("health")
async def _health(c: Client, env: Env, sid: str) -> Response:
    r = await c.get("/health")
    assert await body_of(r) == {"status": "ok", "version": __version__}
    return r


@case("ready")
async def _ready(c: Client, env: Env, sid: str) -> Response:
    r = await c.get("/ready")
    assert await body_of(r) == {"ready": True, "active_sessions": 1, "store_connected": True}
    return r


@case("ping")
async def _ping(c: Client, env: Env, sid: str) -> Response:
    r = await c.get("/api/ping")
    assert await body_of(r) == {"status": "ok"}
    return r


@case("wait_ready")
async def _wait_ready(c: Client, env: Env, sid: str) -> Response:
    await finish_turn(env, sid)
    r = await c.get("/api/ready", query_string={"timeout": "2s"})
    assert await body_of(r) == {"status": "ready"}
    return r


@case("list_agents")
async def _list_agents(c: Client, env: Env, sid: str) -> Response:
    r = await c.get("/api/agents")
    assert await body_of(r) == [{"name": AGENT, "description": "test agent", "multi": False}]
    return r


@case("get_agent")
async def _get_agent(c: Client, env: Env, sid: str) -> Response:
    r = await c.get(f"/api/agents/{AGENT}")
    assert "root" in (await body_of(r))["agents"]
    return r


@case("agent_tool_count")
async def _tool_count(c: Client, env: Env, sid: str) -> Response:
    r = await c.get(f"/api/agents/{AGENT}/root/tools/count")
    assert await body_of(r) == {"available_tools": 3}
    return r


@case("list")
async def _list(c: Client, env: Env, sid: str) -> Response:
    r = await c.get("/api/sessions")
    body = await body_of(r)
    assert [s["id"] for s in body] == [sid]
    assert set(body[0]) >= {
        "id",
        "title",
        "created_at",
        "num_messages",
        "input_tokens",
        "output_tokens",
    }
    assert body[0]["title"] == "Parent"
    assert isinstance(body[0]["created_at"], str)
    return r


@case("create")
async def _create(c: Client, env: Env, sid: str) -> Response:
    template = {"title": "  Trimmed  ", "max_iterations": 7, "id": "ignored", "messages": []}
    r = await c.post("/api/sessions", json=template)
    body = await body_of(r)
    assert body["title"] == "Trimmed"
    assert body["id"] not in ("ignored", sid)
    assert body["max_iterations"] == 7
    assert body["messages"] == []
    stored = await env.store.get_session(body["id"])
    assert stored.title == "Trimmed"
    return r


@case("batch_delete")
async def _batch_delete(c: Client, env: Env, sid: str) -> Response:
    other = await env.new_session()
    r = await c.post("/api/sessions/batch/delete", json={"session_ids": [other]})
    assert await body_of(r) == {"deleted_count": 1, "failed_count": 0}
    return r


@case("batch_export")
async def _batch_export(c: Client, env: Env, sid: str) -> Response:
    r = await c.post("/api/sessions/batch/export", json={"session_ids": [sid, "unknown"]})
    body = await body_of(r)
    assert body["export_format"] == "json"
    assert body["session_count"] == 1
    assert [s["id"] for s in body["sessions"]] == [sid]
    return r


@case("get")
async def _get(c: Client, env: Env, sid: str) -> Response:
    await add_message(c, sid, "user", "question")
    r = await c.get(f"/api/sessions/{sid}")
    body = await body_of(r)
    assert set(body) == SESSION_KEYS
    assert body["id"] == sid and body["title"] == "Parent"
    assert [m["message"]["content"] for m in body["messages"]] == ["question"]
    return r


@case("status")
async def _status(c: Client, env: Env, sid: str) -> Response:
    await finish_turn(env, sid)
    r = await c.get(f"/api/sessions/{sid}/status")
    body = await body_of(r)
    assert body["id"] == sid
    assert body["streaming"] is False
    assert body["agent"] == "root"
    assert body["num_messages"] == 1
    return r


@case("snapshot")
async def _snapshot(c: Client, env: Env, sid: str) -> Response:
    await finish_turn(env, sid)
    r = await c.get(f"/api/sessions/{sid}/snapshot")
    body = await body_of(r)
    assert set(body) == SESSION_KEYS | {"streaming", "agent", "last_event_seq", "cost"}
    assert body["last_event_seq"] == 1 + len(SCRIPT)  # session_title, then the script
    assert body["streaming"] is False and body["agent"] == "root"
    return r


@case("fork")
async def _fork(c: Client, env: Env, sid: str) -> Response:
    await add_message(c, sid, "user", "one")
    await add_message(c, sid, "assistant", "answer")
    await add_message(c, sid, "user", "two")
    r = await c.post(f"/api/sessions/{sid}/fork", json={"message_index": 1})
    body = await body_of(r)
    assert set(body) == SESSION_KEYS
    assert body["id"] != sid
    assert body["title"] == "Parent (fork 1)"
    assert [m["message"]["content"] for m in body["messages"]] == ["one", "answer"]
    return r


@case("delete")
async def _delete(c: Client, env: Env, sid: str) -> Response:
    r = await c.delete(f"/api/sessions/{sid}")
    assert await body_of(r) == {"message": "session deleted"}
    assert (await c.get(f"/api/sessions/{sid}")).status_code == 404
    return r


async def _run_at(c: Client, env: Env, sid: str, path: str) -> Response:
    r = await c.post(path, json=user_body("hello"))
    assert r.headers["Content-Type"].startswith("text/event-stream")
    assert r.headers["Cache-Control"] == "no-cache"
    frames = parse_sse(await r.get_data(as_text=False))
    assert [data["type"] for _, data in frames] == [
        "session_title",  # the session already has a title: announced first
        "stream_started",
        "agent_choice",
        "stream_stopped",
    ]
    assert frames[0][1] == {"type": "session_title", "session_id": sid, "title": "Parent"}
    assert [ident for ident, _ in frames] == [1, 2, 3, 4]  # the event log's seqs
    return r


@case("run")
async def _run(c: Client, env: Env, sid: str) -> Response:
    r = await _run_at(c, env, sid, f"/api/sessions/{sid}/agent/{AGENT}")
    assert env.factory.builds == [(AGENT, "", sid)]
    return r


@case("run_agent")
async def _run_agent(c: Client, env: Env, sid: str) -> Response:
    r = await _run_at(c, env, sid, f"/api/sessions/{sid}/agent/{AGENT}/root")
    assert env.factory.builds == [(AGENT, "root", sid)]
    return r


@case("events")
async def _events(c: Client, env: Env, sid: str) -> Response:
    await finish_turn(env, sid)
    async with trio.open_nursery() as nursery:

        async def delete_when_subscribed() -> None:
            await trio.testing.wait_all_tasks_blocked()
            await env.registry.delete(sid)

        nursery.start_soon(delete_when_subscribed)
        r = await c.get(f"/api/sessions/{sid}/events", query_string={"since": "2"})
    assert r.headers["Content-Type"].startswith("text/event-stream")
    frames = parse_sse(await r.get_data(as_text=False))
    assert [(ident, data["type"]) for ident, data in frames] == [
        (3, "agent_choice"),
        (4, "stream_stopped"),
        (5, "session_exited"),
    ]
    return r


@case("elicitation")
async def _elicitation(c: Client, env: Env, sid: str) -> Response:
    await finish_turn(env, sid)
    answer = {"action": "accept", "content": {"confirmed": True}, "elicitation_id": "e1"}
    r = await c.post(f"/api/sessions/{sid}/elicitation", json=answer)
    assert await body_of(r) is None
    assert env.runtime.elicitation_answers == [("accept", {"confirmed": True}, "e1")]
    return r


@case("cancel")
async def _cancel(c: Client, env: Env, sid: str) -> Response:
    idle = await c.post(f"/api/sessions/{sid}/cancel")
    assert await body_of(idle) == {"cancelled": False}
    stream = await start_held_turn(env, sid)
    r = await c.post(f"/api/sessions/{sid}/cancel")
    assert await body_of(r) == {"cancelled": True}
    with trio.fail_after(5):
        await drain(stream)  # the turn ended without being released
    status = await body_of(await c.get(f"/api/sessions/{sid}/status"))
    assert status["streaming"] is False
    env.runtime.hold = False
    env.runtime.rearm()
    return r


@case("compact")
async def _compact(c: Client, env: Env, sid: str) -> Response:
    refused = await c.post(f"/api/sessions/{sid}/compact")  # no runtime, no agent named
    assert refused.status_code == 409, await refused.get_data()
    await finish_turn(env, sid)
    r = await c.post(f"/api/sessions/{sid}/compact", json={"instructions": "keep the names"})
    assert await body_of(r) == {"status": "compacting"}
    await trio.testing.wait_all_tasks_blocked()
    assert env.runtime.compactions == ["keep the names"]
    session = (await env.registry.session(sid).snapshot()).session
    assert [type(i).__name__ for i in session.items][-1] == "Summary"
    return r


@case("steer")
async def _steer(c: Client, env: Env, sid: str) -> Response:
    await finish_turn(env, sid)
    r = await c.post(f"/api/sessions/{sid}/steer", json=user_body("also this"))
    assert await body_of(r) == {"status": "queued"}
    assert [m.content for m in env.runtime.steered] == ["also this"]
    return r


@case("followup")
async def _followup(c: Client, env: Env, sid: str) -> Response:
    await finish_turn(env, sid)
    r = await c.post(f"/api/sessions/{sid}/followup", json=user_body("then this"))
    assert await body_of(r) == {"status": "queued_idle", "duplicate": False}
    assert [m.content for m in env.runtime.followed] == ["then this"]
    return r


@case("resume")
async def _resume(c: Client, env: Env, sid: str) -> Response:
    await finish_turn(env, sid)
    r = await c.post(f"/api/sessions/{sid}/resume", json={"confirmation": "approve-session"})
    assert await body_of(r) == {"message": "session resumed"}
    assert [req.type for req in env.runtime.resumed] == ["approve-autonomous"]
    return r


@case("toggle_tools")
async def _toggle(c: Client, env: Env, sid: str) -> Response:
    r = await c.post(f"/api/sessions/{sid}/tools/toggle")
    assert await body_of(r) is None
    assert (await env.registry.get(sid)).tools_approved is True
    return r


@case("toggle_thinking")
async def _toggle_thinking(c: Client, env: Env, sid: str) -> Response:
    assert (await body_of(await c.get(f"/api/sessions/{sid}")))["thinking"] is True
    r = await c.post(f"/api/sessions/{sid}/thinking/toggle")
    assert await body_of(r) is None
    assert (await env.registry.get(sid)).thinking is False
    assert (await body_of(await c.get(f"/api/sessions/{sid}")))["thinking"] is False
    return r


@case("set_safety_policy")
async def _safety(c: Client, env: Env, sid: str) -> Response:
    r = await c.patch(f"/api/sessions/{sid}/safety-policy", json={"safety_policy": "strict"})
    assert await body_of(r) == {"message": "session safety policy updated"}
    assert (await env.store.get_session(sid)).safety_policy == "strict"
    return r


@case("set_permissions")
async def _permissions(c: Client, env: Env, sid: str) -> Response:
    perms = {"allow": ["read_*"], "ask": [], "deny": ["shell"]}
    r = await c.patch(f"/api/sessions/{sid}/permissions", json={"permissions": perms})
    assert await body_of(r) == {"message": "session permissions updated"}
    got = await body_of(await c.get(f"/api/sessions/{sid}"))
    assert got["permissions"] == perms
    return r


@case("set_title")
async def _title(c: Client, env: Env, sid: str) -> Response:
    r = await c.patch(f"/api/sessions/{sid}/title", json={"title": " New "})
    assert await body_of(r) == {"id": sid, "title": "New"}
    assert (await env.store.get_session(sid)).title == "New"
    return r


@case("set_tokens")
async def _tokens(c: Client, env: Env, sid: str) -> Response:
    body = {"input_tokens": 10, "output_tokens": 20, "cost": 0.5}
    r = await c.patch(f"/api/sessions/{sid}/tokens", json=body)
    assert await body_of(r) == {"status": "updated"}
    stored = await env.store.get_session(sid)
    assert (stored.input_tokens, stored.output_tokens, stored.cost) == (10, 20, 0.5)
    return r


@case("set_starred")
async def _starred(c: Client, env: Env, sid: str) -> Response:
    r = await c.patch(f"/api/sessions/{sid}/starred", json={"starred": True})
    assert await body_of(r) == {"status": "updated"}
    assert (await env.store.get_session(sid)).starred is True
    return r


@case("models")
async def _models(c: Client, env: Env, sid: str) -> Response:
    env.runtime.model_switching = True
    await finish_turn(env, sid)
    r = await c.get(f"/api/sessions/{sid}/models")
    body = await body_of(r)
    assert body["agent"] == "root"
    assert body["current_model_ref"] == ""
    assert [m["ref"] for m in body["models"]] == ["openai/gpt-4o"]
    return r


@case("add_message")
async def _add_message(c: Client, env: Env, sid: str) -> Response:
    r = await c.post(f"/api/sessions/{sid}/messages", json=message_body("user", "stored"))
    body = await body_of(r)
    assert body["status"] == "added" and isinstance(body["id"], int)
    got = await body_of(await c.get(f"/api/sessions/{sid}"))
    assert [m["message"]["content"] for m in got["messages"]] == ["stored"]
    return r


@case("update_message")
async def _update_message(c: Client, env: Env, sid: str) -> Response:
    message_id = await add_message(c, sid, "user", "original")
    r = await c.patch(
        f"/api/sessions/{sid}/messages/{message_id}", json=message_body("user", "edited")
    )
    assert await body_of(r) == {"status": "updated"}
    got = await body_of(await c.get(f"/api/sessions/{sid}"))
    assert [m["message"]["content"] for m in got["messages"]] == ["edited"]
    return r


@case("add_summary")
async def _add_summary(c: Client, env: Env, sid: str) -> Response:
    body = {"summary": "so far", "tokens": 3, "usage": {"input_tokens": 0, "output_tokens": 0}}
    r = await c.post(f"/api/sessions/{sid}/summaries", json=body)
    assert await body_of(r) == {"status": "added"}
    return r


@case("queue")
async def _queue(c: Client, env: Env, sid: str) -> Response:
    await finish_turn(env, sid)
    r = await c.get(f"/api/sessions/{sid}/queue")
    assert await body_of(r) == {
        "steer": {"depth": 0, "capacity": 8},
        "followup": {"depth": 0, "capacity": 8},
    }
    return r


@case("approvals")
async def _approvals(c: Client, env: Env, sid: str) -> Response:
    r = await c.get(f"/api/sessions/{sid}/approvals")
    assert await body_of(r) == []  # decisions are recorded by turns (tests/test_tools_e2e.py)
    return r


@case("recovery")
async def _recovery(c: Client, env: Env, sid: str) -> Response:
    await add_message(c, sid, "user", "kept")
    r = await c.get(f"/api/sessions/{sid}/recovery")
    body = await body_of(r)
    assert body["id"] == sid
    assert "errors" not in body  # only present when an error was recorded
    assert len(body["messages"]) == 1
    return r


async def leave_in_doubt(env: Env, sid: str, call_id: str = "call-1") -> None:
    """What a crash during a tool call leaves, repaired by recovery: the call is in doubt."""
    store = env.store
    lease = await store.ownership.claim(sid)
    start = TurnStart("turn-1", sid, 1, utcnow(), "agent")
    await store.writer.begin_turn(lease, start, (Message.user("go"),))
    call = ToolCall(call_id, FunctionCall("side_effect", '{"n": 1}'))
    assistant = Message(ChatMessage("assistant", "", tool_calls=(call,)))
    await store.writer.add_turn_message(sid, assistant, TurnMark("turn-1", 0))
    intent = ToolCallIntent(sid, call_id, "turn-1", "side_effect", '{"n": 1}', 0, utcnow())
    await store.writer.begin_tool_call(lease, intent)
    await recover_session(store, sid)


@case("recovery_decisions")
async def _recovery_decisions(c: Client, env: Env, sid: str) -> Response:
    r = await c.get(f"/api/sessions/{sid}/recovery/decisions")
    assert await body_of(r) == {"state": "idle", "in_doubt": []}
    other = await env.new_session("crashed")
    await leave_in_doubt(env, other)
    r = await c.get(f"/api/sessions/{other}/recovery/decisions")
    body = await body_of(r)
    assert body["state"] == "needs_decision"
    (call,) = body["in_doubt"]
    assert {k: call[k] for k in ("tool_call_id", "name", "arguments", "turn_id")} == {
        "tool_call_id": "call-1",
        "name": "side_effect",
        "arguments": '{"n": 1}',
        "turn_id": "turn-1",
    }
    assert call["started_at"].endswith("Z")
    return r


@case("recovery_decide")
async def _recovery_decide(c: Client, env: Env, sid: str) -> Response:
    await leave_in_doubt(env, sid)
    r = await c.post(f"/api/sessions/{sid}/agent/{AGENT}", json=user_body("blocked"))
    assert r.status_code == 409
    assert (await body_of(r))["code"] == "needs_decision"
    decision = {"tool_call_id": "call-1", "action": "done", "result": "7 files"}
    r = await c.post(f"/api/sessions/{sid}/recovery/decisions", json=decision)
    body = await body_of(r)
    assert {k: body[k] for k in ("tool_call_id", "action", "result", "is_error", "pending")} == {
        "tool_call_id": "call-1",
        "action": "done",
        "result": "7 files",
        "is_error": False,
        "pending": 0,
    }
    assert body["decided_by"].startswith("http ")  # no name given: the transport and address
    again = await c.post(f"/api/sessions/{sid}/recovery/decisions", json=decision)
    assert again.status_code == 404
    assert (await body_of(again))["code"] == "tool_call_not_found"
    return r


@case("mcp_oauth_callback")
async def _mcp_oauth_callback(c: Client, env: Env, sid: str) -> Response:
    flows = env.app.greenroom.oauth  # type: ignore[attr-defined]
    waiting = flows.open("st-1")
    r = await c.post("/api/mcp-oauth/callback?state=st-1&code=c-1")
    assert await body_of(r) is None
    assert waiting.receive_nowait() == Redirect(code="c-1")
    again = await c.post("/api/mcp-oauth/callback?state=st-1&code=c-1")
    assert (again.status_code, (await body_of(again))["code"]) == (404, "oauth_flow_not_found")
    missing = await c.post("/api/mcp-oauth/callback?code=c-1")
    assert (missing.status_code, (await body_of(missing))["path"]) == (400, "query.state")
    flows.open("st-2")
    neither = await c.post("/api/mcp-oauth/callback?state=st-2")
    assert (neither.status_code, (await body_of(neither))["path"]) == (400, "query.code")
    return r


@case("list_runs")
async def _list_runs(c: Client, env: Env, sid: str) -> Response:
    await finish_turn(env, sid)
    r = await c.get(f"/api/sessions/{sid}/runs")
    (run,) = (await body_of(r))["runs"]
    assert (run["session_id"], run["status"], run["agent"]) == (sid, "completed", AGENT)
    return r


@case("get_run")
async def _get_run(c: Client, env: Env, sid: str) -> Response:
    await finish_turn(env, sid)
    (record,) = await env.registry.runs(sid)
    r = await c.get(f"/api/sessions/{sid}/runs/{record.turn.turn_id}")
    assert (await body_of(r))["id"] == record.turn.turn_id
    return r


@case("mcp_oauth_landing")
async def _mcp_oauth_landing(c: Client, env: Env, sid: str) -> Response:
    flows = env.app.greenroom.oauth  # type: ignore[attr-defined]
    waiting = flows.open("st-3")
    r = await c.get("/mcp-oauth/callback?state=st-3&error=access_denied&error_description=no")
    assert (await body_of(r))["message"].startswith("authorization received")
    assert waiting.receive_nowait() == Redirect(error="access_denied", error_description="no")
    return r


async def _schedule(c: Client, **extra: Any) -> dict[str, Any]:
    body = {"cron": "0 9 * * 1-5", "timezone": "Europe/Paris", "agent": AGENT, "message": "hi"}
    r = await c.post("/api/schedules", json={**body, **extra})
    assert r.status_code == 201, await r.get_data()
    return await body_of(r)  # type: ignore[no-any-return]


@case("schedule_create")
async def _schedule_create(c: Client, env: Env, sid: str) -> Response:
    body = {"cron": "*/5 * * * *", "agent": AGENT, "message": "go", "session_id": sid}
    r = await c.post("/api/schedules", json=body)
    made = await body_of(r)
    assert (made["target"], made["session_id"], made["timezone"]) == ("session", sid, "UTC")
    assert made["next_fire"].endswith(("0:00Z", "5:00Z")) and made["fires"] == 0
    return r


@case("schedule_list")
async def _schedule_list(c: Client, env: Env, sid: str) -> Response:
    made = await _schedule(c)
    r = await c.get("/api/schedules")
    assert [s["id"] for s in await body_of(r)] == [made["id"]]
    return r


@case("schedule_get")
async def _schedule_get(c: Client, env: Env, sid: str) -> Response:
    made = await _schedule(c)
    r = await c.get(f"/api/schedules/{made['id']}")
    assert await body_of(r) == made
    return r


@case("schedule_pause")
async def _schedule_pause(c: Client, env: Env, sid: str) -> Response:
    made = await _schedule(c)
    r = await c.post(f"/api/schedules/{made['id']}/pause")
    assert (await body_of(r))["paused"] is True
    return r


@case("schedule_resume")
async def _schedule_resume(c: Client, env: Env, sid: str) -> Response:
    made = await _schedule(c)
    await c.post(f"/api/schedules/{made['id']}/pause")
    r = await c.post(f"/api/schedules/{made['id']}/resume")
    assert (await body_of(r))["paused"] is False
    return r


@case("schedule_delete")
async def _schedule_delete(c: Client, env: Env, sid: str) -> Response:
    made = await _schedule(c)
    r = await c.delete(f"/api/schedules/{made['id']}")
    assert await body_of(r) == {"message": "schedule deleted"}
    assert (await c.get(f"/api/schedules/{made['id']}")).status_code == 404
    return r


def test_every_rest_operation_has_a_success_case() -> None:
    assert set(CASES) == {op.name for op in OPERATIONS if op.rest}


@pytest.mark.parametrize("op", [op for op in OPERATIONS if op.rest], ids=lambda op: op.name)
async def test_operation_success(op: Any, client: Client, env: Env) -> None:
    sid = await env.new_session("Parent")
    response = await CASES[op.name](client, env, sid)
    assert response.status_code == op.success, await response.get_data()


# --- 400: the field path in the body ---------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "route", "body", "path", "words"),
    [
        ("POST", "/api/sessions", {"title": 5}, "$.title", "expected str"),
        ("POST", "/api/sessions", {"tools_approved": "yes"}, "$.tools_approved", "bool"),
        ("PATCH", "{s}/title", {}, "$.title", "required field missing"),
        ("PATCH", "{s}/tokens", {"input_tokens": 1}, "$.output_tokens", "missing"),
        ("PATCH", "{s}/starred", {"starred": "true"}, "$.starred", "bool"),
        ("POST", "{s}/steer", {"messages": [{"role": 1}]}, "$.messages[0].role", "string"),
        ("POST", "{s}/steer", {"messages": []}, "$.messages", "at least one"),
        ("POST", "{s}/messages", {"message": None}, "$.message", "expected object, got null"),
        ("POST", "{s}/messages", {}, "$.message", "required"),
        ("POST", "{s}/summaries", {"summary": " "}, "$.summary", "blank"),
        (
            "POST",
            "{s}/summaries",
            {"summary": "x", "usage": {"input_tokens": -1}},
            "$.usage.input_tokens",
            "at least 0",
        ),
        ("POST", "{s}/resume", {"confirmation": "maybe"}, "$.confirmation", "approve"),
        ("POST", "{s}/resume", {}, "$.confirmation", "missing"),
        ("POST", "{s}/elicitation", {"action": "shrug"}, "$.action", ""),
        ("POST", "{s}/fork", {}, "$.message_index", "required"),
        ("POST", "{s}/fork", {"message_index": "1"}, "$.message_index", ""),
        (
            "PATCH",
            "{s}/safety-policy",
            {"safety_policy": "yolo"},
            "$.safety_policy",
            "expected one of '', strict",
        ),
        ("POST", "/api/sessions/batch/delete", {"session_ids": []}, "$.session_ids", "at least"),
        ("POST", "/api/sessions/batch/export", {"session_ids": "abc"}, "$.session_ids", ""),
        ("POST", "{s}/agent/agent", {"messages": [{"content": 3}]}, "$.messages[0].content", ""),
    ],
)
async def test_invalid_body_names_the_field(
    client: Client,
    env: Env,
    method: str,
    route: str,
    body: Any,
    path: str,
    words: str,
) -> None:
    sid = await env.new_session()
    await finish_turn(env, sid)  # a runtime exists: only the body can be wrong
    r = await client.open(route.format(s=f"/api/sessions/{sid}"), method=method, json=body)
    assert r.status_code == 400, await r.get_data()
    got = await body_of(r)
    assert set(got) == {"message", "code", "path"}
    assert got["path"] == path
    assert got["code"].startswith("invalid") or got["code"] == "invalid_request", got
    assert words in got["message"]


@pytest.mark.parametrize(
    "raw",
    [
        b'{"title": "\xff\xfe"}',  # invalid UTF-8
        b"\xc3\x28",
        b"[" * 100_000 + b"]" * 100_000,  # deep enough to blow the recursion limit
        b'{"a":' * 65 + b"1" + b"}" * 65,  # just over the depth limit
        b'{"title": ',  # truncated
        b"not json",
        b"[1, 2]",  # not an object
        b'"text"',
    ],
    ids=["bad-utf8", "bad-utf8-2", "deep-100k", "depth-65", "truncated", "garbage", "array", "str"],
)
async def test_malformed_json_is_400_never_500(client: Client, env: Env, raw: bytes) -> None:
    sid = await env.new_session()
    for route, method in [
        ("/api/sessions", "POST"),
        (f"/api/sessions/{sid}/title", "PATCH"),
        (f"/api/sessions/{sid}/agent/{AGENT}", "POST"),
    ]:
        r = await client.open(
            route, method=method, data=raw, headers={"Content-Type": "application/json"}
        )
        assert r.status_code == 400, (route, await r.get_data())
        assert_error(await body_of(r), "invalid_request")
    assert (await client.get("/health")).status_code == 200


async def test_nesting_inside_strings_is_not_depth(client: Client, env: Env) -> None:
    title = "[" * 500 + "{" * 500
    r = await client.post("/api/sessions", json={"title": title})
    assert r.status_code == 200
    assert (await body_of(r))["title"] == title


async def test_empty_body(client: Client, env: Env) -> None:
    sid = await env.new_session()
    r = await client.post("/api/sessions", data=b"")  # the template is optional
    assert r.status_code == 200
    r = await client.patch(f"/api/sessions/{sid}/title", data=b"")
    assert r.status_code == 400
    assert_error(await body_of(r), "invalid_request")


async def test_bad_working_dir(client: Client, env: Env, tmp_path: Any) -> None:
    r = await client.post("/api/sessions", json={"working_dir": str(tmp_path / "missing")})
    assert r.status_code == 400
    assert_error(await body_of(r), "invalid_working_dir", path="$.working_dir")
    r = await client.post("/api/sessions", json={"working_dir": f"{tmp_path}/a..b"})
    assert r.status_code == 400
    r = await client.post("/api/sessions", json={"working_dir": f" {tmp_path} "})
    assert r.status_code == 200
    assert (await body_of(r))["working_dir"] == str(tmp_path)


@pytest.mark.parametrize(
    "route",
    [
        "/api/ready?timeout=soon",
        "{s}/status?wait=1x",
        "{s}/status?wait=-1s",
        "{s}?wait=true&timeout=abc",
        "{s}/agent/agent?on_disconnect=maybe",
    ],
)
async def test_bad_query_is_400(client: Client, env: Env, route: str) -> None:
    sid = await env.new_session()
    route = route.format(s=f"/api/sessions/{sid}")
    method = "DELETE" if "timeout=abc" in route else "POST" if "agent" in route else "GET"
    kwargs: dict[str, Any] = {"json": user_body("x")} if method == "POST" else {}
    r = await client.open(route, method=method, **kwargs)
    assert r.status_code == 400, await r.get_data()
    got = await body_of(r)
    assert got["code"] == "invalid_request"
    assert got["path"].startswith("query.")
    if method == "DELETE":  # refused before anything happened
        assert (await client.get(f"/api/sessions/{sid}")).status_code == 200


# --- 404 -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "suffix", "body"),
    [
        ("GET", "", None),
        ("DELETE", "", None),
        ("GET", "/recovery", None),
        ("POST", "/fork", {"message_index": 0}),
        ("PATCH", "/title", {"title": "x"}),
        ("PATCH", "/tokens", {"input_tokens": 1, "output_tokens": 1}),
        ("PATCH", "/starred", {"starred": True}),
        ("PATCH", "/permissions", {"permissions": None}),
        ("PATCH", "/safety-policy", {"safety_policy": "strict"}),
        ("POST", "/tools/toggle", None),
        ("POST", "/messages", message_body("user", "x")),
        ("PATCH", "/messages/1", message_body("user", "x")),
        ("POST", "/summaries", {"summary": "x"}),
        ("POST", "/steer", user_body("x")),
        ("POST", "/followup", user_body("x")),
        ("POST", "/resume", {"confirmation": "approve"}),
        ("POST", "/elicitation", {"action": "accept"}),
        ("POST", "/agent/agent", user_body("x")),
        ("GET", "/status", None),
        ("GET", "/queue", None),
        ("GET", "/models", None),
        ("GET", "/events", None),
    ],
)
async def test_unknown_session_is_404(
    client: Client, env: Env, method: str, suffix: str, body: Any
) -> None:
    kwargs = {} if body is None else {"json": body}
    r = await client.open(f"/api/sessions/no-such-session{suffix}", method=method, **kwargs)
    assert r.status_code == 404, await r.get_data()
    assert_error(await body_of(r), "session_not_found")


async def test_snapshot_of_unknown_session(client: Client, env: Env) -> None:
    r = await client.get("/api/sessions/nope/snapshot")
    assert r.status_code == 404
    assert_error(await body_of(r), "unknown_session")


async def test_no_runtime_yet(client: Client, env: Env) -> None:
    """Routes that need a live runtime: 404 (status, queue, models) or 409 (steer, ...)."""
    sid = await env.new_session()
    s = f"/api/sessions/{sid}"
    for route in (f"{s}/status", f"{s}/queue", f"{s}/models"):
        r = await client.get(route)
        assert r.status_code == 404, route
        assert_error(await body_of(r), "session_not_running")
    for route, body in [
        (f"{s}/steer", user_body("x")),
        (f"{s}/followup", user_body("x")),
        (f"{s}/resume", {"confirmation": "approve"}),
        (f"{s}/elicitation", {"action": "decline"}),
    ]:
        r = await client.post(route, json=body)
        assert r.status_code == 409, route
        assert_error(await body_of(r), "session_not_running")


async def test_status_wait_times_out_with_503(
    client: Client, env: Env, autojump_clock: trio.testing.MockClock
) -> None:
    sid = await env.new_session()
    r = await client.get(f"/api/sessions/{sid}/status", query_string={"wait": "2s"})
    assert r.status_code == 503
    assert_error(await body_of(r), "wait_timed_out")


async def test_status_wait_sees_a_runtime_attach(
    client: Client, env: Env, autojump_clock: trio.testing.MockClock
) -> None:
    sid = await env.new_session()
    async with trio.open_nursery() as nursery:

        async def run_later() -> None:
            await trio.sleep(0.5)  # virtual time (autojump clock)
            await finish_turn(env, sid)

        nursery.start_soon(run_later)
        r = await client.get(f"/api/sessions/{sid}/status", query_string={"wait": "5s"})
    assert r.status_code == 200
    assert (await body_of(r))["id"] == sid


async def test_api_ready_times_out_with_503(
    client: Client, env: Env, autojump_clock: trio.testing.MockClock
) -> None:
    start = trio.current_time()
    r = await client.get("/api/ready", query_string={"timeout": "1m30s"})
    assert r.status_code == 503
    assert trio.current_time() - start == pytest.approx(90, abs=0.5)
    r = await client.get("/api/ready", query_string={"timeout": "1h"})  # capped at 5 minutes
    assert r.status_code == 503
    assert trio.current_time() - start == pytest.approx(90 + 300, abs=1)


async def test_unknown_agent_source(client: Client, env: Env) -> None:
    sid = await env.new_session()
    r = await client.post(f"/api/sessions/{sid}/agent/nope", json=user_body("x"))
    assert r.status_code == 404
    assert_error(await body_of(r), "agent_not_found")
    for route in ("/api/agents/nope", "/api/agents/nope/root/tools/count"):
        r = await client.get(route)
        assert r.status_code == 404
        assert_error(await body_of(r), "agent_not_found")
    for route in (f"/api/agents/{UNAVAILABLE}", f"/api/agents/{UNAVAILABLE}/root/tools/count"):
        r = await client.get(route)
        assert r.status_code == 502
        assert_error(await body_of(r), "agent_source_unavailable")


async def test_model_override_unsupported_is_422(client: Client, env: Env) -> None:
    sid = await env.new_session()
    body = {**user_body("x"), "model": "openai/gpt-4o"}
    r = await client.post(f"/api/sessions/{sid}/agent/{AGENT}", json=body)
    assert r.status_code == 422
    assert_error(await body_of(r), "model_switching_not_supported")
    r = await client.get(f"/api/sessions/{sid}/models")
    assert r.status_code == 422
    got = await body_of(await client.get(f"/api/sessions/{sid}"))
    assert got["messages"] == []  # the refused run stored nothing


async def test_model_override_is_applied(client: Client, env: Env) -> None:
    env.runtime.model_switching = True
    sid = await env.new_session()
    body = {**user_body("x"), "model": "openai/gpt-4o"}
    r = await client.post(f"/api/sessions/{sid}/agent/{AGENT}", json=body)
    assert r.status_code == 200
    assert env.runtime.model_calls == [("root", "openai/gpt-4o")]
    r = await client.get(f"/api/sessions/{sid}/models")
    assert (await body_of(r))["current_model_ref"] == "openai/gpt-4o"


# --- messages ----------------------------------------------------------------------------------


async def test_update_message_of_another_session_is_404(client: Client, env: Env) -> None:
    a, b = await env.new_session(), await env.new_session()
    message_id = await add_message(client, a, "user", "original")
    r = await client.patch(
        f"/api/sessions/{b}/messages/{message_id}", json=message_body("user", "hijack")
    )
    assert r.status_code == 404
    assert_error(await body_of(r), "message_not_found")
    got = await body_of(await client.get(f"/api/sessions/{a}"))
    assert [m["message"]["content"] for m in got["messages"]] == ["original"]


@pytest.mark.parametrize("bad_id", ["12junk", "abc", "1.5", "0x10"])
async def test_non_integer_message_id_is_400(client: Client, env: Env, bad_id: str) -> None:
    sid = await env.new_session()
    message_id = await add_message(client, sid, "user", "original")
    route = f"/api/sessions/{sid}/messages/{message_id}{bad_id}"
    if bad_id in ("abc", "0x10"):
        route = f"/api/sessions/{sid}/messages/{bad_id}"
    r = await client.patch(route, json=message_body("user", "x"))
    assert r.status_code == 400
    got = await body_of(r)
    assert_error(got, "invalid_message_id")
    assert "invalid message ID" in got["message"]


async def test_unknown_message_id_is_404(client: Client, env: Env) -> None:
    sid = await env.new_session()
    r = await client.patch(f"/api/sessions/{sid}/messages/999", json=message_body("user", "x"))
    assert r.status_code == 404
    assert_error(await body_of(r), "message_not_found")


# --- 409 busy and 429 --------------------------------------------------------------------------


async def test_busy_while_a_turn_runs(client: Client, env: Env) -> None:
    sid = await env.new_session()
    message_id = await add_message(client, sid, "user", "original")
    stream = await start_held_turn(env, sid)
    s = f"/api/sessions/{sid}"

    r = await client.post(f"{s}/messages", json=message_body("user", "sneaky"))
    assert r.status_code == 409
    assert_error(await body_of(r), "session_busy")
    r = await client.patch(f"{s}/messages/{message_id}", json=message_body("user", "edit"))
    assert r.status_code == 409
    assert_error(await body_of(r), "session_busy")
    r = await client.post(f"{s}/agent/{AGENT}", json=user_body("second"))
    assert r.status_code == 409
    assert_error(await body_of(r), "session_busy")
    r = await client.get(f"{s}/status")
    assert (await body_of(r))["streaming"] is True
    r = await client.post(f"{s}/followup", json=user_body("later"))
    assert r.status_code == 202
    assert await body_of(r) == {"status": "queued_streaming", "duplicate": False}

    await end_held_turn(env, stream)
    got = await body_of(await client.get(s))
    assert [m["message"]["content"] for m in got["messages"]] == ["original", "long"]
    r = await client.post(f"{s}/messages", json=message_body("user", "now"))
    assert r.status_code == 201
    r = await client.patch(f"{s}/messages/{message_id}", json=message_body("user", "edited"))
    assert r.status_code == 200


@pytest.mark.parametrize("runtime_options", [{"queue_capacity": 1}])
async def test_steer_queue_full_is_429(client: Client, env: Env) -> None:
    sid = await env.new_session()
    await finish_turn(env, sid)
    r = await client.post(f"/api/sessions/{sid}/steer", json=user_body("one"))
    assert r.status_code == 202
    r = await client.post(f"/api/sessions/{sid}/steer", json=user_body("two"))
    assert r.status_code == 429
    assert r.headers["Retry-After"] == "1"
    assert_error(await body_of(r), "queue_full")
    r = await client.post(f"/api/sessions/{sid}/followup", json=user_body("a"))
    assert r.status_code == 202
    r = await client.post(f"/api/sessions/{sid}/followup", json=user_body("b"))
    assert r.status_code == 429
    assert r.headers["Retry-After"] == "1"


async def test_followup_idempotency_key(client: Client, env: Env) -> None:
    sid = await env.new_session()
    await finish_turn(env, sid)
    route = f"/api/sessions/{sid}/followup"
    r = await client.post(route, json=user_body("once"), headers={"Idempotency-Key": "k1"})
    assert await body_of(r) == {"status": "queued_idle", "duplicate": False}
    r = await client.post(route, json=user_body("once"), headers={"Idempotency-Key": "k1"})
    assert r.status_code == 202
    assert await body_of(r) == {"status": "duplicate", "duplicate": True}
    r = await client.post(route, json=user_body("again"), headers={"Idempotency-Key": "k2"})
    assert (await body_of(r))["duplicate"] is False
    assert [m.content for m in env.runtime.followed] == ["once", "again"]


# --- 413 ---------------------------------------------------------------------------------------


async def test_body_over_one_mib_is_413(client: Client, env: Env) -> None:
    sid = await env.new_session()
    big = json.dumps({"title": "x" * (1024 * 1024)}).encode()
    for route, method in [
        ("/api/sessions", "POST"),
        (f"/api/sessions/{sid}/title", "PATCH"),
        (f"/api/sessions/{sid}/agent/{AGENT}", "POST"),
    ]:
        r = await client.open(route, method=method, data=big, headers=JSON_TYPE)
        assert r.status_code == 413, route
        assert_error(await body_of(r), "payload_too_large")
    assert (await env.store.get_session(sid)).title == ""
    fits = json.dumps(message_body("user", "y" * (1024 * 1024 - 60))).encode()
    assert len(fits) <= 1024 * 1024
    r = await client.post(f"/api/sessions/{sid}/messages", data=fits, headers=JSON_TYPE)
    assert r.status_code == 201


# --- fork ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["message_index", "user_message_index"])
async def test_fork_index_and_alias(client: Client, env: Env, field: str) -> None:
    sid = await env.new_session("Original")
    for role, text in [("user", "u0"), ("assistant", "a0"), ("user", "u1"), ("assistant", "a1")]:
        await add_message(client, sid, role, text)
    r = await client.post(f"/api/sessions/{sid}/fork", json={field: 0})
    assert r.status_code == 200
    first = await body_of(r)
    assert first["messages"] == [] and first["title"] == "Original (fork 1)"
    r = await client.post(f"/api/sessions/{sid}/fork", json={field: 1})
    second = await body_of(r)
    assert [m["message"]["content"] for m in second["messages"]] == ["u0", "a0"]
    assert second["title"] == "Original (fork 2)"
    listed = {s["id"] for s in await body_of(await client.get("/api/sessions"))}
    assert listed == {sid, first["id"], second["id"]}


@pytest.mark.parametrize(
    ("index", "code"),
    [(-1, "invalid_request"), (2, "fork_out_of_range"), (99, "fork_out_of_range")],
)
async def test_fork_out_of_range_is_400(client: Client, env: Env, index: int, code: str) -> None:
    sid = await env.new_session()
    await add_message(client, sid, "user", "u0")
    await add_message(client, sid, "user", "u1")
    r = await client.post(f"/api/sessions/{sid}/fork", json={"message_index": index})
    assert r.status_code == 400
    assert_error(await body_of(r), code)


# --- delete ------------------------------------------------------------------------------------


async def test_delete_wait_returns_200_once_stopped(
    client: Client, env: Env, autojump_clock: trio.testing.MockClock
) -> None:
    sid = await env.new_session()
    stream = await start_held_turn(env, sid)
    r = await client.delete(f"/api/sessions/{sid}", query_string={"wait": "true", "timeout": "2s"})
    assert r.status_code == 200
    assert await body_of(r) == {"message": "session deleted"}
    with trio.fail_after(5):
        await drain(stream)  # the turn was cancelled
    assert env.runtime.streams == 0


async def test_delete_wait_202_while_the_turn_does_not_stop(
    client: Client, env: Env, autojump_clock: trio.testing.MockClock
) -> None:
    """The embedder holds the guard of its attached runtime: the stop cannot finish."""
    sid = await env.new_session()
    guard = await env.registry.attach_runtime(sid, env.runtime)
    await guard.acquire()
    start = trio.current_time()
    r = await client.delete(
        f"/api/sessions/{sid}", query_string={"wait": "true", "timeout": "1500ms"}
    )
    assert r.status_code == 202
    assert await body_of(r) == {"message": "session deleted, stop still in progress"}
    assert trio.current_time() - start == pytest.approx(1.5, abs=0.1)
    assert guard.done.is_set()  # the embedder was told to end its stream
    assert (await client.get(f"/api/sessions/{sid}")).status_code == 404
    guard.release()
    with trio.fail_after(5):
        await env.registry.wait_stopped(sid)


async def test_delete_unknown_and_batch_failures(client: Client, env: Env) -> None:
    sid = await env.new_session()
    r = await client.post("/api/sessions/batch/delete", json={"session_ids": [sid, "nope"]})
    assert await body_of(r) == {"deleted_count": 1, "failed_count": 1, "failed_ids": ["nope"]}
    r = await client.delete(f"/api/sessions/{sid}")
    assert r.status_code == 404


# --- routing -----------------------------------------------------------------------------------


@pytest.mark.parametrize("route", ["/nope", "/api/nope", "/api/sessions/x/nope", "/api"])
async def test_unknown_route_is_json_404(client: Client, env: Env, route: str) -> None:
    r = await client.get(route)
    assert r.status_code == 404
    assert r.headers["Content-Type"] == "application/json"
    assert_error(await body_of(r), "route_not_found")


@pytest.mark.parametrize(
    ("method", "route", "allowed"),
    [
        ("PUT", "/api/ping", {"GET"}),
        ("DELETE", "/api/sessions", {"GET", "POST"}),
        ("GET", "/api/sessions/x/fork", {"POST"}),
        ("POST", "/api/sessions/x", {"GET", "DELETE"}),
        ("GET", "/api/sessions/batch/delete", {"POST"}),
        ("PATCH", "/health", {"GET"}),
    ],
)
async def test_wrong_method_is_json_405_with_allow(
    client: Client, env: Env, method: str, route: str, allowed: set[str]
) -> None:
    r = await client.open(route, method=method)
    assert r.status_code == 405
    assert r.headers["Content-Type"] == "application/json"
    assert_error(await body_of(r), "method_not_allowed")
    allow = {m.strip() for m in r.headers["Allow"].split(",")}
    assert allowed <= allow
    assert allow <= allowed | {"HEAD", "OPTIONS"}


async def test_static_batch_routes_win_over_session_ids(client: Client, env: Env) -> None:
    r = await client.post("/api/sessions/batch/export", json={"session_ids": ["batch"]})
    assert r.status_code == 200
    assert (await body_of(r))["session_count"] == 0


# --- auth --------------------------------------------------------------------------------------

TOKEN = "s3cret-token"


def _route_of(op: Any) -> str:
    values = {"session_id": "sid", "agent_id": AGENT, "agent_name": "root", "agent": AGENT}
    values["schedule_id"] = "sched"
    values["message_id"] = "1"
    values["run_id"] = "r1"
    return str(op.path.format(**values))


@pytest.mark.parametrize("app_config", [AppConfig(auth_token=TOKEN)])
@pytest.mark.parametrize("op", OPERATIONS, ids=lambda op: op.name)
async def test_auth_required_on_every_route_but_health_and_ready(
    client: Client, env: Env, op: Any
) -> None:
    route = _route_of(op)
    r = await client.open(route, method=op.method)
    if op.name in ("health", "ready"):
        assert r.status_code == 200
        return
    if not op.bearer:  # the browser's OAuth landing: its unguessable state is the credential
        assert r.status_code == 400  # no state given
        return
    assert r.status_code == 401
    assert await body_of(r) == {"message": "missing Authorization header", "code": "unauthorized"}
    r = await client.open(route, method=op.method, headers={"Authorization": "Token " + TOKEN})
    assert r.status_code == 401
    assert (await body_of(r))["message"] == "invalid Authorization header format"
    r = await client.open(route, method=op.method, headers={"Authorization": "Bearer nope"})
    assert r.status_code == 401
    assert (await body_of(r))["message"] == "invalid token"
    assert op.public is False


@pytest.mark.parametrize("app_config", [AppConfig(auth_token=TOKEN)])
async def test_auth_with_the_token(client: Client, env: Env) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert (await client.get("/api/ping", headers=auth)).status_code == 200
    r = await client.post("/api/sessions", json={"title": "t"}, headers=auth)
    assert r.status_code == 200
    sid = (await body_of(r))["id"]
    r = await client.get(f"/api/sessions/{sid}", headers={"Authorization": f"bearer {TOKEN}"})
    assert r.status_code == 200
    # Unknown routes and wrong methods are not revealed without a token.
    assert (await client.get("/api/nope")).status_code == 401
    assert (await client.get("/api/nope", headers=auth)).status_code == 404
    for header in ("Bearer", "Bearer ", f"Basic {TOKEN}", TOKEN):
        r = await client.get("/api/ping", headers={"Authorization": header})
        assert r.status_code == 401, header
        assert (await body_of(r))["message"] == "invalid Authorization header format", header


# --- CORS ----------------------------------------------------------------------------------------

ORIGIN = "https://board.example"


@pytest.mark.parametrize("app_config", [AppConfig(cors_origins=(ORIGIN,), auth_token=TOKEN)])
async def test_cors_allow_list(client: Client, env: Env) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    r = await client.get("/api/ping", headers={**auth, "Origin": ORIGIN})
    assert r.status_code == 200
    assert r.headers["Access-Control-Allow-Origin"] == ORIGIN
    assert "Origin" in r.headers["Vary"]
    r = await client.get("/api/ping", headers={**auth, "Origin": "https://evil.example"})
    assert r.status_code == 200
    assert "Access-Control-Allow-Origin" not in r.headers
    # Error replies carry the header too, so the browser can read them.
    r = await client.get("/api/ping", headers={"Origin": ORIGIN})
    assert r.status_code == 401
    assert r.headers["Access-Control-Allow-Origin"] == ORIGIN


@pytest.mark.parametrize("app_config", [AppConfig(cors_origins=(ORIGIN,), auth_token=TOKEN)])
async def test_cors_preflight_needs_no_token(client: Client, env: Env) -> None:
    headers = {
        "Origin": ORIGIN,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type",
    }
    r = await client.options("/api/sessions", headers=headers)
    assert r.status_code == 204
    assert r.headers["Access-Control-Allow-Origin"] == ORIGIN
    assert "POST" in r.headers["Access-Control-Allow-Methods"]
    allowed_headers = r.headers["Access-Control-Allow-Headers"].lower()
    for name in ("authorization", "content-type", "idempotency-key", "last-event-id"):
        assert name in allowed_headers
    r = await client.options("/api/sessions", headers={**headers, "Origin": "https://evil.example"})
    assert "Access-Control-Allow-Origin" not in r.headers


@pytest.mark.parametrize("app_config", [AppConfig(cors_origins=("*",))])
async def test_cors_wildcard(client: Client, env: Env) -> None:
    r = await client.get("/api/ping", headers={"Origin": "https://any.example"})
    assert r.headers["Access-Control-Allow-Origin"] == "https://any.example"


async def test_no_cors_headers_without_allow_list(client: Client, env: Env) -> None:
    r = await client.get("/api/ping", headers={"Origin": ORIGIN})
    assert r.status_code == 200
    assert "Access-Control-Allow-Origin" not in r.headers


@pytest.mark.parametrize("app_config", [AppConfig(heartbeat=250)])
async def test_event_stream_outlives_quart_response_timeout(
    client: Client, env: Env, autojump_clock: trio.testing.MockClock
) -> None:
    """Quart's default RESPONSE_TIMEOUT (60 s) would cut an SSE stream; ours stays open.

    (A long heartbeat: the test client buffers only ten body chunks until the response ends.)
    """
    sid = await env.new_session()
    async with trio.open_nursery() as nursery:

        async def much_later() -> None:
            await trio.sleep(600)  # virtual time (autojump clock)
            env.registry.append_event(sid, AgentChoice("ten minutes in"))
            await env.registry.delete(sid)

        nursery.start_soon(much_later)
        with trio.fail_after(700):
            r = await client.get(f"/api/sessions/{sid}/events")
    raw = await r.get_data(as_text=False)
    assert [data["type"] for _, data in parse_sse(raw)] == ["agent_choice", "session_exited"]
    assert raw.count(b": ping\n\n") == 600 // 250  # heartbeats after each 250 s of silence
