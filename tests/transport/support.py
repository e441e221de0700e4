"""Helpers shared by the transport tests: the fake agent catalog, the test environment, SSE
and WebSocket readers for the live server.

Every wait here is bounded: the readers take a deadline and raise ``trio.TooSlowError``
instead of hanging.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import attrs
import h11
import httpx
import trio
from quart_trio import QuartTrio
from trio_websocket import ConnectionClosed, WebSocketConnection

from greenroom.actors import Registry
from greenroom.agents import TurnIO
from greenroom.client._sse import SSEParser  # white-box: the client keeps its parser private
from greenroom.domain import AgentChoice, Event, Session, StreamStopped
from greenroom.errors import AgentNotFound, AgentSourceUnavailable
from greenroom.persistence import MemoryStore
from tests.fakes import FakeFactory, FakeRuntime, without_timestamp
from tests.slowness import slow

AGENT = "agent"  # the one source key the fake factory and catalog know
UNAVAILABLE = "remote"  # a source whose fetch fails (502)


class FakeCatalog:
    """The AgentCatalog of the tests: one source ``agent`` with a ``root`` agent."""

    def list_agents(self) -> list[dict[str, Any]]:
        return [{"name": AGENT, "description": "test agent", "multi": False}]

    def agent_config(self, source: str) -> dict[str, Any]:
        if source == UNAVAILABLE:
            raise AgentSourceUnavailable(f"agent source unavailable: {source}")
        if source != AGENT:
            raise AgentNotFound(f"agent source not found: {source}")
        return {"agents": {"root": {"description": "test agent", "model": "echo/echo"}}}

    async def tool_count(self, source: str, agent_name: str) -> int:
        await trio.lowlevel.checkpoint()
        self.check_agent(source, agent_name)
        return 3

    def check_agent(self, source: str, agent_name: str) -> None:
        self.agent_config(source)
        if agent_name not in ("root", ""):
            raise AgentNotFound(f"agent not found: {agent_name}")


class PhasedRuntime(FakeRuntime):
    """A FakeRuntime whose turn emits ``script``, then ``tick`` events every ``tick_every``
    seconds until released, then ``after`` (and records whether it ran to its end)."""

    def __init__(self, *, tick_every: float = 0.0, **options: Any) -> None:
        super().__init__(**options)
        self.tick_every = tick_every
        self.after: list[Event] = [AgentChoice("after release"), StreamStopped()]
        self.completed = 0
        self.cancelled = 0

    async def run_stream(self, io: TurnIO) -> None:
        self.streams += 1
        self.turns += 1
        self.turn_started.set()
        try:
            for event in self.script:
                await io.emit(event)
            ticks = 0
            while not self._release.is_set():
                if self.tick_every:
                    ticks += 1
                    with trio.move_on_after(self.tick_every):
                        await self._release.wait()
                    if not self._release.is_set():
                        await io.emit(AgentChoice(f"tick {ticks}"))
                else:
                    await self._release.wait()
            for event in self.after:
                await io.emit(event)
            self.completed += 1
        except trio.Cancelled:
            self.cancelled += 1
            raise
        finally:
            self.streams -= 1


@attrs.define
class Env:
    """An app over a registry with a FakeFactory and an in-memory store."""

    app: QuartTrio
    registry: Registry
    runtime: FakeRuntime
    factory: FakeFactory
    store: MemoryStore

    async def new_session(self, title: str = "") -> str:
        session = await self.registry.create(Session.new(title=title))
        return session.id


@attrs.define
class Live:
    """A live hypercorn server on 127.0.0.1:0 serving ``env.app``."""

    url: str
    env: Env

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://", 1) + "/api/ws"


def user_body(*texts: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": t} for t in texts]}


def message_body(role: str, content: str) -> dict[str, Any]:
    return {"message": {"message": {"role": role, "content": content}}}


# --- SSE ---------------------------------------------------------------------------------


@attrs.define
class SSEFrame:
    data: Any = None  # the decoded JSON of the data: line(s), None for a comment
    id: int | None = None
    comment: str = ""

    @property
    def type(self) -> str:
        return str(self.data.get("type", "")) if isinstance(self.data, dict) else ""


class _Lines:
    """A response's lines on their way to the parser, noting the comment (``: ping``) among
    them: the client's parser reads a comment only as a sign of life."""

    def __init__(self, lines: AsyncIterator[str]) -> None:
        self._lines = lines
        self.comment = ""

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        line = await self._lines.__anext__()
        if line.startswith(":"):
            self.comment = line[1:].strip()
        return line


