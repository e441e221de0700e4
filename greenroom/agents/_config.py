"""Frozen types of a parsed agent file (docker-agent's YAML format) and its JSON view.

Parsing and validation live in ``_yaml.py``; a value here is always valid: every model ref
resolves, every provider is known, every sub-agent and switch-command target exists.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any

import attrs

from greenroom.domain import Permissions
from greenroom.errors import AgentNotFound, InvalidRequest

from ._rag_config import RagSource
from ._runtime import Command
from .providers._base import ModelConfig, StructuredOutput
from .providers._catalog import CustomProvider, apply_custom_provider

AUTO_MODEL = "auto"
"""The model ref resolved from the environment at build time (``providers.resolve_auto``)."""

DEFAULT_AGENT = "root"


def _frozen(value: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    return types.MappingProxyType(dict(value or {}))


def split_alloy(ref: str) -> list[str]:
    """The parts of an alloy ref ``"a,b"`` (one part for a plain ref), blanks dropped."""
    return [part.strip() for part in ref.split(",") if part.strip()]


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
    line: int = attrs.field(default=0, eq=False)
    """Where the entry starts in its file (0: unknown), for warnings."""


@attrs.frozen
class FallbackConfig:
    """An agent's ``fallback``: models tried in order when its model fails before answering.

    ``cooldown`` is how many seconds the runtime keeps starting from the fallback that
    answered before it tries the primary model again.
    """

    models: tuple[str, ...] = ()
    cooldown: float = 60.0
    retries: int = 2
    """Retries per model for a retryable failure (5xx, timeouts; -1: none); a rate limit
    moves on to the next model at once (docker-agent's semantics)."""


@attrs.frozen
class HookCommand:
    """One hook: a shell command run with the hook's JSON on stdin, killed after ``timeout``."""

    command: str
    timeout: float = 60.0
    line: int = attrs.field(default=0, eq=False)


@attrs.frozen
class HookMatcher:
    """Hooks run for the tools whose name matches ``matcher`` (a regex; "" or ``*``: all)."""

    matcher: str
    hooks: tuple[HookCommand, ...]


@attrs.frozen
class HooksConfig:
    """An agent's ``hooks`` (docker-agent's names); see ``_hooks.py`` for when each runs."""

    pre_tool_use: tuple[HookMatcher, ...] = ()
    post_tool_use: tuple[HookMatcher, ...] = ()
    session_start: tuple[HookCommand, ...] = ()
    session_end: tuple[HookCommand, ...] = ()
    on_user_input: tuple[HookCommand, ...] = ()


@attrs.frozen
class AgentConfig:
    name: str
    model: str
    description: str = ""
    instruction: str = ""
    welcome_message: str = ""
    sub_agents: tuple[str, ...] = ()
    handoffs: tuple[str, ...] = ()
    toolsets: tuple[ToolsetConfig, ...] = ()
    commands: Mapping[str, Command] = attrs.field(factory=_frozen, converter=_frozen)
    max_iterations: int = 0
    max_tool_result_tokens: int = 0
    add_date: bool = False
    safety: str = ""
    """The author's default safety policy for sessions that start on this agent."""
    fallback: FallbackConfig | None = None
    max_cost: float = 0.0
    """USD a session may spend on this agent's turns (0: no budget)."""
    num_history_items: int = 0
    """Conversation messages a prompt keeps at most (user messages always; 0: all)."""
    max_old_tool_call_tokens: int = 0
    """Tokens of tool results kept whole in a prompt, newest first (0: the default budget)."""
    max_consecutive_tool_calls: int = 0
    """Identical tool calls in a row that stop a turn (0: no limit)."""
    # Prompt context and hooks (docs/agents.md, "Prompt context" and "Hooks").
    add_environment_info: bool = False
    add_prompt_files: tuple[str, ...] = ()
    skills: tuple[str, ...] = ()
    """Skill sources: ``local`` (SKILL.md files on disk) and URLs (not fetched by greenroom)."""
    add_description_parameter: bool = False
    code_mode_tools: bool = False
    """The tools offered as functions of one JavaScript tool (``_codemode.py``)."""
    hooks: HooksConfig | None = None
    structured_output: StructuredOutput | None = None
    """The JSON schema the agent's final answer must match (checked after each turn)."""
    rag: tuple[RagSource, ...] = ()
    """The ``rag`` sources the agent searches (one search tool each, ``tools/_rag.py``)."""


@attrs.frozen
class AgentFile:
    """A whole agent file: agents in declaration order, named models, team permissions.

    ``providers`` are the file's custom providers; ``mcps`` names its reusable MCP
    definitions. ``warnings`` are ``file:line: path: what`` lines for what the file asks and
    greenroom will not do (ignored keys, external sub-agents, ...); the ones that depend on
    this server (toolsets without a builder, a missing ``docker`` CLI) come from
    :func:`~greenroom.agents._diagnose.diagnose`.
    """

    path: str
    agents: Mapping[str, AgentConfig] = attrs.field(converter=_frozen)
    models: Mapping[str, ModelConfig] = attrs.field(factory=_frozen, converter=_frozen)
    permissions: Permissions | None = None
    safety: str = ""
    """``runtime.safety``: the file-wide default safety policy (an agent's ``safety`` wins)."""
    titles: bool = True
    """``runtime.titles``: whether its sessions get a title written by a model."""
    version: str = ""
    warnings: tuple[str, ...] = ()
    providers: Mapping[str, CustomProvider] = attrs.field(factory=_frozen, converter=_frozen)
    mcps: tuple[str, ...] = ()

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

        A model of a custom provider comes with that provider's endpoint and key variable.
        An alloy (``"a,b"``, or a ``models`` entry listing several) is not one model: see
        :meth:`model_choices`.

        Raises:
            InvalidRequest: ``ref`` names no model (or is ``auto`` and ``auto`` is None), or
                names an alloy.
        """
        model: ModelConfig | None = None
        if ref in self.models:
            model = self.models[ref]
        elif ref == AUTO_MODEL and auto is not None:
            return auto
        elif (inline := split_inline_ref(ref)) is not None:
            model = ModelConfig(name=ref, provider=inline[0], model=inline[1])
        if model is None or (not model.provider and "," in model.model):
            what = "an alloy of several models" if model is not None else "no model"
            raise InvalidRequest(f"model {ref!r} names {what}", path="model")
        custom = self.providers.get(model.provider)
        return apply_custom_provider(model, custom) if custom is not None else model

    def model_choices(self, ref: str) -> list[str]:
        """The single-model refs ``ref`` stands for: itself, or an alloy's parts (expanded).

        ``"a,b"`` and a ``models`` entry without a provider whose ``model`` is ``"a,b"`` are
        alloys; the runtime picks one part per turn.
        """
        out: list[str] = []

        def expand(part: str, depth: int) -> None:
            named = self.models.get(part)
            if "," in part:
                parts = split_alloy(part)
            elif named is not None and not named.provider and "," in named.model and depth < 8:
                parts = split_alloy(named.model)
            else:
                out.append(part)
                return
            for inner in parts:
                expand(inner, depth + 1)

        expand(ref, 0)
        return list(dict.fromkeys(out))


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
            "handoffs": list(agent.handoffs),
            "toolsets": [{"type": t.type, **_thaw(t.options)} for t in agent.toolsets],
            "commands": {name: _command_json(c) for name, c in agent.commands.items()},
            "max_iterations": agent.max_iterations,
            "max_tool_result_tokens": agent.max_tool_result_tokens,
            "add_date": agent.add_date,
            "safety": agent.safety,
            "fallback": {"models": list(agent.fallback.models)} if agent.fallback else None,
            "max_cost": agent.max_cost,
            "num_history_items": agent.num_history_items,
            "max_old_tool_call_tokens": agent.max_old_tool_call_tokens,
            "max_consecutive_tool_calls": agent.max_consecutive_tool_calls,
            "add_environment_info": agent.add_environment_info,
            "add_prompt_files": list(agent.add_prompt_files),
            "skills": list(agent.skills),
            "add_description_parameter": agent.add_description_parameter,
            "code_mode_tools": agent.code_mode_tools,
            "hooks": _hooks_json(agent.hooks) if agent.hooks else None,
            "rag": [source.name for source in agent.rag],
        }
    )


def _hook_json(hook: HookCommand) -> dict[str, Any]:
    return {"type": "command", "command": hook.command, "timeout": hook.timeout}


def _hooks_json(hooks: HooksConfig) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("pre_tool_use", "post_tool_use"):
        matchers: tuple[HookMatcher, ...] = getattr(hooks, key)
        if matchers:
            out[key] = [
                {"matcher": m.matcher, "hooks": [_hook_json(h) for h in m.hooks]} for m in matchers
            ]
    for key in ("session_start", "session_end", "on_user_input"):
        commands: tuple[HookCommand, ...] = getattr(hooks, key)
        if commands:
            out[key] = [_hook_json(h) for h in commands]
    return out


def _model_json(model: ModelConfig) -> dict[str, Any]:
    values = attrs.asdict(model, recurse=False)
    del values["name"]
    values["provider_opts"] = _thaw(model.provider_opts) or None
    facts = values.pop("facts")
    if facts is not None:
        values.update(facts.as_keys())
    values["routing"] = [
        {"model": rule.model, "examples": list(rule.examples)} for rule in model.routing
    ] or None
    return {k: v for k, v in values.items() if v not in (None, "")}


def agent_file_to_json(config: AgentFile) -> dict[str, Any]:
    """The JSON-ready view of ``config`` for ``GET /api/agents/{id}`` (empty keys left out)."""
    out: dict[str, Any] = {}
    if config.version:
        out["version"] = config.version
    out["agents"] = {name: _agent_json(agent) for name, agent in config.agents.items()}
    if config.providers:
        out["providers"] = {
            name: _omit_empty(attrs.asdict(p, filter=lambda a, _: a.name != "name"))
            for name, p in config.providers.items()
        }
    if config.models:
        out["models"] = {name: _model_json(m) for name, m in config.models.items()}
    runtime: dict[str, Any] = {}
    if config.safety:
        runtime["safety"] = config.safety
    if not config.titles:
        runtime["titles"] = False
    if runtime:
        out["runtime"] = runtime
    if config.permissions is not None:
        out["permissions"] = {
            "allow": list(config.permissions.allow),
            "ask": list(config.permissions.ask),
            "deny": list(config.permissions.deny),
        }
    return out
