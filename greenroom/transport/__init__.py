"""HTTP and WebSocket transport: forwards requests to the session registry."""

from ._app import ShieldedSend as ShieldedSend, create_app as create_app
from ._connections import ClientLimits as ClientLimits
from ._cross_site import check_bearer as check_bearer
from ._forward import HOP_HEADER as HOP_HEADER, Forwarder as Forwarder
from ._ops import (
    MCP_OAUTH_LANDING as MCP_OAUTH_LANDING,
    OPERATIONS as OPERATIONS,
    AgentCatalog as AgentCatalog,
    AppConfig as AppConfig,
    Context as Context,
    Operation as Operation,
)
from ._schedule_endpoints import scheduled_forward as scheduled_forward
