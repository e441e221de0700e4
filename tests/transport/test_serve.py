"""``greenroom serve`` as a real process: the listening line, a run against the bundled echo
agent, graceful SIGTERM with open streams, persistence across a restart, refusing to expose an
unauthenticated server, ``--version``.

REAL clock: every wait is bounded by ``trio.fail_after``.
"""

from __future__ import annotations

import json
import os
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
from trio_websocket import open_websocket_url

from greenroom import __version__
from tests.slowness import slow
from tests.transport.support import (
    WSClient,
    close_transport,
    read_to_end,
    receive_until_closed,
    sse_frames,
)

pytestmark = pytest.mark.slow

STARTUP = slow(60)  # a child server's start, on a slow machine
LISTENING = re.compile(r"greenroom listening on (http://127\.0\.0\.1:(\d+))")


def child_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GREENROOM_")}
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Server:
    """A ``greenroom serve`` child process with its output collected."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.stdout = b""
        self.stderr = b""
        self.url = ""

    async def _collect(self, stream: Any, name: str) -> None:
        async for chunk in stream:
            setattr(self, name, getattr(self, name) + chunk)

    async def wait_listening(self) -> str:
        with trio.fail_after(STARTUP):
            while b"\n" not in self.stdout:
                if self.process.returncode is not None:
                    raise AssertionError(f"server exited: {self.stderr.decode()}")
                await trio.sleep(0.05)  # real clock: waiting for the child's first line
        line = self.stdout.decode().splitlines()[0]
        match = LISTENING.fullmatch(line)
        assert match, line
        self.url = match.group(1)
        return self.url

    async def terminate(self, *, within: float = slow(10)) -> int:
        self.process.send_signal(signal.SIGTERM)
        with trio.fail_after(within):
            return await self.process.wait()


@asynccontextmanager
async def serve(
    tmp_path: Path, *args: str, extra_env: dict[str, str] | None = None
) -> AsyncIterator[Server]:
    """The server, listening; on exit it must stop with code 0 on SIGTERM (if still up)."""
    cmd = [sys.executable, "-m", "greenroom.cli", "serve", "--port", "0", *args]
    env = {**child_env(tmp_path), **(extra_env or {})}
    process = await trio.lowlevel.open_process(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    server = Server(process)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server._collect, process.stdout, "stdout")
            nursery.start_soon(server._collect, process.stderr, "stderr")
            await server.wait_listening()
            yield server
            if process.returncode is None:
                assert await server.terminate() == 0, server.stderr.decode()
    finally:
        if process.returncode is None:
            process.kill()
            with trio.move_on_after(slow(5), shield=True):
                await process.wait()


async def test_serve_runs_streams_and_shuts_down_gracefully(tmp_path: Path) -> None:
    db = tmp_path / "sessions.sqlite3"
    async with (
        serve(tmp_path, "--db", str(db)) as server,
        httpx.AsyncClient(base_url=server.url, timeout=slow(10)) as client,
    ):
        assert (await client.get("/health")).json()["status"] == "ok"
        agents = (await client.get("/api/agents")).json()
        assert len(agents) == 1
        source = agents[0]["name"]
        r = await client.post("/api/sessions", json={"title": "Persisted"})
        sid = r.json()["id"]

        run = f"/api/sessions/{sid}/agent/{source}"
        body = {"messages": [{"role": "user", "content": "hello there"}]}
        async with client.stream("POST", run, json=body) as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
            frames = await read_to_end(sse_frames(stream), within=slow(30))
        events = [f for f in frames if f.data is not None]
        assert events[-1].type == "stream_stopped"
        text = "".join(f.data["content"] for f in events if f.type == "agent_choice")
        assert "hello there" in text  # the echo model
        assert all(f.id is not None for f in events)
        last_seq = events[-1].id

        # Open streams while the server is told to stop: an /events tail and a WebSocket.
        async with (
            client.stream("GET", f"/api/sessions/{sid}/events?since={last_seq}") as tail,
            open_websocket_url(server.url.replace("http", "ws", 1) + "/api/ws") as conn,
        ):
            ws = WSClient(conn)
            assert await ws.result("subscribe", session_id=sid) == {"subscribed": sid}
            tail_frames = sse_frames(tail)
            first = await read_until_comment(tail_frames)
            assert first == "connected"

            start = trio.current_time()
            server.process.send_signal(signal.SIGTERM)
            rest = await read_to_end(tail_frames, within=slow(10))  # the stream ends cleanly
            assert all(f.type != "session_exited" for f in rest)  # resumable, not ended
            code, _ = await receive_until_closed(ws)
            assert code == 1001
            await close_transport(conn)
        with trio.fail_after(slow(10)):
            exit_code = await server.process.wait()
        assert exit_code == 0, server.stderr.decode()
        assert trio.current_time() - start < 8
    assert server.stdout.decode().splitlines()[0] == f"greenroom listening on {server.url}"

    # Restart on the same database file: the session and its turn are there.
    async with (
        serve(tmp_path, "--db", str(db)) as again,
        httpx.AsyncClient(base_url=again.url, timeout=slow(10)) as client,
    ):
        r = await client.get(f"/api/sessions/{sid}")
        assert r.status_code == 200
        session = r.json()
        assert session["title"] == "Persisted"
        contents = [(m["message"]["role"], m["message"]["content"]) for m in session["messages"]]
        assert contents[0] == ("user", "hello there")
        assert contents[-1][0] == "assistant" and "hello there" in contents[-1][1]
        listed = (await client.get("/api/sessions")).json()
        assert [s["id"] for s in listed] == [sid]


async def read_until_comment(frames: Any) -> str:
    with trio.fail_after(slow(10)):
        async for frame in frames:
            if frame.comment:
                return str(frame.comment)
    raise AssertionError("stream ended before a comment")


async def test_non_loopback_host_without_token_is_refused(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "greenroom.cli", "serve", "--host", "0.0.0.0", "--port", "0"]
    cmd += ["--db", ":memory:"]
    with trio.fail_after(STARTUP):
        result = await trio.run_process(
            cmd, capture_stdout=True, capture_stderr=True, check=False, env=child_env(tmp_path)
        )
    assert result.returncode == 2
    assert result.stdout == b""  # never listened
    err = result.stderr.decode()
    assert "refusing to serve 0.0.0.0 without an auth token" in err
    assert "--auth-token" in err and "--insecure-no-auth" in err
    assert "Traceback" not in err


async def test_version(tmp_path: Path) -> None:
    with trio.fail_after(STARTUP):
        result = await trio.run_process(
            [sys.executable, "-m", "greenroom.cli", "--version"],
            capture_stdout=True,
            capture_stderr=True,
            env=child_env(tmp_path),
        )
    assert result.stdout.decode() == f"greenroom {__version__}\n"
    assert result.returncode == 0


async def test_serve_memory_db_with_token(tmp_path: Path) -> None:
    """GREENROOM_AUTH_TOKEN protects the API; /health stays open; SIGTERM exits 0."""
    token = "env-token"
    env_token = {"GREENROOM_AUTH_TOKEN": token}
    async with (
        serve(tmp_path, "--db", ":memory:", extra_env=env_token) as server,
        httpx.AsyncClient(base_url=server.url, timeout=slow(10)) as client,
    ):
        assert (await client.get("/health")).status_code == 200
        r = await client.get("/api/sessions")
        assert r.status_code == 401
        assert json.loads(r.content)["message"] == "missing Authorization header"
        r = await client.get("/api/sessions", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200 and r.json() == []


async def _refused(tmp_path: Path, *args: str) -> str:
    """Run ``greenroom serve ARGS`` expecting a start-up refusal; returns its stderr."""
    cmd = [sys.executable, "-m", "greenroom.cli", "serve", *args]
    with trio.fail_after(STARTUP):
        result = await trio.run_process(
            cmd, capture_stdout=True, capture_stderr=True, check=False, env=child_env(tmp_path)
        )
    err = result.stderr.decode()
    assert result.returncode == 2, err
    assert result.stdout == b""  # never listened
    assert "Traceback" not in err
    assert len([line for line in err.splitlines() if line.startswith("greenroom:")]) == 1, err
    return err


async def test_start_up_failures_are_one_line_and_exit_2(tmp_path: Path) -> None:
    with trio.socket.socket() as taken:
        await taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = str(taken.getsockname()[1])
        err = await _refused(tmp_path, "--port", port, "--db", ":memory:")
    assert f"cannot listen on 127.0.0.1:{port}" in err and "--port" in err
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    err = await _refused(tmp_path, "--port", "0", "--db", str(blocker / "sessions.sqlite3"))
    assert "cannot create the database directory" in err and "--db" in err
    err = await _refused(tmp_path, str(tmp_path / "missing.yaml"), "--port", "0")
    assert "missing.yaml" in err


async def test_start_up_says_where_things_are(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite3"
    async with serve(tmp_path, "--db", str(db)) as server:
        with trio.fail_after(STARTUP):
            for _ in range(round(STARTUP * 20)):
                if b"recovery:" in server.stdout:
                    break
                await trio.sleep(0.05)  # real clock: the summary follows the listening line
    lines = server.stdout.decode().splitlines()
    assert lines[1:3] == [f"  database: {db}", "  agents:   default (the bundled agent)"]
    assert lines[3].startswith("  model:    ") and "echo" in lines[3]
    assert lines[4].startswith("  stop:     Ctrl-C")
    assert lines[5] == "  recovery: 0 turns interrupted, 0 tool calls in doubt"


async def test_sigterm_drains_a_running_turn_when_asked(tmp_path: Path) -> None:
    """--drain-timeout on one node: the first SIGTERM makes /ready answer 503 (draining) and
    lets the running turn finish; then the server stops with code 0."""
    agent = tmp_path / "slowish.yaml"
    agent.write_text(
        "agents:\n  root:\n    model: slow\n"
        "models:\n  slow:\n    provider: echo\n    model: echo\n"
        "    provider_opts:\n      token_delay: 0.1\n"
    )
    words = " ".join(f"w{i}" for i in range(12))  # ~1.2 s of streaming
    async with (
        serve(tmp_path, str(agent), "--db", ":memory:", "--drain-timeout", "20") as server,
        httpx.AsyncClient(base_url=server.url, timeout=slow(10)) as client,
    ):
        sid = (await client.post("/api/sessions", json={})).json()["id"]
        body = {"messages": [{"role": "user", "content": words}]}
        async with client.stream("POST", f"/api/sessions/{sid}/agent/slowish", json=body) as run:
            assert run.status_code == 200
            frames = sse_frames(run)
            with trio.fail_after(slow(10)):
                async for frame in frames:
                    if frame.type == "agent_choice":
                        break  # streaming: now the server is told to stop
            server.process.send_signal(signal.SIGTERM)
            ready = await client.get("/ready")
            assert (ready.status_code, ready.json().get("draining")) == (503, True)
            rest = await read_to_end(frames, within=slow(20))
        events = [f for f in rest if f.data is not None]
        assert events[-1].type == "stream_stopped"
        text = "".join(f.data["content"] for f in events if f.type == "agent_choice")
        assert text.rstrip().endswith("w11"), text  # the whole answer, not cut off
        with trio.fail_after(slow(20)):
            assert await server.process.wait() == 0, server.stderr.decode()
    assert "draining" in server.stderr.decode()
