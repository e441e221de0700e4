"""Slash commands: parse ``/name args`` and resolve agent-switch commands (pure functions).

The session actor applies agent-switch commands before it stores a turn's messages (resolving
each against the agent current *before* the batch); instruction-only commands are left as typed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ._runtime import Command

_COMMAND = re.compile(r"/([A-Za-z0-9_][\w.:-]*)(?:\s+(.*))?", re.DOTALL)


def parse_slash_command(content: str) -> tuple[str, str] | None:
    """``("plan", "explain X")`` for ``"/plan explain X"``; None when it is no command."""
    match = _COMMAND.fullmatch(content.strip())
    if match is None:
        return None
    return match.group(1), (match.group(2) or "").strip()


def expand_command(command: Command, args: str) -> str:
    """The text a command stands for: its instruction with ``args`` (or ``args`` alone)."""
    if not command.instruction:
        return args
    if "${args}" in command.instruction:
        return command.instruction.replace("${args}", args)
    return f"{command.instruction} {args}".strip() if args else command.instruction


def resolve_agent_switch(commands: Mapping[str, Command], content: str) -> tuple[str, str] | None:
    """``(target agent, new content)`` when ``content`` invokes an agent-switch command."""
    parsed = parse_slash_command(content)
    if parsed is None:
        return None
    name, args = parsed
    command = commands.get(name)
    if command is None or not command.agent:
        return None
    return command.agent, expand_command(command, args)
