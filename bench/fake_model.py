"""A fast fake OpenAI-compatible model server for the benchmarks: run by hand, never by tests.

    python bench/fake_model.py [--port 0] [--tokens 200]

``POST /v1/chat/completions`` answers every request with the same story, ``--tokens`` tokens
long (``" tok0"``, ``" tok1"``, ...), streamed as ``chat.completion.chunk`` server-sent events
when ``stream`` is true (a role chunk, one chunk per token, a finish chunk, a usage chunk,
``[DONE]``), else as one ``chat.completion``. A ``max_tokens`` / ``max_completion_tokens`` in
the request caps the answer (finish reason ``length``), as a real model does. A model name
``NAME@TOKENS`` asks for another length, ``NAME@TOKENS+MS`` also waits MS milliseconds before
the first token (the fan-out scenario uses it so that subscribers can join first).

Every chunk is rendered once at start-up (HTTP chunked framing included), so the server's
own cost per token is one ``send`` of ready bytes; ``GET /stats`` reports its requests,
tokens, the caps it saw and its CPU time (``/proc/self/stat``), so a benchmark can subtract
it. Each connection is served by a thread with HTTP/1.1 keep-alive. It binds only to
127.0.0.1, serves at most ``MAX_CONNECTIONS`` connections at once and ``MAX_REQUESTS`` per
connection, drops a connection idle for ``IDLE`` seconds, and stops on SIGTERM or SIGINT, or
by itself after ``--lifetime`` seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import threading
import time
from typing import Any

MAX_CONNECTIONS = 512
MAX_REQUESTS = 100_000
MAX_HEAD = 64 * 1024
MAX_BODY = 16 * 1024 * 1024
IDLE = 120.0
MAX_TOKENS = 20_000
MODEL = "bench-model"
CLOCK_TICK = os.sysconf("SC_CLK_TCK")


def chunked(data: bytes) -> bytes:
    """``data`` as one HTTP/1.1 chunk."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def chunk_payload(delta: dict[str, Any] | None, finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}],
    }


def usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


class Story:
    """Every frame of an answer, pre-rendered; one answer is a slice of them."""

    def __init__(self, tokens: int) -> None:
        self.tokens = [f" tok{n}" for n in range(tokens)]
        self.role = chunked(sse(chunk_payload({"role": "assistant", "content": ""})))
        self.frames = [chunked(sse(chunk_payload({"content": t}))) for t in self.tokens]
        self.done = chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n"
        self._endings: dict[tuple[int, str], bytes] = {}

    def ending(self, count: int, finish: str) -> bytes:
        key = (count, finish)
        if key not in self._endings:
            end = chunked(sse(chunk_payload(None, finish)))
            tail = chunk_payload(None)
            tail["choices"] = []
            tail["usage"] = usage(12, count)
            self._endings[key] = end + chunked(sse(tail)) + self.done
        return self._endings[key]

    def extend(self, tokens: int) -> None:
        while len(self.frames) < tokens:
            n = len(self.frames)
            self.tokens.append(f" tok{n}")
            self.frames.append(chunked(sse(chunk_payload({"content": f" tok{n}"}))))


STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)


class Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests = 0
        self.streams = 0
        self.tokens = 0
        self.connections = 0
        self.caps: dict[str, int] = {}

    def snapshot(self) -> dict[str, Any]:
        with open("/proc/self/stat", encoding="ascii") as stat:
            text = stat.read()
        fields = text[text.rindex(")") + 2 :].split()
        cpu = (int(fields[11]) + int(fields[12])) / CLOCK_TICK
        with self.lock:
            return {
                "requests": self.requests,
                "streams": self.streams,
                "tokens": self.tokens,
                "connections": self.connections,
                "max_tokens_seen": dict(self.caps),
                "cpu_seconds": cpu,
                "pid": os.getpid(),
            }


