"""An in-process greenroom for tests: the real server on 127.0.0.1:0 in the test's own trio
run, scripted agents, a memory or SQLite store, and a client bound to it.

Everything runs in one trio run, so trio's mock clock drives the server too: scripted delays,
idle timeouts and the client's reconnect backoff pass in virtual time under
``autojump_clock``. (Use the memory store with ``autojump_clock``: SQLite works through
threads, and virtual time jumps while a thread works.)
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import attrs
import hypercorn.trio
import trio

from greenroom.actors import Registry, RegistryConfig, Scheduler, open_registry
from greenroom.agents import (
    AgentConfig,
    AgentSources,
    AgentTools,
    FunctionTool,
    LocalRuntimeFactory,
    ToolAnnotations,
    ToolContext,
    ToolResult,
    default_tools_for,
)
from greenroom.agents.providers import ToolSpec
from greenroom.agents.tools import ToolHost, ToolsFor
from greenroom.client import GreenroomClient
from greenroom.domain import parse_webhook_allow
from greenroom.observe import metrics_scope
from greenroom.persistence import Persistence, Store, open_memory_store, open_sqlite_store
from greenroom.serve import (
    Deliverer,
    ServeConfig,
    SourcesCatalog,
    WebhookPolicy,
    hypercorn_config,
)
from greenroom.transport import AppConfig, ShieldedSend, create_app

from ._agents import ScriptedAgent, Tool, ToolCallContext

StoreKind = Literal["memory", "sqlite"]
DEFAULT_SOURCE = "default"


def _tools_for(tools: Mapping[str, tuple[Tool, ...]]) -> ToolsFor:
    """Built-in toolsets plus each source's Python tools (the source is the agent file's
    name); a tool elicits through the runtime running it (``context.host``)."""

    def tools_for(agent: AgentConfig, context: ToolContext) -> AgentTools:
        built = default_tools_for(agent, context)
        for tool in tools.get(Path(context.agent_file).stem, ()):
            built.tools[tool.name] = _bind(tool, context.host)
        return built

    return tools_for


def _bind(tool: Tool, host: ToolHost | None) -> FunctionTool:
    async def handler(arguments: Mapping[str, Any]) -> ToolResult | str:
        return await tool.handler(ToolCallContext(arguments, host))

    spec = ToolSpec(tool.name, tool.description, tool.parameters)
    annotations = ToolAnnotations() if tool.confirm else ToolAnnotations(read_only=True)
    return FunctionTool(spec, handler, annotations)


class _Dropper:
    """ASGI middleware: :meth:`drop` cuts every WebSocket and HTTP response in flight (event
    streams included), as a network failure or a proxy restart would; clients must reconnect
    and resume."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._scopes: set[trio.CancelScope] = set()
        self.dropped = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        cancel = trio.CancelScope()
        self._scopes.add(cancel)
        try:
            with cancel:
                await self.app(scope, receive, send)
        finally:
            self._scopes.discard(cancel)

    def drop(self) -> int:
        scopes = list(self._scopes)
        for cancel in scopes:
            cancel.cancel()
        self.dropped += len(scopes)
        return len(scopes)


@attrs.define
class Greenroom:
    """A running in-process server.

    Attributes:
        url: its base URL (``http://127.0.0.1:<port>``).
        client: a :class:`~greenroom.client.GreenroomClient` bound to it.
        registry: the session registry (for assertions about server state).
        store: the session store.
    """

    url: str
    client: GreenroomClient
    registry: Registry
    store: Store
    _dropper: _Dropper
    _context: Any

    def drop_connections(self) -> int:
        """Cut every WebSocket and HTTP response in flight; returns how many."""
        return self._dropper.drop()

    def end_subscriptions(self) -> None:
        """End every event-log subscription as if each subscriber fell behind."""
        self.registry.end_subscriptions()


