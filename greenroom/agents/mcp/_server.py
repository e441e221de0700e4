"""One MCP server of one toolset: connected, listed, called, restarted (spec §5.2 to §5.6).

A supervisor task in the runtime's service nursery (a child of the session actor, never of a
turn or a request) owns the connection: transport (``_transport.py``), the SDK's
``ClientSession``, ``initialize``, ``tools/list`` (every page). Calls come from tool-call tasks
and share the session.

Lifecycle:

- The first start happens when the runtime asks (:meth:`McpServer.ensure_started`, at build
  and before a turn); the caller waits for the attempt at most ``start_timeout`` seconds.
- A start that fails leaves the server ``failed`` with a warning; the next
  :meth:`ensure_started` (the next turn) tries again.
- A server that dies after it was ready is restarted with back-off (:data:`BACKOFF`); each
  death is reported (``notify``) as a warning. After the last attempt it is ``failed``.
- ``notifications/tools/list_changed`` makes the supervisor list the tools again; the new list
  is taken by the agent between turns (:attr:`version` tells it something changed).

Bad servers cannot hurt the session: a malformed message is logged and dropped, a call that
gets no answer in ``call_timeout`` seconds is a tool error, a flood of output is bounded by the
transport, and stopping kills and reaps the process group.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import mcp_types
import trio
from mcp import ClientSession
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from greenroom import __version__
from greenroom.domain import AuthorizationEvent, Warning
from greenroom.observe import mcp_call_span, metrics

from ..tools._base import McpSettings, ServicesUnavailable, Tool, ToolHost, ToolResult, error
from ._content import McpTool, result_of, tool_of
from ._oauth import oauth_provider
from ._spec import RemoteSpec, ServerSpec
from ._transport import Watched, open_transport, reason

log = logging.getLogger(__name__)

BACKOFF = McpSettings().restart_backoff
"""Seconds before each restart of a server that died (upstream's five attempts)."""
MAX_PAGES = 100
"""tools/list pages read at most (a server that pages forever is cut off)."""
MALFORMED_LOGGED = 3
"""Malformed messages logged per connection (the rest are only counted)."""
CLIENT_INFO = mcp_types.Implementation(name="greenroom", version=__version__)


class McpServer:
    """See the module docstring. ``prefix`` is the toolset's ``name`` (tool names become
    ``<prefix>_<tool>``)."""

    def __init__(
        self,
        spec: ServerSpec,
        host: ToolHost | None,
        settings: McpSettings,
        *,
        prefix: str = "",
        data_dir: Path | None = None,
    ) -> None:
        self.spec = spec
        self.description = spec.description
        self.prefix = prefix
        self._host = host
        self._settings = settings
        self._data_dir = data_dir or Path.home() / ".local/share/greenroom"
        self.state = "idle"  # idle, starting, ready, failed, stopped
        metrics().mcp_servers.add(self)  # up (ready) or down (failed), read at each scrape
        self.tools: list[McpTool] = []
        self.instructions = ""
        self.version = 0  # bumped whenever tools or instructions change
        self.last_error = ""
        self.restarts = 0
        self._session: ClientSession | None = None
        self._supervised = False
        self._attempt = trio.Event()  # set when the current start attempt has an outcome
        self._retry = trio.Event()
        self._list_changed = trio.Event()
        self._broken = trio.Event()
        self.malformed = 0
        self._authorized = False
        self._stderr_tail = ""

    # --- what the toolset uses ---------------------------------------------------------------

    async def ensure_started(self) -> str:
        """Start the server (or retry a failed start) and wait for the attempt, at most
        ``start_timeout`` seconds. Returns "" when ready, else the warning text."""
        if self.state == "ready":
            return ""
        if self.state in ("idle", "stopped") and not self._supervised:
            if self._host is None:
                return f"{self.description} start failed: no runtime to run it"
            self._attempt = trio.Event()
            self.state = "starting"
            try:
                self._host.start_service(self._supervise)
            except ServicesUnavailable:
                self.state = "idle"
                return f"{self.description} start failed: the runtime runs no services"
            self._supervised = True
        elif self.state == "failed":
            self._attempt = trio.Event()
            self.state = "starting"
            self._retry.set()
        with trio.move_on_after(self._settings.start_timeout):
            await self._attempt.wait()
        if self.state == "ready":
            return ""
        if self.state == "starting":
            return (
                f"{self.description} start failed: not ready within "
                f"{self._settings.start_timeout:g} seconds (still trying)"
            )
        return self.last_error or f"{self.description} start failed"

    async def call(self, name: str, arguments: Mapping[str, Any]) -> ToolResult:
        session = self._session
        if session is None or self.state != "ready":
            return error(
                f"Error calling tool: failed to call tool: {self.description} is not running"
            )
        timeout = self._settings.call_timeout
        result: mcp_types.CallToolResult | None = None
        with trio.move_on_after(timeout), mcp_call_span(self.description, name):
            try:
                result = await session.call_tool(name, dict(arguments))
            except MCPError as exc:
                return error(f"Error calling tool: failed to call tool: {reason(exc)}")
            except (ValidationError, ValueError, RuntimeError) as exc:
                return error(f"Error calling tool: failed to call tool: {reason(exc)}")
            except (httpx2.TransportError, OSError) as exc:
                self._broken.set()
                return error(f"Error calling tool: failed to call tool: {reason(exc)}")
        if result is None:
            return error(
                f"Error calling tool: failed to call tool: {self.description} did not answer "
                f"within {timeout:g} seconds"
            )
        return result_of(result)

    def current(self) -> tuple[list[Tool], str]:
        """The tools and instructions as last listed (the toolset's live view)."""
        return list(self.tools), self.instructions

    # --- the supervisor ------------------------------------------------------------------

    async def _supervise(self) -> None:
        try:
            while True:
                died = await self._run_once()
                backoff = self._settings.restart_backoff
                if died and self.restarts < len(backoff):
                    delay = backoff[self.restarts]
                    self.restarts += 1
                    self._notify(
                        f"{self.description} stopped: {self.last_error}; restarting in "
                        f"{delay:g}s (attempt {self.restarts} of {len(backoff)})"
                    )
                    self.state = "starting"
                    self._attempt = trio.Event()  # a turn now waits for the restart
                    await trio.sleep(delay)
                    continue
                if died:
                    self._notify(
                        f"{self.description} stopped: {self.last_error}; gave up after "
                        f"{len(backoff)} restarts (tried again at the next turn)"
                    )
                    self.last_error = f"{self.description} start failed: {self.last_error}"
                self.state = "failed"
                self._attempt.set()
                await self._retry.wait()
                self._retry = trio.Event()
                self.restarts = 0
        finally:
            self.state = "stopped"
            self._session = None
            self._supervised = False
            self._attempt.set()

    async def _run_once(self) -> bool:
        """One connection; True when it was ready and then died (False: it never started)."""
        ready = False
        try:
            with trio.move_on_after(self._settings.start_timeout) as starting:
                async with self._connect() as (session, ended):
                    result = await session.initialize()
                    tools = await self._list(session)
                    starting.deadline = math.inf  # started: it may run for good now
                    self._ready(session, tools, result.instructions or "")
                    ready = True
                    if self._authorized:
                        self._authorized = False
                        self._notify_event(AuthorizationEvent("accept", self._url()))
                    await self._serve(session, ended)
            if starting.cancelled_caught:
                self.last_error = f"no answer within {self._settings.start_timeout:g} seconds"
            else:
                self.last_error = "the server closed the connection"
        except Exception as exc:  # anything a transport, the SDK or the server throws
            self.last_error = reason(exc)
            log.debug("MCP server %s: %s", self.description, self.last_error, exc_info=True)
        finally:
            self._session = None
        if self._stderr_tail:
            self.last_error += f" (stderr: {self._stderr_tail})"
            self._stderr_tail = ""
        if not ready:
            self.last_error = f"{self.description} start failed: {self.last_error}"
        return ready

    def _ready(
        self, session: ClientSession, tools: list[mcp_types.Tool], instructions: str
    ) -> None:
        self._session = session
        self.state = "ready"
        self._set_tools(tools, instructions)
        self._attempt.set()

    def _set_tools(self, tools: list[mcp_types.Tool], instructions: str) -> None:
        mapped = [tool_of(t, self.prefix, self.call) for t in tools]
        if [t.spec for t in mapped] != [t.spec for t in self.tools] or (
            instructions != self.instructions
        ):
            self.version += 1
        self.tools = mapped
        self.instructions = instructions

    async def _serve(self, session: ClientSession, ended: trio.Event) -> None:
        """Until the connection ends: re-list the tools when the server says they changed."""
        while True:
            async with trio.open_nursery() as nursery:

                async def watch(event: trio.Event) -> None:
                    await event.wait()
                    nursery.cancel_scope.cancel()

                nursery.start_soon(watch, ended)
                nursery.start_soon(watch, self._broken)
                nursery.start_soon(watch, self._list_changed)
            if ended.is_set() or self._broken.is_set():
                self._broken = trio.Event()
                return
            self._list_changed = trio.Event()
            with trio.move_on_after(self._settings.start_timeout):
                try:
                    self._set_tools(await self._list(session), self.instructions)
                except (MCPError, ValidationError) as exc:
                    log.warning("MCP server %s: listing tools failed: %s", self.description, exc)

    async def _list(self, session: ClientSession) -> list[mcp_types.Tool]:
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    # --- connecting ------------------------------------------------------------------------

    @asynccontextmanager
    async def _connect(self) -> AsyncIterator[tuple[ClientSession, trio.Event]]:
        ended = trio.Event()
        transport = open_transport(
            self.spec, self._settings, auth=self._oauth, on_stderr=self._on_stderr
        )
        async with transport as (read, write):
            watched = Watched(read, ended)
            session = ClientSession(
                watched,
                write,
                elicitation_callback=self._elicit,
                message_handler=self._on_message,
                client_info=CLIENT_INFO,
            )
            async with session:
                yield session, ended

    def _on_stderr(self, tail: str) -> None:
        self._stderr_tail = tail

    def _oauth(self, url: str) -> httpx2.Auth | None:
        settings = self._settings
        if settings.oauth is None or not settings.oauth_redirect_uri or self._host is None:
            return None

        def authorized() -> None:
            self._authorized = True

        return oauth_provider(
            url,
            data_dir=self._data_dir,
            flows=settings.oauth,
            redirect_uri=settings.oauth_redirect_uri,
            elicit=self._host.elicit,
            on_redirect=authorized,
            timeout=settings.oauth_timeout,
        )

    def _url(self) -> str:
        return self.spec.url if isinstance(self.spec, RemoteSpec) else ""

    # --- what the server sends us ----------------------------------------------------------

    async def _elicit(
        self, context: Any, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult | mcp_types.ErrorData:
        del context
        if self._host is None:
            return mcp_types.ElicitResult(action="decline")
        if isinstance(params, mcp_types.ElicitRequestURLParams):
            answer = await self._host.elicit(
                params.message, mode="url", url=params.url, meta={"cagent/server": self.description}
            )
        else:
            answer = await self._host.elicit(
                params.message,
                schema=params.requested_schema,
                meta={"cagent/server": self.description},
            )
        try:
            content = dict(answer.content) if answer.action == "accept" and answer.content else None
            return mcp_types.ElicitResult(action=answer.action, content=content)  # type: ignore[arg-type]
        except ValidationError as exc:
            return mcp_types.ErrorData(
                code=mcp_types.INVALID_PARAMS, message=f"the answer does not fit: {reason(exc)}"
            )

    async def _on_message(self, message: Any) -> None:
        await trio.lowlevel.checkpoint()
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self._list_changed.set()
        elif isinstance(message, httpx2.TransportError):
            self._broken.set()
        elif isinstance(message, Exception):
            self.malformed += 1
            if self.malformed <= MALFORMED_LOGGED:
                log.warning(
                    "MCP server %s sent a bad message: %s", self.description, reason(message)
                )

    def _notify(self, text: str) -> None:
        self._notify_event(Warning(message=text))

    def _notify_event(self, event: Any) -> None:
        log.info("MCP server %s: %s", self.description, getattr(event, "message", event))
        if self._host is not None:
            self._host.notify(event)