class Server:
    def __init__(self, port: int, tokens: int) -> None:
        self.story = Story(tokens)
        self.default_tokens = tokens
        self.stats = Stats()
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.story_lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", port), backlog=1024)
        self.port = self.listener.getsockname()[1]

    def serve(self, stop: threading.Event, lifetime: float) -> None:
        self.listener.settimeout(0.5)
        deadline = time.monotonic() + lifetime
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            if not self.slots.acquire(blocking=False):
                conn.close()
                continue
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()
        self.listener.close()

    def _connection(self, conn: socket.socket) -> None:
        with self.stats.lock:
            self.stats.connections += 1
        try:
            conn.settimeout(IDLE)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            buffer = b""
            for _ in range(MAX_REQUESTS):
                request = self._read_request(conn, buffer)
                if request is None:
                    return
                method, path, headers, body, buffer = request
                if not self._answer(conn, method, path, body):
                    return
                if headers.get("connection", "").lower() == "close":
                    return
        except OSError:
            return
        finally:
            conn.close()
            self.slots.release()

    def _read_request(
        self, conn: socket.socket, buffer: bytes
    ) -> tuple[str, str, dict[str, str], bytes, bytes] | None:
        while b"\r\n\r\n" not in buffer:
            if len(buffer) > MAX_HEAD:
                return None
            data = conn.recv(65536)
            if not data:
                return None
            buffer += data
        head, buffer = buffer.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0") or 0)
        if length > MAX_BODY:
            return None
        while len(buffer) < length:
            data = conn.recv(65536)
            if not data:
                return None
            buffer += data
        return method, path, headers, buffer[:length], buffer[length:]

    def _answer(self, conn: socket.socket, method: str, path: str, body: bytes) -> bool:
        if method == "GET" and path == "/stats":
            self._json(conn, 200, self.stats.snapshot())
            return True
        if method != "POST" or not path.endswith("/chat/completions"):
            self._json(conn, 404, {"error": {"message": f"no route {method} {path}"}})
            return True
        try:
            request = json.loads(body)
        except ValueError:
            self._json(conn, 400, {"error": {"message": "the body is not JSON"}})
            return True
        tokens, wait = self._length(str(request.get("model", "")))
        cap = request.get("max_completion_tokens") or request.get("max_tokens")
        count = min(tokens, cap) if isinstance(cap, int) and cap > 0 else tokens
        finish = "length" if count < tokens else "stop"
        with self.stats.lock:
            self.stats.requests += 1
            self.stats.tokens += count
            if cap is not None:
                self.stats.caps[str(cap)] = self.stats.caps.get(str(cap), 0) + 1
        if wait:
            time.sleep(wait)
        if not request.get("stream"):
            text = "".join(self.story.tokens[:count])
            message = {"role": "assistant", "content": text}
            choice = {"index": 0, "message": message, "finish_reason": finish}
            reply = {
                "id": "chatcmpl-bench",
                "object": "chat.completion",
                "created": 1700000000,
                "model": MODEL,
                "choices": [choice],
                "usage": usage(12, count),
            }
            self._json(conn, 200, reply)
            return True
        with self.stats.lock:
            self.stats.streams += 1
        conn.sendall(STREAM_HEAD + self.story.role)
        for frame in self.story.frames[:count]:  # one send per token, as a model streams
            conn.sendall(frame)
        conn.sendall(self.story.ending(count, finish))
        return True

    def _length(self, model: str) -> tuple[int, float]:
        """Tokens and the wait before the first one, from a ``NAME@TOKENS[+MS]`` model."""
        if "@" not in model:
            return self.default_tokens, 0.0
        spec = model.rsplit("@", 1)[1]
        count, _, wait = spec.partition("+")
        tokens = max(1, min(MAX_TOKENS, int(count or self.default_tokens)))
        with self.story_lock:
            self.story.extend(tokens)
        return tokens, min(float(wait or 0) / 1000, 10.0)

    def _json(self, conn: socket.socket, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}[status]
        head = (
            f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(data)}\r\n\r\n"
        )
        conn.sendall(head.encode() + data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--lifetime", type=float, default=4 * 3600, help="seconds, at most")
    args = parser.parse_args()
    server = Server(args.port, max(1, min(MAX_TOKENS, args.tokens)))
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(f"fake model listening on http://127.0.0.1:{server.port}", flush=True)
    server.serve(stop, args.lifetime)
    sys.exit(0)


if __name__ == "__main__":
    main()
