"""The load generator of ``bench/side_by_side.py``: one scenario, in its own process.

    python bench/_loadgen.py '<config JSON>'     # prints one JSON result line

It speaks plain HTTP/1.1 over trio sockets (keep-alive, chunked bodies) and counts token
events by a byte pattern per server, so its own CPU per token stays small next to the
servers'; WebSocket goes through trio-websocket. Every wait is bounded by the scenario's
``timeout`` and every loop by a count.

Adapters (``server`` in the config): ``greenroom`` (REST + SSE), ``greenroom-ws`` (the
WebSocket API) and ``langgraph`` (LangGraph's agent server API: threads, runs/stream with
``messages-tuple``, threads/search, joining a run's stream).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import trio

MAX_HEAD = 64 * 1024
MAX_BODY = 256 * 1024 * 1024
MAX_EVENTS_PER_TURN = 50_000
CLOCK_TICK = os.sysconf("SC_CLK_TCK")
USER = "Tell me a story."


# --------------------------------------------------------------------------- /proc readings


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (all its threads), from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        text = stat.read()
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICK


def rss_bytes(pid: int) -> int:
    """Resident memory of ``pid``, from /proc/<pid>/status (VmRSS)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def own_cpu() -> float:
    times = os.times()
    return times.user + times.system


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(fraction * len(ordered) + 0.5)))
    return ordered[rank - 1]


# --------------------------------------------------------------------------- HTTP/1.1 client


class HttpError(Exception):
    pass


