"""Several greenroom nodes on one PostgreSQL: the node's lease, the sweeper, subscriptions to
sessions other nodes own, and the service that runs them (``greenroom serve --db
postgresql://...``). Forwarding requests to a session's owner is the transport's
(``greenroom/transport/_forward.py``)."""

import typing as _typing

from ._flags import (
    DEFAULT_LEASE_TTL as DEFAULT_LEASE_TTL,
    check_cluster_flags as check_cluster_flags,
    is_cluster_db as is_cluster_db,
    redact_dsn as redact_dsn,
)

if _typing.TYPE_CHECKING:
    from ._lease import Fence as Fence, LeaseKeeper as LeaseKeeper, LeaseTimes as LeaseTimes
    from ._remote import Mirrors as Mirrors
    from ._service import (
        ClusterConfig as ClusterConfig,
        ClusterNode as ClusterNode,
        node_json as node_json,
        nodes_table as nodes_table,
    )
    from ._sweeper import sweep_once as sweep_once, sweeper as sweeper

_LAZY = {
    "Fence": "._lease",
    "LeaseKeeper": "._lease",
    "LeaseTimes": "._lease",
    "Mirrors": "._remote",
    "ClusterConfig": "._service",
    "ClusterNode": "._service",
    "node_json": "._service",
    "nodes_table": "._service",
    "sweep_once": "._sweeper",
    "sweeper": "._sweeper",
}
"""Names whose modules (the lease keeper, the sweeper, the mirrors, the node service) are
imported on first access: a single node never loads them; the flags' checks are eager."""


def __getattr__(name: str) -> _typing.Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
