"""The ``greenroom`` command line: serve (and serve a2a), chat, validate, nodes, import, export."""

from __future__ import annotations

import argparse
import errno
import logging
import os
import socket
import sys
from collections.abc import Sequence
from typing import NoReturn

from greenroom import __version__
from greenroom.cli_modes import is_mode, mode_main
from greenroom.cli_serve import add_serve_options, port, serve_config


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

    serve = sub.add_parser(
        "serve",
        help="serve the session API over HTTP and WebSocket",
        epilog="other modes: `greenroom serve mcp AGENT_FILE...` (agents as MCP tools) and "
        "`greenroom serve acp AGENT_FILE` (an editor's agent), see docs/modes.md; "
        "`greenroom serve a2a AGENT_FILE` (an agent over A2A, see docs/api.md)",
    )
    add_serve_options(serve)

    nodes = sub.add_parser("nodes", help="list the nodes of a cluster and their sessions")
    nodes.add_argument(
        "--db",
        default=os.environ.get("GREENROOM_DB", ""),
        metavar="postgresql://...",
        help="the cluster's PostgreSQL URL (default: $GREENROOM_DB)",
    )
    nodes.add_argument("--json", action="store_true", help="print JSON instead of a table")

    validate = sub.add_parser("validate", help="check agent YAML files and report every error")
    validate.add_argument(
        "files", nargs="+", metavar="AGENT_FILE_OR_DIR", help="files, directories, URLs or OCI "
        "references",
    )  # fmt: skip
    validate.add_argument(
        "--agent-catalog",
        default="",
        metavar="REGISTRY/NAMESPACE",
        help="pull sub_agents: [agentcatalog/NAME] from this catalog to check them (e.g. "
        "docker.io/agentcatalog; default: warn and leave them out)",
    )
    validate.add_argument(
        "--allow-private-network",
        action="append",
        default=[],
        metavar="CIDR",
        help="let URL and OCI sources on this private or loopback network be fetched (repeatable)",
    )

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
    given = list(sys.argv[1:] if argv is None else argv)
    if given[:2] == ["serve", "a2a"]:
        from greenroom.serve._a2a_cli import a2a_main

        return a2a_main(given[2:])  # its own parser: `serve` takes agent paths (0035)
    if is_mode(given):  # serve mcp|acp (0031)
        return mode_main(given, Parser, port)
    args = build_parser().parse_args(given)
    if args.command == "validate":
        from greenroom.agents._validate import validate_main

        return validate_main(
            args.files,
            allow_private_networks=args.allow_private_network,
            agent_catalog=args.agent_catalog,
        )
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
    from greenroom.serve import check_config

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

    cfg = serve_config(args, token or "", retention)
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
    from greenroom.agents._source_refs import remote_ref

    local = []
    for path in paths:
        try:
            if remote_ref(path) is None:  # URLs and OCI references: the server fetches them
                local.append(path)
        except ValueError:
            local.append(path)  # a bad oci:// reference: the server says why
    if not local:
        return
    from greenroom.agents import AgentSources

    AgentSources.from_paths(local).check_all()  # every fault of every file, each once


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