class Http:
    """One keep-alive HTTP/1.1 connection; requests are sent one at a time."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self._stream: trio.SocketStream | None = None
        self._buffer = bytearray()

    async def __aenter__(self) -> Http:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._stream is not None:
            await self._stream.aclose()
            self._stream = None

    async def _connect(self) -> trio.SocketStream:
        if self._stream is None:
            self._stream = await trio.open_tcp_stream(self.host, self.port)
            self._buffer.clear()
        return self._stream

    async def _fill(self) -> None:
        assert self._stream is not None
        data = await self._stream.receive_some(262144)
        if not data:
            raise HttpError("the server closed the connection")
        self._buffer += data

    async def _line(self) -> bytes:
        for _ in range(MAX_HEAD):
            end = self._buffer.find(b"\r\n")
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[: end + 2]
                return line
            if len(self._buffer) > MAX_HEAD:
                raise HttpError("a header line is too long")
            await self._fill()
        raise HttpError("no line end")

    async def request(
        self, method: str, path: str, body: Any = None
    ) -> tuple[int, dict[str, str], AsyncIterator[bytes]]:
        """Send a request (``body`` as JSON); returns the status, headers and body pieces.

        The body iterator must be read to its end before the next request."""
        stream = await self._connect()
        payload = b"" if body is None else json.dumps(body).encode()
        head = (
            f"{method} {path} HTTP/1.1\r\nhost: {self.host}:{self.port}\r\n"
            f"content-length: {len(payload)}\r\n"
        )
        if body is not None:
            head += "content-type: application/json\r\n"
        await stream.send_all(head.encode() + b"\r\n" + payload)
        status_line = await self._line()
        status = int(status_line.split(b" ", 2)[1])
        headers: dict[str, str] = {}
        for _ in range(200):
            line = await self._line()
            if not line:
                break
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        else:
            raise HttpError("too many headers")
        return status, headers, self._body(headers)

    async def _body(self, headers: dict[str, str]) -> AsyncIterator[bytes]:
        if headers.get("transfer-encoding", "").lower() == "chunked":
            total = 0
            while True:
                size = int((await self._line()).split(b";")[0], 16)
                if size == 0:
                    await self._line()  # the blank line after the last chunk (no trailers)
                    break
                while len(self._buffer) < size + 2:
                    await self._fill()
                total += size
                if total > MAX_BODY:
                    raise HttpError("body too large")
                piece = bytes(self._buffer[:size])
                del self._buffer[: size + 2]
                yield piece
        else:
            length = int(headers.get("content-length", "0"))
            if length > MAX_BODY:
                raise HttpError("body too large")
            while len(self._buffer) < length:
                await self._fill()
            piece = bytes(self._buffer[:length])
            del self._buffer[:length]
            if piece:
                yield piece
        if headers.get("connection", "").lower() == "close":
            await self.close()

    async def json(self, method: str, path: str, body: Any = None) -> Any:
        status, _, pieces = await self.request(method, path, body)
        data = b"".join([piece async for piece in pieces])
        if status >= 300:
            raise HttpError(f"{method} {path}: HTTP {status} {data[:300]!r}")
        return json.loads(data) if data else None


class Counter:
    """Counts a marker in a byte stream that arrives in pieces (a marker may straddle two)."""

    def __init__(self, marker: bytes) -> None:
        self.marker = marker
        self.count = 0
        self._tail = b""

    def feed(self, piece: bytes) -> int:
        data = self._tail + piece
        found = data.count(self.marker)
        self.count += found
        self._tail = data[-(len(self.marker) - 1) :] if len(self.marker) > 1 else b""
        # A marker wholly inside the kept tail was counted already; the tail is shorter than
        # the marker, so it cannot hold a whole one.
        return found


class TurnResult:
    def __init__(self) -> None:
        self.tokens = 0
        self.ttft = float("nan")
        self.elapsed = 0.0
        self.body = b""


# --------------------------------------------------------------------------- adapters


class Greenroom:
    """greenroom over REST + SSE."""

    marker = b'"type":"agent_choice"'

    def __init__(self, url: str, source: str) -> None:
        self.url = url
        self.source = source

    async def create(self, http: Http) -> str:
        return str((await http.json("POST", "/api/sessions", {}))["id"])

    async def turn(self, http: Http, session: str, source: str | None = None) -> TurnResult:
        path = f"/api/sessions/{session}/agent/{source or self.source}"
        result = TurnResult()
        counter = Counter(self.marker)
        tail = b""
        sent = time.perf_counter()
        status, _, pieces = await http.request(
            "POST", path, {"messages": [{"role": "user", "content": USER}]}
        )
        async for piece in pieces:
            if counter.feed(piece) and result.tokens == 0:
                result.ttft = time.perf_counter() - sent
            result.tokens = counter.count
            tail = (tail + piece)[-400:]
        result.elapsed = time.perf_counter() - sent
        if status != 200 or b'"reason":"normal"' not in tail:
            raise HttpError(f"run: HTTP {status}, end {tail[-200:]!r}")
        return result

    async def list_all(self, http: Http) -> int:
        return len(await http.json("GET", "/api/sessions"))

    async def subscribe(self, http: Http, session: str) -> AsyncIterator[bytes]:
        status, _, pieces = await http.request("GET", f"/api/sessions/{session}/events")
        if status != 200:
            raise HttpError(f"events: HTTP {status}")
        return pieces


class GreenroomWs:
    """greenroom over its WebSocket API (one connection per session), runs with ``batch``."""

    marker = b'"type":"agent_choice"'

    def __init__(self, url: str, source: str) -> None:
        self.url = url.replace("http://", "ws://", 1) + "/api/ws"
        self.source = source
        self._runs = 0

    async def open(self) -> Any:
        from trio_websocket import open_websocket_url

        return open_websocket_url(self.url, max_message_size=4 * 1024 * 1024)

    async def create(self, ws: Any) -> str:
        await ws.send_message('{"id":"c","op":"create"}')
        for _ in range(100):
            reply = json.loads(await ws.get_message())
            if reply.get("id") == "c":
                if not reply.get("ok"):
                    raise HttpError(f"create: {reply}")
                return str(reply["result"]["id"])
        raise HttpError("create: no reply")

    async def turn(self, ws: Any, session: str) -> TurnResult:
        self._runs += 1
        frame = {
            "id": f"r{self._runs}",
            "op": "run",
            "session_id": session,
            "agent": self.source,
            "messages": [{"role": "user", "content": USER}],
            "batch": True,  # the events that wait go in one frame (docs/websocket.md)
        }
        run_id = f"r{self._runs}"
        result = TurnResult()
        sent = time.perf_counter()
        await ws.send_message(json.dumps(frame))
        stopped = False
        for _ in range(MAX_EVENTS_PER_TURN):
            message = await ws.get_message()
            data = message.encode() if isinstance(message, str) else message
            found = data.count(self.marker)  # token events are counted, not parsed
            if found:
                if result.tokens == 0:
                    result.ttft = time.perf_counter() - sent
                result.tokens += found
            if b'"type":"stream_stopped"' in data:
                stopped = b'"reason":"normal"' in data
            elif found == 0:
                reply = json.loads(data)
                if reply.get("run") == run_id and reply.get("end"):
                    break
                if reply.get("ok") is False:
                    raise HttpError(f"run: {data[:300]!r}")
        else:
            raise HttpError("run: no end frame")
        result.elapsed = time.perf_counter() - sent
        if not stopped:
            raise HttpError("run: no normal stream_stopped")
        return result


class LangGraph:
    """LangGraph's agent server (``langgraph dev``)."""

    marker = b'[{"content":" tok'

    def __init__(self, url: str, graph: str) -> None:
        self.url = url
        self.graph = graph

    async def create(self, http: Http) -> str:
        return str((await http.json("POST", "/threads", {}))["thread_id"])

    def _run_body(self, graph: str | None = None) -> dict[str, Any]:
        return {
            "assistant_id": graph or self.graph,
            "input": {"messages": [{"role": "user", "content": USER}]},
            "stream_mode": ["messages-tuple"],
        }

    async def turn(self, http: Http, session: str, source: str | None = None) -> TurnResult:
        result = TurnResult()
        counter = Counter(self.marker)
        sent = time.perf_counter()
        status, _, pieces = await http.request(
            "POST", f"/threads/{session}/runs/stream", self._run_body(source)
        )
        errored = False
        async for piece in pieces:
            if counter.feed(piece) and result.tokens == 0:
                result.ttft = time.perf_counter() - sent
            result.tokens = counter.count
            errored = errored or b"event: error" in piece
        result.elapsed = time.perf_counter() - sent
        if status != 200 or errored:
            raise HttpError(f"run: HTTP {status}, error event: {errored}")
        return result

    async def list_all(self, http: Http) -> int:
        total = 0
        for page in range(1000):  # 1,000 per page: the server's maximum
            batch = await http.json(
                "POST", "/threads/search", {"limit": 1000, "offset": page * 1000}
            )
            total += len(batch)
            if len(batch) < 1000:
                return total
        raise HttpError("more than a million threads")

    async def start_run(self, http: Http, session: str, graph: str) -> str:
        run = await http.json("POST", f"/threads/{session}/runs", self._run_body(graph))
        return str(run["run_id"])

    async def join(self, http: Http, session: str, run_id: str) -> AsyncIterator[bytes]:
        status, _, pieces = await http.request("GET", f"/threads/{session}/runs/{run_id}/stream")
        if status != 200:
            raise HttpError(f"join: HTTP {status}")
        return pieces


