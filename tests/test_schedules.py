"""Scheduled runs (issue 25, decision 0028) through the REST API of an in-process server whose
scheduler runs on trio's mock clock: the operations and their 400s naming the field; firing at
the right instants across a daylight-saving change; pause; a target session (a follow-up while
it is busy); the last error on the schedule. The SQLite file and the missed occurrences at
start are in tests/test_schedules_restart.py; a cluster in tests/cluster/test_schedules_cluster.py.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
import trio
from trio_websocket import open_websocket_url

from greenroom.persistence import Schedule
from greenroom.testing import Greenroom, ScriptedAgent, Tool, ToolCallContext, open_greenroom

AGENT = ScriptedAgent(turns=["Scheduled reply."], loop=True)


def at(text: str) -> float:
    """Epoch seconds of an ISO time (UTC)."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


@asynccontextmanager
async def server(
    start: str, agent: ScriptedAgent = AGENT
) -> AsyncIterator[tuple[Greenroom, httpx.AsyncClient, Callable[[], float]]]:
    """A server whose wall clock reads ``start`` now and moves with trio's mock clock."""
    origin, zero = at(start), trio.current_time()

    def clock() -> float:
        return origin + (trio.current_time() - zero)

    async with (
        open_greenroom(agent, clock=clock) as gr,
        # No keep-alive: virtual hours pass between requests, and the server closes idle
        # connections meanwhile (a reused one would race that close).
        httpx.AsyncClient(
            base_url=gr.url, limits=httpx.Limits(max_keepalive_connections=0)
        ) as http,
    ):
        yield gr, http, clock


async def until(clock: Callable[[], float], when: str | float) -> None:
    """Virtual time passes until the wall clock reads ``when`` (ISO, or epoch seconds)."""
    target = at(when) if isinstance(when, str) else when
    await trio.sleep(max(0.0, target - clock()))  # virtual time (autojump clock)


async def created(http: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    r = await http.post("/api/schedules", json={"agent": "default", "message": "hi", **body})
    assert r.status_code == 201, r.text
    return r.json()  # type: ignore[no-any-return]


async def read(http: httpx.AsyncClient, schedule_id: str) -> dict[str, Any]:
    r = await http.get(f"/api/schedules/{schedule_id}")
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


async def test_create_list_get_pause_resume_delete(autojump_clock: Any) -> None:
    async with server("2026-06-01T10:07:30") as (_, http, _clock):
        assert (await http.get("/api/schedules")).json() == []
        one = await created(
            http, cron="*/15 * * * *", timezone="Asia/Kolkata", title="digest", message="go"
        )
        assert one["next_fire"] == "2026-06-01T10:15:00Z"  # 15:45 IST
        assert one["target"] == "new_session" and one["session_id"] == ""
        assert {k: one[k] for k in ("paused", "fires", "last_fired_at", "last_error")} == {
            "paused": False,
            "fires": 0,
            "last_fired_at": None,
            "last_error": "",
        }
        await trio.sleep(1)  # virtual time: listed oldest first
        two = await created(http, cron="@daily", message="daily")
        assert two["timezone"] == "UTC" and two["next_fire"] == "2026-06-02T00:00:00Z"
        listed = (await http.get("/api/schedules")).json()
        assert [s["id"] for s in listed] == [one["id"], two["id"]]
        assert await read(http, one["id"]) == one
        paused = (await http.post(f"/api/schedules/{one['id']}/pause")).json()
        assert paused["paused"] is True and paused["next_fire"] is None
        resumed = (await http.post(f"/api/schedules/{one['id']}/resume")).json()
        assert resumed["paused"] is False and resumed["next_fire"] == "2026-06-01T10:15:00Z"
        r = await http.delete(f"/api/schedules/{one['id']}")
        assert r.status_code == 200
        for method, path in [
            ("GET", ""),
            ("DELETE", ""),
            ("POST", "/pause"),
            ("POST", "/resume"),
        ]:
            r = await http.request(method, f"/api/schedules/{one['id']}{path}")
            assert (r.status_code, r.json()["code"]) == (404, "schedule_not_found")
        assert [s["id"] for s in (await http.get("/api/schedules")).json()] == [two["id"]]


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"cron": "61 * * * *"}, "$.cron"),
        ({"cron": "* * *"}, "$.cron"),
        ({"cron": "* * * * * * *"}, "$.cron"),
        ({"cron": "0 0 30 2 *"}, "$.cron"),  # February 30th never comes
        ({"cron": " "}, "$.cron"),
        ({"cron": None}, "$.cron"),
        ({"timezone": "Mars/Olympus_Mons"}, "$.timezone"),
        ({"timezone": "../../etc/passwd"}, "$.timezone"),
        ({"timezone": ""}, "$.timezone"),
        ({"agent": "nope"}, "$.agent"),
        ({"agent_name": "nobody"}, "$.agent_name"),
        ({"message": ""}, "$.message"),
        ({"message": " \n "}, "$.message"),
        ({"session_id": "no-such-session"}, "$.session_id"),
        ({"title": 5}, "$.title"),
    ],
)
async def test_bad_input_is_400_naming_the_field(
    autojump_clock: Any, body: dict[str, Any], path: str
) -> None:
    async with server("2026-06-01T10:00:00") as (_, http, _clock):
        good = {"cron": "0 9 * * *", "timezone": "UTC", "agent": "default", "message": "hi"}
        payload = {k: v for k, v in {**good, **body}.items() if v is not None}
        r = await http.post("/api/schedules", json=payload)
        assert r.status_code == 400, r.text
        assert (r.json()["code"], r.json()["path"]) == ("invalid_request", path), r.json()
        assert (await http.get("/api/schedules")).json() == []  # nothing was stored


