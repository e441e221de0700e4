"""A server span per HTTP request, around the whole ASGI exchange (a stream's too).

The span starts under the request's ``traceparent`` (a new trace without one) as
``<METHOD> <path>``; the view renames it to its route (``POST /api/sessions/{session_id}/agent
/{agent}``, :func:`~greenroom.observe.annotate`) once Quart matched it, and the status code
is set from ``http.response.start``. Everything the request's task starts (quart-trio's
handler, a forwarded request, an actor command) nests under it. WebSocket ops get a span each
in ``_ws.py`` instead: a connection may live for hours. While tracing is off the middleware
passes the call straight through.
"""

from __future__ import annotations

from typing import Any

from greenroom.observe import extract, server_span, tracing_enabled


class TracedApp:
    """ASGI middleware: a ``server`` span per HTTP request (see the module docstring)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not tracing_enabled():
            await self.app(scope, receive, send)
            return
        headers = {
            k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())
        }
        method = scope.get("method", "GET")
        path = scope.get("path", "/")
        attributes = {
            "http.request.method": method,
            "url.path": path,
            "url.scheme": scope.get("scheme", "http"),
            "network.protocol.version": scope.get("http_version", "1.1"),
        }
        client = scope.get("client")
        if client:
            attributes["client.address"] = str(client[0])
        with server_span(f"{method} {path}", attributes, extract(headers)) as traced:

            async def traced_send(message: Any) -> None:
                if message["type"] == "http.response.start":
                    traced.set_attribute("http.response.status_code", message["status"])
                await send(message)

            await self.app(scope, receive, traced_send)
