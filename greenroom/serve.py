"""``greenroom serve``: the store, the registry and the HTTP server, started and stopped in order.

::

    trio.run(serve)
    └─ open_store                  opened first, closed last
       └─ open_model_clients       one pooled HTTP client per model endpoint, shared
          └─ open_registry         session actors
             └─ nursery: signal watcher + hypercorn (shutdown_trigger = stop)

Shutdown (SIGINT/SIGTERM): stop accepting, end open SSE streams and close WebSockets with 1001,
let hypercorn drain, let every actor persist, close the model clients, close the store, exit 0.
"""

from __future__ import annotations

import gc
import ipaddress
import logging
import os
import queue
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import attrs
import hypercorn.trio
import trio
from hypercorn.config import Config, Sockets

from greenroom.actors import RecoveryReport, Registry, open_registry, recover
from greenroom.agents import (
    AgentSources,
    LocalRuntimeFactory,
    McpSettings,
    OAuthFlows,
    default_tools_for,
)
from greenroom.agents._diagnose import diagnose
from greenroom.agents.providers import ModelClients, open_model_clients, resolve_auto
from greenroom.cluster import (
    DEFAULT_LEASE_TTL,
    ClusterConfig,
    ClusterNode,
    check_cluster_flags,
    is_cluster_db,
    redact_dsn,
    sweep_once,
)
from greenroom.errors import (
    AgentConfigError,
    AgentSourceUnavailable,
    ConfigError,
    GreenroomError,
)
from greenroom.persistence import (
    Persistence,
    RetentionPolicy,
    open_memory_store,
    open_sqlite_store,
)
from greenroom.transport import (
    MCP_OAUTH_LANDING,
    AppConfig,
    ClientLimits,
    Forwarder,
    ShieldedSend,
    create_app,
)

log = logging.getLogger("greenroom")

# A client that stops reading is dropped by the kernel after this long with unacknowledged
# data (hypercorn shields its writes, so no deadline in Python can free such a task).
TCP_USER_TIMEOUT_MS = 30_000
SEND_BUFFER = 256 * 1024
DEFAULT_CLUSTER_DRAIN = 30.0  # seconds a stopping cluster node lets running turns finish
WS_MAX_MESSAGE = 4 * 1024 * 1024  # larger frames than the API's 1 MiB get an error reply first


def default_db_path() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "greenroom" / "sessions.sqlite3"


@attrs.frozen
class ServeConfig:
    agent_paths: tuple[str, ...] = ()
    host: str = "127.0.0.1"
    port: int = 8080
    db: str = ""  # "" = default_db_path(); ":memory:" = in-memory store
    auth_token: str = ""
    insecure_no_auth: bool = False
    cors_origins: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()
    working_dir_root: str | None = None
    auth_label: str = "token"  # recorded as decided_by on tool approvals when auth is on
    data_dir: str = ""  # "" = beside the database (or $XDG_DATA_HOME/greenroom for :memory:)
    confirmation_timeout: float | None = None  # seconds before an unanswered tool call is rejected
    mcp_oauth_redirect_uri: str = ""  # "" = this server's /mcp-oauth/callback
    mcp_start_timeout: float = 30.0
    mcp_call_timeout: float = 300.0
    graceful_timeout: float = 5.0
    keep_alive_timeout: float = 5.0  # idle connections, and request headers, must not take longer
    max_connections_per_client: int = 128  # open requests/streams/WebSockets per address; 0: any
    titles: bool = True  # False: no session title is asked of a model (--no-titles)
    tune_gc: bool = False  # process-wide GC settings: for the CLI's own process only
    access_log: bool = False  # a log line per request (greenroom serve --log-level debug)
    retention: RetentionPolicy = attrs.field(factory=RetentionPolicy)  # token deltas kept
    retention_interval: float = 60.0  # seconds between retention sweeps
    # A cluster (--db postgresql://...): this node's name, the URL other nodes reach it at
    # ("" = the bound http://host:port), its lease and how often it is renewed (0 = ttl / 3).
    node_id: str = ""
    advertise_url: str = ""
    lease_ttl: float = DEFAULT_LEASE_TTL
    lease_renew: float = 0.0
    # On the first SIGTERM/SIGINT: stop being ready and let running turns finish for at most
    # this long before they are cancelled (a second signal stops at once). None: 30 s on a
    # cluster node (a rolling restart should not cut turns off), 0 on a single node.
    drain_timeout: float | None = None

    @property
    def drain_seconds(self) -> float:
        if self.drain_timeout is not None:
            return self.drain_timeout
        return DEFAULT_CLUSTER_DRAIN if self.cluster else 0.0

    @property
    def cluster(self) -> bool:
        return is_cluster_db(self.db)


