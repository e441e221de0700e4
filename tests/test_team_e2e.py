"""Teams and MCP end to end: ``greenroom serve`` with scripted models, over SSE and WebSocket.

- A team file (root + two sub-agents: one with an MCP server, one that starts a background
  agent): transfers, a question from the MCP server asked by the background task and answered
  from ``/events``, and the recall that shows the background result on ``/events``.
- Nested transfers, a handoff and an MCP elicitation over the WebSocket.
- A remote MCP server that requires OAuth: the authorization URL on the run stream, the redirect
  relayed to ``POST /api/mcp-oauth/callback``, the tool call going through.
- A crashing MCP server: a tool error, and the next turn has the server back.

Live servers and MCP subprocesses: the real clock, every wait bounded by ``trio.fail_after``.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from trio_websocket import open_websocket_url

from greenroom.serve import ServeConfig, serve
from tests.mcp.http_servers import AutoApprove, oauth_app, serving as serving_mcp
from tests.mcp.support import SERVER
from tests.slowness import slow

pytestmark = pytest.mark.slow
DEADLINE = slow(60)
Decide = Callable[[dict[str, Any]], Awaitable[None]]


def tool(name: str, call_id: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_call": {"name": name, "id": call_id, "arguments": arguments}}


def transfer(agent: str, call_id: str, task: str) -> list[Any]:
    return [tool("transfer_task", call_id, agent=agent, task=task, expected_output="a line")]


def mcp_stdio(*args: str) -> str:
    listed = ", ".join(json.dumps(a) for a in (str(SERVER), *args))
    return f"      - type: mcp\n        command: {sys.executable}\n        args: [{listed}]\n"


@asynccontextmanager
async def serving(
    tmp_path: Path, agent_yaml: str, scripts: dict[str, list[Any]]
) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    for name, turns in scripts.items():
        (tmp_path / f"{name}.json").write_text(json.dumps({"turns": turns}))
    agent = tmp_path / "team.yaml"
    agent.write_text(agent_yaml)
    async with trio.open_nursery() as nursery:
        cfg = ServeConfig(
            agent_paths=(str(agent),), port=0, db=str(tmp_path / "db.sqlite3"),
            data_dir=str(tmp_path / "data"), graceful_timeout=1,
            allow_private_networks=("127.0.0.1/32",),  # the loopback MCP server (issue 23)
        )  # fmt: skip
        url: str = await nursery.start(serve, cfg)
        async with httpx.AsyncClient(base_url=url, timeout=slow(20)) as client:
            yield client, url
        nursery.cancel_scope.cancel()


async def new_session(client: httpx.AsyncClient, tmp_path: Path) -> str:
    body = {"title": "team", "working_dir": str(tmp_path)}  # a title: no title model call
    created = await client.post("/api/sessions", json=body)
    assert created.status_code == 200, created.text
    return str(created.json()["id"])


async def sse_events(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    async for line in response.aiter_lines():
        if line.startswith("data: "):
            yield json.loads(line[6:])


async def run_turn(
    client: httpx.AsyncClient, sid: str, text: str, decide: Decide | None = None
) -> list[dict[str, Any]]:
    """A turn over SSE; each question (confirmation, elicitation) goes to ``decide``."""
    events: list[dict[str, Any]] = []
    body = {"messages": [{"role": "user", "content": text}]}
    async with client.stream("POST", f"/api/sessions/{sid}/agent/team", json=body) as response:
        assert response.status_code == 200
        async for event in sse_events(response):
            events.append(event)
            if decide is not None and event["type"] in (
                "tool_call_confirmation",
                "elicitation_request",
            ):
                await decide(event)
    return events


class Tail:
    """``GET /events`` read in the background; :meth:`wait_for` a matching event."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._changed = trio.Event()

    async def follow(self, client: httpx.AsyncClient, sid: str, *, task_status: Any) -> None:
        async with client.stream("GET", f"/api/sessions/{sid}/events") as response:
            assert response.status_code == 200
            task_status.started()
            async for event in sse_events(response):
                self.events.append(event)
                self._changed.set()
                self._changed = trio.Event()

    async def wait_for(self, predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        while True:
            for event in self.events:
                if predicate(event):
                    return event
            await self._changed.wait()

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        while not condition():
            await self._changed.wait()


def said(events: list[dict[str, Any]]) -> str:
    """The text the agents streamed (``agent_choice`` deltas joined)."""
    return "".join(e["content"] for e in events if e["type"] == "agent_choice")


def responses(events: list[dict[str, Any]]) -> dict[str, str]:
    return {e["tool_call_id"]: e["response"] for e in events if e["type"] == "tool_call_response"}


TEAM = """\
agents:
  root:
    model: scripted/root.json
    instruction: You lead a small team.
    sub_agents: [researcher, manager]
  researcher:
    model: scripted/researcher.json
    description: Looks things up with its MCP server
    toolsets:
{mcp}  manager:
    model: scripted/manager.json
    description: Starts background work
    sub_agents: [researcher]
    toolsets:
      - type: background_agents
"""


async def test_a_team_with_mcp_and_a_background_agent_runs_over_sse(tmp_path: Path) -> None:
    scripts: dict[str, list[Any]] = {
        "root": [
            transfer("researcher", "t1", "Echo hello"),
            transfer("manager", "t2", "Start the background research"),
            "Team work done.",
            "Background result noted.",
        ],
        "researcher": [
            [tool("echo", "e1", text="hello")],
            "Research: echo: hello",
            [tool("ask", "a1")],  # in the background task: the MCP server asks the user
            "Background research complete.",
        ],
        "manager": [
            [tool("run_background_agent", "b1", agent="researcher", task="Ask for a name")],
            "Started a background researcher.",
        ],
    }
    async with serving(tmp_path, TEAM.format(mcp=mcp_stdio()), scripts) as (client, _):
        sid = await new_session(client, tmp_path)
        tail = Tail()
        with trio.fail_after(DEADLINE):
            async with trio.open_nursery() as nursery:
                await nursery.start(tail.follow, client, sid)

                async def approve(event: dict[str, Any]) -> None:
                    if event["type"] == "tool_call_confirmation":  # run_background_agent asks
                        answer = {"confirmation": "approve"}
                        r = await client.post(f"/api/sessions/{sid}/resume", json=answer)
                        assert r.status_code == 200, r.text

                events = await run_turn(client, sid, "Do the team work", approve)
                got = responses(events)
                assert got["t1"] == "Research: echo: hello"
                assert got["t2"] == "Started a background researcher."
                assert got["e1"] == "echo: hello"
                assert got["b1"].startswith("Background agent task started with ID: agent_task_")
                sessions = {e["session_id"] for e in events if e["type"] == "stream_started"}
                assert len(sessions) == 3  # the root and two sub-sessions
                # The background task's MCP server asks; the question reaches /events.
                asked = await tail.wait_for(lambda e: e["type"] == "elicitation_request")
                assert asked["message"] == "What is your name?"
                answer = {
                    "action": "accept",
                    "content": {"name": "Ada"},
                    "elicitation_id": asked["elicitation_id"],
                }
                r = await client.post(f"/api/sessions/{sid}/elicitation", json=answer)
                assert r.status_code == 200, r.text
                # The task finishes: the session is recalled, its turn shows on /events.
                await tail.wait_until(lambda: "Background result noted." in said(tail.events))
                nursery.cancel_scope.cancel()
        session = (await client.get(f"/api/sessions/{sid}")).json()
        contents = [m["message"].get("content", "") for m in session["messages"]]
        assert "Research: echo: hello" in contents  # sub-sessions are part of the history
        recall = contents[-2]  # the message the task's end injected, then the answer to it
        assert recall.startswith("Background agent task agent_task_")
        assert recall.endswith("finished with status completed.\n\nBackground research complete.")
        assert contents[-1] == "Background result noted."
        assert "accept: Ada" in json.dumps(session["messages"])  # the task's tool result


WS_TEAM = """\
agents:
  root:
    model: scripted/root.json
    sub_agents: [helper]
    handoffs: [writer]
  helper:
    model: scripted/helper.json
    sub_agents: [deep]
  deep:
    model: scripted/deep.json
  writer:
    model: scripted/writer.json
    toolsets:
{mcp}"""


async def test_nested_transfers_a_handoff_and_an_elicitation_over_websocket(
    tmp_path: Path,
) -> None:
    scripts: dict[str, list[Any]] = {
        "root": [
            transfer("helper", "t1", "Go deep"),
            "Root has it.",
            [tool("handoff", "h1", agent="writer")],
        ],
        "helper": [transfer("deep", "t2", "Dig"), "Helper got: deep found it"],
        "deep": ["deep found it"],
        "writer": ["Writer speaking.", [tool("ask", "a1")], "Nice to meet you."],
    }
    async with serving(tmp_path, WS_TEAM.format(mcp=mcp_stdio()), scripts) as (client, url):
        sid = await new_session(client, tmp_path)
        async with open_websocket_url(url.replace("http://", "ws://") + "/api/ws") as ws:
            counter = iter(range(1000))
            pending: list[dict[str, Any]] = []

            async def call(frame: dict[str, Any]) -> Any:
                frame_id = f"f{next(counter)}"
                await ws.send_message(json.dumps({"id": frame_id, **frame}))
                while True:
                    message = json.loads(await ws.get_message())
                    if message.get("id") == frame_id and "ok" in message:
                        assert message["ok"], message
                        return message["result"]
                    pending.append(message)

            async def turn(text: str) -> list[dict[str, Any]]:
                start = {"op": "run", "session_id": sid, "agent": "team"}
                run = await call({**start, "messages": [{"role": "user", "content": text}]})
                del run
                events: list[dict[str, Any]] = []
                while True:
                    frame = pending.pop(0) if pending else json.loads(await ws.get_message())
                    if frame.get("end"):
                        return events
                    if "event" not in frame:
                        continue
                    event = frame["event"]
                    events.append(event)
                    if event["type"] == "tool_call_confirmation":  # ask is not read-only
                        await call({"op": "resume", "session_id": sid, "confirmation": "approve"})
                    if event["type"] == "elicitation_request":
                        await call({
                            "op": "elicitation", "session_id": sid, "action": "accept",
                            "content": {"name": "Lin"}, "elicitation_id": event["elicitation_id"],
                        })  # fmt: skip

            with trio.fail_after(DEADLINE):
                first = await turn("dig")
                assert responses(first)["t1"] == "Helper got: deep found it"
                assert responses(first)["t2"] == "deep found it"
                started = [e["session_id"] for e in first if e["type"] == "stream_started"]
                assert len(set(started)) == 3
                switches = [
                    (e["from_agent"], e["to_agent"])
                    for e in first
                    if e["type"] == "agent_switching"
                ]
                assert switches == [
                    ("root", "helper"), ("helper", "deep"), ("deep", "helper"), ("helper", "root"),
                ]  # fmt: skip
                second = await turn("over to the writer")
                assert responses(second)["h1"].startswith("The conversation was handed off")
                assert said(second) == "Writer speaking."
                status = await call({"op": "status", "session_id": sid})
                assert status["agent"] == "writer"
                third = await turn("who am I talking to?")
                assert responses(third)["a1"] == "accept: Lin"
        session = (await client.get(f"/api/sessions/{sid}")).json()
        assert session["messages"][-1]["message"]["content"] == "Nice to meet you."


OAUTH = """\
agents:
  root:
    model: scripted/root.json
    toolsets:
      - type: mcp
        remote:
          url: {url}/mcp
          transport_type: streamable
"""


async def test_a_remote_server_that_needs_oauth_over_route_36(tmp_path: Path) -> None:
    provider = AutoApprove()
    scripts: dict[str, list[Any]] = {"root": [[tool("echo", "s1", text="secret")], "Done."]}
    async with serving_mcp(oauth_app(provider)) as mcp_url:
        yaml = OAUTH.format(url=mcp_url)
        async with serving(tmp_path, yaml, scripts) as (client, _):
            sid = await new_session(client, tmp_path)

            async def authorize(event: dict[str, Any]) -> None:
                assert event["type"] == "elicitation_request" and event["mode"] == "url"
                assert event["meta"]["cagent/type"] == "oauth_flow"
                async with httpx.AsyncClient() as browser:  # the user signs in
                    redirect = await browser.get(event["url"])
                assert redirect.status_code == 302
                query = dict(
                    urllib.parse.parse_qsl(
                        urllib.parse.urlsplit(redirect.headers["location"]).query
                    )
                )
                callback = "/api/mcp-oauth/callback?" + urllib.parse.urlencode(
                    {"state": query["state"], "code": query["code"]}
                )
                r = await client.post(callback)
                assert (r.status_code, r.json()) == (200, None)

            with trio.fail_after(DEADLINE):
                events = await run_turn(client, sid, "use the secured tool", authorize)
            assert responses(events)["s1"] == "secured: secret"
            assert [e["server_url"] for e in events if e["type"] == "authorization_event"] == [
                f"{mcp_url}/mcp"
            ]
            (token_file,) = (tmp_path / "data" / "mcp-oauth").iterdir()
            assert stat.S_IMODE(os.stat(token_file).st_mode) == 0o600
            assert "access_token" in token_file.read_text()
            late = await client.post("/api/mcp-oauth/callback?state=gone&code=x")
            assert (late.status_code, late.json()["code"]) == (404, "oauth_flow_not_found")


CRASHY = """\
agents:
  root:
    model: scripted/root.json
    toolsets:
{mcp}"""


async def test_a_crashing_mcp_server_leaves_the_session_usable(tmp_path: Path) -> None:
    scripts: dict[str, list[Any]] = {
        "root": [
            [tool("die", "d1")],
            "It died.",
            [tool("echo", "e1", text="back")],
            "It is back.",
        ]
    }

    async def approve(event: dict[str, Any]) -> None:
        if event["type"] == "tool_call_confirmation":
            await client.post(f"/api/sessions/{sid}/resume", json={"confirmation": "approve"})

    async with serving(tmp_path, CRASHY.format(mcp=mcp_stdio()), scripts) as (client, _):
        sid = await new_session(client, tmp_path)
        tail = Tail()
        with trio.fail_after(DEADLINE):
            async with trio.open_nursery() as nursery:
                await nursery.start(tail.follow, client, sid)
                first = await run_turn(client, sid, "crash it", approve)
                assert responses(first)["d1"].startswith("Error calling tool: failed to call")
                assert first[-1]["type"] == "stream_stopped"
                # The death is told on the turn's stream, or (after it) on /events.
                warning = await tail.wait_for(lambda e: e["type"] == "warning")
                assert "stopped" in warning["message"] and "restarting" in warning["message"]
                second = await run_turn(client, sid, "again", approve)
                nursery.cancel_scope.cancel()
        assert responses(second)["e1"] == "echo: back"
