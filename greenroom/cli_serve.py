"""The options of ``greenroom serve`` (argparse) and the :class:`ServeConfig` they make.

Only the standard library at import: ``greenroom --help`` and a bad flag stay instant.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from greenroom.persistence import RetentionPolicy
    from greenroom.serve import ServeConfig

LOG_LEVELS = ("debug", "info", "warning", "error")
_AGE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([smhd]?)$")
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def age(text: str) -> float:
    """A duration such as ``90``, ``30s``, ``15m``, ``1h`` or ``7d``, in seconds."""
    match = _AGE.match(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (e.g. 30m, 1h, 7d, 0)")
    return float(match.group(1)) * _SECONDS[match.group(2)]


def pull_interval(text: str) -> float:
    """``--pull-interval``: minutes as docker-agent takes it (``5``), or a duration with a unit
    (``30s``, ``5m``, ``1h``); 0 turns refreshing off. In seconds."""
    value = text.strip()
    try:
        return age(value) if value[-1:] in _SECONDS and value[-1:] else age(value) * 60
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an interval (minutes, e.g. 5, or 30s, 5m, 1h; 0 = never)"
        ) from None


def count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count (0, 1, 2, ...)")
    return value


def port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0 to 65535; 0 = any free port)")
    return value


def seconds(*, zero: bool) -> Callable[[str], float]:
    """A number of seconds: positive, or also 0 when ``zero``."""
    least = "0 or more" if zero else "more than 0"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds ({least})")
        return value

    parse.__name__ = "seconds"
    return parse


def add_serve_options(serve: argparse.ArgumentParser) -> None:
    """Every option of ``greenroom serve``."""
    serve.add_argument(
        "agents",
        nargs="*",
        metavar="AGENT_FILE_OR_DIR",
        help="agent YAML files or directories, URLs (https://...) or OCI references "
        "(docker.io/NAMESPACE/AGENT:TAG, oci://...) (default: the bundled example agent)",
    )
    serve.add_argument(
        "--pull-interval",
        type=pull_interval,
        default=0.0,
        metavar="MINUTES|DURATION",
        help="fetch URL and OCI agent sources (and catalog sub-agents) again this often: "
        "minutes as docker-agent, or 30s, 1h (default 0: only at start)",
    )
    serve.add_argument(
        "--agent-catalog",
        default=os.environ.get("GREENROOM_AGENT_CATALOG", "docker.io/agentcatalog"),
        metavar="REGISTRY/NAMESPACE",
        help="where sub_agents: [agentcatalog/NAME] are pulled from (default: "
        "$GREENROOM_AGENT_CATALOG, else docker-agent's docker.io/agentcatalog; '' = none)",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=port, default=8080, help="port (0 = any free port)")
    serve.add_argument(
        "--db",
        default=os.environ.get("GREENROOM_DB", ""),
        metavar="PATH|:memory:|postgresql://...",
        help="SQLite file, or a PostgreSQL URL that several nodes share (default: $GREENROOM_DB, "
        "else $XDG_DATA_HOME/greenroom/sessions.sqlite3)",
    )
    serve.add_argument(
        "--node-id",
        default=os.environ.get("GREENROOM_NODE_ID", ""),
        metavar="NAME",
        help="this node's name in a cluster (PostgreSQL only; default: $GREENROOM_NODE_ID, "
        "else the host name)",
    )
    serve.add_argument(
        "--advertise-url",
        default=os.environ.get("GREENROOM_ADVERTISE_URL", ""),
        metavar="URL",
        help="http://host:port at which the other nodes reach this one (PostgreSQL only; "
        "default: $GREENROOM_ADVERTISE_URL, else the bound address)",
    )
    serve.add_argument(
        "--lease-ttl",
        type=seconds(zero=False),
        default=10.0,
        metavar="SECONDS",
        help="a node that has not renewed its lease for this long loses its sessions to the "
        "others (PostgreSQL only; default 10)",
    )
    serve.add_argument(
        "--lease-renew",
        type=seconds(zero=True),
        default=0.0,
        metavar="SECONDS",
        help="how often the lease is renewed (PostgreSQL only; default: a third of --lease-ttl)",
    )
    serve.add_argument(
        "--drain-timeout",
        type=seconds(zero=True),
        default=None,
        metavar="SECONDS",
        help="on SIGTERM or Ctrl-C, stop being ready and let running turns finish for up to "
        "this long (a second signal stops at once; default 30 with PostgreSQL, else 0)",
    )
    serve.add_argument(
        "--otel",
        action="store_true",
        help="export OpenTelemetry traces (OTLP; endpoint and protocol from the OTEL_* "
        "variables, which turn tracing on by themselves too; see docs/observability.md)",
    )
    serve.add_argument(
        "--auth-token",
        default=None,  # not given: $GREENROOM_AUTH_TOKEN; given but blank: exit 2
        help="bearer token required on every route but /health and /ready "
        "(default: $GREENROOM_AUTH_TOKEN)",
    )
    serve.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="allow a non-loopback --host without a token",
    )
    serve.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="allow browser requests from ORIGIN (repeatable; * for any)",
    )
    serve.add_argument(
        "--allow-private-network",
        action="append",
        default=[],
        metavar="CIDR",
        help="let network tools (fetch, api, openapi) reach this loopback, private or "
        "link-local network, which they are refused by default (repeatable)",
    )
    serve.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="HOST",
        help="a host name clients use to reach the server, besides its bind address and "
        "localhost (repeatable; * turns the Host check off)",
    )
    serve.add_argument(
        "--keep-alive-timeout",
        type=seconds(zero=False),
        default=5.0,
        metavar="SECONDS",
        help="close idle connections, and connections that have not sent their request "
        "headers, after this long (default 5)",
    )
    serve.add_argument(
        "--max-connections-per-client",
        type=count,
        default=128,
        metavar="N",
        help="open requests, streams and WebSockets allowed per client address "
        "(default 128; 0 = no cap)",
    )
    serve.add_argument(
        "--session-workingdir-root",
        default=None,
        metavar="DIR",
        help="session working directories must lie inside DIR",
    )
    serve.add_argument(
        "--auth-label",
        default="token",
        help="who answered a tool confirmation, as recorded in the approvals audit when a "
        "token is required (default: token)",
    )
    serve.add_argument(
        "--data-dir",
        default="",
        metavar="DIR",
        help="where tools keep their data, e.g. memory databases (default: beside --db)",
    )
    serve.add_argument(
        "--max-session-cost",
        type=float,
        default=0.0,
        metavar="USD",
        help="stop a turn before a model call would take its session's cost past USD "
        "(a budget_exceeded error; default: no budget)",
    )
    serve.add_argument(
        "--confirmation-timeout",
        type=seconds(zero=False),
        default=None,
        metavar="SECONDS",
        help="reject a tool call nobody approved within SECONDS (default: wait)",
    )
    serve.add_argument(
        "--retain-deltas",
        type=age,
        default=3600.0,
        metavar="AGE",
        help="keep token deltas (agent_choice events) replayable for this long; every other "
        "event is kept (default 1h; 0 = forever)",
    )
    serve.add_argument(
        "--retain-deltas-per-session",
        type=count,
        default=5000,
        metavar="N",
        help="keep at most the newest N token deltas of each session (default 5000, about 25 "
        "turns of 200 tokens; 0 = no cap)",
    )
    serve.add_argument(
        "--webhook-allow",
        action="append",
        default=[],
        metavar="URL-PREFIX",
        help="a run may ask for a webhook (its summary POSTed when it ends) under this URL "
        "prefix (scheme, host, port and path compared; repeatable; default: none allowed)",
    )
    serve.add_argument(
        "--webhook-secret",
        default=os.environ.get("GREENROOM_WEBHOOK_SECRET", ""),
        metavar="SECRET",
        help="the HMAC-SHA256 key webhooks are signed with (Greenroom-Signature; default: "
        "$GREENROOM_WEBHOOK_SECRET; required with --webhook-allow)",
    )
    serve.add_argument(
        "--mcp-oauth-redirect-uri",
        default="",
        metavar="URL",
        help="where the authorization server of an MCP server sends the user back "
        "(default: this server's /mcp-oauth/callback)",
    )
    serve.add_argument(
        "--mcp-start-timeout",
        type=seconds(zero=False),
        default=30.0,
        metavar="SECONDS",
        help="how long a turn waits for an MCP server to start (default 30)",
    )
    serve.add_argument(
        "--mcp-call-timeout",
        type=seconds(zero=False),
        default=300.0,
        metavar="SECONDS",
        help="an MCP tool call that takes longer is a tool error (default 300)",
    )
    serve.add_argument(
        "--no-titles",
        action="store_true",
        help="never ask a model for a session title (an agent file can also turn titles off "
        "with runtime: {titles: false})",
    )
    serve.add_argument("--log-level", choices=LOG_LEVELS, default="info")
    serve.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="text: a line for a person (default); json: one JSON object per line with time, "
        "level, message, logger, node and, where known, session, turn and trace ids",
    )
    serve.add_argument(
        "--metrics-token",
        default=os.environ.get("GREENROOM_METRICS_TOKEN", ""),
        metavar="TOKEN",
        help="a bearer token GET /metrics also takes, for a scraper that should not hold the "
        "API token (default: $GREENROOM_METRICS_TOKEN; see docs/observability.md)",
    )


def serve_config(args: argparse.Namespace, token: str, retention: RetentionPolicy) -> ServeConfig:
    """The server's configuration from ``greenroom serve``'s parsed options (checked later, by
    :func:`greenroom.serve.check_config`)."""
    from greenroom.serve import ServeConfig

    return ServeConfig(
        agent_paths=tuple(args.agents),
        host=args.host,
        port=args.port,
        db=args.db,
        auth_token=token,
        insecure_no_auth=args.insecure_no_auth,
        cors_origins=tuple(args.cors_origin),
        allowed_hosts=tuple(args.allowed_host),
        allow_private_networks=tuple(args.allow_private_network),
        keep_alive_timeout=args.keep_alive_timeout,
        max_connections_per_client=args.max_connections_per_client,
        working_dir_root=args.session_workingdir_root,
        auth_label=args.auth_label,
        data_dir=args.data_dir,
        confirmation_timeout=args.confirmation_timeout,
        max_session_cost=args.max_session_cost,
        mcp_oauth_redirect_uri=args.mcp_oauth_redirect_uri,
        mcp_start_timeout=args.mcp_start_timeout,
        mcp_call_timeout=args.mcp_call_timeout,
        titles=not args.no_titles,
        tune_gc=True,
        access_log=args.log_level == "debug",
        retention=retention,
        node_id=args.node_id,
        advertise_url=args.advertise_url,
        lease_ttl=args.lease_ttl,
        lease_renew=args.lease_renew,
        drain_timeout=args.drain_timeout,
        metrics_token=args.metrics_token,
        otel=args.otel,
        webhook_allow=tuple(args.webhook_allow),
        webhook_secret=args.webhook_secret,
        pull_interval=args.pull_interval,
        agent_catalog=args.agent_catalog,
    )
