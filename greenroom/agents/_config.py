"""Frozen types of a parsed agent file (docker-agent's YAML format) and its JSON view.

Parsing and validation live in ``_yaml.py``; a value here is always valid: every model ref
resolves, every sub-agent and switch-command target exists.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any

import attrs

from greenroom.domain import Permissions
from greenroom.errors import AgentNotFound, InvalidRequest

from ._runtime import Command
from .providers._base import ModelConfig

AUTO_MODEL = "auto"
"""The model ref resolved from the environment at build time (``providers.resolve_auto``)."""

DEFAULT_AGENT = "root"


def _frozen(value: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    return types.MappingProxyType(dict(value or {}))


def split_inline_ref(ref: str) -> tuple[str, str] | None:
    """``("openai", "gpt-4o")`` for ``"openai/gpt-4o"``; None when ``ref`` is not inline."""
    provider, slash, model = ref.partition("/")
    if slash and provider and model:
        return provider, model
    return None


@attrs.frozen
class ToolsetConfig:
    """One ``toolsets`` entry: its ``type`` and the other keys as given (deeply frozen)."""

    type: str
    options: Mapping[str, Any] = attrs.field(factory=_frozen, converter=_frozen)


@attrs.frozen
class AgentConfig:
    name: str
    model: str
    description: str = ""
    instruction: str = ""
    welcome_message: str = ""
    sub_agents: tuple[str, ...] = ()
    toolsets: tuple[ToolsetConfig, ...] = ()
    commands: Mapping[str, Command] = attrs.field(factory=_frozen, converter=_frozen)
    max_iterations: int = 0
    max_tool_result_tokens: int = 0
    add_date: bool = False
    safety: str = ""
    """The author's default safety policy for sessions that start on this agent."""


@attrs.frozen
class AgentFile:
    """A whole agent file: agents in declaration order, named models, team permissions."""

    path: str
    agents: Mapping[str, AgentConfig] = attrs.field(converter=_frozen)
    models: Mapping[str, ModelConfig] = attrs.field(factory=_frozen, converter=_frozen)
    permissions: Permissions | None = None
    safety: str = ""
    """``runtime.safety``: the file-wide default safety policy (an agent's ``safety`` wins)."""
    version: str = ""
    ignored: tuple[str, ...] = ()
    """``file:line: path`` of docker-agent keys that were accepted but are not implemented."""

    @property
    def first_agent(self) -> AgentConfig:
        return next(iter(self.agents.values()))

    @property
    def default_agent(self) -> AgentConfig:
        """The agent named ``root`` if there is one, else the first declared."""
        return self.agents.get(DEFAULT_AGENT) or self.first_agent

    def agent(self, name: str = "") -> AgentConfig:
        """The agent ``name`` (the default agent when empty). Raises AgentNotFound."""
        if not name:
            return self.default_agent
        try:
            return self.agents[name]
        except KeyError:
            raise AgentNotFound(f"agent not found: {name}") from None

    def model_config(self, ref: str, *, auto: ModelConfig | None = None) -> ModelConfig:
        """The model a ref names: an entry of ``models``, ``auto``, or inline ``provider/model``.

        Raises:
            InvalidRequest: ``ref`` names no model (or is ``auto`` and ``auto`` is None).
        """
        if ref in self.models:
            return self.models[ref]
        if ref == AUTO_MODEL and auto is not None:
            return auto
        inline = split_inline_ref(ref)
        if inline is not None:
            return ModelConfig(name=ref, provider=inline[0], model=inline[1])
        raise InvalidRequest(f"unknown model {ref!r}", path="model")


def _omit_empty(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v not in (None, "", (), [], {}, 0, False)}


def _thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_thaw(v) for v in value]
    return value


def _command_json(command: Command) -> dict[str, Any]:
    return _omit_empty(attrs.asdict(command))


def _agent_json(agent: AgentConfig) -> dict[str, Any]:
    return _omit_empty(
        {
            "model": agent.model,
            "description": agent.description,
            "instruction": agent.instruction,
            "welcome_message": agent.welcome_message,
            "sub_agents": list(agent.sub_agents),
            "toolsets": [{"type": t.type, **_thaw(t.options)} for t in agent.toolsets],
            "commands": {name: _command_json(c) for name, c in agent.commands.items()},
            "max_iterations": agent.max_iterations,
            "max_tool_result_tokens": agent.max_tool_result_tokens,
            "add_date": agent.add_date,
            "safety": agent.safety,
        }
    )


def _model_json(model: ModelConfig) -> dict[str, Any]:
    values = attrs.asdict(model)
    del values["name"]
    return {k: v for k, v in values.items() if v not in (None, "")}


def agent_file_to_json(config: AgentFile) -> dict[str, Any]:
    """The JSON-ready view of ``config`` for ``GET /api/agents/{id}`` (empty keys left out)."""
    out: dict[str, Any] = {}
    if config.version:
        out["version"] = config.version
    out["agents"] = {name: _agent_json(agent) for name, agent in config.agents.items()}
    if config.models:
        out["models"] = {name: _model_json(m) for name, m in config.models.items()}
    if config.safety:
        out["runtime"] = {"safety": config.safety}
    if config.permissions is not None:
        out["permissions"] = {
            "allow": list(config.permissions.allow),
            "ask": list(config.permissions.ask),
            "deny": list(config.permissions.deny),
        }
    return out
