"""A tiny live HTTP server answering with scripted server-sent-event streams.

The base of the fake model servers (``fake_openai``, ``fake_anthropic``): a raw ASGI app served
by hypercorn's trio worker on 127.0.0.1, port 0, in the caller's nursery::

    server = await nursery.start(FakeOpenAI().serve)
    server.script(text_reply("Hel", "lo"))
    ...  # point a client at server.url
    server.requests[0].json  # what the client sent

Each request takes the next scripted :class:`Reply` (first in, first out), or once they run out
the reply ``responder`` makes for it (if set), else ``default``; it is recorded as a
:class:`Recorded`. Pauses between events use the real clock.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Callable
from functools import partial
from typing import Any, Literal, cast

import attrs
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

Ending = Literal["close", "abort", "stall"]


@attrs.frozen
class Reply:
    """One scripted answer.

    Attributes:
        status: the HTTP status; anything but 200 answers ``body`` as JSON.
        events: encoded SSE frames, sent one by one.
        body: the JSON body of a non-200 answer.
        delay: seconds (real clock) to wait before each frame.
        ending: after the frames, ``close`` ends the body properly, ``abort`` drops the
            connection mid-body, ``stall`` sends nothing more until the client leaves.
        content_type: of a 200 stream (binary protocols send other framings).
        headers: more response headers.
    """

    status: int = 200
    events: tuple[bytes, ...] = ()
    body: Any = None
    delay: float = 0.0
    ending: Ending = "close"
    content_type: str = "text/event-stream"
    headers: tuple[tuple[str, str], ...] = ()


@attrs.define(eq=False)
class Recorded:
    """One request the server received, and how its answer ended."""

    method: str
    path: str
    headers: dict[str, str]
    json: Any
    query: str = ""
    body: bytes = b""
    client: tuple[str, int] | None = None
    """The client's address and port: one port per connection (keep-alive shows as reuse)."""
    done: trio.Event = attrs.Factory(trio.Event)
    """Set once the handler returned (answer sent, aborted, or the client left)."""
    disconnected: bool = False
    """The client went away before the answer ended."""


class _Abort(Exception):
    """Raised by the app to make hypercorn drop the connection mid-body."""


class FakeSSEServer:
    """Serves scripted replies and records requests; see the module docstring."""

    def __init__(self, default: Reply) -> None:
        self.default = default
        self.url = ""
        self.requests: list[Recorded] = []
        self.responder: Callable[[Recorded], Reply] | None = None
        self._replies: collections.deque[Reply] = collections.deque()
        self._stop = trio.Event()

    def script(self, *replies: Reply) -> None:
        """Queue answers for the next requests, in order."""
        self._replies.extend(replies)

    def stop(self) -> None:
        self._stop.set()

    async def serve(self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
        """Run until :meth:`stop`; ``task_status.started(self)`` once ``url`` is set."""
        config = Config()
        config.bind = ["127.0.0.1:0"]
        config.graceful_timeout = 1.0
        async with trio.open_nursery() as nursery:
            run = partial(serve, cast(Any, self._app), config, shutdown_trigger=self._stop.wait)
            binds = await nursery.start(run)
            self.url = binds[0]
            task_status.started(self)

    async def _app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        record = Recorded(
            scope["method"],
            scope["path"],
            headers,
            json.loads(body or b"null"),
            query=scope["query_string"].decode(),
            body=bytes(body),
            client=tuple(scope["client"]) if scope.get("client") else None,
        )
        self.requests.append(record)
        if self._replies:
            reply = self._replies.popleft()
        else:
            reply = self.responder(record) if self.responder is not None else self.default
        try:
            if reply.status != 200:
                await _send_json(send, reply.status, reply.body, reply.headers)
            else:
                await _stream(reply, record, receive, send)
        finally:
            record.done.set()


async def _send_json(
    send: Any, status: int, body: Any, extra: tuple[tuple[str, str], ...] = ()
) -> None:
    headers = [(b"content-type", b"application/json")]
    headers += [(k.encode(), v.encode()) for k, v in extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": json.dumps(body).encode()})


async def _stream(reply: Reply, record: Recorded, receive: Any, send: Any) -> None:
    async with trio.open_nursery() as nursery:

        async def watch_disconnect() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            record.disconnected = True
            nursery.cancel_scope.cancel()

        nursery.start_soon(watch_disconnect)
        headers = [(b"content-type", reply.content_type.encode()), (b"cache-control", b"no-cache")]
        headers += [(k.encode(), v.encode()) for k, v in reply.headers]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for frame in reply.events:
            await trio.sleep(reply.delay)  # real clock
            await send({"type": "http.response.body", "body": frame, "more_body": True})
        if reply.ending == "stall":
            await trio.sleep_forever()  # until the client leaves
        if reply.ending == "abort":
            raise _Abort("fake server: dropping the connection mid-body")
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        nursery.cancel_scope.cancel()
