"""The outermost ASGI layer: refuse ambiguous framing and cap what one client may hold open.

- A request with both ``Content-Length`` and ``Transfer-Encoding`` is answered 400 and the
  connection closed: a proxy in front of greenroom may frame the body by the other header,
  which is how requests get smuggled (RFC 9112 §6.1 lets a server reject it; h11 does not).
- Each client address may hold at most ``max_per_client`` requests, streams and WebSockets
  open at once; more get 429 ``too_many_connections`` with ``Retry-After`` and a closed
  connection. Idle connections are not counted: they close after hypercorn's keep-alive
  timeout, which also bounds how long a client may take to send its request headers.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from greenroom.errors import GreenroomError, InvalidRequest, TooManyConnections

from ._errors import map_error

ASGIApp = Callable[[MutableMapping[str, Any], Any, Any], Awaitable[None]]


class ClientLimits:
    """ASGI middleware around the whole app (see the module docstring). ``max_per_client`` 0
    means no cap."""

    def __init__(self, app: Any, max_per_client: int = 0) -> None:
        self.app: ASGIApp = app
        self.max_per_client = max_per_client
        self._open: Counter[str] = Counter()

    def open_count(self, client: str) -> int:
        return self._open[client]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        if kind == "http" and _ambiguous_framing(scope):
            framing = InvalidRequest("Content-Length and Transfer-Encoding together are refused")
            await _refuse_http(send, framing)
            return
        client = (scope.get("client") or ("", 0))[0]
        if self.max_per_client and self._open[client] >= self.max_per_client:
            error = TooManyConnections(
                f"at most {self.max_per_client} open requests, streams and WebSockets per "
                "client address (--max-connections-per-client)"
            )
            if kind == "http":
                await _refuse_http(send, error)
            else:
                await receive()  # websocket.connect
                await refuse_websocket(scope, send, error, close_code=1013)
            return
        self._open[client] += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self._open[client] -= 1
            if not self._open[client]:
                del self._open[client]


def _ambiguous_framing(scope: Any) -> bool:
    names = {name.lower() for name, _ in scope.get("headers") or ()}
    return b"content-length" in names and b"transfer-encoding" in names


def _reply(error: GreenroomError) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    status, body, extra = map_error(error)
    headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
    headers += [(k.lower().encode(), v.encode()) for k, v in extra.items()]
    return status, headers, json.dumps(body).encode()


async def _refuse_http(send: Any, error: GreenroomError) -> None:
    status, headers, body = _reply(error)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def refuse_websocket(scope: Any, send: Any, error: GreenroomError, close_code: int) -> None:
    """Refuse a WebSocket whose ``websocket.connect`` was read: the error as an HTTP response
    where the server can send one (the ``websocket.http.response`` extension), else a close."""
    if "websocket.http.response" in (scope.get("extensions") or {}):
        status, headers, body = _reply(error)
        await send({"type": "websocket.http.response.start", "status": status, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await send({"type": "websocket.close", "code": close_code})