async def test_fires_at_the_zones_wall_clock_across_a_dst_change(autojump_clock: Any) -> None:
    # New York moves from EST (UTC-5) to EDT (UTC-4) at 02:00 on Sunday 2026-03-08: 09:00
    # local is 14:00 UTC before and 13:00 UTC after.
    async with server("2026-03-06T12:00:00") as (_, http, clock):
        s = await created(http, cron="0 9 * * *", timezone="America/New_York", message="news")
        expected = [
            ("2026-03-06T14:00:00", "EST"),
            ("2026-03-07T14:00:00", "EST"),
            ("2026-03-08T13:00:00", "EDT"),
            ("2026-03-09T13:00:00", "EDT"),
        ]
        sessions = []
        for fired, (when, abbreviation) in enumerate(expected):
            await until(clock, at(when) - 1)  # a second before
            assert (await read(http, s["id"]))["fires"] == fired
            await until(clock, at(when) + 1)
            got = await read(http, s["id"])
            assert got["fires"] == fired + 1
            assert got["last_occurrence"] == iso(at(when))
            assert got["last_error"] == "" and got["last_session_id"]
            sessions.append(got["last_session_id"])
            session = (await http.get(f"/api/sessions/{got['last_session_id']}")).json()
            assert session["title"] == f"Scheduled run ({when[:10]} 09:00:00 {abbreviation})"
            assert session["agent_file"] == "default"
        assert len(set(sessions)) == 4
        listed = {s["id"] for s in (await http.get("/api/sessions")).json()}
        assert listed == set(sessions)
        # Each occurrence ran its turn: the message, then the agent's reply.
        await trio.sleep(1)  # virtual time (autojump clock)
        session = (await http.get(f"/api/sessions/{sessions[0]}")).json()
        texts = [(m["message"]["role"], m["message"]["content"]) for m in session["messages"]]
        assert texts == [("user", "news"), ("assistant", "Scheduled reply.")]


async def test_paused_schedules_do_not_fire(autojump_clock: Any) -> None:
    async with server("2026-06-01T10:00:00") as (_, http, clock):
        s = await created(http, cron="*/10 * * * *")
        await until(clock, "2026-06-01T10:10:30")
        assert (await read(http, s["id"]))["fires"] == 1
        await http.post(f"/api/schedules/{s['id']}/pause")
        await until(clock, "2026-06-01T12:00:30")  # 11 occurrences while paused
        assert (await read(http, s["id"]))["fires"] == 1
        resumed = (await http.post(f"/api/schedules/{s['id']}/resume")).json()
        assert resumed["next_fire"] == "2026-06-01T12:10:00Z"  # what was missed does not fire
        await until(clock, "2026-06-01T12:10:30")
        got = await read(http, s["id"])
        assert (got["fires"], got["last_occurrence"]) == (2, "2026-06-01T12:10:00Z")
        await http.delete(f"/api/schedules/{s['id']}")
        await until(clock, "2026-06-01T14:00:00")
        assert len((await http.get("/api/sessions")).json()) == 2


async def test_a_target_session_gets_a_follow_up_while_busy(autojump_clock: Any) -> None:
    entered, release = trio.Event(), trio.Event()

    async def hold(ctx: ToolCallContext) -> str:
        entered.set()
        await release.wait()
        return "held"

    agent = ScriptedAgent(
        turns=[[{"tool_call": {"name": "hold", "arguments": {}}}], "First done.", "Then this."],
        tools=[Tool("hold", hold)],
        loop=True,
    )
    async with server("2026-06-01T10:00:00", agent) as (gr, http, clock):
        sid = (await http.post("/api/sessions", json={"title": "mine"})).json()["id"]
        s = await created(http, cron="5 10 * * *", session_id=sid, message="scheduled ping")
        assert s["target"] == "session" and s["session_id"] == sid
        await gr.client.run(sid, "start working")  # detached: the turn waits in its tool
        await entered.wait()
        await until(clock, "2026-06-01T10:05:01")  # the occurrence: the session is busy
        got = await read(http, s["id"])
        assert (got["fires"], got["last_session_id"], got["last_error"]) == (1, sid, "")
        release.set()
        await trio.sleep(5)  # virtual time (autojump clock)
        session = (await http.get(f"/api/sessions/{sid}")).json()
        users = [
            m["message"]["content"] for m in session["messages"] if m["message"]["role"] == "user"
        ]
        assert users == ["start working", "scheduled ping"]  # queued, then taken, once
        assert len((await http.get("/api/sessions")).json()) == 1  # no new session


