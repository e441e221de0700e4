"""The quart-trio application: routes from the operation table, auth, CORS, JSON errors."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

import trio
from quart import Response, request
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

from greenroom.actors import Registry, Scheduler
from greenroom.agents import OAuthFlows
from greenroom.errors import GreenroomError, OwnedElsewhere, PayloadTooLarge
from greenroom.observe import annotate

from ._context import Encoded
from ._cross_site import check_bearer, check_json_content_type, check_request
from ._errors import map_error
from ._forward import HOP_HEADER, ClaimHere, Forwarder, served_here
from ._json import check_params, dumps, parse_body
from ._metrics_route import METRICS_PATH, register_metrics
from ._openapi import build_openapi
from ._ops import OPERATIONS, AgentCatalog, AppConfig, Context, Operation, Reply, Request
from ._run_endpoints import RUN_ID_HEADER
from ._sse import log_events, run_events
from ._static import is_page_path, register_page
from ._tracing import TracedApp
from ._ws import WebSocketAPI

if TYPE_CHECKING:
    from greenroom.cluster import Mirrors

PUBLIC_PATHS = frozenset({"/health", "/ready"})
BEARER_FREE_PATHS = frozenset(op.path for op in OPERATIONS if not op.bearer)
SSE_HEADERS = {"Cache-Control": "no-cache", "Connection": "keep-alive", "X-Accel-Buffering": "no"}
CORS_HEADERS = "Authorization, Content-Type, Idempotency-Key, Last-Event-ID"


_STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    data = body.data if isinstance(body, Encoded) else dumps(body)
    return Response(data, status, headers or {}, content_type="application/json")


def error_response(exc: GreenroomError, op: Operation | None = None) -> Response:
    status, body, headers = map_error(exc, op)
    return json_response(body, status, headers)


def _quart_path(path: str) -> str:
    return re.sub(r"{(\w+)}", r"<\1>", path)


async def _read_request(op: Operation, params: dict[str, str], limit: int) -> tuple[Request, bytes]:
    """The parsed request, and its body as it came (for forwarding it to another node)."""
    body = None
    data = b""
    declared = request.headers.get("Content-Type")
    if op.body is not None or op.method in _STATE_CHANGING:
        if request.content_length is not None and request.content_length > limit:
            raise PayloadTooLarge(f"request body is larger than {limit} bytes")
        raw = await request.get_data(cache=False, as_text=False)
        assert isinstance(raw, bytes)
        data = raw
        # A body, or a declared type even without one (a cross-site form or text/plain POST
        # needs no preflight), must be JSON; an operation without a body ignores a JSON one.
        if data.strip() or declared:
            check_json_content_type(declared)
    if op.body is not None:
        body = parse_body(data, op.body, empty_ok=not op.body_required, array_field=op.array_body)
    raw_headers = {k.lower(): v for k, v in request.headers.items()}
    query, headers = check_params(op, params, dict(request.args), raw_headers)
    client = f"http {request.remote_addr or '?'}"
    return Request(params, query, headers, body, client), data


async def _forwarded(ctx: Context, op: Operation, exc: OwnedElsewhere, data: bytes) -> Response:
    """The owner's answer to this request, proxied (raises ClaimHere, OwnerUnavailable)."""
    assert ctx.forwarder is not None
    headers = {k.lower(): v for k, v in request.headers.items()}
    target = request.full_path if request.query_string else request.path
    session_id = request.view_args.get("session_id", "") if request.view_args else ""
    upstream = await ctx.forwarder.send(session_id, exc, request.method, target, headers, data)
    if op.stream and upstream.status == 200:
        response = Response(upstream.chunks(), 200, dict(upstream.headers))
        response.timeout = None
        return response
    body = await upstream.read(ctx.forwarder.answer_timeout)
    return Response(body, upstream.status, dict(upstream.headers))


