"""``greenroom validate FILE...``: check agent files without starting a server.

Every error and warning is one ``file:line: path: what`` line (warnings say ``warning:``), then
one line per file and a summary (``3 files: 2 ok, 1 with warnings``). The exit code is 0 when
no file has an error (warnings allowed), 1 otherwise, 2 for a usage error.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO

from ._diagnose import FileReport, check_file, summary
from ._sources import agent_files_in


def _expand(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files.extend(agent_files_in(path))
        else:
            files.append(path)
    return files


def check_files(
    paths: Iterable[str | os.PathLike[str]],
    *,
    allow_private_networks: Sequence[str] = (),
    agent_catalog: str = "",
    **options: Any,
) -> list[FileReport]:
    """One report per agent file given (directories give their ``*.yaml``/``*.yml`` files).

    URLs and OCI references are fetched (through the egress policy: public addresses, plus
    ``allow_private_networks``); with ``agent_catalog``, catalog sub-agents are pulled from it
    (without, they are warned about and left out).
    """
    names = [os.fspath(p) for p in paths]
    from ._source_refs import remote_ref

    def is_remote(name: str) -> bool:
        try:
            return remote_ref(name) is not None
        except ValueError:
            return False

    if not agent_catalog and not any(is_remote(n) for n in names):
        return [check_file(path, **options) for path in _expand(names)]
    from ._validate_remote import check_with_fetching, split_remote

    items = split_remote(names)
    local = _expand(name for name, ref in items if ref is None)
    return check_with_fetching(
        items,
        local,
        allow_private_networks=allow_private_networks,
        agent_catalog=agent_catalog,
        **options,
    )


def validate_files(paths: Iterable[str | os.PathLike[str]]) -> list[str]:
    """Error lines (``file:line: path: what``) for the agent files (and directories) given.

    Returns:
        An empty list when every file is a valid agent file (warnings are not errors).
    """
    return [line for report in check_files(paths) for line in report.errors]


def validate_main(
    argv: Sequence[str],
    *,
    out: TextIO | None = None,
    allow_private_networks: Sequence[str] = (),
    agent_catalog: str = "",
    **options: Any,
) -> int:
    """Validate the files (URLs, OCI references) in ``argv`` and print the report. Returns the
    exit code."""
    stream = out if out is not None else sys.stdout
    if not argv:
        print("usage: greenroom validate FILE...", file=stream)
        return 2
    reports = check_files(
        argv,
        allow_private_networks=allow_private_networks,
        agent_catalog=agent_catalog,
        **options,
    )
    for report in reports:
        for line in (*report.errors, *report.warnings):
            print(line, file=stream)
        if report.status == "errors":
            print(f"{report.path}: {len(report.errors)} error(s)", file=stream)
        elif report.status == "warnings":
            print(
                f"{report.path}: ok, {len(report.warnings)} warning(s) ({report.agents} agent(s))",
                file=stream,
            )
        else:
            print(f"{report.path}: ok ({report.agents} agent(s))", file=stream)
    print(summary(reports), file=stream)
    return 1 if any(report.errors for report in reports) else 0
