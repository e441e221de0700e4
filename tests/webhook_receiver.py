"""A webhook receiver for tests: a real HTTP server (hypercorn, 127.0.0.1, port 0) that keeps
every request it got, answers with ``status``, and can hold answers until released; plus the
receiver's side of the signature check, written from docs/security.md's recipe (not from
greenroom's code)."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

import attrs
import trio
from hypercorn.config import Config
from hypercorn.trio import serve


@attrs.frozen
class Hit:
    headers: dict[str, str]  # lower-case names
    body: bytes
    at: float  # trio.current_time() when it arrived

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def delivery_id(self) -> str:
        return self.headers.get("greenroom-delivery", "")


def verify(secret: str, headers: dict[str, str], body: bytes, now: float, tolerance: float) -> bool:
    """docs/security.md: split ``t=...,v1=...``, refuse an old ``t``, compare the HMAC-SHA256
    of ``"<t>.<body>"`` in constant time."""
    fields = dict(part.split("=", 1) for part in headers["greenroom-signature"].split(","))
    timestamp = int(fields["t"])
    if abs(now - timestamp) > tolerance:
        return False
    expected = hmac.new(
        secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256
    ).hexdigest()
    return hmac.compare_digest(expected, fields["v1"])


@attrs.define(eq=False)
class Receiver:
    status: int = 200
    hold: trio.Event | None = None  # while unset, answers wait for it
    hits: list[Hit] = attrs.field(factory=list)
    url: str = ""
    _arrived: trio.Event = attrs.field(factory=trio.Event)
    _stop: trio.Event = attrs.field(factory=trio.Event)

    async def serve(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        config = Config()
        config.bind = ["127.0.0.1:0"]
        config.accesslog = None
        config.errorlog = None
        config.graceful_timeout = 0.5
        binds: list[str] = []

        app: Any = self._app

        async def started(*, task_status: trio.TaskStatus[list[str]]) -> None:
            await serve(app, config, shutdown_trigger=self._stop.wait, task_status=task_status)

        async with trio.open_nursery() as nursery:
            binds = await nursery.start(started)
            self.url = binds[0]
            task_status.started(self.url)

    def stop(self) -> None:
        self._stop.set()

    async def wait_for(self, count: int) -> list[Hit]:
        """Until ``count`` requests arrived (the caller bounds the wait)."""
        while len(self.hits) < count:
            self._arrived = trio.Event()
            await self._arrived.wait()
        return self.hits

    async def _app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                kind = message["type"].replace(".startup", ".startup.complete")
                kind = kind.replace(".shutdown", ".shutdown.complete")
                await send({"type": kind})
                if message["type"] == "lifespan.shutdown":
                    return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        self.hits.append(Hit(headers, body, trio.current_time()))
        self._arrived.set()
        if self.hold is not None:
            await self.hold.wait()
        await send({"type": "http.response.start", "status": self.status, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