def adapter(config: dict[str, Any]) -> Any:
    kind = config["server"]
    if kind == "greenroom":
        return Greenroom(config["url"], config["source"])
    if kind == "greenroom-ws":
        return GreenroomWs(config["url"], config["source"])
    if kind == "langgraph":
        return LangGraph(config["url"], config["source"])
    raise ValueError(f"unknown server {kind!r}")


# --------------------------------------------------------------------------- scenarios


async def turns(config: dict[str, Any]) -> dict[str, Any]:
    """``sessions`` sessions at once, each on its own connection, ``turns`` turns each after
    one warm-up turn; the clock runs from all ready to the last turn's end."""
    server = adapter(config)
    sessions: int = config["sessions"]
    pid: int = config["server_pid"]
    expected: int = config["tokens"]
    ttft: list[float] = []
    turn_times: list[float] = []
    errors: list[str] = []
    tokens = 0
    done_turns = 0
    ready = trio.Semaphore(0)
    finished = trio.Semaphore(0)
    go = trio.Event()
    release = trio.Event()

    async def session_task(n: int) -> None:
        # Each session arrives at "ready" and "finished" exactly once, also when it fails.
        state = {"ready": False, "finished": False}
        try:
            if isinstance(server, GreenroomWs):
                async with await server.open() as ws:
                    session = await server.create(ws)
                    await play(lambda: server.turn(ws, session), state)
            else:
                async with Http(config["url"]) as http:
                    session = await server.create(http)
                    await play(lambda: server.turn(http, session), state)
        except Exception as exc:  # recorded; the other sessions go on
            errors.append(f"session {n}: {type(exc).__name__}: {exc}")
        finally:
            if not state["ready"]:
                ready.release()
            if not state["finished"]:
                finished.release()

    async def play(one: Any, state: dict[str, bool]) -> None:
        nonlocal tokens, done_turns
        for _ in range(config["warmup"]):
            await one()
        state["ready"] = True
        ready.release()
        await go.wait()
        try:
            for _ in range(config["turns"]):
                result = await one()
                if result.tokens != expected:
                    raise HttpError(f"a turn delivered {result.tokens} of {expected} tokens")
                tokens += result.tokens
                done_turns += 1
                ttft.append(result.ttft)
                turn_times.append(result.elapsed)
        finally:
            state["finished"] = True
            finished.release()
        await release.wait()

    started = ended = 0.0
    cpu_start = cpu_end = client_start = client_end = 0.0
    timed_out = False
    with trio.move_on_after(config["timeout"]) as deadline:
        async with trio.open_nursery() as nursery:
            for n in range(sessions):
                nursery.start_soon(session_task, n)
            for _ in range(sessions):
                await ready.acquire()
            cpu_start, client_start = cpu_seconds(pid), own_cpu()
            started = time.perf_counter()
            go.set()
            for _ in range(sessions):
                await finished.acquire()
            ended = time.perf_counter()
            cpu_end, client_end = cpu_seconds(pid), own_cpu()
            release.set()
    if deadline.cancelled_caught:
        timed_out = True
        errors.append("the scenario timed out")
        if started and not ended:
            ended = time.perf_counter()
            cpu_end, client_end = cpu_seconds(pid), own_cpu()
    return {
        "turns": done_turns,
        "tokens": tokens,
        "elapsed": ended - started if started else 0.0,
        "server_cpu": cpu_end - cpu_start,
        "client_cpu": client_end - client_start,
        "ttft": ttft,
        "turn_times": turn_times,
        "errors": errors,
        "timed_out": timed_out,
    }


