"""``greenroom serve a2a AGENT_FILE``: one agent served over the A2A protocol (decision 0035).

The same task tree as ``greenroom serve`` under a different HTTP app::

    open_store (crash recovery first) → open_model_clients → open_registry
    └─ nursery: the A2A tasks' turns, the signal watcher, hypercorn (shutdown_trigger = stop)

Each A2A context is a session of the store (``--db``), its turns run by the session actors
with the agent file's permissions; see ``transport/_a2a_tasks.py``. On SIGINT/SIGTERM the
running turns are cancelled (their tasks end ``canceled``), hypercorn stops, the actors persist,
the store closes.
"""

from __future__ import annotations

import signal
import sys
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import hypercorn.trio
import trio

from greenroom import __version__
from greenroom.actors import StoreProcessLedger, host_id, open_registry, recover
from greenroom.agents import OAuthFlows
from greenroom.agents.providers import open_model_clients
from greenroom.errors import ConfigError
from greenroom.observe import metrics_scope
from greenroom.transport import ShieldedSend
from greenroom.transport._a2a_app import create_a2a_app
from greenroom.transport._a2a_tasks import A2AAgent
from greenroom.transport._a2a_wire import INVOKE_PATH, CardInfo, agent_card
from greenroom.transport._cross_site import SitePolicy

from ._agents import open_sources, runtime_factory
from ._config import ServeConfig, check_config
from ._http import hypercorn_config
from ._store import open_store


def routable(url: str) -> str:
    """``url`` with a wildcard host (``0.0.0.0``, ``::``) replaced by ``localhost``, so the
    agent card names an address clients can use."""
    parts = urlsplit(url)
    if parts.hostname in ("0.0.0.0", "::", ""):
        netloc = f"localhost:{parts.port}" if parts.port else "localhost"
        return urlunsplit(parts._replace(netloc=netloc))
    return url


async def serve_a2a(
    cfg: ServeConfig,
    agent_name: str = "",
    *,
    working_dir: str = "",
    embedded: bool = False,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the one agent file of ``cfg.agent_paths`` over A2A until a signal (or
    cancellation); reports the base URL once listening.

    Raises:
        ConfigError: not exactly one agent file, a PostgreSQL database, or the options are
            unusable.
        AgentNotFound: ``agent_name`` is not an agent of the file.
    """
    check_config(cfg)
    if len(cfg.agent_paths) != 1:
        raise ConfigError("greenroom serve a2a takes exactly one agent file")
    if cfg.cluster:  # it would own sessions without a lease: a single node's store only
        raise ConfigError("greenroom serve a2a keeps its sessions in SQLite (or :memory:)")
    with metrics_scope():
        sources, warnings, _ = await open_sources(cfg)  # URLs and OCI too, fetched once
        for line in warnings:
            print(line, file=sys.stderr, flush=True)
        keys = sources.keys()
        if len(keys) != 1:
            raise ConfigError(f"{cfg.agent_paths[0]}: greenroom serve a2a takes one agent file")
        source = keys[0]
        agent = sources.get(source).agent(agent_name)
        http_config = hypercorn_config(cfg)
        http_config.bind_now()
        try:
            info = CardInfo(
                name=Path(cfg.agent_paths[0]).stem,
                agent_name=agent.name,
                description=agent.description,
                url=routable(http_config.bound_url(cfg.host)) + INVOKE_PATH,
                version=__version__,
                bearer=bool(cfg.auth_token),
            )
            async with open_store(cfg.db) as persistence:
                host = host_id("")
                await recover(persistence, host)
                processes = StoreProcessLedger(persistence.process_log, host)
                factory = partial(runtime_factory, cfg, sources, OAuthFlows())
                async with (
                    open_model_clients() as clients,
                    open_registry(persistence, factory(clients, processes)) as registry,
                    trio.open_nursery() as nursery,
                ):
                    a2a = A2AAgent(registry, nursery, source, agent_name, working_dir)
                    card = agent_card(info)
                    app = create_a2a_app(
                        a2a,
                        lambda: card,
                        auth_token=cfg.auth_token,
                        policy=SitePolicy(cfg.host, cfg.allowed_hosts, cfg.cors_origins),
                    )
                    stop = trio.Event()

                    def stop_now() -> None:
                        registry.cancel_turns()  # the A2A tasks end canceled
                        stop.set()

                    async def run_server(*, task_status: trio.TaskStatus[Any]) -> None:
                        await hypercorn.trio.serve(
                            ShieldedSend(app),
                            http_config,
                            shutdown_trigger=stop.wait,
                            task_status=task_status,
                        )
                        nursery.cancel_scope.cancel(reason="server stopped")

                    if not embedded:
                        nursery.start_soon(_watch_signals, stop_now)
                    await nursery.start(run_server)
                    base = info.url.removesuffix(INVOKE_PATH)
                    if not embedded:
                        print(f"greenroom A2A agent {info.name!r} listening on {base}", flush=True)
                        print(f"  agent card: {base}/.well-known/agent-card.json", flush=True)
                    task_status.started(base)
        finally:
            http_config.release()


async def _watch_signals(stop_now: Any) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            stop_now()
            return
