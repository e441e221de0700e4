"""The ``greenroom`` command line: serve (and serve a2a), chat, validate, nodes, import, export."""

from __future__ import annotations

import argparse
import errno
import logging
import math
import os
import re
import socket
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from greenroom import __version__

LOG_LEVELS = ("debug", "info", "warning", "error")
_AGE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([smhd]?)$")
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def age(text: str) -> float:
    """A duration such as ``90``, ``30s``, ``15m``, ``1h`` or ``7d``, in seconds."""
    match = _AGE.match(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (e.g. 30m, 1h, 7d, 0)")
    return float(match.group(1)) * _SECONDS[match.group(2)]


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


class Parser(argparse.ArgumentParser):
    """Bad input is one line naming the flag and what it takes (exit 2), not the usage text."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="greenroom", description="An agent session server (docker-agent compatible API)."
    )
    parser.add_argument("--version", action="version", version=f"greenroom {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve the session API over HTTP and WebSocket")
    serve.add_argument(
        "agents",
        nargs="*",
        metavar="AGENT_FILE_OR_DIR",
        help="agent YAML files or directories (default: the bundled example agent)",
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

    nodes = sub.add_parser("nodes", help="list the nodes of a cluster and their sessions")
    nodes.add_argument(
        "--db",
        default=os.environ.get("GREENROOM_DB", ""),
        metavar="postgresql://...",
        help="the cluster's PostgreSQL URL (default: $GREENROOM_DB)",
    )
    nodes.add_argument("--json", action="store_true", help="print JSON instead of a table")

    validate = sub.add_parser("validate", help="check agent YAML files and report every error")
    validate.add_argument("files", nargs="+", metavar="AGENT_FILE_OR_DIR")

    chat = sub.add_parser("chat", help="chat with an agent in the terminal")
    chat.add_argument(
        "url",
        nargs="?",
        default="",
        help="a greenroom server (default: start one in this process, on the default database)",
    )
    chat.add_argument(
        "--token",
        default=os.environ.get("GREENROOM_AUTH_TOKEN", ""),
        help="the server's access token (default: $GREENROOM_AUTH_TOKEN)",
    )
    chat.add_argument(
        "--agent",
        default="",
        help="agent source[/agent name] for new sessions (default: default, else the first)",
    )
    chat.add_argument("--session", default="", help="open this session id at once")
    chat.add_argument(
        "--db",
        default="",
        metavar="PATH|:memory:",
        help="database of the embedded server (default: the same as greenroom serve)",
    )
    from greenroom.transfer import add_transfer_parsers  # import / export (light)

    add_transfer_parsers(sub)
    return parser


def chat_main(args: argparse.Namespace) -> int:
    from greenroom.chat import run_chat

    if args.url:
        return run_chat(args.url, token=args.token, agent=args.agent, session_id=args.session)
    logging.basicConfig(level="WARNING", format="%(levelname)s %(name)s: %(message)s")
    from greenroom.errors import GreenroomError
    from greenroom.serve import ServeConfig, serving_in_thread

    try:
        with serving_in_thread(ServeConfig(port=0, db=args.db)) as url:
            return run_chat(url, agent=args.agent, session_id=args.session)
    except GreenroomError as exc:
        print(f"greenroom: {exc}", file=sys.stderr)
        print(
            "greenroom: is a server already running? Connect to it: greenroom chat "
            "http://127.0.0.1:8080",
            file=sys.stderr,
        )
        return 2


def main(argv: Sequence[str] | None = None) -> int:
    if (given := list(sys.argv[1:] if argv is None else argv))[:2] == ["serve", "a2a"]:
        from greenroom.serve._a2a_cli import a2a_main

        return a2a_main(given[2:])  # its own parser: `serve` takes agent paths (0035)
    args = build_parser().parse_args(given)
    if args.command == "validate":
        from greenroom.agents._validate import validate_main

        return validate_main(args.files)
    if args.command == "chat":
        return chat_main(args)
    if args.command == "nodes":
        return nodes_main(args)
    if args.command in ("import", "export"):
        from greenroom.transfer import transfer_main

        return transfer_main(args)

    from greenroom.observe import configure_logging

    configure_logging(args.log_level, args.log_format, args.node_id or socket.gethostname())
    # The options and their checks only: a bad option or a port in use is reported before the
    # server's modules load (about a second of CPU).
    from greenroom.errors import GreenroomError
    from greenroom.persistence import RetentionPolicy
    from greenroom.serve import ServeConfig, check_config

    retention = RetentionPolicy(args.retain_deltas or None, args.retain_deltas_per_session or None)
    token = args.auth_token
    if token is None:
        token = os.environ.get("GREENROOM_AUTH_TOKEN")
    if token is not None and not token.strip():
        # Set but blank: the operator meant to protect the server; never start it open.
        print(
            "greenroom: --auth-token (or GREENROOM_AUTH_TOKEN) is blank; give a token, or "
            "leave both unset to serve loopback without one",
            file=sys.stderr,
        )
        return 2

    cfg = ServeConfig(
        agent_paths=tuple(args.agents),
        host=args.host,
        port=args.port,
        db=args.db,
        auth_token=token or "",
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
    )
    try:
        check_config(cfg)
        check_port_free(cfg.host, cfg.port)
        check_agent_files(cfg.agent_paths)
    except GreenroomError as exc:
        print(f"greenroom: {exc}", file=sys.stderr)
        return 2
    from greenroom.serve import run

    return run(cfg)


def check_agent_files(paths: Sequence[str]) -> None:
    """Load every agent file named, so that a bad one is reported before the server loads (the
    server loads them again, and reports what they ask that it will not do).

    Raises:
        AgentConfigError: a file is missing or wrong (``file:line: path: what``).
    """
    if not paths:
        return
    from greenroom.agents import AgentSources

    AgentSources.from_paths(paths).check_all()  # every fault of every file, each once


def check_port_free(host: str, port: int) -> None:
    """Refuse at once a port another process listens on (the server binds it again later;
    this probe only makes the common mistake fast to report).

    Raises:
        ConfigError: ``host:port`` cannot be bound.
    """
    from greenroom.errors import ConfigError

    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM)
    except OSError:
        return  # the server reports a host it cannot resolve
    family, _, _, _, address = infos[0]
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as hypercorn binds
            probe.bind(address)
    except OSError as exc:
        why = "it is in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
        raise ConfigError(
            f"cannot listen on {host}:{port}: {why} (choose another --port, or 0 for any)"
        ) from None


def nodes_main(args: argparse.Namespace) -> int:
    """``greenroom nodes``: every node on record, its incarnation, state, lease and sessions."""
    import json

    import trio

    from greenroom.cluster import is_cluster_db, node_json, nodes_table
    from greenroom.errors import ConfigError, GreenroomError
    from greenroom.persistence import NodeInfo
    from greenroom.serve import open_store

    if not is_cluster_db(args.db):
        print("greenroom: nodes needs --db postgresql://... (or $GREENROOM_DB)", file=sys.stderr)
        return 2

    async def read() -> list[NodeInfo]:
        async with open_store(args.db) as persistence:
            if persistence.membership is None:
                raise ConfigError(f"{args.db}: not a cluster database")
            return await persistence.membership.nodes()

    try:
        found = trio.run(read)
    except GreenroomError as exc:
        print(f"greenroom: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([node_json(node) for node in found], indent=2))
    else:
        print("\n".join(nodes_table(found)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
