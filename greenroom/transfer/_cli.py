"""``greenroom import docker-agent PATH``, ``greenroom import jsonl FILE`` and
``greenroom export``: their options (light: imported with the command line) and their run.

Exit status: 0 when every session was imported (or already there) or exported; 1 when some
could not be (each named on stderr, the others done); 2 when nothing could start (a file that
is not what it should be, a store another process holds, a bad option).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import IO, Any

PAGE = 50  # sessions read (and held in memory) at a time
STORE_HELP = (
    "greenroom's store, as greenroom serve --db names it: an SQLite file or a PostgreSQL URL "
    "(default: $GREENROOM_DB, else $XDG_DATA_HOME/greenroom/sessions.sqlite3)"
)


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count (0, 1, 2, ...)")
    return value


def _store_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db",
        default=os.environ.get("GREENROOM_DB", ""),
        metavar="PATH|postgresql://...",
        help=STORE_HELP,
    )
    parser.add_argument(
        "--progress-every",
        type=_count,
        default=100,
        metavar="N",
        help="a progress line on stderr every N sessions (default 100; 0 = none)",
    )


def add_transfer_parsers(sub: Any) -> None:
    """Add ``import`` and ``export`` to the ``greenroom`` subcommands ``sub``."""
    imp = sub.add_parser("import", help="import sessions (docker-agent's history, an export)")
    kinds = imp.add_subparsers(dest="source", required=True)
    docker = kinds.add_parser(
        "docker-agent",
        help="docker-agent's session database (read-only; default place ~/.cagent/session.db)",
    )
    docker.add_argument("path", metavar="PATH", help="docker-agent's session.db")
    docker.add_argument(
        "--allow-newer-schema",
        action="store_true",
        help="read a database a newer docker-agent migrated (its new columns are ignored)",
    )
    _store_options(docker)
    jsonl = kinds.add_parser("jsonl", help="sessions greenroom export wrote (one per line)")
    jsonl.add_argument("file", metavar="FILE", help="the JSON lines file (- for stdin)")
    _store_options(jsonl)

    exp = sub.add_parser("export", help="write sessions as JSON lines, one session per line")
    exp.add_argument(
        "--session",
        action="append",
        default=[],
        metavar="ID",
        help="export this session (repeatable; default: every root session, newest first)",
    )
    exp.add_argument("--out", default="-", metavar="FILE", help="write here (default: stdout)")
    _store_options(exp)


def transfer_main(args: argparse.Namespace) -> int:
    """Run ``greenroom import ...`` or ``greenroom export``; returns the exit status."""
    import trio

    from greenroom.errors import GreenroomError

    if args.db == ":memory:":
        _say("--db :memory: would be gone when the command ends; name a file or a PostgreSQL URL")
        return 2
    try:
        if args.command == "export":
            return trio.run(_export, args)
        return trio.run(_import, args)
    except GreenroomError as exc:
        _say(str(exc))
        return 2
    except OSError as exc:
        _say(f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": "))
        return 2


def _say(text: str) -> None:
    print(f"greenroom: {text}", file=sys.stderr, flush=True)


def _progress(command: str) -> Any:
    return lambda line: print(f"greenroom {command}: {line}", file=sys.stderr, flush=True)


async def _import(args: argparse.Namespace) -> int:
    import trio

    from greenroom.serve import open_store

    from ._docker_agent_db import DockerAgentDatabase, Loaded
    from ._jsonl import read_lines
    from ._run import import_pages

    progress = _progress("import")
    if args.source == "docker-agent":
        # Checked before the store opens: a wrong file is refused without touching the store.
        db = await trio.to_thread.run_sync(
            lambda: DockerAgentDatabase.open(args.path, allow_newer=args.allow_newer_schema)
        )
        try:
            total = await trio.to_thread.run_sync(db.count_roots)
            progress(f"{total} sessions in {db.path}")
            after = [""]

            def next_page() -> list[Loaded]:
                page = db.next_page(after[0], PAGE)
                if page:
                    after[0] = page[-1].session_id
                return page

            async with open_store(args.db, node_id="greenroom-import") as persistence:
                report = await import_pages(
                    persistence.store,
                    next_page,
                    root="$",
                    progress=progress,
                    every=args.progress_every,
                )
        finally:
            db.close()
    else:
        stream: IO[bytes] = sys.stdin.buffer
        if args.file != "-":
            stream = await trio.to_thread.run_sync(lambda: open(args.file, "rb"))  # noqa: SIM115
        name = "<stdin>" if args.file == "-" else args.file
        try:
            pages = read_lines(stream, name, PAGE)
            async with open_store(args.db, node_id="greenroom-import") as persistence:
                report = await import_pages(
                    persistence.store,
                    lambda: next(pages, []),
                    root="$.session",
                    progress=progress,
                    every=args.progress_every,
                )
        finally:
            if stream is not sys.stdin.buffer:
                stream.close()
    for failure in report.failed:
        _say(failure)
    for what, times in sorted(report.dropped.items()):
        progress(f"not carried over: {what} ({times})")
    progress(report.line())
    return 1 if report.failed else 0


async def _export(args: argparse.Namespace) -> int:
    import trio

    from greenroom.serve import open_store

    from ._run import export_sessions

    progress = _progress("export")
    async with open_store(args.db, node_id="greenroom-export") as persistence:
        out: IO[bytes] = sys.stdout.buffer
        if args.out != "-":
            out = await trio.to_thread.run_sync(lambda: open(args.out, "wb"))  # noqa: SIM115
        try:
            report = await export_sessions(
                persistence.store,
                out,
                args.session,
                progress=progress,
                every=args.progress_every,
            )
        finally:
            if out is not sys.stdout.buffer:
                out.close()
    for missing in report.missing:
        _say(f"session not found: {missing}")
    progress(f"{report.written} sessions written")
    return 1 if report.missing else 0
