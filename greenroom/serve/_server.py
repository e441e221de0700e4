"""Starting and stopping one server: the store, the model clients, the registry and hypercorn
opened in order (a cluster node joins before serving), and the shutdown that closes them in
reverse: draining on the first signal, then streams, turns, the server, the actors.
"""

from __future__ import annotations

import gc
import logging
import signal
import socket
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import attrs
import hypercorn.trio
import trio

from greenroom.actors import (
    RecoveryReport,
    Registry,
    Scheduler,
    StoreProcessLedger,
    host_id,
    kill_leftover_groups,
    open_registry,
    recover,
)
from greenroom.agents import AgentSources, LocalRuntimeFactory, OAuthFlows
from greenroom.agents.providers import open_model_clients, resolve_auto
from greenroom.cluster import redact_dsn
from greenroom.domain import parse_webhook_allow
from greenroom.errors import GreenroomError
from greenroom.observe import metrics_scope, setup_tracing, shutdown_tracing
from greenroom.persistence import Persistence, RetentionPolicy
from greenroom.transport import (
    MCP_OAUTH_LANDING,
    AppConfig,
    ClientLimits,
    Forwarder,
    ShieldedSend,
    create_app,
    scheduled_forward,
)

from ._agents import SourcesCatalog, open_sources, runtime_factory
from ._config import ServeConfig, check_config, default_db_path
from ._http import HypercornConfig, hypercorn_config
from ._store import open_store
from ._webhooks import Deliverer

if TYPE_CHECKING:  # the cluster's modules load when a node joins one
    from greenroom.cluster import ClusterNode

log = logging.getLogger("greenroom")


@attrs.frozen
class ClusterServing:
    """A cluster node's part: the node, the forwarder to sessions' owners, this incarnation."""

    node: ClusterNode
    forwarder: Forwarder
    incarnation: int


@attrs.frozen
class Serving:
    """What one server serves with, gathered as it starts (its task tree, outermost first)."""

    cfg: ServeConfig
    sources: AgentSources
    http_config: HypercornConfig  # its sockets already bound
    embedded: bool  # inside another program: no signal handling, no listening line
    persistence: Persistence
    registry: Registry
    report: RecoveryReport | None = None  # what crash recovery did (a single node only)
    cluster: ClusterServing | None = None  # a cluster node, once joined


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
    with metrics_scope():  # this server's registry, for every task it starts
        await _serve_loaded(cfg, embedded, task_status)


async def _serve_loaded(
    cfg: ServeConfig, embedded: bool, task_status: trio.TaskStatus[str]
) -> None:
    sources, warnings, remote = await open_sources(cfg)
    for line in warnings:
        print(line, file=sys.stderr, flush=True)
    http_config = hypercorn_config(cfg)
    http_config.bind_now()
    traced = setup_tracing(cfg.node_id or socket.gethostname(), flag=cfg.otel)
    failed: GreenroomError | None = None
    try:
        async with trio.open_nursery() as nursery:
            if cfg.pull_interval > 0:  # remote sources refetched in the background
                nursery.start_soon(remote.refresh_forever, cfg.pull_interval)
            try:
                await _serve_bound(cfg, sources, http_config, embedded, task_status)
            except GreenroomError as exc:  # e.g. the database in use: raised as itself below,
                failed = exc  # not inside the nursery's exception group
            nursery.cancel_scope.cancel(reason="server stopped")
        if failed is not None:
            raise failed
    finally:
        http_config.release()  # no-op once hypercorn took the sockets
        if traced:  # the last spans are exported (bounded) before the process ends
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(shutdown_tracing)


