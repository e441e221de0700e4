"""JSON-RPC over one language server's stdio: our requests, its answers, its notifications.

:meth:`Connection.run` reads until the server's stdout ends; every request still waiting then
fails with :class:`ConnectionLost` at once, so a crashed server never leaves a tool call
waiting. Requests the server sends us are answered at once (``workspace/configuration`` with
nulls, registrations accepted, ``workspace/applyEdit`` refused: greenroom edits files only in
``lsp_rename`` and ``lsp_format``); notifications go to ``on_notification``.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Callable
from typing import Any

import attrs
import trio

from ._lsp_wire import FrameError, Reader, encode

log = logging.getLogger(__name__)

METHOD_NOT_FOUND = -32601


class LspError(Exception):
    """A request failed: the server answered with an error, or the connection is gone."""


class ConnectionLost(LspError):
    """The server's stdout ended (it exited or broke the framing) before it answered."""


@attrs.define(eq=False)
class _Waiting:
    done: trio.Event = attrs.field(factory=trio.Event)
    result: Any = None
    error: LspError | None = None


def _answer_for(method: str, params: Any, root_uri: str) -> tuple[Any, dict[str, Any] | None]:
    """Our (result, error) for a request the server sends us."""
    if method == "workspace/configuration":
        items = params.get("items") if isinstance(params, dict) else None
        return [None] * (len(items) if isinstance(items, list) else 0), None
    if method in (
        "client/registerCapability",
        "client/unregisterCapability",
        "window/workDoneProgress/create",
        "window/showMessageRequest",
        "workspace/diagnostic/refresh",
        "workspace/inlayHint/refresh",
        "workspace/semanticTokens/refresh",
        "workspace/codeLens/refresh",
    ):
        return None, None
    if method == "workspace/workspaceFolders":
        return [{"uri": root_uri, "name": root_uri.rsplit("/", 1)[-1] or "root"}], None
    if method == "workspace/applyEdit":
        reason = "greenroom applies edits only through lsp_rename and lsp_format"
        return {"applied": False, "failureReason": reason}, None
    return None, {"code": METHOD_NOT_FOUND, "message": f"method not supported: {method}"}


class Connection:
    """One JSON-RPC connection to a language server (see the module docstring)."""

    def __init__(
        self,
        send: trio.abc.SendStream,
        receive: trio.abc.ReceiveStream,
        *,
        on_notification: Callable[[str, Any], None],
        root_uri: str = "",
        max_message: int | None = None,
    ) -> None:
        self._send = send
        self._reader = (
            Reader(receive) if max_message is None else Reader(receive, max_message=max_message)
        )
        self._on_notification = on_notification
        self._root_uri = root_uri
        self._ids = itertools.count(1)
        self._waiting: dict[int, _Waiting] = {}
        self._write_lock = trio.Lock()
        self.closed = trio.Event()
        self.reason = ""
        """Why the connection ended ("" while it runs, or when the server just exited)."""

    async def run(self) -> None:
        """Read messages until the stream ends; then fail every waiting request."""
        try:
            while True:
                message = await self._reader.next()
                if message is None:
                    break
                await self._dispatch(message)
        except FrameError as exc:
            self.reason = str(exc)
            log.warning("LSP server broke the framing: %s", exc)
        except (trio.ClosedResourceError, trio.BrokenResourceError, OSError) as exc:
            self.reason = str(exc) or type(exc).__name__
        finally:
            self._end()

    def _end(self) -> None:
        self.closed.set()
        waiting, self._waiting = self._waiting, {}
        for entry in waiting.values():
            entry.error = ConnectionLost(self.reason or "the server closed its output")
            entry.done.set()

    async def _dispatch(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        if isinstance(method, str):
            if "id" in message:
                result, error = _answer_for(method, message.get("params"), self._root_uri)
                reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"]}
                if error is None:
                    reply["result"] = result
                else:
                    reply["error"] = error
                with contextlib.suppress(LspError):  # the connection is ending: seen next
                    await self._write(reply)
                return
            try:
                self._on_notification(method, message.get("params"))
            except Exception:
                log.exception("handling the LSP notification %s failed", method)
            return
        ident = message.get("id")
        entry = self._waiting.pop(ident, None) if isinstance(ident, int) else None
        if entry is None:
            return  # an answer nobody waits for (its caller gave up)
        error = message.get("error")
        if isinstance(error, dict):
            entry.error = LspError(f"LSP error {error.get('code')}: {error.get('message', '')}")
        else:
            entry.result = message.get("result")
        entry.done.set()

    async def _write(self, message: dict[str, Any]) -> None:
        data = encode(message)
        async with self._write_lock:
            try:
                await self._send.send_all(data)
            except (trio.ClosedResourceError, trio.BrokenResourceError, OSError) as exc:
                raise ConnectionLost(f"writing to the server failed: {exc}") from None

    async def request(self, method: str, params: Any = None) -> Any:
        """Send a request and wait for its result (deadlines belong to the caller).

        Raises:
            LspError: the server answered with an error.
            ConnectionLost: the connection ended first.
        """
        if self.closed.is_set():
            raise ConnectionLost(self.reason or "the server closed its output")
        ident = next(self._ids)
        entry = self._waiting[ident] = _Waiting()
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": ident, "method": method}
        if params is not None:
            message["params"] = params
        try:
            await self._write(message)
            await entry.done.wait()
        finally:
            self._waiting.pop(ident, None)
        if entry.error is not None:
            raise entry.error
        return entry.result

    async def notify(self, method: str, params: Any = None) -> None:
        """Send a notification.

        Raises:
            ConnectionLost: the connection ended.
        """
        if self.closed.is_set():
            raise ConnectionLost(self.reason or "the server closed its output")
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        await self._write(message)