_TOKEN_CHARS = re.compile(r"[\x21-\x7e]+")  # printable ASCII, no spaces: fits every header


def check_config(cfg: ServeConfig) -> None:
    """Refuse options that would start a server no one can use, or one open to anyone."""
    if cfg.auth_token and not _TOKEN_CHARS.fullmatch(cfg.auth_token):
        raise ConfigError(
            "--auth-token (or GREENROOM_AUTH_TOKEN) must be printable ASCII without spaces; "
            "a blank or whitespace token could never be sent back"
        )
    if cfg.keep_alive_timeout <= 0:
        raise ConfigError("--keep-alive-timeout must be a positive number of seconds")
    if cfg.max_connections_per_client < 0:
        raise ConfigError("--max-connections-per-client must be 0 (no cap) or more")
    if cfg.drain_timeout is not None and not 0 <= cfg.drain_timeout <= 3600:
        raise ConfigError("--drain-timeout must be 0 to 3600 seconds")
    if cfg.mcp_start_timeout <= 0 or cfg.mcp_call_timeout <= 0:
        raise ConfigError("--mcp-start-timeout and --mcp-call-timeout must be positive")
    check_cluster_flags(
        cfg.db, cfg.host, cfg.node_id, cfg.advertise_url, cfg.lease_ttl, cfg.lease_renew
    )
    check_exposure(cfg)


def check_exposure(cfg: ServeConfig) -> None:
    """Refuse to serve a non-loopback address without a token unless told to."""
    if cfg.auth_token or cfg.insecure_no_auth:
        return
    host = cfg.host.strip("[]")
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ConfigError(
            f"refusing to serve {cfg.host} without an auth token: pass --auth-token (or set "
            "GREENROOM_AUTH_TOKEN), or --insecure-no-auth if the network is trusted"
        )


class SourcesCatalog:
    """What GET /api/agents shows, read from the agent sources."""

    def __init__(self, sources: AgentSources) -> None:
        self.sources = sources

    def list_agents(self) -> list[dict[str, Any]]:
        return [entry.to_json() for entry in self.sources.list()]

    def agent_config(self, source: str) -> dict[str, Any]:
        try:
            return self.sources.get_json(source)
        except AgentConfigError as exc:  # the file never loaded: the source is unusable
            raise AgentSourceUnavailable(str(exc)) from exc

    async def tool_count(self, source: str, agent_name: str) -> int:
        await trio.lowlevel.checkpoint()
        return len(default_tools_for(self._agent(source, agent_name)).specs)

    def check_agent(self, source: str, agent_name: str) -> None:
        self._agent(source, agent_name)

    def _agent(self, source: str, agent_name: str) -> Any:
        try:
            return self.sources.get(source).agent(agent_name)
        except AgentConfigError as exc:  # the file never loaded: the source is unusable
            raise AgentSourceUnavailable(str(exc)) from exc


@asynccontextmanager
async def open_store(
    db: str, *, node_id: str = "", advertise_url: str = "", lease_ttl: float = 10.0
) -> AsyncIterator[Persistence]:
    """The persistence ``db`` names: ``:memory:``, a ``postgresql://`` (or ``postgres://``)
    URL (a cluster node: ``node_id`` defaults to the host name), else an SQLite file."""
    if db.startswith(("postgresql://", "postgres://")):
        from greenroom.persistence.postgres import open_postgres_store  # psycopg: only if used

        async with open_postgres_store(
            db,
            node_id=node_id or socket.gethostname(),
            advertise_url=advertise_url,
            lease_ttl=lease_ttl,
        ) as postgres:
            yield postgres
        return
    if db == ":memory:":
        async with open_memory_store() as memory:
            yield memory
        return
    path = Path(db) if db else default_db_path()
    try:
        await trio.to_thread.run_sync(lambda: path.parent.mkdir(parents=True, exist_ok=True))
    except OSError as exc:
        raise ConfigError(
            f"cannot create the database directory {path.parent}: {exc.strerror or exc} "
            "(choose another file with --db PATH, or --db :memory:)"
        ) from None
    async with open_sqlite_store(path) as sqlite:
        yield sqlite