class SSEReader:
    """Parse an SSE body into frames (comments such as ``: ping`` included), with the client's
    own parser.

    A plain async iterator, not an async generator: a test may stop reading mid-stream without
    leaving a generator for the garbage collector (httpx's own are filtered in pyproject).
    """

    def __init__(self, response: httpx.Response) -> None:
        self._lines = _Lines(response.aiter_lines())
        self._frames = SSEParser(self._lines)

    def __aiter__(self) -> SSEReader:
        return self

    async def __anext__(self) -> SSEFrame:
        self._lines.comment = ""
        frame = await self._frames.__anext__()
        return SSEFrame(without_timestamp(frame.data), frame.id, self._lines.comment)


def sse_frames(response: httpx.Response) -> SSEReader:
    return SSEReader(response)


async def receive_until_closed(ws: WSClient, *, within: float = slow(10)) -> tuple[int, list[Any]]:
    """Read frames until the server closes the socket: (close code, frames read)."""
    frames: list[Any] = []
    with trio.fail_after(within):
        while True:
            try:
                frames.append(await ws.receive(within))
            except ConnectionClosed as exc:
                reason = exc.reason
                if reason is None:
                    raise AssertionError("closed without a close reason") from exc
                return reason.code, frames


async def read_until(
    frames: AsyncIterator[SSEFrame], stop_type: str, *, within: float = slow(10)
) -> list[SSEFrame]:
    """Data frames (comments skipped) up to and including the first of type ``stop_type``."""
    out: list[SSEFrame] = []
    with trio.fail_after(within):
        async for frame in frames:
            if frame.data is None:
                continue
            out.append(frame)
            if frame.type == stop_type:
                return out
    raise AssertionError(f"stream ended before {stop_type!r}: {[f.type for f in out]}")


async def read_to_end(
    frames: AsyncIterator[SSEFrame], *, within: float = slow(10)
) -> list[SSEFrame]:
    """Every frame until the stream ends (comments included)."""
    out: list[SSEFrame] = []
    with trio.fail_after(within):
        async for frame in frames:
            out.append(frame)
    return out


# --- WebSocket ---------------------------------------------------------------------------


