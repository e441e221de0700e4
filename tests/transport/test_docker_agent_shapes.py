"""docker-agent's clients against greenroom: the request shapes they send, route by route.

The bodies below are written for these tests from docker-agent's published Go types (a
``session.Session`` marshalled by ``encoding/json``: nil slices as ``null``, a zero
``created_at``, the untagged ``SendUserMessage``; ``omitempty`` fields left out) and from its
``run --remote`` client (a bare JSON array of messages as the run body). Go's decoder ignores
keys it does not know, so greenroom's REST bodies do too; a key it does use with a wrong value
is still a 400 naming it. Quart's test client; the WebSocket test uses a live server.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import trio
from quart.testing import QuartClient as Client
from trio_websocket import open_websocket_url

from greenroom.domain import AgentChoice, StreamStarted, StreamStopped
from greenroom.transport import AppConfig
from tests.fakes import without_timestamp
from tests.slowness import slow
from tests.transport.support import AGENT, Env, Live, WSClient, user_body

GO_SESSION: dict[str, Any] = {
    "id": "",
    "title": "From the Go client",
    "messages": None,
    "created_at": "0001-01-01T00:00:00Z",
    "tools_approved": False,
    "thinking": False,
    "hide_tool_results": True,
    "SendUserMessage": True,
    "max_iterations": 20,
    "starred": False,
    "input_tokens": 0,
    "output_tokens": 0,
    "cost": 0,
}
GO_MESSAGES = [{"role": "user", "content": "hello from the Go client"}]
SCRIPT = [StreamStarted(), AgentChoice("hi"), StreamStopped()]


async def body_of(r: Any) -> Any:
    return json.loads(await r.get_data(as_text=True))


def sse_types(raw: bytes) -> list[str]:
    datas = [line[6:] for line in raw.decode().splitlines() if line.startswith("data: ")]
    return [without_timestamp(json.loads(d))["type"] for d in datas]


async def test_a_marshalled_go_session_creates_a_session(client: Client) -> None:
    r = await client.post("/api/sessions", json=GO_SESSION)
    assert r.status_code == 200, await r.get_data()
    created = await body_of(r)
    assert created["id"]  # a fresh id: the empty one was ignored
    assert created["created_at"] != GO_SESSION["created_at"]
    assert (created["title"], created["max_iterations"]) == ("From the Go client", 20)
    assert (created["thinking"], created["hide_tool_results"]) == (False, True)
    got = await body_of(await client.get(f"/api/sessions/{created['id']}"))
    assert (got["thinking"], got["hide_tool_results"]) == (False, True)


@pytest.mark.parametrize(
    ("field", "value", "path"),
    [("title", 5, "$.title"), ("thinking", "yes", "$.thinking"), ("max_iterations", -1, None)],
)
async def test_a_used_field_with_a_wrong_value_is_still_400(
    client: Client, field: str, value: Any, path: str | None
) -> None:
    r = await client.post("/api/sessions", json={**GO_SESSION, field: value})
    assert r.status_code == 400
    assert (await body_of(r))["path"] == (path or f"$.{field}")


@pytest.mark.parametrize(
    ("method", "route", "body"),
    [
        ("PATCH", "{s}/title", {"title": "t", "unknown": [1, 2]}),
        ("PATCH", "{s}/permissions", {"permissions": {"allow": ["read_*"], "extra": True}}),
        ("POST", "{s}/messages", {"message": {"message": {"role": "user", "x": 1}, "y": 2}}),
        ("POST", "{s}/summaries", {"summary": "s", "legacy_field": "ignored"}),
    ],
)
async def test_unknown_keys_are_ignored_at_every_depth(
    client: Client, env: Env, method: str, route: str, body: dict[str, Any]
) -> None:
    sid = await env.new_session()
    r = await client.open(route.format(s=f"/api/sessions/{sid}"), method=method, json=body)
    assert r.status_code in (200, 201), await r.get_data()


@pytest.mark.parametrize("runtime_options", [{"script": SCRIPT}])
@pytest.mark.parametrize("shape", ["array", "object"])
async def test_the_run_body_is_an_array_or_an_object(client: Client, env: Env, shape: str) -> None:
    sid = await env.new_session()
    body: Any = GO_MESSAGES if shape == "array" else {"messages": GO_MESSAGES, "model": ""}
    r = await client.post(f"/api/sessions/{sid}/agent/{AGENT}", json=body)
    assert r.status_code == 200
    assert sse_types(await r.get_data(as_text=False)) == [
        "stream_started",
        "agent_choice",
        "stream_stopped",
    ]
    stored = await env.registry.get(sid)
    assert [m.content for m in stored.items] == ["hello from the Go client"]  # type: ignore[union-attr]


@pytest.mark.parametrize("runtime_options", [{"script": SCRIPT}])
async def test_a_run_naming_an_unknown_agent_is_404_every_time(client: Client, env: Env) -> None:
    sid = await env.new_session()
    assert (
        await client.post(f"/api/sessions/{sid}/agent/{AGENT}", json=GO_MESSAGES)
    ).status_code == 200
    for route, code in [
        (f"/api/sessions/{sid}/agent/nope", "agent_not_found"),
        (f"/api/sessions/{sid}/agent/{AGENT}/nobody", "agent_not_found"),
    ]:
        for _ in range(2):  # and again: the session's runtime exists now
            r = await client.post(route, json=GO_MESSAGES)
            assert (r.status_code, (await body_of(r))["code"]) == (404, code)
    assert env.runtime.turns == 1


async def test_go_client_bodies_for_the_other_routes(client: Client, env: Env) -> None:
    sid = await env.new_session()
    s = f"/api/sessions/{sid}"
    # ResumeSessionRequest / ResumeElicitationRequest with nothing pending: 409, not 400.
    r = await client.post(f"{s}/resume", json={"confirmation": "approve"})
    assert r.status_code == 409
    r = await client.post(f"{s}/elicitation", json={"action": "decline", "content": None})
    assert r.status_code == 409
    r = await client.patch(f"{s}/permissions", json={"permissions": {"allow": ["shell"]}})
    assert r.status_code == 200
    r = await client.patch(f"{s}/permissions", json={"permissions": None})
    assert r.status_code == 200
    assert (await client.post(f"{s}/tools/toggle")).status_code == 200
    assert (await client.post(f"{s}/thinking/toggle")).status_code == 200
    got = await env.registry.get(sid)
    assert (got.tools_approved, got.thinking, got.permissions) == (True, False, None)
    r = await client.patch(f"{s}/title", json={"title": "Renamed"})
    assert await body_of(r) == {"id": sid, "title": "Renamed"}


@pytest.mark.parametrize("app_config", [AppConfig(auth_token="secret")])
async def test_401_says_which_scheme_to_use(client: Client) -> None:
    r = await client.get("/api/sessions")
    assert r.status_code == 401
    assert r.headers["WWW-Authenticate"].startswith("Bearer")


async def test_unknown_routes_answer_in_greenrooms_own_shape(client: Client) -> None:
    r = await client.get("/api/nothing/here")
    assert r.status_code == 404
    assert await body_of(r) == {
        "message": "no route GET /api/nothing/here (see GET /openapi.json)",
        "code": "route_not_found",
    }
    r = await client.put("/api/sessions")
    assert (r.status_code, (await body_of(r))["code"]) == (405, "method_not_allowed")
    assert "GET" in r.headers["Allow"]


@pytest.mark.parametrize("runtime_options", [{"script": SCRIPT}])
async def test_a_websocket_that_subscribed_and_runs_gets_each_event_once(live: Live) -> None:
    async with httpx.AsyncClient(base_url=live.url, timeout=slow(10)) as http:
        sid = (await http.post("/api/sessions", json={})).json()["id"]
    async with open_websocket_url(live.ws_url) as ws:
        client = WSClient(ws)
        assert (await client.result("subscribe", session_id=sid)) == {"subscribed": sid}
        run = await client.send({"op": "run", "session_id": sid, "agent": AGENT, **user_body("x")})
        end = await client.wait_for(lambda f: f.get("run") == run and f.get("end"))
        assert end == {"session_id": sid, "run": run, "end": True}
        with trio.move_on_after(slow(0.5)):  # real clock: nothing more is on its way
            while True:
                client.pending.append(await client.receive(slow(5)))  # move_on ends it
        seqs = [f["seq"] for f in client.pending if "event" in f]
        assert sorted(seqs) == list(range(1, len(SCRIPT) + 1))  # once each, no duplicates
        assert all("run" not in f for f in client.pending if "event" in f)