async def memory(config: dict[str, Any]) -> dict[str, Any]:
    """Server RSS per idle stored session (``idle`` sessions created, nothing run), listing
    them all, then RSS per session after one turn (``sessions`` sessions, one turn each, 10
    at a time)."""
    server = adapter(config)
    pid: int = config["server_pid"]
    errors: list[str] = []
    out: dict[str, Any] = {"errors": errors}
    with trio.move_on_after(config["timeout"]) as deadline:
        async with Http(config["url"]) as http:
            # Settle what the first requests allocate once (routes, caches) before measuring.
            warm = await server.create(http)
            await server.turn(http, warm)
            before = rss_bytes(pid)
            for _ in range(config["idle"]):
                await server.create(http)
            await trio.sleep(1.0)  # real clock: let a server's background flush settle
            out["idle_rss_delta"] = rss_bytes(pid) - before
            out["idle_sessions"] = config["idle"]
            listings = []
            for _ in range(5):
                start = time.perf_counter()
                count = await server.list_all(http)
                listings.append(time.perf_counter() - start)
            out["list_count"] = count
            out["list_seconds"] = listings
        before = rss_bytes(pid)
        done = 0

        async def worker(share: int) -> None:
            nonlocal done
            async with Http(config["url"]) as http:
                for _ in range(share):
                    session = await server.create(http)
                    result = await server.turn(http, session)
                    if result.tokens != config["tokens"]:
                        errors.append(f"a turn delivered {result.tokens} tokens")
                    done += 1

        workers = 10
        async with trio.open_nursery() as nursery:
            for w in range(workers):
                share, extra = divmod(config["sessions"], workers)
                nursery.start_soon(worker, share + (w < extra))
        await trio.sleep(1.0)  # real clock: titles and background writes finish
        out["turn_rss_delta"] = rss_bytes(pid) - before
        out["turn_sessions"] = done
    if deadline.cancelled_caught:
        errors.append("the scenario timed out")
    return out


