"""What the crash tests share: a slow fake model that calls the side-effect tool, a real
``greenroom serve`` child process on a real file that can be killed with SIGKILL, ``/events``
watchers that keep every (seq, body) they received and resume after their last seq, and a
read-only view of the database file.

The side-effect tool is a ``script`` toolset of the agent file: it appends ``<call> <pid>`` (the
server's pid) to a file in one write, sleeps ``sleep`` seconds, then waits while a hold file
exists. The fake model puts the tool call's id in the ``call`` argument.

Real clock throughout (separate processes); every wait is bounded.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio

from tests.agents import fake_openai as fo
from tests.agents.fake_sse import Recorded, Reply
from tests.slowness import slow

STARTUP = slow(60)  # a child server's start, on a busy machine
LISTENING = re.compile(r"greenroom listening on (http://127\.0\.0\.1:\d+)")
RECOVERY = re.compile(
    r"  recovery: (\d+) turns? interrupted, (\d+) tool calls? in doubt"
    r"(?:, (\d+) tool process groups? killed)?"
)
KEY_VAR = "GREENROOM_CRASH_TEST_KEY"


# --- the model -------------------------------------------------------------------------------


@attrs.define
class SlowModel:
    """Answers a user message with ``tokens`` words then a call of the side-effect tool (a
    fresh id, also in its arguments); answers a tool result with two words. ``delay`` seconds
    (real clock) before each streamed frame."""

    tokens: int = 8
    delay: float = 0.03
    tool_sleep: float = 0.4
    calls: list[str] = attrs.field(factory=list)

    def __call__(self, request: Recorded) -> Reply:
        messages = request.json.get("messages", []) if isinstance(request.json, dict) else []
        if messages and messages[-1].get("role") == "tool":
            return fo.text_reply("All ", "done.", delay=self.delay)
        call_id = f"call-{uuid.uuid4().hex[:12]}"
        self.calls.append(call_id)
        arguments = json.dumps({"call": call_id, "sleep": self.tool_sleep})
        payloads: list[dict[str, Any]] = [fo.chunk({"role": "assistant", "content": ""})]
        payloads += [fo.chunk({"content": f"word{n} "}) for n in range(self.tokens)]
        first = {"index": 0, "id": call_id, "type": "function"}
        first["function"] = {"name": "side_effect", "arguments": ""}
        payloads.append(fo.chunk({"tool_calls": [first]}))
        part = {"index": 0, "function": {"arguments": arguments}}
        payloads.append(fo.chunk({"tool_calls": [part]}))
        payloads += [fo.chunk(finish_reason="tool_calls"), fo.usage_chunk(20, self.tokens)]
        return fo.stream_reply(payloads, delay=self.delay)


def side_effect_command(side_effects: Path, hold: Path) -> str:
    # One O_APPEND write per line, with the pid of the server that started the shell (field 4
    # of the shell's /proc stat: the script toolset takes every $name for an argument). The
    # wait on the hold file is bounded (two minutes).
    return (
        f'printf "%s %s\\n" "$call" "$(cut -d" " -f4 /proc/$$/stat)" >> {side_effects}; '
        f'sleep "$sleep"; for n in $(seq 6000); do [ -e {hold} ] || break; sleep 0.02; done; '
        'echo "side effect $call done"'
    )


def write_agent(directory: Path, model_url: str, side_effects: Path, hold: Path) -> Path:
    path = directory / "crash.yaml"
    command = side_effect_command(side_effects, hold).replace("'", "''")
    path.write_text(
        "\n".join(
            [
                'version: "2"',
                "agents:",
                "  root:",
                "    model: main",
                "    description: crash test agent",
                "    instruction: Call the side_effect tool.",
                "    toolsets:",
                "      - type: script",
                "        shell:",
                "          side_effect:",
                "            description: Does something that must not happen twice.",
                f"            cmd: '{command}'",
                "            args:",
                "              call: {type: string}",
                "              sleep: {type: number}",
                "            required: [call, sleep]",
                "models:",
                "  main:",
                "    provider: openai",
                f"    model: {fo.MODEL}",
                f"    base_url: {model_url}/v1",
                f"    token_key: {KEY_VAR}",
                "",
            ]
        )
    )
    return path


def user(text: str) -> dict[str, Any]:
    """The body of a run with one user message."""
    return {"messages": [{"role": "user", "content": text}]}


@asynccontextmanager
async def fake_model(model: Callable[[Recorded], Reply]) -> AsyncIterator[fo.FakeOpenAI]:
    """The fake OpenAI server answering with ``model``, on loopback, for the block."""
    async with trio.open_nursery() as nursery:
        fake = fo.FakeOpenAI()
        fake.responder = model
        await nursery.start(fake.serve)
        yield fake
        fake.stop()


# --- the server ------------------------------------------------------------------------------


@attrs.define
class Server:
    process: trio.Process
    url: str
    recovered: tuple[int, int]  # (turns interrupted, tool calls in doubt) as printed
    started_at: dt.datetime  # just before it was started (what recovery ends came after)
    groups_killed: int = 0  # tool process groups left by the last server, killed at start

    @property
    def pid(self) -> int:
        return self.process.pid

    async def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGKILL)
        with trio.fail_after(slow(10)):
            await self.process.wait()
        await self._close()

    async def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        with trio.fail_after(slow(30)):
            code = await self.process.wait()
        await self._close()
        return code

    async def _close(self) -> None:
        if self.process.stdout is not None:
            await self.process.stdout.aclose()


@asynccontextmanager
async def servers() -> AsyncIterator[list[Server]]:
    """Collects the servers a test starts; any still running at the end is killed."""
    started: list[Server] = []
    try:
        yield started
    finally:
        with trio.CancelScope(shield=True):
            for server in started:
                await server.kill()


@attrs.define
class ServerFiles:
    directory: Path
    model_url: str

    @property
    def db(self) -> Path:
        return self.directory / "crash.db"

    @property
    def side_effects(self) -> Path:
        return self.directory / "side-effects.log"

    @property
    def hold(self) -> Path:
        return self.directory / "hold"

    @property
    def stderr(self) -> Path:
        return self.directory / "server.err"

    @property
    def agent(self) -> Path:
        return write_agent(self.directory, self.model_url, self.side_effects, self.hold)

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GREENROOM_")}
        env.update({KEY_VAR: "test-key", "PYTHONUNBUFFERED": "1"})
        return env


async def start_server(files: ServerFiles, extra: Sequence[str] = ()) -> Server:
    """``greenroom serve`` on 127.0.0.1:0 over ``files.db`` (with ``extra`` options); returns
    once it listens and has said what recovery did."""
    command = [sys.executable, "-m", "greenroom.cli", "serve", str(files.agent), "--port", "0"]
    command += ["--db", str(files.db), "--log-level", "warning"]
    command += ["--retain-deltas", "0", "--retain-deltas-per-session", "0", *extra]
    started_at = dt.datetime.now(dt.UTC)
    with files.stderr.open("ab") as err:
        process = await trio.lowlevel.open_process(
            command, stdout=subprocess.PIPE, stderr=err, env=files.env()
        )
    assert process.stdout is not None
    out = b""
    try:
        with trio.fail_after(STARTUP):  # the listening line, then the summary ending in recovery
            while b"  recovery:" not in out or not out.endswith(b"\n"):
                chunk = await process.stdout.receive_some()
                if not chunk:
                    raise AssertionError(f"the server exited early:\n{files.stderr.read_text()}")
                out += chunk
        lines = out.decode().splitlines()
        url = LISTENING.fullmatch(lines[0])
        counts = next(filter(None, map(RECOVERY.fullmatch, lines)), None)
        assert url and counts, out
    except BaseException:
        with trio.CancelScope(shield=True):
            await Server(process, "", (0, 0), started_at).kill()
        raise
    recovered = (int(counts.group(1)), int(counts.group(2)))
    return Server(process, url.group(1), recovered, started_at, int(counts.group(3) or 0))


@asynccontextmanager
async def client(server: Server) -> AsyncIterator[httpx.AsyncClient]:
    limits = httpx.Limits(max_connections=300, max_keepalive_connections=50)
    async with httpx.AsyncClient(base_url=server.url, timeout=slow(30), limits=limits) as http:
        yield http


# --- /events watchers --------------------------------------------------------------------------


@attrs.define
class Watcher:
    """An ``/events`` client of one session: every (seq, exact body) it got, resuming after
    its last seq (Last-Event-ID) each time it reconnects (to the same server or, in a
    cluster, to any node). ``entries`` keeps the arrival order (duplicates included) and
    ``gaps`` the seqs after which an explicit ``gap`` came; ``gaps_allowed`` says whether such
    a gap is expected (retention) or a problem."""

    session_id: str
    received: dict[int, bytes] = attrs.field(factory=dict)
    last: int = 0
    problems: list[str] = attrs.field(factory=list)
    caught_up: trio.Event = attrs.field(factory=trio.Event)
    target: int = 0  # caught_up is set once last reaches it
    entries: list[tuple[int, bytes]] = attrs.field(factory=list)
    gaps: list[int] = attrs.field(factory=list)
    gaps_allowed: bool = False
    exited: trio.Event = attrs.field(factory=trio.Event)  # session_exited arrived

    def expect(self, target: int) -> None:
        self.target = target
        self.caught_up = trio.Event()
        if self.last >= target:
            self.caught_up.set()

    async def watch(self, http: httpx.AsyncClient) -> int:
        """Read until the server goes away (killed), the stream ends or the task is
        cancelled; the status the server answered (0: it could not be reached)."""
        headers = {"Last-Event-ID": str(self.last)}
        try:
            path = f"/api/sessions/{self.session_id}/events"
            async with http.stream("GET", path, headers=headers) as response:
                if response.status_code != 200:
                    self.problems.append(f"/events answered {response.status_code}")
                    return response.status_code
                seq = 0
                async for line in response.aiter_lines():
                    if line.startswith("id: "):
                        seq = int(line[4:])
                    elif line.startswith("data: "):
                        self._take(seq, line[6:].encode())
                        seq = 0
                return 200
        except (httpx.TransportError, httpx.StreamError):
            return 0  # the server died: resume after the restart

    def _take(self, seq: int, body: bytes) -> None:
        if seq == 0:
            if self.gaps_allowed and json.loads(body).get("type") == "gap":
                self.gaps.append(self.last)
            else:
                self.problems.append(f"control event {body!r}")
            return
        expected = seq == self.last + 1 or (self.gaps and self.gaps[-1] == self.last)
        if not expected or seq <= self.last:  # a resumed stream goes on exactly where it stopped
            self.problems.append(f"seq {seq} after {self.last}")
        self.entries.append((seq, body))
        self.received[seq] = body
        self.last = max(self.last, seq)
        if b'"session_exited"' in body and json.loads(body).get("type") == "session_exited":
            self.exited.set()
        if self.last >= self.target:
            self.caught_up.set()


# --- the database, read while the server runs ------------------------------------------------


class Database:
    """A read-only connection to the server's file (WAL lets it read beside the writer)."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)

    def close(self) -> None:
        self.conn.close()

    def rows(self, sql: str, *args: Any) -> list[Any]:
        return self.conn.execute(sql, args).fetchall()

    def events(self, session_id: str) -> dict[int, bytes]:
        rows = self.rows("SELECT seq, body FROM events WHERE session_id = ?", session_id)
        return {seq: bytes(body) for seq, body in rows}

    def head(self, session_id: str) -> int:
        rows = self.rows("SELECT last_seq FROM heads WHERE session_id = ?", session_id)
        return int(rows[0][0]) if rows else 0

    def sessions(self) -> set[str]:
        return {r[0] for r in self.rows("SELECT id FROM sessions")}

    def messages(self, session_id: str) -> list[dict[str, Any]]:
        rows = self.rows(
            "SELECT body FROM items WHERE session_id = ? AND kind = 'message' ORDER BY position",
            session_id,
        )
        return [json.loads(body)["message"] for (body,) in rows]

    def tool_calls(self) -> dict[str, tuple[str, str]]:
        """tool call id -> (session id, state)."""
        rows = self.rows("SELECT tool_call_id, session_id, state FROM tool_calls")
        return {call: (session, state) for call, session, state in rows}


def side_effect_lines(path: Path) -> list[tuple[str, int]]:
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    return [(call, int(pid)) for call, pid in (line.split() for line in lines)]