def create_app(
    registry: Registry,
    agents: AgentCatalog,
    config: AppConfig | None = None,
    oauth: OAuthFlows | None = None,
    *,
    forwarder: Forwarder | None = None,
    mirrors: Mirrors | None = None,
    scheduler: Scheduler | None = None,
) -> QuartTrio:
    """The HTTP application over ``registry``. ``app.greenroom`` is its :class:`Context`;
    ``oauth`` holds the MCP OAuth flows the callback routes complete; a cluster node forwards
    requests to sessions' owners with ``forwarder`` and serves subscriptions to them from
    ``mirrors``; ``scheduler`` serves the schedules (its task is the caller's to run)."""
    config = config or AppConfig()
    app = QuartTrio("greenroom")
    app.config["RESPONSE_TIMEOUT"] = None  # Quart's 60 s default would cut every stream
    app.config["BODY_TIMEOUT"] = 60
    app.config["MAX_CONTENT_LENGTH"] = config.max_body
    ctx = Context(
        registry,
        agents,
        config,
        oauth=oauth or OAuthFlows(),
        forwarder=forwarder,
        mirrors=mirrors,
        scheduler=scheduler,
    )
    app.greenroom = ctx  # type: ignore[attr-defined]

    def make_view(op: Operation) -> Callable[..., Awaitable[Response]]:
        async def view(**params: str) -> Response:
            annotate(f"{op.method} {op.path}", {"http.route": op.path, "greenroom.op": op.name})
            try:
                req, data = await _read_request(op, params, config.max_body)
                try:
                    result = await op.handler(ctx, req)
                except OwnedElsewhere as exc:
                    if ctx.forwarder is None or HOP_HEADER in request.headers:
                        raise  # 421: a hop is never forwarded again
                    try:
                        return await _forwarded(ctx, op, exc, data)
                    except ClaimHere:  # the owner died and its lease expired: serve it here
                        result = await served_here(lambda: op.handler(ctx, req))
            except GreenroomError as exc:
                return error_response(exc, op)
            if op.stream is not None and not isinstance(result, Reply):
                headers = SSE_HEADERS
                if op.stream == "log":
                    body = log_events(result, config.heartbeat, ctx.shutting_down)
                else:
                    body = run_events(result)
                    if result.run_id:  # the run's id (issue 25)
                        headers = {**SSE_HEADERS, RUN_ID_HEADER: result.run_id}
                response = Response(body, 200, headers, mimetype="text/event-stream")
                response.timeout = None
                return response
            assert isinstance(result, Reply)
            return json_response(result.body, result.status, dict(result.headers))

        view.__name__ = op.name
        return view

    for op in OPERATIONS:
        if op.rest:
            app.add_url_rule(
                _quart_path(op.path), endpoint=op.name, view_func=make_view(op), methods=[op.method]
            )

    document = build_openapi(secured=bool(config.auth_token))

    @app.get("/openapi.json")
    async def openapi() -> Response:
        return json_response(document)

    site = config.site_policy

    @app.before_request
    async def guard() -> Response | None:
        if request.path in PUBLIC_PATHS:  # probes: harmless, and sent with any Host
            return None
        try:
            headers = {"host": request.headers.get("Host", "")}
            if "Origin" in request.headers:
                headers["origin"] = request.headers["Origin"]
            check_request(site, request.method, headers)
            if request.method == "OPTIONS" and config.cors_origins:
                return _preflight(config)
            bearer_free = is_page_path(request.path) or request.path in BEARER_FREE_PATHS
            bearer_free = bearer_free or request.path == METRICS_PATH  # its own token rule
            if config.auth_token and not bearer_free:  # a page asks for one; see BEARER_FREE
                check_bearer(request.headers.get("Authorization", ""), config.auth_token)
        except GreenroomError as exc:
            return error_response(exc)
        return None

    @app.after_request
    async def cors(response: Response) -> Response:
        origin = request.headers.get("Origin", "")
        if origin and _origin_allowed(origin, config):
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Access-Control-Expose-Headers"] = RUN_ID_HEADER
            response.headers["Vary"] = "Origin"
        return response

    @app.errorhandler(HTTPException)
    async def http_error(exc: HTTPException) -> Response:
        # The framework's own errors, in greenroom's shape and words (no werkzeug prose).
        status = exc.code or 500
        route = f"{request.method} {request.path}"
        known = {
            404: ("route_not_found", f"no route {route} (see GET /openapi.json)"),
            405: ("method_not_allowed", f"{request.method} is not allowed on {request.path}"),
            413: ("payload_too_large", "request body too large"),
        }
        code, message = known.get(status, ("http_error", exc.name))
        headers = {k: v for k, v in exc.get_headers() if k.lower() == "allow"}
        return json_response({"message": message, "code": code}, status, headers)

    @app.errorhandler(GreenroomError)
    async def greenroom_error(exc: GreenroomError) -> Response:
        return error_response(exc)

    register_page(app)
    register_metrics(app, ctx)
    app.asgi_app = TracedApp(WebSocketAPI(app.asgi_app, ctx))  # type: ignore[method-assign]
    return app


