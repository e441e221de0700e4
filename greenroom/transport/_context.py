"""The values the transport passes around: configuration, context, requests, replies."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import trio

from greenroom.actors import Registry, Scheduler
from greenroom.agents import OAuthFlows
from greenroom.domain import WebhookPrefix
from greenroom.observe import Metrics, metrics as current_metrics

from ._cross_site import SitePolicy

if TYPE_CHECKING:
    from greenroom.cluster import Mirrors

    from ._forward import Forwarder


class AgentCatalog(Protocol):
    """What the API shows about agent files (GET /api/agents...)."""

    def list_agents(self) -> list[dict[str, Any]]: ...

    def agent_config(self, source: str) -> dict[str, Any]: ...

    async def tool_count(self, source: str, agent_name: str) -> int: ...

    def check_agent(self, source: str, agent_name: str) -> None:
        """Raise AgentNotFound (unknown source or agent name; "" is the default agent) or
        AgentSourceUnavailable."""


@attrs.frozen
class AppConfig:
    auth_token: str = ""
    auth_label: str = "token"  # who approved a tool call, in the audit, when auth is on
    cors_origins: tuple[str, ...] = ()
    bind_host: str = "127.0.0.1"  # with allowed_hosts: the Host values requests may carry
    allowed_hosts: tuple[str, ...] = ()
    max_body: int = 1024 * 1024
    heartbeat: float = 15.0
    working_dir_root: str | None = None
    ws_buffer: int = 256  # frames queued per WebSocket before a slow client is closed (1013)
    metrics_token: str = ""  # GET /metrics also takes this bearer token (--metrics-token)
    # Where a run's webhook may point (--webhook-allow; none: runs may not ask for one).
    webhook_allow: tuple[WebhookPrefix, ...] = ()

    @property
    def site_policy(self) -> SitePolicy:
        return SitePolicy(self.bind_host, self.allowed_hosts, self.cors_origins)


@attrs.define
class Context:
    registry: Registry
    agents: AgentCatalog
    config: AppConfig
    shutting_down: trio.Event = attrs.field(factory=trio.Event)
    draining: trio.Event = attrs.field(factory=trio.Event)  # stopping once running turns end
    oauth: OAuthFlows = attrs.field(factory=OAuthFlows)  # MCP OAuth flows waiting for a redirect
    # A cluster node: forwards requests to sessions' owners, mirrors their event logs.
    forwarder: Forwarder | None = None
    mirrors: Mirrors | None = None
    metrics: Metrics = attrs.field(factory=current_metrics)  # the server's, current when created
    # Scheduled runs (decision 0028): the server runs its task, else nothing fires.
    scheduler: Scheduler | None = None
    # What to call at shutdown for each open WebSocket (it closes with 1001): one set here
    # instead of a task per connection waiting on ``shutting_down``.
    on_shutdown: set[Callable[[], None]] = attrs.field(factory=set)

    def shut_down(self) -> None:
        """Refuse new work (``shutting_down``) and close every open WebSocket with 1001."""
        self.shutting_down.set()
        for close in list(self.on_shutdown):
            close()

    @property
    def schedules(self) -> Scheduler:
        """The scheduler (one over the registry's store when none was given)."""
        if self.scheduler is None:
            self.scheduler = Scheduler(self.registry, self.registry.persistence.schedules)
        return self.scheduler


@attrs.frozen
class Request:
    params: Mapping[str, str] = attrs.field(factory=dict)
    query: Mapping[str, Any] = attrs.field(factory=dict)  # the operation's, parsed (_params.py)
    headers: Mapping[str, Any] = attrs.field(factory=dict)  # the operation's, parsed
    body: Any = None
    client: str = ""  # who sent it, as the transport knows it ("http 127.0.0.1")


@attrs.frozen
class Encoded:
    """A reply body that is JSON already (UTF-8 bytes), sent as it is."""

    data: bytes


@attrs.frozen
class Reply:
    body: Any = None  # JSON-ready values, or Encoded
    status: int = 200
    headers: Mapping[str, str] = attrs.field(factory=dict)


Handler = Callable[[Context, Request], Awaitable[Any]]
