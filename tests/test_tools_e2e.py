"""Tools end to end: ``greenroom serve`` with an agent using filesystem, shell, todo, fetch and
user_prompt, driven by a scripted model, over HTTP (SSE + /resume) and over the WebSocket.

Every asking call waits for a decision sent by the test; a rejected call never runs (a side
effect file proves it); nothing escapes the working directory; approve-tool persists (and
with ``expires_in`` expires); every decision is in ``GET /approvals``. Live servers use the
real clock: every wait is bounded by ``trio.fail_after``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from trio_websocket import open_websocket_url

from greenroom.serve import ServeConfig, serve
from tests.slowness import slow

pytestmark = pytest.mark.slow
DEADLINE = slow(30)
Answer = Callable[[dict[str, Any]], dict[str, Any]]


# --- a loopback web server for fetch ---------------------------------------------------------


@asynccontextmanager
async def web_server(pages: dict[str, tuple[int, str, str]]) -> AsyncIterator[str]:
    """HTTP/1.1 on 127.0.0.1:0 answering ``pages[path] = (status, content type, body)``."""

    async def handle(stream: trio.SocketStream) -> None:
        async with stream:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    return
                data += chunk
            path = data.split(b" ", 2)[1].decode()
            status, ctype, body = pages.get(path, (404, "text/plain", "not found"))
            raw = body.encode()
            head = (
                f"HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\nContent-Length: {len(raw)}\r\n"
                "Connection: close\r\n\r\n"
            )
            await stream.send_all(head.encode() + raw)

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, handle, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        yield f"http://127.0.0.1:{port}"
        nursery.cancel_scope.cancel()


# --- the server under test -------------------------------------------------------------------


def write_agent(tmp_path: Path, turns: list[Any]) -> Path:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": turns}))
    agent = tmp_path / "agent.yaml"
    agent.write_text(
        "agents:\n"
        "  root:\n"
        "    model: scripted/script.json\n"
        "    instruction: You are a test agent.\n"
        "    toolsets:\n"
        "      - type: filesystem\n"
        "      - type: shell\n"
        "      - type: todo\n"
        "      - type: fetch\n"
        "      - type: user_prompt\n"
    )
    return agent


def tool(name: str, call_id: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_call": {"name": name, "id": call_id, "arguments": arguments}}


@asynccontextmanager
async def serving(tmp_path: Path, turns: list[Any]) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    agent = write_agent(tmp_path, turns)
    async with trio.open_nursery() as nursery:
        cfg = ServeConfig(
            agent_paths=(str(agent),), port=0, db=str(tmp_path / "db.sqlite3"),
            data_dir=str(tmp_path / "data"), graceful_timeout=1,
            allow_private_networks=("127.0.0.1/32",),  # the loopback web server (issue 23)
        )  # fmt: skip
        url: str = await nursery.start(serve, cfg)
        async with httpx.AsyncClient(base_url=url, timeout=slow(10)) as client:
            yield client, url
        nursery.cancel_scope.cancel()


async def new_session(client: httpx.AsyncClient, work: Path) -> str:
    created = await client.post("/api/sessions", json={"title": "tools", "working_dir": str(work)})
    assert created.status_code == 200, created.text
    return str(created.json()["id"])


async def run_turn(
    client: httpx.AsyncClient, sid: str, text: str, decide: Callable[[dict[str, Any]], Any]
) -> list[dict[str, Any]]:
    """Run a turn over SSE; each asking event gets ``await decide(event)`` (sent by the test)."""
    events: list[dict[str, Any]] = []
    body = {"messages": [{"role": "user", "content": text}]}
    async with client.stream("POST", f"/api/sessions/{sid}/agent/agent", json=body) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            events.append(event)
            if event["type"] in ("tool_call_confirmation", "elicitation_request"):
                await decide(event)
    return events


def responses(events: list[dict[str, Any]]) -> dict[str, str]:
    return {e["tool_call_id"]: e["response"] for e in events if e["type"] == "tool_call_response"}


async def test_agent_with_filesystem_shell_todo_and_fetch_over_http(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "outside.txt").write_text("secret")
    page = "<html><body><h1>Greenroom</h1><p>Hello <b>tools</b></p></body></html>"
    async with web_server({"/page": (200, "text/html", page)}) as web:
        turns = [
            [tool("create_todo", "t1", description="write notes"),
             tool("write_file", "w1", path="notes.txt", content="hello")],
            [tool("write_file", "w2", path="more.txt", content="more"),
             tool("read_file", "r1", path="notes.txt"),
             tool("list_directory", "l1", path=".")],
            [tool("shell", "s1", cmd="echo ran > side.txt")],
            [tool("fetch", "f1", urls=[f"{web}/page"], format="markdown")],
            [tool("read_file", "r2", path="../outside.txt"),
             tool("shell", "s2", cmd="echo", bogus=1),
             tool("no_such_tool", "n1")],
            "All done.",
        ]  # fmt: skip
        async with serving(tmp_path, turns) as (client, _):
            sid = await new_session(client, work)
            asked: list[str] = []

            async def decide(event: dict[str, Any]) -> None:
                name = event["tool_call"]["function"]["name"]
                asked.append(name)
                answer = {
                    "write_file": {"confirmation": "approve-tool", "tool_name": "write_file"},
                    "shell": {"confirmation": "reject", "reason": "no shell today"},
                    "fetch": {"confirmation": "approve"},
                }[name]
                r = await client.post(f"/api/sessions/{sid}/resume", json=answer)
                assert r.status_code == 200, r.text

            with trio.fail_after(DEADLINE):
                events = await run_turn(client, sid, "go", decide)
            # Every asking call waited for a decision; the grant covered the second write.
            assert asked == ["write_file", "shell", "fetch"]
            got = responses(events)
            assert json.loads(got["t1"])["created"]["description"] == "write notes"
            assert got["w1"] == "File written successfully: notes.txt (5 bytes)"
            assert got["w2"] == "File written successfully: more.txt (4 bytes)"
            assert got["r1"] == "hello"
            assert got["l1"].splitlines() == ["FILE more.txt", "FILE notes.txt"]
            assert got["s1"] == "The user rejected the tool call. Reason: no shell today"
            assert not (work / "side.txt").exists()  # the rejected call never ran
            assert got["f1"].startswith(f"Successfully fetched {web}/page (Status: 200")
            assert "# Greenroom" in got["f1"]
            assert "Hello **tools**" in got["f1"]
            assert "outside the working directory" in got["r2"]
            assert got["s2"].startswith("Error calling tool: invalid arguments:")
            assert got["n1"].startswith("Tool 'no_such_tool' is not available.")
            assert events[-1]["type"] == "stream_stopped"

            session = (await client.get(f"/api/sessions/{sid}")).json()
            assert session["permissions"]["allow"] == ["write_file"]  # approve-tool persisted
            audit = (await client.get(f"/api/sessions/{sid}/approvals")).json()
            assert [(a["tool"], a["decision"]) for a in audit] == [
                ("write_file", "approve-tool"),
                ("shell", "reject"),
                ("fetch", "approve"),
            ]
            assert audit[0]["grant"] == "write_file"
            assert audit[1]["reason"] == "no shell today"
            assert audit[2]["arguments_digest"].startswith("sha256:")
            assert all(a["decided_at"] and not a.get("decided_by") for a in audit)
            recovery = (await client.get(f"/api/sessions/{sid}/recovery")).json()
            assert recovery["approvals"] == audit


async def ws_call(ws: Any, frame: dict[str, Any], frames: list[dict[str, Any]]) -> Any:
    await ws.send_message(json.dumps(frame))
    while True:
        message = json.loads(await ws.get_message())
        if message.get("id") == frame["id"] and "ok" in message:
            assert message["ok"], message
            return message["result"]
        frames.append(message)


async def test_approve_tool_with_expiry_and_user_prompt_over_websocket(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    turns = [
        [tool("write_file", "w1", path="a.txt", content="a")],
        "first done",
        [tool("write_file", "w2", path="b.txt", content="b")],
        "second done",
        [tool("write_file", "w3", path="c.txt", content="c")],
        "third done",
        [tool("user_prompt", "u1", message="Your name?", schema={"type": "object"})],
        "bye",
    ]
    async with serving(tmp_path, turns) as (client, url):
        sid = await new_session(client, work)
        ws_url = url.replace("http://", "ws://") + "/api/ws"
        async with open_websocket_url(ws_url) as ws:
            counter = iter(range(1000))

            async def turn(text: str, answer: Answer) -> list[dict[str, Any]]:
                run_id = f"run{next(counter)}"
                frames: list[dict[str, Any]] = []
                messages = [{"role": "user", "content": text}]
                start = {"id": run_id, "op": "run", "session_id": sid, "agent": "agent"}
                await ws_call(ws, {**start, "messages": messages}, frames)
                events: list[dict[str, Any]] = []
                while True:
                    frame = frames.pop(0) if frames else json.loads(await ws.get_message())
                    if frame.get("run") != run_id:
                        continue
                    if frame.get("end"):
                        return events
                    event = frame["event"]
                    events.append(event)
                    if event["type"] in ("tool_call_confirmation", "elicitation_request"):
                        reply = {"id": f"a{next(counter)}", "session_id": sid, **answer(event)}
                        await ws_call(ws, reply, frames)

            def approve_for_a_moment(_: dict[str, Any]) -> dict[str, Any]:
                return {"op": "resume", "confirmation": "approve-tool", "expires_in": 1.0}

            with trio.fail_after(DEADLINE):
                first = await turn("one", approve_for_a_moment)
                second = await turn("two", approve_for_a_moment)  # within the second: no question
                asks = [e for e in first + second if e["type"] == "tool_call_confirmation"]
                assert len(asks) == 1
                await trio.sleep(1.2)  # real clock: let the grant expire
                third = await turn("three", lambda _: {"op": "resume", "confirmation": "approve"})
                assert [e["type"] for e in third].count("tool_call_confirmation") == 1
                assert (work / "c.txt").read_text() == "c"

                def answer_prompt(event: dict[str, Any]) -> dict[str, Any]:
                    assert event["message"] == "Your name?"
                    return {"op": "elicitation", "action": "accept", "content": {"name": "Ada"},
                            "elicitation_id": event["elicitation_id"]}  # fmt: skip

                fourth = await turn("four", answer_prompt)
                assert responses(fourth)["u1"] == '{"action": "accept", "content": {"name": "Ada"}}'

        session = (await client.get(f"/api/sessions/{sid}")).json()
        assert session["permissions"] is None  # an expiring grant is no lasting allow rule
        audit = (await client.get(f"/api/sessions/{sid}/approvals")).json()
        assert [a["decision"] for a in audit] == ["approve-tool", "approve"]
        assert audit[0]["expires_at"] > audit[0]["decided_at"]
