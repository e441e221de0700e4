"""``greenroom serve a2a AGENT_FILE [--agent NAME] [--host H] [--port P] [--db ...]``: the
command line of the A2A server (decision 0035). Light: the server's modules load only once the
options passed their checks."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path

DEFAULT_PORT = 8082  # docker-agent's serve a2a listens on 127.0.0.1:8082


def default_a2a_db() -> str:
    """Beside ``greenroom serve``'s database, but its own file: both servers may run at once."""
    from ._config import default_db_path

    return str(default_db_path().with_name("a2a.sqlite3"))


def listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for an IPv6 address) as docker-agent's ``--listen``."""
    from greenroom.cli_serve import port

    host, sep, number = text.rpartition(":")
    if not sep:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT (e.g. 127.0.0.1:8082)")
    return host.strip("[]") or "127.0.0.1", port(number)


def build_a2a_parser() -> argparse.ArgumentParser:
    from greenroom.cli import Parser
    from greenroom.cli_serve import port

    parser = Parser(
        prog="greenroom serve a2a",
        description="Serve one agent over the A2A (Agent2Agent) protocol: its agent card at "
        "/.well-known/agent-card.json, JSON-RPC at /invoke.",
    )
    parser.add_argument("agent_file", metavar="AGENT_FILE", help="the agent YAML file")
    parser.add_argument(
        "--agent", "-a", default="", help="the agent of the file that answers (default: root)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=port, default=DEFAULT_PORT, help="port (default 8082; 0 = any free port)"
    )
    parser.add_argument(
        "--listen",
        "-l",
        type=listen,
        metavar="HOST:PORT",
        help="docker-agent's spelling of --host and --port together (127.0.0.1:8082, [::1]:0)",
    )
    parser.add_argument(
        "--db",
        default=os.environ.get("GREENROOM_A2A_DB", ""),
        metavar="PATH|:memory:",
        help="where the A2A contexts' sessions are kept (default: $GREENROOM_A2A_DB, else "
        "a2a.sqlite3 beside greenroom serve's database)",
    )
    parser.add_argument(
        "--auth-token",
        default=None,
        help="a bearer token every call must carry (default: $GREENROOM_AUTH_TOKEN); "
        "required to listen beyond loopback",
    )
    parser.add_argument(
        "--working-dir",
        default="",
        metavar="DIR",
        help="the working directory of the sessions it creates (default: none)",
    )
    parser.add_argument("--log-level", choices=("debug", "info", "warning", "error"))
    return parser


def a2a_main(argv: Sequence[str]) -> int:
    args = build_a2a_parser().parse_args(argv)
    if args.listen is not None:
        args.host, args.port = args.listen
    from greenroom.observe import configure_logging

    configure_logging(args.log_level or "info", "text", "")
    from greenroom.errors import GreenroomError

    from ._config import ServeConfig, check_config

    token = (
        args.auth_token if args.auth_token is not None else os.environ.get("GREENROOM_AUTH_TOKEN")
    )
    if token is not None and not token.strip():
        print("greenroom: --auth-token (or GREENROOM_AUTH_TOKEN) is blank", file=sys.stderr)
        return 2
    working_dir = str(Path(args.working_dir).resolve()) if args.working_dir else ""
    cfg = ServeConfig(
        agent_paths=(args.agent_file,),
        host=args.host,
        port=args.port,
        db=args.db or default_a2a_db(),
        auth_token=token or "",
        access_log=args.log_level == "debug",
    )
    try:
        check_config(cfg)
        if cfg.cluster:
            from greenroom.errors import ConfigError

            raise ConfigError(
                "--db: greenroom serve a2a keeps its sessions in SQLite (or :memory:)"
            )
        if not Path(args.agent_file).is_file():
            from greenroom.errors import ConfigError

            raise ConfigError(f"{args.agent_file}: no such agent file")
        from greenroom.cli import check_agent_files, check_port_free

        check_port_free(cfg.host, cfg.port)
        check_agent_files(cfg.agent_paths)
    except GreenroomError as exc:
        print(f"greenroom: {exc}", file=sys.stderr)
        return 2
    import trio

    from ._a2a import serve_a2a

    failed = False
    try:
        trio.run(partial(serve_a2a, cfg, args.agent, working_dir=working_dir))
    except* GreenroomError as group:
        failed = True
        for problem in group.exceptions:
            print(f"greenroom: {problem}", file=sys.stderr)
    return 2 if failed else 0
