"""Agent-switch slash commands: ``/plan explain X`` switches to the planner, then sends "explain X".

Every message of a batch is resolved against the agent that was current *before* the batch (a
later message's command may not exist on the agent an earlier one switched to). If a switch
fails, the runtime goes back to the original agent and no message is changed.
"""

from __future__ import annotations

import logging
import re

import attrs

from greenroom.agents import Command, Runtime
from greenroom.domain import ChatMessage
from greenroom.errors import AgentSwitchFailed

log = logging.getLogger(__name__)

_SLASH = re.compile(r"^/(\S+)(?:\s+(.*))?$", re.DOTALL)


def resolve_command(command: Command, args: str) -> str:
    """The text an agent-switch command sends: its instruction (with the arguments after it),
    or the arguments verbatim when it has no instruction."""
    if not command.instruction:
        return args
    if "${args}" in command.instruction:
        return command.instruction.replace("${args}", args)
    return f"{command.instruction} {args}".strip()


async def apply_agent_switch_commands(
    runtime: Runtime, messages: tuple[ChatMessage, ...]
) -> tuple[ChatMessage, ...]:
    """Apply the agent-switch commands of ``messages``; returns the messages to store.

    Raises AgentSwitchFailed (its ``__cause__`` is the runtime's error) when a switch fails.
    """
    original = runtime.current_agent()
    pending: list[tuple[int, str, str]] = []
    for index, message in enumerate(messages):
        if message.role != "user":
            continue
        match = _SLASH.match(message.content)
        if match is None:
            continue
        command = original.commands.get(match.group(1))
        if command is None or not command.agent:
            continue
        pending.append((index, command.agent, resolve_command(command, match.group(2) or "")))
    if not pending:
        return messages

    out = list(messages)
    current = original.name
    for index, target, content in pending:
        if target != current:
            try:
                await runtime.set_current_agent(target)
            except Exception as exc:
                try:
                    await runtime.set_current_agent(original.name)
                except Exception:
                    log.exception("could not switch back to agent %r", original.name)
                raise AgentSwitchFailed(f'switch agent to "{target}": {exc}') from exc
            current = target
        out[index] = attrs.evolve(out[index], content=content)
    return tuple(out)