class WSClient:
    """A WebSocket API client: numbered requests, replies matched by id, other frames kept."""

    def __init__(self, ws: WebSocketConnection) -> None:
        self.ws = ws
        self.pending: list[dict[str, Any]] = []  # frames received but not yet asked for
        self._next = 0

    async def send(self, frame: dict[str, Any]) -> str:
        self._next += 1
        frame_id = f"r{self._next}"
        await self.ws.send_message(json.dumps({"id": frame_id, **frame}))
        return frame_id

    async def receive(self, within: float = slow(10)) -> dict[str, Any]:
        with trio.fail_after(within):
            value: dict[str, Any] = json.loads(await self.ws.get_message())
        if "event" in value:
            value["event"] = without_timestamp(value["event"])
        return value

    async def wait_for(self, predicate: Any, *, within: float = slow(10)) -> dict[str, Any]:
        """The first frame (pending ones first) that satisfies ``predicate``."""
        for i, frame in enumerate(self.pending):
            if predicate(frame):
                return self.pending.pop(i)
        with trio.fail_after(within):
            while True:
                frame = await self.receive(within)
                if predicate(frame):
                    return frame
                self.pending.append(frame)

    async def reply(self, frame_id: str, *, within: float = slow(10)) -> dict[str, Any]:
        return await self.wait_for(lambda f: f.get("id") == frame_id and "ok" in f, within=within)

    async def call(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send an op and return its reply frame."""
        return await self.reply(await self.send({"op": op, **fields}))

    async def result(self, op: str, **fields: Any) -> Any:
        frame = await self.call(op, **fields)
        assert frame["ok"] is True, frame
        return frame["result"]


async def close_transport(conn: WebSocketConnection) -> None:
    """Close the TCP stream of a connection the *server* closed: trio-websocket (0.12) skips
    that when the close handshake came from the peer, and leaks the socket."""
    await conn._stream.aclose()


async def ws_handshake(
    url: str, headers: list[tuple[str, str]], *, host: str | None = None
) -> tuple[int, dict[str, str], bytes]:
    """A raw WebSocket opening handshake: (status, headers, body) of the server's answer.

    For refusals: trio-websocket leaks its socket when the server rejects the handshake.
    """
    address, _, port = url.removeprefix("http://").partition(":")
    conn = h11.Connection(h11.CLIENT)
    request = h11.Request(
        method="GET",
        target="/api/ws",
        headers=[
            ("Host", host or f"{address}:{port}"),
            ("Upgrade", "websocket"),
            ("Connection", "Upgrade"),
            ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("Sec-WebSocket-Version", "13"),
            *headers,
        ],
    )
    with trio.fail_after(slow(10)):
        stream = await trio.open_tcp_stream(address, int(port))
        async with stream:
            await stream.send_all(conn.send(request) + conn.send(h11.EndOfMessage()))
            status, answer, body = 0, {}, b""
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    conn.receive_data(await stream.receive_some(65536))
                    continue
                if isinstance(event, h11.Response | h11.InformationalResponse):
                    status = event.status_code
                    answer = {k.decode().lower(): v.decode() for k, v in event.headers}
                    if status == 101:
                        return status, answer, body
                elif isinstance(event, h11.Data):
                    body += bytes(event.data)
                elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                    return status, answer, body


# --- raw HTTP/1.1 ----------------------------------------------------------------------------


@attrs.define
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class RawConnection:
    """One HTTP/1.1 connection driven by hand."""

    def __init__(self, stream: trio.SocketStream, host: str) -> None:
        self.stream = stream
        self.host = host
        self.buffer = b""

    @classmethod
    async def open(cls, live: Live) -> RawConnection:
        host, _, port = live.url.removeprefix("http://").partition(":")
        with trio.fail_after(slow(5)):
            stream = await trio.open_tcp_stream(host, int(port))
        return cls(stream, f"{host}:{port}")

    async def aclose(self) -> None:
        await self.stream.aclose()

    def request_bytes(
        self,
        method: str,
        path: str,
        *,
        headers: dict[str, str] | None = None,
        body: bytes | None = None,
    ) -> bytes:
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.host}"]
        all_headers = dict(headers or {})
        if body is not None and "Transfer-Encoding" not in all_headers:
            all_headers.setdefault("Content-Length", str(len(body)))
            all_headers.setdefault("Content-Type", "application/json")
        lines += [f"{k}: {v}" for k, v in all_headers.items()]
        return "\r\n".join(lines).encode() + b"\r\n\r\n" + (body or b"")

    async def send(self, data: bytes) -> None:
        with trio.fail_after(slow(10)):
            await self.stream.send_all(data)

    async def _fill(self) -> None:
        data = await self.stream.receive_some(65536)
        if not data:
            raise EOFError("connection closed by the server")
        self.buffer += data

    async def _take_until(self, marker: bytes) -> bytes:
        while marker not in self.buffer:
            await self._fill()
        head, _, self.buffer = self.buffer.partition(marker)
        return head

    async def _take(self, n: int) -> bytes:
        while len(self.buffer) < n:
            await self._fill()
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    async def response(self, *, within: float = slow(5)) -> RawResponse:
        with trio.fail_after(within):
            head = (await self._take_until(b"\r\n\r\n")).decode("latin-1")
            status_line, *header_lines = head.split("\r\n")
            status = int(status_line.split(" ")[1])
            headers: dict[str, str] = {}
            for line in header_lines:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            if headers.get("transfer-encoding") == "chunked":
                body = b""
                while True:
                    size = int(await self._take_until(b"\r\n"), 16)
                    chunk = await self._take(size + 2)
                    if size == 0:
                        break
                    body += chunk[:-2]
            else:
                body = await self._take(int(headers.get("content-length", "0")))
        return RawResponse(status, headers, body)

    async def eof_within(self, seconds: float) -> bool:
        """True when the server closes the connection within ``seconds``."""
        with trio.move_on_after(seconds):
            try:
                while True:
                    await self._fill()
            except (EOFError, trio.BrokenResourceError):
                return True
        return False


async def assert_healthy(live: Live) -> None:
    """A fresh connection still gets /health answered."""
    conn = await RawConnection.open(live)
    try:
        await conn.send(conn.request_bytes("GET", "/health"))
        r = await conn.response()
        assert r.status == 200
        assert r.json()["status"] == "ok"
    finally:
        await conn.aclose()
