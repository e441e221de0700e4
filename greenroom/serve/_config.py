"""``greenroom serve``'s options: the configuration record, where its files go by default, and
the checks that refuse a configuration no one could use, or one open to anyone."""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path

import attrs

from greenroom.cluster import DEFAULT_LEASE_TTL, check_cluster_flags, is_cluster_db
from greenroom.domain import parse_webhook_allow
from greenroom.errors import ConfigError
from greenroom.observe import tracing_problem
from greenroom.persistence import RetentionPolicy

DEFAULT_CLUSTER_DRAIN = 30.0  # seconds a stopping cluster node lets running turns finish


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
    # Networks the network tools may reach besides public addresses (--allow-private-network).
    allow_private_networks: tuple[str, ...] = ()
    working_dir_root: str | None = None
    auth_label: str = "token"  # recorded as decided_by on tool approvals when auth is on
    data_dir: str = ""  # "" = beside the database (or $XDG_DATA_HOME/greenroom for :memory:)
    confirmation_timeout: float | None = None  # seconds before an unanswered tool call is rejected
    max_session_cost: float = 0.0  # USD a session may spend on model calls; 0: no budget
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
    metrics_token: str = ""  # GET /metrics also takes this bearer token (--metrics-token)
    # OpenTelemetry traces (--otel; the OTEL_* variables turn them on too): decision 0025.
    otel: bool = False
    # Webhooks of runs (issue 25): the URL prefixes a run's webhook may be under, and the
    # HMAC-SHA256 key of their signatures (required with any prefix).
    webhook_allow: tuple[str, ...] = ()
    webhook_secret: str = ""
    # Remote agent sources (URLs, OCI references; decision 0034): refetched every this many
    # seconds (0: only at start), and where ``sub_agents: [agentcatalog/NAME]`` is pulled from
    # (REGISTRY/NAMESPACE; "" = no catalog: such a sub-agent is an error).
    pull_interval: float = 0.0
    agent_catalog: str = "docker.io/agentcatalog"

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
    if problem := tracing_problem(flag=cfg.otel):
        raise ConfigError(problem)
    if not 0 <= cfg.max_session_cost < float("inf"):
        raise ConfigError("--max-session-cost must be 0 (no budget) or a positive number of USD")
    if cfg.mcp_start_timeout <= 0 or cfg.mcp_call_timeout <= 0:
        raise ConfigError("--mcp-start-timeout and --mcp-call-timeout must be positive")
    for network in cfg.allow_private_networks:
        try:
            ipaddress.ip_network(network.strip(), strict=False)
        except ValueError:
            raise ConfigError(
                f"--allow-private-network {network!r} is not an IP network (CIDR)"
            ) from None
    if not 0 <= cfg.pull_interval < float("inf"):
        raise ConfigError("--pull-interval must be 0 (no refresh) or a positive duration")
    if cfg.metrics_token and not _TOKEN_CHARS.fullmatch(cfg.metrics_token):
        raise ConfigError("--metrics-token must be printable ASCII without spaces")
    parse_webhook_allow(cfg.webhook_allow)  # ConfigError naming a bad prefix
    if cfg.webhook_allow and not cfg.webhook_secret:
        raise ConfigError(
            "--webhook-allow needs --webhook-secret (or GREENROOM_WEBHOOK_SECRET): every "
            "webhook is signed, so its receiver can tell it came from this server"
        )
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


def data_dir(cfg: ServeConfig) -> Path:
    if cfg.data_dir:
        return Path(cfg.data_dir)
    if cfg.db == ":memory:":
        return default_db_path().parent
    return (Path(cfg.db) if cfg.db else default_db_path()).parent