async def test_a_failed_firing_is_recorded_on_the_schedule(autojump_clock: Any) -> None:
    async with server("2026-06-01T10:00:00") as (_, http, clock):
        sid = (await http.post("/api/sessions", json={})).json()["id"]
        s = await created(http, cron="0 * * * *", session_id=sid)
        assert (await http.delete(f"/api/sessions/{sid}")).status_code == 200
        await until(clock, "2026-06-01T11:00:01")
        got = await read(http, s["id"])
        assert got["fires"] == 1
        assert got["last_error"].startswith("session_not_found"), got
        assert got["next_fire"] == "2026-06-01T12:00:00Z"  # it goes on


async def test_the_schedule_operations_are_websocket_ops_too(autojump_clock: Any) -> None:
    async with (
        server("2026-06-01T10:00:00") as (gr, http, _clock),
        open_websocket_url(gr.url.replace("http", "ws") + "/api/ws") as ws,
    ):

        async def call(frame: dict[str, Any]) -> dict[str, Any]:
            await ws.send_message(json.dumps({"id": "r", **frame}))
            reply: dict[str, Any] = json.loads(await ws.get_message())
            return reply

        body = {"cron": "0 8 * * *", "agent": "default", "message": "ws", "timezone": "UTC"}
        made = await call({"op": "schedule_create", **body})
        assert made["ok"] is True and made["result"]["next_fire"] == "2026-06-02T08:00:00Z"
        schedule_id = made["result"]["id"]
        paused = await call({"op": "schedule_pause", "schedule_id": schedule_id})
        assert paused["result"]["paused"] is True
        assert (await read(http, schedule_id))["paused"] is True
        bad = await call({"op": "schedule_create", **body, "timezone": "Nowhere/Land"})
        assert (bad["ok"], bad["error"]["status"], bad["error"]["path"]) == (
            False,
            400,
            "$.timezone",
        )
        gone = await call({"op": "schedule_delete", "schedule_id": schedule_id})
        assert gone["result"] == {"message": "schedule deleted"}
        missing = await call({"op": "schedule_get", "schedule_id": schedule_id})
        assert missing["error"]["code"] == "schedule_not_found"


async def test_a_schedule_that_cannot_be_computed_is_paused_with_why(
    autojump_clock: Any,
) -> None:
    async with server("2026-06-01T10:00:00") as (gr, http, clock):
        scheduler = gr._context.scheduler  # white-box: a row this server could not have made
        broken = Schedule(
            id="broken",
            cron="0 * * * *",
            timezone="Gone/Zone",  # e.g. the system's tzdata lost it since
            agent="default",
            agent_name="",
            message="hi",
            session_id="",
            title="",
            paused=False,
            next_fire=int(clock()) - 60,
            created_at=clock() - 120,
        )
        await scheduler.store.add_schedule(broken)
        scheduler.changed()
        await trio.sleep(1)  # virtual time (autojump clock)
        got = await read(http, "broken")
        assert (got["paused"], got["fires"]) == (True, 0)
        assert got["last_error"].startswith("cannot fire: $.timezone: unknown time zone")
        assert (await http.get("/api/sessions")).json() == []


async def test_an_agent_gone_since_is_the_last_error_and_the_session_is_kept(
    autojump_clock: Any,
) -> None:
    async with server("2026-06-01T10:00:00") as (gr, http, clock):
        scheduler = gr._context.scheduler  # white-box: an agent the server no longer has
        gone = Schedule(
            id="gone",
            cron="0 * * * *",
            timezone="UTC",
            agent="removed-since",
            agent_name="",
            message="hi",
            session_id="",
            title="hourly",
            paused=False,
            next_fire=int(at("2026-06-01T11:00:00")),
            created_at=clock(),
        )
        await scheduler.store.add_schedule(gone)
        scheduler.changed()
        await until(clock, "2026-06-01T11:00:05")
        got = await read(http, "gone")
        assert got["fires"] == 1 and got["next_fire"] == "2026-06-01T12:00:00Z"
        assert got["last_error"].startswith("agent_not_found"), got
        (session,) = (await http.get("/api/sessions")).json()
        assert session["id"] == got["last_session_id"]
        assert session["title"] == "hourly (2026-06-01 11:00:00 UTC)"