async def _serve_bound(
    cfg: ServeConfig,
    sources: AgentSources,
    http_config: HypercornConfig,
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
        # Before any request: tool process groups the last process left running are killed,
        # and turns it left running are marked interrupted. (A cluster node repairs only what
        # dead nodes left: its sweeper, once joined; its records are its own, by node id.)
        host = host_id(cfg.node_id if persistence.membership is not None else "")
        if persistence.membership is None:
            report: RecoveryReport | None = await recover(persistence, host)
        else:
            report = None
            await kill_leftover_groups(persistence.process_log, host)
        processes = StoreProcessLedger(persistence.process_log, host)
        oauth = OAuthFlows()  # MCP OAuth flows: started by runtimes, completed by the routes
        leave: list[ClusterNode] = []
        try:
            async with (
                open_model_clients() as clients,
                open_registry(
                    persistence, runtime_factory(cfg, sources, oauth, clients, processes)
                ) as registry,
            ):
                serving = Serving(
                    cfg, sources, http_config, embedded, persistence, registry, report
                )
                if persistence.membership is None:
                    await _serve_registry(serving, task_status)
                    return
                await _serve_cluster(serving, task_status, leave)
        finally:
            for node in leave:  # after every actor persisted: its sessions are free at once
                await node.leave()


async def _serve_cluster(
    serving: Serving, task_status: trio.TaskStatus[str], leave: list[ClusterNode]
) -> None:
    """A cluster node: join (the lease keeper, the sweeper and the mirrors run beside the
    HTTP server), repair what dead nodes left running, then serve with forwarding."""
    cfg, persistence, registry = serving.cfg, serving.persistence, serving.registry
    from greenroom.cluster import ClusterConfig, ClusterNode, sweep_once

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
            await _serve_registry(attrs.evolve(serving, cluster=cluster), task_status)
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await forwarder.aclose()
            nursery.cancel_scope.cancel(reason="server stopped")


async def _serve_registry(serving: Serving, task_status: trio.TaskStatus[str]) -> None:
    """Serve HTTP over the registry until stopped: the signal watcher, the retention sweeps and
    hypercorn in one nursery, then the listening line and the startup summary."""
    cfg, registry, cluster = serving.cfg, serving.registry, serving.cluster
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
        metrics_token=cfg.metrics_token,
        webhook_allow=parse_webhook_allow(cfg.webhook_allow),
    )
    factory = registry.factory
    oauth = factory.mcp.oauth if isinstance(factory, LocalRuntimeFactory) else None
    scheduler = schedules_of(serving)
    app = create_app(
        registry,
        SourcesCatalog(serving.sources),
        app_config,
        oauth,
        forwarder=cluster.forwarder if cluster is not None else None,
        mirrors=cluster.node.mirrors if cluster is not None else None,
        scheduler=scheduler,
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
            if serving.persistence.membership is not None:
                try:
                    await serving.persistence.membership.drain()
                except GreenroomError as exc:
                    log.warning("marking this node draining failed: %s", exc)
            await registry.wait_turns_over()
        stop_now()

    def stop_now() -> None:
        if stop.is_set():
            return
        log.info("shutting down")
        context.shut_down()  # WebSockets close with 1001
        registry.end_subscriptions()  # /events streams end (clients resume later)
        registry.cancel_turns()  # run streams end; their sessions persist
        stop.set()

    async with trio.open_nursery() as nursery:

        async def run_server(*, task_status: trio.TaskStatus[list[str]]) -> None:
            await hypercorn.trio.serve(
                ClientLimits(ShieldedSend(app), cfg.max_connections_per_client),
                serving.http_config,
                shutdown_trigger=stop.wait,
                task_status=task_status,
            )
            nursery.cancel_scope.cancel(reason="server stopped")

        if not serving.embedded:
            nursery.start_soon(_watch_signals, begin_shutdown)
        nursery.start_soon(_retain, serving.persistence, cfg.retention, cfg.retention_interval)
        await nursery.start(scheduler.run)  # scheduled runs (decision 0028)
        if cfg.webhook_secret:  # runs' webhooks: sent from the outbox, also after a restart
            deliverer = Deliverer(
                serving.persistence.run_log,
                app_config.webhook_allow,
                cfg.webhook_secret,
                single_node=serving.persistence.membership is None,
                name=cfg.node_id,
            )
            await nursery.start(deliverer.run)
        binds = await nursery.start(run_server)
        if cfg.tune_gc and cluster is None:  # a cluster node settled it before joining
            _settle_garbage_collector()
        url = binds[0]
        if not cfg.mcp_oauth_redirect_uri and isinstance(factory, LocalRuntimeFactory):
            # Known now (the port may have been 0): browsers come back to this server.
            redirect = f"{url}{MCP_OAUTH_LANDING}"
            factory.mcp = attrs.evolve(factory.mcp, oauth_redirect_uri=redirect)
        if not serving.embedded:
            print(f"greenroom listening on {url}", flush=True)
            node = None if cluster is None else (cluster.node.node_id, cluster.incarnation)
            for line in startup_summary(cfg, serving.sources, serving.report, node):
                print(f"  {line}", flush=True)
        task_status.started(url)


def schedules_of(serving: Serving) -> Scheduler:
    """The scheduler of scheduled runs: on a cluster every node runs one, looks for changes
    made on other nodes every lease renewal, and fires into a session another node owns by
    forwarding there."""
    registry, cluster = serving.registry, serving.cluster
    if cluster is None:
        return Scheduler(registry, serving.persistence.schedules)
    return Scheduler(
        registry,
        serving.persistence.schedules,
        poll=serving.cfg.lease_renew or serving.cfg.lease_ttl / 3,
        remote=scheduled_forward(cluster.forwarder),
    )


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