@asynccontextmanager
async def open_greenroom(
    agent: ScriptedAgent | None = None,
    *,
    agents: Mapping[str, ScriptedAgent] | None = None,
    store: StoreKind = "memory",
    db_path: Path | str | None = None,
    auth_token: str = "",
    registry_config: RegistryConfig | None = None,
    clock: Callable[[], float] | None = None,
    webhook_allow: tuple[str, ...] = (),
    webhook_secret: str = "",
    webhook_policy: WebhookPolicy | None = None,
) -> AsyncIterator[Greenroom]:
    """Serve scripted agents on 127.0.0.1:0 for the duration of the block.

    Args:
        agent: the agent of source ``default`` (what ``client.run`` uses by default).
        agents: agents by source key (instead of, or besides, ``agent``).
        store: ``memory`` or ``sqlite`` (a file at ``db_path``, else in a temporary
            directory).
        auth_token: require this bearer token (the bound client sends it).
        registry_config: the registry's limits and timeouts.
        clock: the wall clock scheduled runs fire by (epoch seconds; default ``time.time``);
            under trio's mock clock pass one that moves with it, e.g.
            ``lambda: START + trio.current_time()``.
        webhook_allow, webhook_secret, webhook_policy: runs may ask for webhooks under these
            prefixes; with a secret a deliverer sends them, on trio's clock (so backoff runs
            in virtual time under ``autojump_clock``).
    """
    table: dict[str, ScriptedAgent] = dict(agents or {})
    if agent is not None:
        table[DEFAULT_SOURCE] = agent
    if not table:
        table[DEFAULT_SOURCE] = ScriptedAgent(turns=["Hello from the scripted model."], loop=True)
    with metrics_scope(), tempfile.TemporaryDirectory(prefix="greenroom-test-") as tmp:
        directory = Path(tmp)
        paths = [str(a.write(directory, source)) for source, a in table.items()]
        sources = AgentSources.from_paths(paths)
        tools = {source: tuple(a.tools) for source, a in table.items()}
        factory = LocalRuntimeFactory(
            sources, env={}, tools_for=_tools_for(tools), data_dir=directory / "data"
        )
        async with (
            _open_store(store, db_path, directory) as opened,
            open_registry(opened, factory, registry_config or RegistryConfig()) as registry,
        ):
            allow = parse_webhook_allow(webhook_allow)
            app_config = AppConfig(auth_token=auth_token, webhook_allow=allow)
            scheduler = Scheduler(registry, opened.schedules, clock=clock or time.time)
            app = create_app(registry, SourcesCatalog(sources), app_config, scheduler=scheduler)
            dropper = _Dropper(ShieldedSend(app))
            config = hypercorn_config(ServeConfig(host="127.0.0.1", port=0, graceful_timeout=1.0))
            stop = trio.Event()
            async with trio.open_nursery() as nursery:
                await nursery.start(scheduler.run)
                if webhook_secret:
                    deliverer = Deliverer(
                        opened.run_log,
                        allow,
                        webhook_secret,
                        webhook_policy,
                        clock=trio.current_time,
                    )
                    await nursery.start(deliverer.run)
                binds: list[str] = await nursery.start(
                    lambda task_status: hypercorn.trio.serve(
                        dropper, config, shutdown_trigger=stop.wait, task_status=task_status
                    )
                )
                context = app.greenroom  # type: ignore[attr-defined]
                async with GreenroomClient(binds[0], token=auth_token) as client:
                    yield Greenroom(binds[0], client, registry, opened.store, dropper, context)
                # Stop like `greenroom serve`: end streams and sockets, then hypercorn.
                context.shut_down()
                registry.end_subscriptions()
                registry.cancel_turns()
                stop.set()
                nursery.cancel_scope.cancel(
                    reason="server stopped"
                )  # the scheduler and the deliverer


@asynccontextmanager
async def _open_store(
    kind: StoreKind, db_path: Path | str | None, tmp: Path
) -> AsyncIterator[Persistence]:
    if kind == "memory":
        async with open_memory_store() as memory:
            yield memory
    elif kind == "sqlite":
        async with open_sqlite_store(Path(db_path) if db_path else tmp / "sessions.sqlite3") as db:
            yield db
    else:
        raise ValueError(f"store must be 'memory' or 'sqlite', not {kind!r}")