@attrs.frozen
class ClusterServing:
    node: ClusterNode
    forwarder: Forwarder
    incarnation: int


class _HypercornConfig(Config):
    _bound: Sockets | None = None

    def bound_url(self, host: str) -> str:
        """``http://host:port`` of the first socket :meth:`bind_now` bound (port 0 resolved)."""
        assert self._bound is not None and self._bound.insecure_sockets
        port = self._bound.insecure_sockets[0].getsockname()[1]
        host = host.strip("[]")
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def bind_now(self) -> None:
        """Create the listening sockets before serving, so a port in use is reported at once
        (as a ConfigError) instead of from inside the server's task tree."""
        try:
            self._bound = self.create_sockets()
        except OSError as exc:
            raise ConfigError(
                f"cannot listen on {', '.join(self.bind)}: {exc.strerror or exc} "
                "(another server on that port? choose one with --port, or --port 0 for any)"
            ) from None

    def release(self) -> None:
        """Close sockets bound by :meth:`bind_now` that the server never took (a later
        startup step failed, e.g. the database is locked)."""
        bound, self._bound = self._bound, None
        if bound is not None:
            for sock in (*bound.secure_sockets, *bound.insecure_sockets, *bound.quic_sockets):
                sock.close()

    def create_sockets(self) -> Sockets:
        if self._bound is not None:
            bound, self._bound = self._bound, None
            return bound
        sockets = super().create_sockets()
        for sock in sockets.insecure_sockets:
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                if hasattr(socket, "TCP_USER_TIMEOUT"):
                    sock.setsockopt(
                        socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, TCP_USER_TIMEOUT_MS
                    )
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        return sockets


def hypercorn_config(cfg: ServeConfig) -> _HypercornConfig:
    config = _HypercornConfig()
    host = f"[{cfg.host}]" if ":" in cfg.host and not cfg.host.startswith("[") else cfg.host
    config.bind = [f"{host}:{cfg.port}"]
    config.graceful_timeout = cfg.graceful_timeout
    # --log-level debug: one access-log line per request.
    config.accesslog = logging.getLogger("hypercorn.access") if cfg.access_log else None
    config.errorlog = logging.getLogger("hypercorn.error")
    config.websocket_max_message_size = WS_MAX_MESSAGE
    # Also the time a new connection has to complete its request headers (hypercorn's idle
    # timer runs until a request starts): slow-header clients are cut off after it.
    config.keep_alive_timeout = cfg.keep_alive_timeout
    config.h11_max_incomplete_size = 64 * 1024
    return config


def load_sources(paths: tuple[str, ...]) -> tuple[AgentSources, list[str]]:
    """Agent sources from files and directories (or the bundled agent), and their warnings.

    Every file must load; the warnings (``file:line: path: warning: what``) say what the
    files ask that this server will not do.
    """
    sources = AgentSources.from_paths(paths) if paths else AgentSources.bundled()
    warnings: list[str] = []
    for key in sources.keys():  # noqa: SIM118 (AgentSources is not a mapping)
        config = sources.get(key)  # raises AgentConfigError: file:line: path: what is wrong
        warnings.extend(diagnose(config))
    return sources, warnings


def data_dir(cfg: ServeConfig) -> Path:
    if cfg.data_dir:
        return Path(cfg.data_dir)
    if cfg.db == ":memory:":
        return default_db_path().parent
    return (Path(cfg.db) if cfg.db else default_db_path()).parent


