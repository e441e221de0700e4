"""Sub-agents from elsewhere (``sub_agents: [agentcatalog/pirate]``): the fetched file's default
agent joins the team under the reference's name (decision 0034).

As docker-agent does, the external file's default agent (``root``, else its first) is what is
brought in; greenroom brings it alone: its own sub-agents, handoffs and agent-switch commands
are left out (with a warning). Its models come along; one whose name the host file already uses
for another model is renamed ``NAME@REFERENCE``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import attrs

from ._config import AgentConfig, AgentFile, split_alloy
from ._source_refs import is_external_agent
from ._yaml_checks import Checker, as_str_list, line_of


class ExternalAgentUnavailable(Exception):
    """The external agent cannot be had; the message says why and what to configure."""


class ExternalAgents(Protocol):
    """Resolves an external agent reference to its (already fetched) agent file."""

    def agent_file(self, ref: str) -> AgentFile:
        """Raises ExternalAgentUnavailable."""
        ...


def parse_sub_agents(
    c: Checker,
    mapping: Mapping[Any, Any],
    key: str,
    path: str,
    line: int,
    name: str,
    agents: Mapping[Any, Any],
) -> tuple[str, ...]:
    """The agents named under ``key`` (``sub_agents``, ``handoffs``): local ones, and external
    ones (recorded for :func:`merge_external`) when the file is loaded with a lookup; without
    one, external references are warned about and left out."""
    names = c.typed(mapping, key, path, as_str_list, "a list of strings") or []
    kept = []
    for index, sub in enumerate(names):
        sub_line = line_of(mapping[key], index) or line
        sub_path = f"{path}.{key}[{index}]"
        if sub == name:
            c.fail(sub_line, sub_path, f"an agent cannot be its own sub-agent {sub!r}")
        elif sub in agents:
            kept.append(sub)
        elif ("/" in sub or ":" in sub) and c.resolve_external and is_external_agent(sub):
            kept.append(sub)
            c.external.append((sub_line, sub_path, sub))
        elif "/" in sub or ":" in sub:
            c.warn(
                sub_line,
                sub_path,
                f"agent {sub!r} from a catalog or registry is not checked offline "
                "(greenroom serve pulls it from --agent-catalog; validate checks it when given "
                "--agent-catalog)",
            )
        else:
            c.fail(sub_line, sub_path, f"unknown agent {sub!r}")
    return tuple(kept)


def merge_external(
    c: Checker,
    agents: dict[str, AgentConfig],
    models: dict[str, Any],
    providers: dict[str, Any],
    external: ExternalAgents,
) -> None:
    """Add each external sub-agent the walk recorded to ``agents`` (its models to ``models``);
    a reference that cannot be resolved is an error at its key path."""
    for line, path, ref in c.external:
        if ref in agents:
            continue
        try:
            other = external.agent_file(ref)
        except ExternalAgentUnavailable as exc:
            c.fail(line, path, str(exc))
            continue
        agent = other.default_agent
        rename: dict[str, str] = {}
        used = [*split_alloy(agent.model), *(agent.fallback.models if agent.fallback else ())]
        for name in used:
            config = other.models.get(name)
            if config is None:
                continue  # an inline (provider/model) or auto ref
            if name in models and models[name] != config:
                rename[name] = f"{name}@{ref}"
            models[rename.get(name, name)] = config
        for name, provider in other.providers.items():
            if providers.setdefault(name, provider) != provider:
                c.fail(line, path, f"{ref!r} defines provider {name!r} unlike this file")
        left_out = [*agent.sub_agents, *agent.handoffs]
        commands = {k: v for k, v in agent.commands.items() if not v.agent}
        if left_out or len(commands) != len(agent.commands):
            c.warn(
                line,
                path,
                f"agent {ref!r} comes alone: its sub-agents, handoffs and agent-switch "
                "commands are left out",
            )
        fallback = agent.fallback
        if fallback is not None:
            fallback = attrs.evolve(
                fallback, models=tuple(rename.get(m, m) for m in fallback.models)
            )
        agents[ref] = attrs.evolve(
            agent,
            name=ref,
            model=",".join(rename.get(part, part) for part in split_alloy(agent.model)),
            fallback=fallback,
            sub_agents=(),
            handoffs=(),
            commands=commands,
        )
