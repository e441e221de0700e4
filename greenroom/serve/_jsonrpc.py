"""JSON-RPC 2.0 over a pair of trio byte streams, one message per line (what ACP speaks over
stdio): requests both ways, notifications, and the standard error codes for bad input.

Each incoming request runs in its own task, so a long one (an ACP prompt) does not hold the
others (its cancel); writes are serialised by a lock; a request this side sends waits for its
answer in a one-slot channel.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio

log = logging.getLogger("greenroom.modes")

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
MAX_LINE = 16 * 1024 * 1024  # bytes one message may take

Params = dict[str, Any]
Handler = Callable[[Params], Awaitable[Any]]


class RpcError(Exception):
    """An error answer: raised by a handler (sent to the peer), or received from the peer."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_json(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


class Connection:
    """One JSON-RPC peer. ``requests`` and ``notifications`` map method names to handlers;
    :meth:`serve` reads until the input ends (then every handler still running is cancelled).
    """

    def __init__(
        self,
        receive: trio.abc.ReceiveStream,
        send: trio.abc.SendStream,
        requests: Mapping[str, Handler],
        notifications: Mapping[str, Handler],
    ) -> None:
        self._receive = receive
        self._send = send
        self._requests = requests
        self._notifications = notifications
        self._lock = trio.Lock()
        self._ids = itertools.count(1)
        self._pending: dict[int, trio.MemorySendChannel[dict[str, Any]]] = {}

    async def serve(self) -> None:
        async with trio.open_nursery() as nursery:
            async for line in self._lines():
                await self._dispatch(line, nursery)
            nursery.cancel_scope.cancel(reason="the peer closed its input")
        for reply in self._pending.values():
            reply.close()

    async def notify(self, method: str, params: Params) -> None:
        await self._write({"jsonrpc": "2.0", "method": method, "params": params})

    async def request(self, method: str, params: Params) -> Any:
        """Send a request and wait for its result.

        Raises:
            RpcError: the peer answered with an error, or closed the connection first.
        """
        request_id = next(self._ids)
        send, receive = trio.open_memory_channel[dict[str, Any]](1)
        self._pending[request_id] = send
        try:
            await self._write(
                {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
            )
            async with receive:
                try:
                    answer = await receive.receive()
                except trio.EndOfChannel:
                    raise RpcError(INTERNAL_ERROR, "the client closed the connection") from None
        finally:
            self._pending.pop(request_id, None)
            send.close()
        if "error" in answer:
            error = answer["error"] if isinstance(answer["error"], dict) else {}
            raise RpcError(
                int(error.get("code", INTERNAL_ERROR)),
                str(error.get("message", "")),
                error.get("data"),
            )
        return answer.get("result")

    async def _lines(self) -> Any:
        buffer = bytearray()
        while True:
            chunk = await self._receive.receive_some(65536)
            if not chunk:
                if buffer.strip():
                    yield bytes(buffer)
                return
            buffer += chunk
            while (end := buffer.find(b"\n")) >= 0:
                line = bytes(buffer[:end])
                del buffer[: end + 1]
                if line.strip():
                    yield line
            if len(buffer) > MAX_LINE:
                await self._error(None, RpcError(PARSE_ERROR, f"a message over {MAX_LINE} bytes"))
                return

    async def _dispatch(self, line: bytes, nursery: trio.Nursery) -> None:
        try:
            message = json.loads(line)
        except ValueError as exc:
            await self._error(None, RpcError(PARSE_ERROR, f"not JSON: {exc}"))
            return
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            why = 'a JSON-RPC message is an object with "jsonrpc": "2.0"'
            await self._error(_id_of(message), RpcError(INVALID_REQUEST, why))
            return
        if "method" not in message:  # an answer to one of our requests
            reply = self._pending.get(message.get("id"))  # type: ignore[arg-type]
            if reply is not None:
                # One slot, one answer: never blocks. A request being abandoned (cancelled)
                # may have closed its end already: the late answer is dropped.
                with contextlib.suppress(
                    trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError
                ):
                    reply.send_nowait(message)
            return
        method, request_id = message["method"], message.get("id")
        params = message.get("params", {})
        if not isinstance(method, str) or not isinstance(params, dict):
            why = '"method" must be a string and "params" an object'
            if "id" in message:
                await self._error(request_id, RpcError(INVALID_REQUEST, why))
            return
        if "id" not in message:
            handler = self._notifications.get(method)
            if handler is not None:
                nursery.start_soon(self._notified, handler, method, params)
            return
        request = self._requests.get(method)
        if request is None:
            known = ", ".join(sorted(self._requests))
            why = f"unknown method {method!r} (this agent answers {known})"
            await self._error(request_id, RpcError(METHOD_NOT_FOUND, why))
            return
        nursery.start_soon(self._answer, request, request_id, params)

    async def _answer(self, handler: Handler, request_id: Any, params: Params) -> None:
        try:
            result = await handler(params)
        except RpcError as exc:
            await self._error(request_id, exc)
            return
        except Exception as exc:
            log.exception("a request failed")
            await self._error(request_id, RpcError(INTERNAL_ERROR, f"{type(exc).__name__}: {exc}"))
            return
        await self._write({"jsonrpc": "2.0", "id": request_id, "result": result})

    async def _notified(self, handler: Handler, method: str, params: Params) -> None:
        try:
            await handler(params)
        except Exception:  # a notification has nobody to answer
            log.exception("notification %s failed", method)

    async def _error(self, request_id: Any, error: RpcError) -> None:
        await self._write({"jsonrpc": "2.0", "id": request_id, "error": error.to_json()})

    async def _write(self, message: dict[str, Any]) -> None:
        data = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        async with self._lock:
            try:
                await self._send.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                log.debug("the client is gone; dropped a %d-byte message", len(data))


def _id_of(message: Any) -> Any:
    return message.get("id") if isinstance(message, dict) else None
