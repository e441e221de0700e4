"""The WebSocket API (``GET /api/ws``): every operation of the table, plus subscriptions.

Client frames are ``{"id": ..., "op": ..., <fields>}``; replies ``{"id", "ok": true, "result"}``
or ``{"id", "ok": false, "error": {"status", "code", "message"}}``; events
``{"session_id", "seq", "event"}`` (with ``"run": <id>`` for events of a ``run`` op), or, for a
``run`` or ``subscribe`` that asked ``"batch": true``, ``{"session_id", "events": [{"seq",
"event"}, ...]}``: the events that were waiting, in one frame (and one write). All
outgoing frames go through one bounded queue: a client that cannot keep up is closed with 1013
and resumes by resubscribing with ``since``. Bad frames get an error reply, never a hang-up.
"""

from __future__ import annotations

import json
import logging
from collections import deque
from typing import Any
from urllib.parse import quote, urlencode

import trio

from greenroom.actors import RunStream, Subscription
from greenroom.domain import check_value, parse
from greenroom.errors import GreenroomError, InvalidRequest, NotFound, OwnedElsewhere, Unauthorized
from greenroom.observe import extract_field, server_span

from ._connections import refuse_websocket
from ._context import Encoded
from ._cross_site import check_bearer, check_request
from ._errors import map_error
from ._forward import ClaimHere, RemoteRun, served_here
from ._json import MAX_BODY, check_path_params, load_json
from ._ops import BY_NAME, Context, Operation, Reply, Request
from ._params import parse_name
from ._sse import BATCH, FLUSH_INTERVAL, LOG_BATCH
from ._turn_endpoints import subscribe
from ._ws_frames import (
    batch_option,
    event_frame,
    events_frame,
    param,
    reply_id,
    scalar_text,
    text_field,
)

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 32  # requests of one connection running at once; more wait for a slot
WRITER_IDLE = 5.0  # seconds a connection's writer task waits for frames before it ends
END_WAIT = 10.0  # seconds a run's end frame waits for its last events on the subscription
CLOSE_GOING_AWAY = 1001
CLOSE_POLICY = 1008  # a refused upgrade, on a server that cannot answer it over HTTP
CLOSE_INTERNAL_ERROR = 1011
CLOSE_TRY_AGAIN = 1013
_FRAME_KEYS = frozenset({"id", "op", "traceparent", "tracestate"})  # a frame's, not a body's


PATH = "/api/ws"


class WebSocketAPI:
    """ASGI middleware: ``/api/ws`` served here on hypercorn's own ``receive`` and ``send``,
    everything else passed on to Quart. Quart's websocket machinery (a nursery and two tasks,
    a channel, a request object and two signals per frame for each connection) is not on the
    path: it was a third of an idle connection's memory and a hop per frame (decision 0038)."""

    def __init__(self, app: Any, ctx: Context) -> None:
        self.app = app
        self.ctx = ctx

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "websocket" or scope.get("path") != PATH:
            await self.app(scope, receive, send)
            return
        if (await receive())["type"] != "websocket.connect":
            return
        try:
            subprotocol = _admit(self.ctx, scope)
        except GreenroomError as exc:
            await refuse_websocket(scope, send, exc, close_code=CLOSE_POLICY)
            return
        await send({"type": "websocket.accept", "subprotocol": subprotocol, "headers": []})
        client = (scope.get("client") or ("?",))[0]
        await Connection(self.ctx, receive, send, f"websocket {client}").serve()


def _admit(ctx: Context, scope: Any) -> str | None:
    """Check Host, Origin and the token (a function: its dicts are gone once the socket is
    open); the subprotocol to echo."""
    headers = _headers(scope)
    checked = {"host": headers.get("host", "")}
    if "origin" in headers:
        checked["origin"] = headers["origin"]
    check_request(ctx.config.site_policy, "GET", checked, websocket=True)
    if ctx.config.auth_token:
        return _authenticate(ctx.config.auth_token, headers, scope)
    return None


def _headers(scope: Any) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


def _authenticate(token: str, headers: dict[str, str], scope: Any) -> str | None:
    """Accept ``Authorization: Bearer`` or, for browsers, ``Sec-WebSocket-Protocol:
    bearer.<token>`` (echoed back as the chosen subprotocol)."""
    header = headers.get("authorization", "")
    if header:
        check_bearer(header, token)
        return None
    for protocol in scope.get("subprotocols") or ():
        if protocol.startswith("bearer."):
            check_bearer(f"Bearer {protocol.removeprefix('bearer.')}", token)
            return str(protocol)
    raise Unauthorized("missing Authorization header")