def _origin_allowed(origin: str, config: AppConfig) -> bool:
    return "*" in config.cors_origins or origin in config.cors_origins


def _preflight(config: AppConfig) -> Response:
    origin = request.headers.get("Origin", "")
    response = Response("", 204)
    if _origin_allowed(origin, config):
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Access-Control-Allow-Methods"] = "GET, POST, PATCH, DELETE, OPTIONS"
        response.headers["Access-Control-Allow-Headers"] = CORS_HEADERS
        response.headers["Access-Control-Max-Age"] = "600"
        response.headers["Vary"] = "Origin"
    return response


ASGIApp = Callable[[MutableMapping[str, Any], Any, Any], Awaitable[None]]


# An early reply (401, 404, 413, ...) is held back until the request body has arrived, so
# hypercorn can read the next request on the connection; a body larger than this, or slower
# than DRAIN_SECONDS, gets ``Connection: close`` instead.
DRAIN_LIMIT = 8 * 1024 * 1024
DRAIN_SECONDS = 5.0


class ShieldedSend:
    """ASGI middleware: finish every HTTP ``send`` even if quart-trio cancels the request.

    quart-trio cancels its per-request nursery while hypercorn may still be writing the
    response from inside the app's task; shielding each send keeps keep-alive connections,
    ``Connection: close`` and early error replies healthy (a client that never reads is
    dropped by the kernel: see the socket options in serve/_http.py).

    A reply that starts before the request body was read (an early 401/404/413) waits until
    quart has read the rest of it (quart keeps reading while it answers), else hypercorn
    closes the connection the client is still sending on, with no ``Connection: close``.
    """

    def __init__(self, app: Any) -> None:
        self.app: ASGIApp = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_read = trio.Event()

        async def tracking_receive() -> Any:
            message = await receive()
            if message["type"] == "http.disconnect" or not message.get("more_body", False):
                request_read.set()
            return message

        async def shielded_send(message: Any) -> None:
            if message["type"] == "http.response.start" and not request_read.is_set():
                message = await _early_reply(scope, message, request_read)
            with trio.CancelScope(shield=True):
                await send(message)

        await self.app(scope, tracking_receive, shielded_send)


async def _early_reply(scope: Any, message: Any, request_read: trio.Event) -> Any:
    declared = dict(scope.get("headers") or []).get(b"content-length", b"0")
    if not declared.isdigit() or int(declared) <= DRAIN_LIMIT:
        with trio.move_on_after(DRAIN_SECONDS):
            await request_read.wait()
    if request_read.is_set():
        return message
    headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"connection"]
    return {**message, "headers": [*headers, (b"connection", b"close")]}


__all__ = ["ShieldedSend", "create_app"]
