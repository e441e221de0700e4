"""The system-prompt parts that depend on where a session works (docker-agent's
``add_environment_info`` and ``add_prompt_files``).

Environment info names the working directory, whether it is in a git repository, the operating
system, the CPU architecture and the date, as docker-agent does; greenroom adds the current git
branch and a short ``git status`` when it is a repository. git runs without a shell, with stdin
closed and a deadline of :data:`GIT_BUDGET` seconds (a hung git is killed and left out).

A prompt file (``AGENTS.md``, ...) is looked for as docker-agent does: the first file of that
name from the working directory upward, then the one in the home directory (when it is another
file); both are added, the working directory's first.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import trio

GIT_BUDGET = 2.0
"""Seconds each git command may take."""
STATUS_LINES = 20
"""Lines of ``git status --porcelain`` shown; the rest are counted."""
PROMPT_FILE_LIMIT = 256 * 1024
"""Bytes read of one prompt file."""

_OS_NAMES = {"darwin": "MacOS", "linux": "Linux", "win32": "Windows"}
_ARCH_NAMES = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}


def git_root(directory: Path) -> Path | None:
    """The closest directory at or above ``directory`` holding a ``.git`` (dir or file)."""
    current = directory.absolute()
    for candidate in (current, *current.parents):
        if (candidate / ".git").exists():
            return candidate
    return None


async def _git(args: Sequence[str], cwd: Path) -> str | None:
    """``git args`` in ``cwd``: its stdout, or None when it failed or took too long."""
    with trio.move_on_after(GIT_BUDGET):
        try:
            done = await trio.run_process(
                ["git", *args],
                cwd=str(cwd),
                stdin=subprocess.DEVNULL,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                env={**os.environ, "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"},
            )
        except OSError:
            return None
        if done.returncode == 0:
            return bytes(done.stdout).decode(errors="replace")
    return None


async def environment_info(working_dir: Path, today: dt.date) -> str:
    """The environment block of the system prompt for ``working_dir``."""
    is_repo = git_root(working_dir) is not None
    system = _OS_NAMES.get(sys.platform, sys.platform)
    machine = platform.machine().lower()
    lines = [
        f"Working directory: {working_dir}",
        f"Is directory a git repo: {'Yes' if is_repo else 'No'}",
        f"Operating System: {system}",
        f"CPU Architecture: {_ARCH_NAMES.get(machine, machine)}",
        f"Date: {today.isoformat()}",
    ]
    if is_repo:
        branch = await _git(["rev-parse", "--abbrev-ref", "HEAD"], working_dir)
        if branch is not None and branch.strip():
            lines.append(f"Git branch: {branch.strip()}")
        status = await _git(["status", "--porcelain"], working_dir)
        if status is not None:
            changed = [line for line in status.splitlines() if line.strip()]
            shown = "\n".join(changed[:STATUS_LINES])
            if len(changed) > STATUS_LINES:
                shown += f"\n... and {len(changed) - STATUS_LINES} more"
            lines.append(f"Git status:\n{shown}" if changed else "Git status: clean")
    body = "\n".join(lines)
    return (
        "Here is useful information about the environment you are running in:\n"
        f"<env>\n{body}\n</env>"
    )


def _find_upward(start: Path, name: str) -> Path | None:
    current = start.absolute()
    for candidate in (current, *current.parents):
        path = candidate / name
        if path.is_file():
            return path
    return None


def _read(path: Path) -> str | None:
    try:
        with path.open("rb") as f:
            return f.read(PROMPT_FILE_LIMIT).decode(errors="replace")
    except OSError:
        return None


def read_prompt_files(
    working_dir: Path, names: Sequence[str], home: Path | None = None
) -> list[str]:
    """The contents of the prompt files ``names`` (see the module docstring), in order."""
    home_dir = home if home is not None else Path.home()
    out: list[str] = []
    for name in names:
        found = _find_upward(working_dir, name)
        paths = [found] if found is not None else []
        in_home = home_dir / name
        if in_home.is_file() and (found is None or in_home.resolve() != found.resolve()):
            paths.append(in_home)
        for path in paths:
            text = _read(path)
            if text is not None and text.strip():
                out.append(text)
    return out


async def prompt_context(
    working_dir: Path,
    *,
    environment: bool,
    prompt_files: Sequence[str],
    today: dt.date,
    home: Path | None = None,
) -> list[str]:
    """The context parts of an agent's system prompt: environment info, then prompt files."""
    parts: list[str] = []
    if environment:
        parts.append(await environment_info(working_dir, today))
    if prompt_files:
        parts += await trio.to_thread.run_sync(
            read_prompt_files, working_dir, list(prompt_files), home
        )
    return parts
