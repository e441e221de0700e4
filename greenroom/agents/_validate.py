"""``greenroom validate FILE...``: check agent files without starting a server."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TextIO

from greenroom.errors import AgentConfigError

from ._sources import agent_files_in
from ._yaml import load_agent_file


def _expand(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files.extend(agent_files_in(path))
        else:
            files.append(path)
    return files


def validate_files(paths: Iterable[str | os.PathLike[str]]) -> list[str]:
    """Error lines (``file:line: path: what``) for the agent files (and directories) given.

    Returns:
        An empty list when every file is a valid agent file.
    """
    problems: list[str] = []
    for path in _expand(paths):
        try:
            load_agent_file(path)
        except AgentConfigError as exc:
            problems.extend(exc.problems)
    return problems


def validate_main(argv: Sequence[str], *, out: TextIO | None = None) -> int:
    """Validate the files in ``argv``; print problems (or ``ok`` lines). Returns the exit code."""
    stream = out if out is not None else sys.stdout
    if not argv:
        print("usage: greenroom validate FILE...", file=stream)
        return 2
    status = 0
    for path in _expand(argv):
        try:
            config = load_agent_file(path)
        except AgentConfigError as exc:
            status = 1
            for line in exc.problems:
                print(line, file=stream)
            continue
        for line in config.ignored:
            print(f"{line}: ignored (not supported by greenroom)", file=stream)
        print(f"{path}: ok ({len(config.agents)} agent(s))", file=stream)
    return status
