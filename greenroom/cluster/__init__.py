"""Several greenroom nodes on one PostgreSQL: the node's lease, the sweeper, subscriptions to
sessions other nodes own, and the service that runs them (``greenroom serve --db
postgresql://...``). Forwarding requests to a session's owner is the transport's
(``greenroom/transport/_forward.py``)."""

from ._flags import (
    DEFAULT_LEASE_TTL as DEFAULT_LEASE_TTL,
    check_cluster_flags as check_cluster_flags,
    is_cluster_db as is_cluster_db,
    redact_dsn as redact_dsn,
)
from ._lease import Fence as Fence, LeaseKeeper as LeaseKeeper, LeaseTimes as LeaseTimes
from ._remote import Mirrors as Mirrors
from ._service import (
    ClusterConfig as ClusterConfig,
    ClusterNode as ClusterNode,
    node_json as node_json,
    nodes_table as nodes_table,
)
from ._sweeper import sweep_once as sweep_once, sweeper as sweeper
