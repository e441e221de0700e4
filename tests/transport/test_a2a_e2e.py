"""An A2A agent calls a greenroom A2A server (issue 26's done-when): a client agent in a
``greenroom serve`` server calls, through greenroom's own ``a2a`` toolset, a ``greenroom serve
a2a`` server: in this process, then as the real command (a child process). The official
``a2a-sdk`` client (httpx, so it runs under trio) is a second client.

REAL clock: every wait is bounded by ``trio.fail_after``.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from greenroom.serve import ServeConfig, serve
from tests.slowness import slow

from .a2a_support import LIMIT, a2a_server, config, echo_agent

pytestmark = pytest.mark.slow

LISTENING = re.compile(rb"greenroom A2A agent 'helper' listening on (http://127\.0\.0\.1:\d+)")


@asynccontextmanager
async def client_server(tmp_path: Path, a2a_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """A greenroom server whose agent calls the A2A agent at ``a2a_url`` once, then thanks."""
    turns = [
        [{"tool_call": {"name": "remote_helper_root", "arguments": {"message": "hi from afar"}}}],
        "Thanks, remote agent.",
    ]
    (tmp_path / "client.json").write_text(json.dumps({"turns": turns}))
    agent = tmp_path / "client.yaml"
    agent.write_text(
        "agents:\n  root:\n    model: scripted/client.json\n    toolsets:\n"
        f"      - type: a2a\n        name: remote\n        url: {a2a_url}\n"
    )
    cfg = ServeConfig(
        agent_paths=(str(agent),), port=0, db=str(tmp_path / "client.sqlite3"),
        data_dir=str(tmp_path / "client-data"), graceful_timeout=1, titles=False,
    )  # fmt: skip
    async with trio.open_nursery() as nursery:
        url: str = await nursery.start(serve, cfg)
        async with httpx.AsyncClient(base_url=url, timeout=LIMIT) as client:
            yield client
        nursery.cancel_scope.cancel()


async def client_turn(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    """One turn of the client agent over SSE, approving its A2A call."""
    sid = (await client.post("/api/sessions", json={})).json()["id"]
    body = {"messages": [{"role": "user", "content": "ask the remote agent"}]}
    events = []
    with trio.fail_after(LIMIT):
        async with client.stream("POST", f"/api/sessions/{sid}/agent/client", json=body) as run:
            assert run.status_code == 200
            async for line in run.aiter_lines():
                if not line.startswith("data: "):
                    continue
                event = json.loads(line[6:])
                events.append(event)
                if event["type"] == "tool_call_confirmation":
                    answer = {"confirmation": "approve"}
                    resumed = await client.post(f"/api/sessions/{sid}/resume", json=answer)
                    assert resumed.status_code == 200, resumed.text
    return events


def tool_answers(events: list[dict[str, Any]]) -> list[str]:
    return [str(e["response"]) for e in events if e["type"] == "tool_call_response"]


async def test_a_greenroom_agent_calls_a_greenroom_a2a_server(tmp_path: Path) -> None:
    async with (
        a2a_server(config(tmp_path, echo_agent(tmp_path))) as a2a_url,
        client_server(tmp_path, a2a_url) as client,
    ):
        events = await client_turn(client)
    assert tool_answers(events) == ["Echo: hi from afar"]  # streamed, joined, once
    said = "".join(e["content"] for e in events if e["type"] == "agent_choice")
    assert said == "Thanks, remote agent."


@asynccontextmanager
async def a2a_command(tmp_path: Path, *args: str) -> AsyncIterator[str]:
    """``greenroom serve a2a`` as a child process; its base URL once listening. On exit it must
    stop with code 0 on SIGTERM."""
    cmd = [sys.executable, "-m", "greenroom.cli", "serve", "a2a", *args]
    env = {"PATH": "/usr/bin:/bin", "XDG_DATA_HOME": str(tmp_path / "xdg"), "PYTHONUNBUFFERED": "1"}
    process = await trio.lowlevel.open_process(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    assert process.stdout is not None
    out = b""
    try:
        with trio.fail_after(slow(60)):  # real clock: a child server's start
            while (match := LISTENING.search(out)) is None:
                chunk = await process.stdout.receive_some()
                assert chunk, f"exited: {process.returncode}"
                out += chunk
        yield match.group(1).decode()
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(slow(15)):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            with trio.move_on_after(slow(5), shield=True):
                await process.wait()


async def test_the_command_serves_and_a_greenroom_agent_calls_it(tmp_path: Path) -> None:
    agent = echo_agent(tmp_path)
    db = tmp_path / "kept.sqlite3"
    async with a2a_command(tmp_path, str(agent), "--port", "0", "--db", str(db)) as a2a_url:
        async with httpx.AsyncClient(timeout=LIMIT) as http:
            card = (await http.get(f"{a2a_url}/.well-known/agent-card.json")).json()
        assert card["url"] == f"{a2a_url}/invoke"
        async with client_server(tmp_path, a2a_url) as client:
            events = await client_turn(client)
    assert tool_answers(events) == ["Echo: hi from afar"]
    assert db.exists()


async def test_the_command_refuses_what_it_cannot_serve(tmp_path: Path) -> None:
    agent = echo_agent(tmp_path)
    base = [sys.executable, "-m", "greenroom.cli", "serve", "a2a"]
    for args, said in [
        ([str(tmp_path / "missing.yaml")], "no such agent file"),
        ([str(agent), "--agent", "nobody"], "nobody"),
        ([str(agent), "--host", "0.0.0.0"], "token"),
    ]:
        with trio.fail_after(slow(60)):
            done = await trio.run_process(
                [*base, *args, "--port", "0", "--db", ":memory:"],
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                env={"PATH": "/usr/bin:/bin", "XDG_DATA_HOME": str(tmp_path / "xdg")},
            )
        assert done.returncode == 2, (args, done.stderr)
        assert said in done.stderr.decode(), (args, done.stderr)


async def test_the_a2a_sdk_client_talks_to_it(tmp_path: Path) -> None:
    from a2a.client import A2ACardResolver
    from a2a.client.transports import JsonRpcTransport
    from a2a.types import (
        Message,
        MessageSendParams,
        Part,
        Role,
        Task,
        TaskArtifactUpdateEvent,
        TaskState,
        TaskStatusUpdateEvent,
        TextPart,
    )

    def params(text: str) -> MessageSendParams:
        part = Part(root=TextPart(text=text))
        return MessageSendParams(message=Message(role=Role.user, parts=[part], message_id="m1"))

    async with (
        a2a_server(config(tmp_path, echo_agent(tmp_path))) as url,
        httpx.AsyncClient(timeout=LIMIT) as http,
    ):
        with trio.fail_after(LIMIT):
            card = await A2ACardResolver(http, url).get_agent_card()
            transport = JsonRpcTransport(http, agent_card=card)
            task = await transport.send_message(params("hi sdk"))
            streamed = [e async for e in transport.send_message_streaming(params("hi stream"))]
    assert card.name == "helper" and card.capabilities.streaming
    assert isinstance(task, Task) and task.status.state == TaskState.completed
    assert task.artifacts is not None
    assert [p.root for p in task.artifacts[0].parts] == [TextPart(text="Echo: hi sdk")]
    assert isinstance(streamed[0], Task)
    last = streamed[-1]
    assert isinstance(last, TaskStatusUpdateEvent) and last.final
    assert last.status.state == TaskState.completed
    text = "".join(
        str(getattr(p.root, "text", ""))
        for e in streamed
        if isinstance(e, TaskArtifactUpdateEvent)
        for p in e.artifact.parts
    )
    assert text == "Echo: hi stream"
