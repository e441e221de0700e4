"""``greenroom serve mcp`` and ``greenroom serve acp``: the command lines of the server modes
(decision 0031). ``cli.main`` hands them ``argv`` when ``serve`` is followed by ``mcp`` or
``acp``; every other ``greenroom serve`` keeps its own parser.

Only the parser is imported with this module; a mode's server loads when it runs.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from greenroom.serve import ServeConfig

MODES = ("mcp", "acp")
LOG_LEVELS = ("debug", "info", "warning", "error")


def is_mode(argv: Sequence[str]) -> bool:
    """Whether ``argv`` is ``serve mcp ...`` or ``serve acp ...``."""
    return len(argv) >= 2 and argv[0] == "serve" and argv[1] in MODES


def build_mode_parser(
    mode: str, parser_class: type[argparse.ArgumentParser], port: Callable[[str], int]
) -> argparse.ArgumentParser:
    if mode == "mcp":
        parser = parser_class(
            prog="greenroom serve mcp",
            description="Serve agents as the tools of an MCP server (one tool per agent; "
            "input: a message; output: the agent's final answer), over stdio or, with "
            "--http, streamable HTTP.",
        )
        parser.add_argument("agents", nargs="+", metavar="AGENT_FILE_OR_DIR")
        parser.add_argument(
            "--agent", default="", metavar="NAME", help="expose only this agent (default: all)"
        )
        parser.add_argument(
            "--http", action="store_true", help="serve streamable HTTP at /mcp, not stdio"
        )
        parser.add_argument("--host", default="127.0.0.1", help="with --http (default 127.0.0.1)")
        parser.add_argument(
            "--port", type=port, default=8081, help="with --http (default 8081; 0 = any)"
        )
        parser.add_argument(
            "--insecure-no-auth",
            action="store_true",
            help="with --http: allow a non-loopback --host (the endpoint has no authentication)",
        )
        parser.add_argument(
            "--tools-approved",
            action="store_true",
            help="run every tool call unasked, as docker-agent's serve mcp does (permission "
            "deny rules still hold); without it a call that asks is put to the MCP client "
            "(elicitation), or refused when the client cannot answer",
        )
    else:
        parser = parser_class(
            prog="greenroom serve acp",
            description="Serve an agent to an editor over the Agent Client Protocol (stdio).",
        )
        parser.add_argument("agents", nargs=1, metavar="AGENT_FILE")
        parser.add_argument(
            "--agent", default="", metavar="NAME", help="the agent to run (default: the file's)"
        )
    parser.add_argument(
        "--db",
        default=":memory:",
        metavar="PATH|:memory:",
        help="keep the sessions in this SQLite file (default :memory:: they end with the "
        "process; one process per file)",
    )
    parser.add_argument(
        "--data-dir",
        default="",
        metavar="DIR",
        help="where tools keep their data (default: beside --db)",
    )
    parser.add_argument(
        "--allow-private-network",
        action="append",
        default=[],
        metavar="CIDR",
        help="let network tools reach this private network (repeatable)",
    )
    parser.add_argument(
        "--max-session-cost",
        type=float,
        default=0.0,
        metavar="USD",
        help="stop a turn before its session's cost passes USD (default: no budget)",
    )
    parser.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default="warning",
        help="logs go to stderr (stdout is the protocol's)",
    )
    return parser


def mode_main(
    argv: Sequence[str],
    parser_class: type[argparse.ArgumentParser],
    port: Callable[[str], int],
) -> int:
    """Run ``greenroom serve mcp|acp`` (``argv`` starts with ``serve``)."""
    mode = argv[1]
    args = build_mode_parser(mode, parser_class, port).parse_args(argv[2:])
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    from greenroom.errors import GreenroomError
    from greenroom.serve import ServeConfig

    cfg = ServeConfig(
        agent_paths=tuple(args.agents),
        host=getattr(args, "host", "127.0.0.1"),
        port=getattr(args, "port", 0),
        db=args.db,
        data_dir=args.data_dir,
        allow_private_networks=tuple(args.allow_private_network),
        max_session_cost=args.max_session_cost,
        titles=False,  # a session per call (MCP) or per editor chat (ACP): no title wanted
        insecure_no_auth=getattr(args, "insecure_no_auth", False),
    )
    failed: list[BaseException] = []
    interrupted = False
    try:
        if mode == "mcp":
            _run_mcp(cfg, args)
        else:
            _run_acp(cfg, args)
    except* GreenroomError as group:
        failed.extend(group.exceptions)
    except* KeyboardInterrupt:
        interrupted = True
    for exc in failed:
        print(f"greenroom: {exc}", file=sys.stderr)
    return 2 if failed else 130 if interrupted else 0


def _run_mcp(cfg: ServeConfig, args: argparse.Namespace) -> None:
    from functools import partial

    import trio

    from greenroom.errors import ConfigError
    from greenroom.serve import check_exposure
    from greenroom.serve._mcp_server import serve_mcp_http, serve_mcp_stdio

    if args.http:
        try:
            check_exposure(cfg)
        except ConfigError:
            raise ConfigError(
                f"refusing to serve MCP on {cfg.host}: the endpoint has no authentication; "
                "bind a loopback --host (put an authenticating proxy in front to reach it "
                "from elsewhere), or pass --insecure-no-auth if the network is trusted"
            ) from None
    serve = serve_mcp_http if args.http else serve_mcp_stdio
    trio.run(partial(serve, cfg, tools_approved=args.tools_approved, only=args.agent))


def _run_acp(cfg: ServeConfig, args: argparse.Namespace) -> None:
    from functools import partial

    import trio

    from greenroom.serve._acp import serve_acp_stdio

    trio.run(partial(serve_acp_stdio, cfg, agent_name=args.agent))
