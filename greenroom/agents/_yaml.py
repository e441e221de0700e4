"""Load and validate an agent file; every fault becomes one ``file:line: path: what`` line.

ruamel.yaml's round-trip loader keeps the line of every key and value, so a problem can point at
the line to fix. The whole file is checked before failing, so one run reports every fault.
Keys of docker-agent's format that greenroom does not implement (``hooks``, ``mcps``, ...) are
accepted and listed in :attr:`AgentFile.ignored`; any other key is an error.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from greenroom.domain import Permissions
from greenroom.errors import AgentConfigError

from ._config import AUTO_MODEL, AgentConfig, AgentFile, ToolsetConfig, split_inline_ref
from ._runtime import Command
from ._yaml_checks import (
    Checker,
    as_bool,
    as_count,
    as_mapping,
    as_number,
    as_positive,
    as_str,
    as_str_list,
    as_version,
    join,
    kind_of,
    line_of,
    own_line,
    plain,
)
from .providers._base import ModelConfig

_TOP_KEYS = {"version", "agents", "models", "permissions", "runtime"}
_TOP_IGNORED = {"providers", "mcps", "rag", "metadata"}
SAFETY_POLICIES = ("strict", "balanced", "restricted", "autonomous", "unsafe", "safer", "safe-auto")
_SAFETY_ALIASES = {"unsafe": "autonomous", "safer": "balanced", "safe-auto": "balanced"}
_AGENT_KEYS = {
    "model",
    "description",
    "instruction",
    "welcome_message",
    "sub_agents",
    "toolsets",
    "commands",
    "max_iterations",
    "max_tool_result_tokens",
    "add_date",
    "safety",
}
_AGENT_IGNORED = {
    "handoffs",
    "num_history_items",
    "add_environment_info",
    "add_prompt_files",
    "fallback",
    "structured_output",
    "skills",
    "hooks",
    "rag",
    "max_consecutive_tool_calls",
    "max_old_tool_call_tokens",
}
_AGENT_UNSUPPORTED = {"harness": "harness agents are not supported by greenroom"}
_MODEL_KEYS = {
    "provider",
    "model",
    "base_url",
    "token_key",
    "temperature",
    "max_tokens",
    "title_model",
}
_MODEL_IGNORED = {
    "top_p",
    "frequency_penalty",
    "presence_penalty",
    "provider_opts",
    "thinking_budget",
    "parallel_tool_calls",
    "routing",
    "output_capabilities",
}
_COMMAND_KEYS = {"description", "instruction", "agent"}
_PERMISSION_KEYS = ("allow", "ask", "deny")


def _valid_ref(ref: str, models: Mapping[str, Any]) -> bool:
    return ref in models or ref == AUTO_MODEL or split_inline_ref(ref) is not None


def _ref_problem(ref: str) -> str:
    return f"unknown model {ref!r} (not in models; use a models name, 'auto' or provider/model)"


def _parse_model(
    c: Checker, name: str, raw: Any, line: int, all_models: Mapping[str, Any]
) -> ModelConfig | None:
    path = f"models.{name}"
    mapping = as_mapping(raw)
    if mapping is None:
        c.fail(line, path, f"expected a mapping, got {kind_of(raw)}")
        return None
    c.keys(mapping, _MODEL_KEYS, _MODEL_IGNORED, path)
    fields: dict[str, Any] = {}
    for key in ("provider", "model"):
        if key not in mapping:
            c.fail(line, join(path, key), "is required")
    for key in ("provider", "model", "base_url", "token_key", "title_model"):
        if key in mapping:
            fields[key] = c.typed(mapping, key, path, as_str, "a string")
    if "temperature" in mapping:
        fields["temperature"] = c.typed(mapping, "temperature", path, as_number, "a number")
    if "max_tokens" in mapping:
        fields["max_tokens"] = c.typed(
            mapping, "max_tokens", path, as_positive, "a positive integer"
        )
    title = fields.get("title_model")
    if title and not _valid_ref(title, all_models):
        c.fail(line_of(mapping, "title_model") or line, f"{path}.title_model", _ref_problem(title))
    if not fields.get("provider") or not fields.get("model"):
        return None
    return ModelConfig(name=name, **{k: v for k, v in fields.items() if v is not None})


def _command_entries(c: Checker, raw: Any, path: str, line: int) -> list[tuple[Any, Any, int]]:
    """``(name, value, line)`` of a commands map or a list of single-key maps."""
    entries: list[tuple[Any, Any, int]] = []
    if isinstance(raw, Mapping):
        for name, value in raw.items():
            entries.append((name, value, line_of(raw, name, value=False) or line))
    elif isinstance(raw, list):
        for index, item in enumerate(raw):
            item_line = line_of(raw, index) or line
            if not isinstance(item, Mapping) or len(item) != 1:
                c.fail(item_line, f"{path}[{index}]", "expected a mapping with a single key")
                continue
            ((name, value),) = item.items()
            entries.append((name, value, item_line))
    else:
        c.fail(line, path, f"expected a mapping or a list, got {kind_of(raw)}")
    return entries


def _parse_commands(
    c: Checker, raw: Any, path: str, line: int, agents: Mapping[Any, Any]
) -> dict[str, Command]:
    commands: dict[str, Command] = {}
    for name, value, value_line in _command_entries(c, raw, path, line):
        cmd_path = join(path, name)
        if not isinstance(name, str) or not name:
            c.fail(value_line, path, f"command name {name!r} is not a non-empty string")
            continue
        if name in commands:
            c.fail(value_line, cmd_path, "duplicate command")
            continue
        if isinstance(value, str):
            commands[name] = Command(instruction=str(value))
            continue
        mapping = as_mapping(value)
        if mapping is None:
            c.fail(value_line, cmd_path, f"expected a string or a mapping, got {kind_of(value)}")
            continue
        c.keys(mapping, _COMMAND_KEYS, set(), cmd_path)
        fields = {
            key: c.typed(mapping, key, cmd_path, as_str, "a string") or ""
            for key in _COMMAND_KEYS
            if key in mapping
        }
        target = fields.get("agent", "")
        if target and target not in agents:
            c.fail(
                line_of(mapping, "agent") or value_line,
                f"{cmd_path}.agent",
                f"unknown agent {target!r}",
            )
        if not fields.get("instruction") and not target:
            c.fail(value_line, cmd_path, "needs an instruction or an agent")
        commands[name] = Command(**fields)
    return commands


def _parse_toolsets(c: Checker, raw: Any, path: str, line: int) -> list[ToolsetConfig]:
    if not isinstance(raw, list):
        c.fail(line, path, f"expected a list, got {kind_of(raw)}")
        return []
    toolsets = []
    for index, item in enumerate(raw):
        item_path = f"{path}[{index}]"
        item_line = line_of(raw, index) or line
        mapping = as_mapping(item)
        if mapping is None:
            c.fail(item_line, item_path, f"expected a mapping, got {kind_of(item)}")
            continue
        if "type" not in mapping:
            c.fail(item_line, f"{item_path}.type", "is required")
            continue
        kind = c.typed(mapping, "type", item_path, as_str, "a string")
        if kind is not None:
            options = {str(k): plain(v) for k, v in mapping.items() if k != "type"}
            toolsets.append(ToolsetConfig(type=kind, options=options))
    return toolsets


def _parse_agent(
    c: Checker,
    name: str,
    raw: Any,
    line: int,
    agents: Mapping[Any, Any],
    models: Mapping[str, Any],
) -> AgentConfig | None:
    path = f"agents.{name}"
    mapping = as_mapping(raw)
    if mapping is None:
        c.fail(line, path, f"expected a mapping, got {kind_of(raw)}")
        return None
    c.keys(mapping, _AGENT_KEYS, _AGENT_IGNORED, path, _AGENT_UNSUPPORTED)
    fields: dict[str, Any] = {}
    for key in ("model", "description", "instruction", "welcome_message"):
        if key in mapping:
            fields[key] = c.typed(mapping, key, path, as_str, "a string")
    for key in ("max_iterations", "max_tool_result_tokens"):
        if key in mapping:
            fields[key] = c.typed(mapping, key, path, as_count, "a non-negative integer")
    if "add_date" in mapping:
        fields["add_date"] = c.typed(mapping, "add_date", path, as_bool, "a boolean")
    if "safety" in mapping:
        fields["safety"] = _safety(c, mapping, path)
    model = fields.get("model")
    if "model" not in mapping:
        c.fail(line, f"{path}.model", "is required")
    elif model is not None and not _valid_ref(model, models):
        c.fail(line_of(mapping, "model") or line, f"{path}.model", _ref_problem(model))
    if "sub_agents" in mapping:
        subs = c.typed(mapping, "sub_agents", path, as_str_list, "a list of strings") or []
        for index, sub in enumerate(subs):
            if sub not in agents or sub == name:
                sub_line = line_of(mapping["sub_agents"], index) or line
                what = "an agent cannot be its own sub-agent" if sub == name else "unknown agent"
                c.fail(sub_line, f"{path}.sub_agents[{index}]", f"{what} {sub!r}")
        fields["sub_agents"] = tuple(subs)
    if "toolsets" in mapping:
        toolsets_line = line_of(mapping, "toolsets") or line
        fields["toolsets"] = tuple(
            _parse_toolsets(c, mapping["toolsets"], f"{path}.toolsets", toolsets_line)
        )
    if "commands" in mapping:
        commands_line = line_of(mapping, "commands") or line
        fields["commands"] = _parse_commands(
            c, mapping["commands"], f"{path}.commands", commands_line, agents
        )
    if not model or any(v is None for v in fields.values()):
        return None
    return AgentConfig(name=name, **fields)


def _parse_permissions(c: Checker, raw: Any, line: int) -> Permissions | None:
    mapping = as_mapping(raw)
    if mapping is None:
        c.fail(line, "permissions", f"expected a mapping, got {kind_of(raw)}")
        return None
    c.keys(mapping, set(_PERMISSION_KEYS), set(), "permissions")
    lists = {
        key: c.typed(mapping, key, "permissions", as_str_list, "a list of strings") or []
        for key in _PERMISSION_KEYS
        if key in mapping
    }
    return Permissions(**lists)


def _safety(c: Checker, mapping: Mapping[Any, Any], path: str) -> str | None:
    value = c.typed(mapping, "safety", path, as_str, "a string")
    if value is None:
        return None
    if value not in SAFETY_POLICIES:
        line = line_of(mapping, "safety") or own_line(mapping, 1)
        c.fail(line, join(path, "safety"), f"expected one of {', '.join(SAFETY_POLICIES)}")
        return None
    return _SAFETY_ALIASES.get(value, value)


def _parse_runtime(c: Checker, raw: Any, line: int) -> str:
    mapping = as_mapping(raw)
    if mapping is None:
        c.fail(line, "runtime", f"expected a mapping, got {kind_of(raw)}")
        return ""
    c.keys(mapping, {"safety"}, set(), "runtime")
    return (_safety(c, mapping, "runtime") or "") if "safety" in mapping else ""


def _parse_document(c: Checker, doc: Any) -> AgentFile | None:
    if doc is None:
        c.fail(1, "(document)", "the file is empty; expected a mapping with 'agents'")
        return None
    if not isinstance(doc, Mapping):
        c.fail(own_line(doc, 1), "(document)", f"expected a mapping, got {kind_of(doc)}")
        return None
    c.keys(doc, _TOP_KEYS, _TOP_IGNORED, "")
    version = ""
    if "version" in doc:
        version = c.typed(doc, "version", "", as_version, "a string") or ""
    raw_models: Mapping[Any, Any] = {}
    if "models" in doc:
        raw_models = c.typed(doc, "models", "", as_mapping, "a mapping") or {}
    model_names = {str(k): v for k, v in raw_models.items()}
    models = {}
    for name, raw in raw_models.items():
        line = line_of(raw_models, name, value=False) or 1
        parsed = _parse_model(c, str(name), raw, line, model_names)
        if parsed is not None:
            models[str(name)] = parsed
    if "agents" not in doc:
        c.fail(1, "agents", "is required")
        return None
    agents_raw = c.typed(doc, "agents", "", as_mapping, "a mapping")
    if agents_raw is None:
        return None
    if not agents_raw:
        c.fail(line_of(doc, "agents") or 1, "agents", "declares no agent")
    agents = {}
    for name, raw in agents_raw.items():
        line = line_of(agents_raw, name, value=False) or 1
        if not isinstance(name, str):
            c.fail(line, "agents", f"agent name {name!r} is not a string")
            continue
        agent = _parse_agent(c, name, raw, line, agents_raw, model_names)
        if agent is not None:
            agents[name] = agent
    permissions = None
    if "permissions" in doc:
        permissions = _parse_permissions(c, doc["permissions"], line_of(doc, "permissions") or 1)
    safety = ""
    if "runtime" in doc:
        safety = _parse_runtime(c, doc["runtime"], line_of(doc, "runtime") or 1)
    if c.problems:
        return None
    return AgentFile(
        path=c.file,
        agents=agents,
        models=models,
        permissions=permissions,
        safety=safety,
        version=version,
        ignored=tuple(text for _, text in sorted(c.ignored)),
    )


def parse_agent_file(text: str, file: str) -> AgentFile:
    """Parse the text of an agent file; ``file`` names it in error lines and in the result.

    Raises:
        AgentConfigError: the YAML is malformed or does not describe a valid agent team.
    """
    try:
        doc = YAML(typ="rt").load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        what = "; ".join(str(p) for p in (exc.context, exc.problem) if p)
        raise AgentConfigError([f"{file}:{line}: (yaml): {what}"], path="(yaml)") from None
    except YAMLError as exc:
        raise AgentConfigError([f"{file}:1: (yaml): {exc}"], path="(yaml)") from None
    checker = Checker(file)
    parsed = _parse_document(checker, doc)
    if parsed is None:
        first = min(checker.problems, key=lambda p: p[0])
        raise AgentConfigError(checker.lines(), path=first[1])
    return parsed


def load_agent_file(path: str | os.PathLike[str]) -> AgentFile:
    """Read and parse the agent file at ``path``.

    Raises:
        AgentConfigError: the file cannot be read or is not a valid agent file.
    """
    name = os.fspath(path)
    try:
        with open(name, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise AgentConfigError([f"{name}: cannot read: {reason}"], path="(file)") from None
    return parse_agent_file(text, name)
