"""``greenroom serve``: the store, the registry and the HTTP server, started and stopped in order.

::

    trio.run(serve)
    └─ open_store                  opened first, closed last
       └─ open_model_clients       one pooled HTTP client per model endpoint, shared
          └─ open_registry         session actors
             └─ nursery: signal watcher + hypercorn (shutdown_trigger = stop)

Shutdown (SIGINT/SIGTERM): stop accepting, end open SSE streams and close WebSockets with 1001,
let hypercorn drain, let every actor persist, close the model clients, close the store, exit 0.

The package: ``_config`` (the options and the checks that refuse unusable ones), ``_store``
(the store ``--db`` names), ``_http`` (hypercorn's configuration and sockets), ``_agents`` (the
agent sources, their catalog and the runtime factory), ``_server`` (the task tree above and its
shutdown), ``_run`` (in this process, or on a thread of another program).

Only the options and their checks are imported with the package (so ``greenroom serve`` can
refuse a bad option before it loads the server); every other name loads its module (the
actors, the agents, the transport, hypercorn) on first access.
"""

import typing as _typing

from ._config import (
    DEFAULT_CLUSTER_DRAIN as DEFAULT_CLUSTER_DRAIN,
    ServeConfig as ServeConfig,
    check_config as check_config,
    check_exposure as check_exposure,
    data_dir as data_dir,
    default_db_path as default_db_path,
)

if _typing.TYPE_CHECKING:
    from greenroom.actors import Registry as Registry

    from ._agents import (
        SourcesCatalog as SourcesCatalog,
        load_sources as load_sources,
        runtime_factory as runtime_factory,
    )
    from ._http import (
        SEND_BUFFER as SEND_BUFFER,
        TCP_USER_TIMEOUT_MS as TCP_USER_TIMEOUT_MS,
        WS_MAX_MESSAGE as WS_MAX_MESSAGE,
        hypercorn_config as hypercorn_config,
    )
    from ._run import run as run, serving_in_thread as serving_in_thread
    from ._server import serve as serve, startup_summary as startup_summary
    from ._store import open_store as open_store
    from ._webhooks import (
        Deliverer as Deliverer,
        WebhookPolicy as WebhookPolicy,
        sign as sign,
    )

_LAZY = {
    "Registry": "greenroom.actors",
    "SourcesCatalog": "greenroom.serve._agents",
    "load_sources": "greenroom.serve._agents",
    "runtime_factory": "greenroom.serve._agents",
    "SEND_BUFFER": "greenroom.serve._http",
    "TCP_USER_TIMEOUT_MS": "greenroom.serve._http",
    "WS_MAX_MESSAGE": "greenroom.serve._http",
    "hypercorn_config": "greenroom.serve._http",
    "run": "greenroom.serve._run",
    "serving_in_thread": "greenroom.serve._run",
    "serve": "greenroom.serve._server",
    "startup_summary": "greenroom.serve._server",
    "open_store": "greenroom.serve._store",
    "Deliverer": "greenroom.serve._webhooks",
    "WebhookPolicy": "greenroom.serve._webhooks",
    "sign": "greenroom.serve._webhooks",
}


def __getattr__(name: str) -> _typing.Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "DEFAULT_CLUSTER_DRAIN",
    "SEND_BUFFER",
    "TCP_USER_TIMEOUT_MS",
    "WS_MAX_MESSAGE",
    "Deliverer",
    "Registry",
    "ServeConfig",
    "SourcesCatalog",
    "WebhookPolicy",
    "check_config",
    "check_exposure",
    "data_dir",
    "default_db_path",
    "hypercorn_config",
    "load_sources",
    "open_store",
    "run",
    "runtime_factory",
    "serve",
    "serving_in_thread",
    "sign",
    "startup_summary",
]