def runtime_factory(
    cfg: ServeConfig,
    sources: AgentSources,
    oauth: OAuthFlows | None = None,
    clients: ModelClients | None = None,
) -> LocalRuntimeFactory:
    mcp = McpSettings(
        start_timeout=cfg.mcp_start_timeout,
        call_timeout=cfg.mcp_call_timeout,
        oauth=oauth,
        oauth_redirect_uri=cfg.mcp_oauth_redirect_uri,
    )
    return LocalRuntimeFactory(
        sources,
        data_dir=data_dir(cfg),
        confirmation_timeout=cfg.confirmation_timeout,
        mcp=mcp,
        titles=cfg.titles,
        clients=clients,
    )


async def serve(
    cfg: ServeConfig,
    *,
    embedded: bool = False,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until SIGINT/SIGTERM (or cancellation); reports the bound URL once listening.

    ``embedded``: a server inside another program (``greenroom chat``): no signal handling
    and no "listening" line; it stops when cancelled.
    """
    check_config(cfg)
    sources, warnings = await trio.to_thread.run_sync(load_sources, cfg.agent_paths)
    for line in warnings:
        print(line, file=sys.stderr, flush=True)
    http_config = hypercorn_config(cfg)
    http_config.bind_now()
    try:
        await _serve_bound(cfg, sources, http_config, embedded, task_status)
    finally:
        http_config.release()  # no-op once hypercorn took the sockets


async def _serve_bound(
    cfg: ServeConfig,
    sources: AgentSources,
    http_config: _HypercornConfig,
    embedded: bool,
    task_status: trio.TaskStatus[str],
) -> None:
    if cfg.cluster:
        cfg = attrs.evolve(
            cfg,
            node_id=cfg.node_id or socket.gethostname(),
            advertise_url=(cfg.advertise_url or http_config.bound_url(cfg.host)).rstrip("/"),
        )
    async with open_store(
        cfg.db, node_id=cfg.node_id, advertise_url=cfg.advertise_url, lease_ttl=cfg.lease_ttl
    ) as persistence:
        # Before any request: turns the last process left running are marked interrupted.
        # (A cluster node repairs only what dead nodes left: its sweeper, once joined.)
        report = await recover(persistence) if persistence.membership is None else None
        oauth = OAuthFlows()  # MCP OAuth flows: started by runtimes, completed by the routes
        leave: list[ClusterNode] = []
        try:
            async with (
                open_model_clients() as clients,
                open_registry(
                    persistence, runtime_factory(cfg, sources, oauth, clients)
                ) as registry,
            ):
                if persistence.membership is None:
                    await _serve_registry(
                        cfg,
                        sources,
                        http_config,
                        embedded,
                        persistence,
                        registry,
                        report,
                        task_status,
                    )
                    return
                await _serve_cluster(
                    cfg, sources, http_config, embedded, persistence, registry, task_status, leave
                )
        finally:
            for node in leave:  # after every actor persisted: its sessions are free at once
                await node.leave()


async def _serve_cluster(
    cfg: ServeConfig,
    sources: AgentSources,
    http_config: _HypercornConfig,
    embedded: bool,
    persistence: Persistence,
    registry: Registry,
    task_status: trio.TaskStatus[str],
    leave: list[ClusterNode],
) -> None:
    """A cluster node: join (the lease keeper, the sweeper and the mirrors run beside the
    HTTP server), repair what dead nodes left running, then serve with forwarding."""
    config = ClusterConfig(lease_ttl=cfg.lease_ttl, lease_renew=cfg.lease_renew)
    node = ClusterNode(persistence, registry, config)
    leave.append(node)
    if cfg.tune_gc:
        # Before the join: a full collection of everything startup built can block the loop
        # for longer than a short lease, and the watchdog would fence a node that just joined.
        _settle_garbage_collector()
    async with trio.open_nursery() as nursery:
        incarnation = await nursery.start(node.run)
        await sweep_once(node.membership, registry)
        forwarder = Forwarder(
            node,
            auth_token=cfg.auth_token,
            connect_timeout=config.connect_timeout,
            answer_timeout=config.forward_timeout,
        )
        try:
            cluster = ClusterServing(node, forwarder, incarnation)
            await _serve_registry(
                cfg,
                sources,
                http_config,
                embedded,
                persistence,
                registry,
                None,
                task_status,
                cluster,
            )
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await forwarder.aclose()
            nursery.cancel_scope.cancel(reason="server stopped")


async def _serve_registry(
    cfg: ServeConfig,
    sources: AgentSources,
    http_config: _HypercornConfig,
    embedded: bool,
    persistence: Persistence,
    registry: Registry,
    report: RecoveryReport | None,
    task_status: trio.TaskStatus[str],
    cluster: ClusterServing | None = None,
) -> None:
    allowed_hosts = cfg.allowed_hosts
    if cluster is not None:  # forwarded requests name this node as other nodes reach it
        allowed_hosts = (*allowed_hosts, urlsplit(cfg.advertise_url).hostname or "")
    app_config = AppConfig(
        auth_token=cfg.auth_token,
        auth_label=cfg.auth_label,
        cors_origins=cfg.cors_origins,
        bind_host=cfg.host,
        allowed_hosts=allowed_hosts,
        working_dir_root=cfg.working_dir_root,
    )
    factory = registry.factory
    oauth = factory.mcp.oauth if isinstance(factory, LocalRuntimeFactory) else None
    app = create_app(
        registry,
        SourcesCatalog(sources),
        app_config,
        oauth,
        forwarder=cluster.forwarder if cluster is not None else None,
        mirrors=cluster.node.mirrors if cluster is not None else None,
    )
    context = app.greenroom  # type: ignore[attr-defined]
    stop = trio.Event()

    def begin_shutdown() -> None:
        """The first signal drains (when there is time to), the next one stops at once."""
        if stop.is_set():
            return
        if cfg.drain_seconds > 0 and not context.draining.is_set():
            context.draining.set()
            nursery.start_soon(drain)
            return
        stop_now()

    async def drain() -> None:
        log.info(
            "draining: not ready; %d running turns may finish within %g s (signal again to "
            "stop now)",
            registry.running_turns(),
            cfg.drain_seconds,
        )
        with trio.move_on_after(cfg.drain_seconds):
            if persistence.membership is not None:
                try:
                    await persistence.membership.drain()
                except GreenroomError as exc:
                    log.warning("marking this node draining failed: %s", exc)
            await registry.wait_turns_over()
        stop_now()

    def stop_now() -> None:
        if stop.is_set():
            return
        log.info("shutting down")
        context.shutting_down.set()  # WebSockets close with 1001
        registry.end_subscriptions()  # /events streams end (clients resume later)
        registry.cancel_turns()  # run streams end; their sessions persist
        stop.set()

    async with trio.open_nursery() as nursery:

        async def run_server(*, task_status: trio.TaskStatus[list[str]]) -> None:
            await hypercorn.trio.serve(
                ClientLimits(ShieldedSend(app), cfg.max_connections_per_client),
                http_config,
                shutdown_trigger=stop.wait,
                task_status=task_status,
            )
            nursery.cancel_scope.cancel(reason="server stopped")

        if not embedded:
            nursery.start_soon(_watch_signals, begin_shutdown)
        nursery.start_soon(_retain, persistence, cfg.retention, cfg.retention_interval)
        binds = await nursery.start(run_server)
        if cfg.tune_gc and cluster is None:  # a cluster node settled it before joining
            _settle_garbage_collector()
        url = binds[0]
        if not cfg.mcp_oauth_redirect_uri and isinstance(factory, LocalRuntimeFactory):
            # Known now (the port may have been 0): browsers come back to this server.
            redirect = f"{url}{MCP_OAUTH_LANDING}"
            factory.mcp = attrs.evolve(factory.mcp, oauth_redirect_uri=redirect)
        if not embedded:
            print(f"greenroom listening on {url}", flush=True)
            node = None if cluster is None else (cluster.node.node_id, cluster.incarnation)
            for line in startup_summary(cfg, sources, report, node):
                print(f"  {line}", flush=True)
        task_status.started(url)


def startup_summary(
    cfg: ServeConfig,
    sources: AgentSources,
    report: RecoveryReport | None = None,
    node: tuple[str, int] | None = None,
) -> list[str]:
    """What a person starting the server wants to know, after the ``listening`` line."""
    if cfg.cluster:
        database = f"PostgreSQL {redact_dsn(cfg.db)} (a cluster: nodes share it)"
    elif cfg.db == ":memory:":
        database = "in memory (--db :memory:): sessions end with the process"
    else:
        database = str(Path(cfg.db) if cfg.db else default_db_path())
    names = ", ".join(sources.keys()) or "none"
    origin = "the bundled agent" if not cfg.agent_paths else ", ".join(cfg.agent_paths)
    lines = [f"database: {database}"]
    if node is not None:
        lines.append(
            f"node:     {node[0]} incarnation {node[1]}, lease {cfg.lease_ttl:g} s, "
            f"reached at {cfg.advertise_url}"
        )
    lines.append(f"agents:   {names} ({origin})")
    if not cfg.agent_paths:
        lines.append(f"model:    {resolve_auto()[1].removeprefix('auto model: ')}")
    if cfg.auth_token:
        lines.append("auth:     a bearer token is required (Authorization: Bearer ...)")
    lines.append("stop:     Ctrl-C (or SIGTERM): open streams end, sessions are kept")
    if report is not None:  # what crash recovery did before the server started
        lines.append(f"recovery: {report.summary()}")
    return lines


def _settle_garbage_collector() -> None:
    # The SDKs leave a few hundred thousand long-lived objects from their imports; full
    # collections walking them cost ~20% of the CPU under load. Freeze what startup built and
    # collect the young generation less often.
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)


async def _retain(persistence: Persistence, policy: RetentionPolicy, interval: float) -> None:
    """Remove the token deltas (and expired follow-up keys) the retention policy no longer
    keeps, every ``interval`` seconds."""
    while True:
        await trio.sleep(interval)
        try:
            removed = await persistence.writer.apply_retention(policy, time.time())
        except GreenroomError:
            log.exception("retention sweep failed")
        else:
            if removed:
                log.info("retention removed %d rows (token deltas, expired keys)", removed)


async def _watch_signals(begin_shutdown: Any) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            begin_shutdown()


@contextmanager
def serving_in_thread(cfg: ServeConfig) -> Iterator[str]:
    """Run an embedded server on a thread with its own trio loop; yields its URL.

    For programs that are not trio programs (``greenroom chat`` runs on asyncio). Leaving the
    block cancels the server (streams end, sessions persist, the store closes) and joins the
    thread.

    Raises:
        GreenroomError: the server could not start (a configuration error, a locked database).
    """
    started: queue.Queue[tuple[str, trio.lowlevel.TrioToken, trio.CancelScope] | BaseException]
    started = queue.Queue(maxsize=2)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            url = await nursery.start(partial(serve, cfg, embedded=True))
            started.put((url, trio.lowlevel.current_trio_token(), nursery.cancel_scope))

    def thread_main() -> None:
        try:
            trio.run(main)
        except BaseException as exc:  # reported to the waiting caller, or lost if it left
            with suppress(queue.Full):
                started.put_nowait(exc)

    thread = threading.Thread(target=thread_main, name="greenroom-server", daemon=True)
    thread.start()
    outcome = started.get()
    if isinstance(outcome, BaseException):
        thread.join()
        if isinstance(outcome, BaseExceptionGroup):
            found = outcome.subgroup(GreenroomError)
            if found is not None:
                raise found.exceptions[0] from outcome
        raise outcome
    url, token, scope = outcome
    try:
        yield url
    finally:
        with suppress(trio.RunFinishedError):
            trio.from_thread.run_sync(scope.cancel, trio_token=token)
        thread.join()


def run(cfg: ServeConfig) -> int:
    """Run the server in this process; 0 after a clean shutdown, 2 for a configuration error."""
    failed = False
    try:
        trio.run(partial(serve, cfg))
    except* GreenroomError as group:
        failed = True
        for exc in group.exceptions:
            print(f"greenroom: {exc}", file=sys.stderr)
    return 2 if failed else 0


__all__ = [
    "Registry",
    "ServeConfig",
    "check_config",
    "check_exposure",
    "default_db_path",
    "run",
    "serve",
    "serving_in_thread",
]