class Connection:
    def __init__(self, ctx: Context, receive: Any, send: Any, client: str) -> None:
        self.ctx = ctx
        self._receive = receive
        self._asgi_send = send
        self._client = client
        # Outgoing frames wait here for the writer, a task that runs while there is something
        # to send and for WRITER_IDLE seconds after: an idle connection holds no writer task.
        self._out: deque[str] = deque()
        self._writing = False  # a writer task is running
        self._parked: trio.lowlevel.Task | None = None  # the writer, waiting for frames
        self._limiter_: trio.CapacityLimiter | None = None  # made with the first request
        self._subscriptions: dict[str, trio.CancelScope] = {}
        self._sent_seq: dict[str, int] = {}  # per session: the last seq a subscription sent
        self._sent = trio.Event()  # set (and replaced) each time a subscription sends
        self._nursery: trio.Nursery | None = None
        self._close_code = 1000
        self._frames_in = ctx.metrics.ws_frames.labels("in")
        self._frames_out = ctx.metrics.ws_frames.labels("out")

    async def serve(self) -> None:
        going_away = self._going_away
        self.ctx.on_shutdown.add(going_away)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                if self.ctx.shutting_down.is_set():
                    self._close(CLOSE_GOING_AWAY)
                await self._reader()
                nursery.cancel_scope.cancel()
        except* Exception as group:  # a bug: the client hears 1011, the log has the trace
            log.error("WebSocket connection failed", exc_info=group)
            self._close_code = CLOSE_INTERNAL_ERROR
        finally:
            self.ctx.on_shutdown.discard(going_away)
        with trio.move_on_after(1, shield=True):
            await self._asgi_send({"type": "websocket.close", "code": self._close_code})

    def _going_away(self) -> None:
        self._close(CLOSE_GOING_AWAY)

    def _close(self, code: int) -> None:
        self._close_code = code
        assert self._nursery is not None
        self._nursery.cancel_scope.cancel()

    async def _writer(self) -> None:
        try:
            while True:
                while self._out:
                    frame = self._out.popleft()
                    await self._asgi_send({"type": "websocket.send", "text": frame})
                    self._frames_out.inc()
                if not await self._wait_for_frames():
                    return
        finally:
            self._writing = False

    async def _wait_for_frames(self) -> bool:
        """Park until ``send`` queues a frame (True) or WRITER_IDLE seconds pass (False)."""
        with trio.move_on_after(WRITER_IDLE):
            self._parked = trio.lowlevel.current_task()

            def abort(_: Any) -> trio.lowlevel.Abort:
                self._parked = None
                return trio.lowlevel.Abort.SUCCEEDED

            await trio.lowlevel.wait_task_rescheduled(abort)
            return True
        return bool(self._out)

    def send(self, frame: str) -> None:
        """Queue a frame; a full queue means the client cannot keep up: close with 1013."""
        if self._nursery is None or self._nursery.cancel_scope.cancel_called:
            return  # the connection is closing: nothing more goes out
        if len(self._out) >= self.ctx.config.ws_buffer:
            self._close(CLOSE_TRY_AGAIN)
            return
        self._out.append(frame)
        if self._parked is not None:
            trio.lowlevel.reschedule(self._parked)
            self._parked = None
        elif not self._writing:
            self._writing = True
            self._nursery.start_soon(self._writer)

    @property
    def _limiter(self) -> trio.CapacityLimiter:
        if self._limiter_ is None:
            self._limiter_ = trio.CapacityLimiter(MAX_IN_FLIGHT)
        return self._limiter_

    def reply(self, frame_id: Any, result: Any) -> None:
        if isinstance(result, Encoded):  # JSON already: spliced in, not decoded and re-encoded
            head = json.dumps({"id": frame_id, "ok": True, "result": None})[: -len("null}")]
            self.send(f"{head}{result.data.decode()}}}")
            return
        self.send(json.dumps({"id": frame_id, "ok": True, "result": result}))

    def fail(self, frame_id: Any, exc: GreenroomError, op: Operation | None = None) -> None:
        status, body, _ = map_error(exc, op)
        error = {"status": status, **body}
        self.send(json.dumps({"id": frame_id, "ok": False, "error": error}))

    async def _reader(self) -> None:
        while True:
            message = await self._receive()
            if message["type"] != "websocket.receive":  # websocket.disconnect
                return
            self._frames_in.inc()
            text = message.get("text")
            data = text.encode() if text is not None else message.get("bytes") or b""
            try:
                frame = load_json(data, limit=MAX_BODY, check=False)
                if not isinstance(frame, dict):
                    raise InvalidRequest("$: a frame must be a JSON object")
            except GreenroomError as exc:
                self.fail(None, exc)
                continue
            try:
                check_value(frame)
            except GreenroomError as exc:  # the reply still names the frame when it can
                self.fail(reply_id(frame.get("id")), exc)
                continue
            await self._limiter.acquire_on_behalf_of(frame_ref := object())
            assert self._nursery is not None
            self._nursery.start_soon(self._handle, frame, frame_ref)

    async def _handle(self, frame: dict[str, Any], ref: object) -> None:
        frame_id = frame.get("id")
        op_name = frame.get("op")
        op = BY_NAME.get(op_name) if isinstance(op_name, str) else None
        parent = extract_field(frame.get("traceparent"), frame.get("tracestate"))
        traced = server_span(f"ws {op_name}", {"greenroom.ws.op": str(op_name)}, parent)
        try:
            with traced:
                if op_name == "subscribe":
                    await self._subscribe(frame_id, frame)
                elif op_name == "unsubscribe":
                    self._unsubscribe(frame_id, frame)
                elif op is None or not op.websocket:
                    raise NotFound(f"unknown op {op_name!r}")
                else:
                    await self._run_op(op, frame_id, frame)
        except GreenroomError as exc:
            self.fail(frame_id, exc, op)
        finally:
            self._limiter.release_on_behalf_of(ref)

    async def _run_op(self, op: Operation, frame_id: Any, frame: dict[str, Any]) -> None:
        params = {name: param(frame, name) for name in op.params}
        if op.name == "run" and "agent_name" in frame:
            params["agent_name"] = text_field(frame, "agent_name")
        check_path_params(params, prefix="$.")
        query = {
            p.name: p.parse(scalar_text(frame[p.name]), f"$.{p.name}")
            for p in op.query
            if frame.get(p.name) is not None
        }
        headers = {}
        if "idempotency_key" in frame:
            headers["idempotency-key"] = parse_name(
                text_field(frame, "idempotency_key"), "$.idempotency_key"
            )
        batch = batch_option(frame) if op.stream else False
        body: Any = None
        if op.body is not None:
            skip = _FRAME_KEYS | set(params) | set(query) | {"agent_name", "idempotency_key"}
            skip |= {"batch"} if op.stream else set()
            body = parse({k: v for k, v in frame.items() if k not in skip}, op.body)
        req = Request(params, query, headers, body, self._client)
        try:
            result = await op.handler(self.ctx, req)
        except OwnedElsewhere as exc:
            if self.ctx.forwarder is None:
                raise
            try:  # the same path as REST: the owner answers over internal HTTP
                await self._forward(op, frame_id, frame, params, exc, batch)
                return
            except ClaimHere:
                result = await served_here(lambda: op.handler(self.ctx, req))
        if op.stream and not isinstance(result, Reply):  # a run with wait: its result
            await self._stream_run(frame_id, params["session_id"], result, batch)
            return
        assert isinstance(result, Reply)
        self.reply(frame_id, result.body)

    async def _forward(
        self,
        op: Operation,
        frame_id: Any,
        frame: dict[str, Any],
        params: dict[str, str],
        exc: OwnedElsewhere,
        batch: bool,
    ) -> None:
        """Send the op as its REST request to the session's owner; its answer is this
        frame's reply (a run's SSE stream becomes the run's event frames)."""
        forwarder = self.ctx.forwarder
        assert forwarder is not None
        path = op.path
        if op.name == "run" and "agent_name" in params:
            path += "/{agent_name}"
        for name, value in params.items():
            path = path.replace(f"{{{name}}}", quote(value, safe=""))
        query = {
            p.name: scalar_text(frame[p.name]) for p in op.query if frame.get(p.name) is not None
        }
        target = f"{path}?{urlencode(query)}" if query else path
        headers = {"content-type": "application/json"}
        if "idempotency_key" in frame:
            headers["idempotency-key"] = text_field(frame, "idempotency_key")
        data = b""
        if op.body is not None:
            skip = _FRAME_KEYS | set(params) | set(query) | {"idempotency_key", "batch"}
            data = json.dumps({k: v for k, v in frame.items() if k not in skip}).encode()
        session_id = params.get("session_id", "")
        upstream = await forwarder.send(session_id, exc, op.method, target, headers, data)
        streamed = "text/event-stream" in upstream.headers.get("content-type", "")
        if op.stream and upstream.status == 200 and streamed:
            try:
                await self._stream_run(frame_id, session_id, RemoteRun(upstream), batch)
            finally:
                await upstream.aclose()
            return
        raw = await upstream.read(forwarder.answer_timeout)
        try:
            answer = json.loads(raw) if raw.strip() else None
        except ValueError:
            answer = {"message": raw.decode(errors="replace"), "code": "bad_gateway"}
        if 200 <= upstream.status < 300:
            self.reply(frame_id, answer)
        else:
            error = {"status": upstream.status, **(answer if isinstance(answer, dict) else {})}
            self.send(json.dumps({"id": frame_id, "ok": False, "error": error}))

    async def _stream_run(
        self, frame_id: Any, session_id: str, stream: RunStream | RemoteRun, batch: bool
    ) -> None:
        self.reply(frame_id, {"streaming": True})
        run = json.dumps(frame_id)
        left_to_subscription = 0
        try:
            async for entry in stream:
                entries = [entry, *stream.ready(BATCH)] if batch else [entry]
                # Sent once per connection: while this connection is subscribed to the session,
                # its sequenced events come on the subscription (without a "run" key).
                if session_id in self._subscriptions:
                    for e in entries:
                        if e.seq:
                            left_to_subscription = e.seq
                    entries = [e for e in entries if not e.seq]
                if not entries:
                    continue
                if batch:
                    self.send(events_frame(session_id, entries, run=run))
                    await trio.sleep(FLUSH_INTERVAL)  # what streams meanwhile goes together
                else:
                    self.send(event_frame(session_id, entries[0], run=run))
        finally:
            stream.close()
        # The subscription sends an event once it is committed, a little after the run stream
        # had it: the end frame comes after the run's last event, as without a subscription.
        with trio.move_on_after(END_WAIT):
            while (
                session_id in self._subscriptions
                and self._sent_seq.get(session_id, 0) < left_to_subscription
            ):
                await self._sent.wait()
        self.send(json.dumps({"session_id": session_id, "run": frame_id, "end": True}))

    async def _subscribe(self, frame_id: Any, frame: dict[str, Any]) -> None:
        session_id = text_field(frame, "session_id")
        since = frame.get("since")
        if since is not None and (not isinstance(since, int) or isinstance(since, bool)):
            raise InvalidRequest("$.since: expected integer", path="$.since")
        batch = batch_option(frame)
        subscription = await subscribe(self.ctx, session_id, since)
        previous = self._subscriptions.pop(session_id, None)
        if previous is not None:
            previous.cancel()
        scope = trio.CancelScope()
        self._subscriptions[session_id] = scope
        self.reply(frame_id, {"subscribed": session_id})
        assert self._nursery is not None
        self._nursery.start_soon(self._pump, session_id, subscription, scope, batch)

    async def _pump(
        self, session_id: str, subscription: Subscription, scope: trio.CancelScope, batch: bool
    ) -> None:
        reason = "unsubscribed"
        with subscription, scope:
            exited = False
            async for entry in subscription:
                entries = [entry, *subscription.ready(LOG_BATCH)] if batch else [entry]
                if batch:
                    self.send(events_frame(session_id, entries))
                else:
                    self.send(event_frame(session_id, entry))
                entry = entries[-1]
                exited = entry.type == "session_exited"  # no parse of a replayed entry
                sequenced = [e.seq for e in entries if e.seq]
                if sequenced:
                    self._sent_seq[session_id] = sequenced[-1]
                    self._sent.set()
                    self._sent = trio.Event()
                if batch and not exited:
                    await trio.sleep(FLUSH_INTERVAL)
            reason = "session_exited" if exited else "dropped"
        if self._subscriptions.get(session_id) is scope:
            del self._subscriptions[session_id]
            self._sent_seq.pop(session_id, None)
            self._sent.set()  # a run waiting on this subscription stops waiting
            end = {"session_id": session_id, "subscription_ended": True, "reason": reason}
            self.send(json.dumps(end))

    def _unsubscribe(self, frame_id: Any, frame: dict[str, Any]) -> None:
        session_id = text_field(frame, "session_id")
        scope = self._subscriptions.pop(session_id, None)
        if scope is not None:
            scope.cancel()
        self.reply(frame_id, {"unsubscribed": session_id, "was_subscribed": scope is not None})