async def fanout(config: dict[str, Any]) -> dict[str, Any]:
    """``subscribers`` clients follow one session while one long turn streams; the clock runs
    from the first token any subscriber sees to the last token the last one sees."""
    server = adapter(config)
    pid: int = config["server_pid"]
    subscribers: int = config["subscribers"]
    expected: int = config["tokens"]
    counts = [0] * subscribers
    first: list[float] = []
    last = [0.0] * subscribers
    errors: list[str] = []
    joined = trio.Semaphore(0)
    cpu_start = cpu_end = 0.0

    async def follow(n: int, pieces_of: Any) -> None:
        try:
            async with Http(config["url"]) as http:
                pieces = await pieces_of(http)
                joined.release()
                counter = Counter(server.marker)
                async for piece in pieces:
                    if counter.feed(piece):
                        now = time.perf_counter()
                        if not first:
                            first.append(now)
                        last[n] = now
                    counts[n] = counter.count
                    if counter.count >= expected:
                        break  # the subscription stays open; this subscriber has it all
        except Exception as exc:
            errors.append(f"subscriber {n}: {type(exc).__name__}: {exc}")
            joined.release()

    with trio.move_on_after(config["timeout"]) as deadline:
        async with Http(config["url"]) as control:
            session = await server.create(control)
            async with trio.open_nursery() as nursery:
                cpu_start = cpu_seconds(pid)
                if isinstance(server, Greenroom):
                    for n in range(subscribers):
                        nursery.start_soon(follow, n, lambda h: server.subscribe(h, session))
                    for _ in range(subscribers):
                        await joined.acquire()
                    await server.turn(control, session, config["fanout_source"])
                else:
                    # The run waits before its first token (the fake model's +MS), so every
                    # subscriber joins before the tokens flow.
                    run_id = await server.start_run(control, session, config["fanout_source"])
                    for n in range(subscribers):
                        nursery.start_soon(follow, n, lambda h: server.join(h, session, run_id))
                    for _ in range(subscribers):
                        await joined.acquire()
            cpu_end = cpu_seconds(pid)
    if deadline.cancelled_caught:
        errors.append("the scenario timed out")
    short = [c for c in counts if c != expected]
    if short:
        errors.append(f"{len(short)} subscribers got {short[:3]} of {expected} tokens")
    elapsed = max(last) - first[0] if first else 0.0
    return {
        "subscribers": subscribers,
        "tokens": expected,
        "deliveries": sum(counts),
        "elapsed": elapsed,
        "server_cpu": cpu_end - cpu_start,
        "errors": errors,
    }


SCENARIOS = {"turns": turns, "memory": memory, "fanout": fanout}


def main() -> None:
    config = json.loads(sys.argv[1])
    result = trio.run(SCENARIOS[config["kind"]], config)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
