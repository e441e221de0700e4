"""The HTTP side of ``greenroom serve a2a`` (decision 0035): the agent card, public, at
``/.well-known/agent-card.json`` (and the older ``agent.json``), and the JSON-RPC endpoint
(``/invoke``, as docker-agent names it, and ``/``): ``message/send``, ``message/stream``
(server-sent events), ``tasks/get``, ``tasks/cancel`` and ``tasks/resubscribe``.

Every call passes greenroom's edge checks first (the ``Host`` check against DNS rebinding, no
foreign ``Origin``, a JSON content type, and the bearer token when the server has one); a call
refused there gets that HTTP status with a JSON-RPC error body (``-32600``). Past them, every
answer is HTTP 200 with a JSON-RPC result or error.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from quart import Response, request
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

from greenroom.errors import GreenroomError

from . import _a2a_wire as w
from ._a2a_tasks import A2AAgent, A2ATask
from ._cross_site import SitePolicy, check_bearer, check_json_content_type, check_request
from ._json import dumps

log = logging.getLogger("greenroom.a2a")

MAX_BODY = 1024 * 1024
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
_PUSH_METHODS = frozenset(
    {
        "tasks/pushNotificationConfig/set",
        "tasks/pushNotificationConfig/get",
        "tasks/pushNotificationConfig/list",
        "tasks/pushNotificationConfig/delete",
    }
)


def _json(body: Any, status: int = 200) -> Response:
    return Response(dumps(body), status, content_type="application/json")


def _history_length(params: Mapping[str, Any]) -> int | None:
    value = params.get("historyLength")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise w.params_error("$.params.historyLength must be a count (0, 1, 2, ...)")
    return value


def _stream(request_id: Any, events: AsyncIterator[dict[str, Any]]) -> Response:
    async def body() -> AsyncIterator[bytes]:
        async for event in events:
            yield b"data: " + dumps(w.result(request_id, event)).encode() + b"\n\n"

    response = Response(body(), 200, SSE_HEADERS, mimetype="text/event-stream")
    response.timeout = None
    return response


async def _resubscribe(task: A2ATask) -> AsyncIterator[dict[str, Any]]:
    """The task as it is, then its events from now on."""
    yield task.snapshot()
    async for event in task.follow(len(task.events)):
        yield event


def create_a2a_app(
    agent: A2AAgent,
    card: Callable[[], dict[str, Any]],
    *,
    auth_token: str = "",
    policy: SitePolicy | None = None,
) -> QuartTrio:
    """The A2A application over ``agent``; ``card`` gives the agent card."""
    policy = policy or SitePolicy()
    app = QuartTrio("greenroom-a2a")
    app.config["RESPONSE_TIMEOUT"] = None  # streams last as long as their turn
    app.config["BODY_TIMEOUT"] = 60
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY

    async def agent_card() -> Response:
        try:
            check_request(policy, "GET", {k.lower(): v for k, v in request.headers.items()})
        except GreenroomError as exc:
            return _json({"code": exc.code, "error": exc.message}, exc.status)
        return _json(card())

    app.add_url_rule(w.CARD_PATH, "agent_card", agent_card, methods=["GET"])
    app.add_url_rule("/.well-known/agent.json", "agent_json", agent_card, methods=["GET"])

    async def invoke() -> Response:
        try:
            headers = {k.lower(): v for k, v in request.headers.items()}
            check_request(policy, "POST", headers)
            if auth_token:
                check_bearer(headers.get("authorization", ""), auth_token)
            check_json_content_type(headers.get("content-type"))
        except GreenroomError as exc:
            refused = w.RpcError(w.INVALID_REQUEST, exc.message, {"code": exc.code})
            return _json(refused.body(None), exc.status)
        try:
            data = await request.get_data(cache=False)
        except HTTPException as exc:  # a body over MAX_BODY
            too_large = w.RpcError(w.INVALID_REQUEST, f"Invalid Request: {exc.description}")
            return _json(too_large.body(None), exc.code or 400)
        assert isinstance(data, bytes)
        request_id = None
        try:
            rpc = w.parse_request(data)
            request_id = rpc.id
            return await dispatch(rpc)
        except w.RpcError as exc:
            return _json(exc.body(request_id if exc.request_id is None else exc.request_id))
        except GreenroomError as exc:
            failed = w.RpcError(w.INTERNAL_ERROR, exc.message, {"code": exc.code})
            return _json(failed.body(request_id))

    app.add_url_rule(w.INVOKE_PATH, "invoke", invoke, methods=["POST"])
    app.add_url_rule("/", "invoke_root", invoke, methods=["POST"])

    async def send(rpc: w.RpcRequest) -> Response:
        incoming = w.read_message(rpc.params)
        task = agent.start(incoming)
        if incoming.blocking:
            await task.done.wait()
        return _json(w.result(rpc.id, task.snapshot(_history_length(rpc.params))))

    async def stream(rpc: w.RpcRequest) -> Response:
        task = agent.start(w.read_message(rpc.params))
        return _stream(rpc.id, task.follow(0))

    async def get(rpc: w.RpcRequest) -> Response:
        task = agent.find(w.task_id_param(rpc.params))
        return _json(w.result(rpc.id, task.snapshot(_history_length(rpc.params))))

    async def cancel(rpc: w.RpcRequest) -> Response:
        task = await agent.cancel(w.task_id_param(rpc.params))
        return _json(w.result(rpc.id, task.snapshot()))

    async def resubscribe(rpc: w.RpcRequest) -> Response:
        task = agent.find(w.task_id_param(rpc.params))
        return _stream(rpc.id, _resubscribe(task))

    methods: dict[str, Callable[[w.RpcRequest], Awaitable[Response]]] = {
        "message/send": send,
        "message/stream": stream,
        "tasks/get": get,
        "tasks/cancel": cancel,
        "tasks/resubscribe": resubscribe,
    }

    async def dispatch(rpc: w.RpcRequest) -> Response:
        handler = methods.get(rpc.method)
        if handler is not None:
            return await handler(rpc)
        if rpc.method in _PUSH_METHODS:
            raise w.RpcError(w.PUSH_NOT_SUPPORTED, "Push Notification is not supported")
        if rpc.method == "agent/getAuthenticatedExtendedCard":
            raise w.RpcError(-32007, "Authenticated Extended Card is not configured")
        raise w.RpcError(w.METHOD_NOT_FOUND, f"Method not found: {json.dumps(rpc.method)}")

    return app
