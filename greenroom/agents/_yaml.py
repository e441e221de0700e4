"""Load and validate an agent file; every fault becomes one ``file:line: path: what`` line.

ruamel.yaml's round-trip loader keeps the line of every key and value, so a problem can point at
the line to fix. The whole file is checked before failing, so one run reports every fault.
What docker-agent's format allows and greenroom will not do as written (keys it does not
implement, sub-agents from a catalog, ...) is accepted and listed in
:attr:`AgentFile.warnings`; anything else wrong (an unknown key, provider, model, agent or
toolset type) is an error. Models are read by ``_yaml_models.py``, ``rag`` by ``_yaml_rag.py``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from greenroom.domain import Permissions
from greenroom.errors import AgentConfigError

from ._config import AgentConfig, AgentFile, ToolsetConfig
from ._rag_config import RagSource
from ._runtime import Command
from ._toolset_types import KNOWN_TOOLSET_TYPES, unknown_type_problem
from ._yaml_checks import (
    IGNORED,
    Checker,
    as_bool,
    as_count,
    as_mapping,
    as_number,
    as_str,
    as_str_list,
    as_version,
    join,
    kind_of,
    line_of,
    own_line,
    plain,
)
from ._yaml_context import (
    CONTEXT_KEYS,
    check_toolset_models,
    check_toolset_routing,
    parse_context,
)
from ._yaml_external import ExternalAgents, merge_external, parse_sub_agents
from ._yaml_lsp import check_lsp_toolset
from ._yaml_models import ModelRefs, parse_fallback, parse_model, parse_providers
from ._yaml_output import parse_structured_output
from ._yaml_rag import agent_rag, parse_rag

_TOP_KEYS = {
    "version",
    "agents",
    "models",
    "permissions",
    "runtime",
    "providers",
    "metadata",
    "mcps",
    "rag",
}
_TOP_IGNORED: set[str] = set()
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
    "fallback",
    "handoffs",
    "max_cost",
    "num_history_items",
    "structured_output",
    "max_consecutive_tool_calls",
    "max_old_tool_call_tokens",
    "rag",
    *CONTEXT_KEYS,
}
_AGENT_IGNORED: set[str] = set()
_AGENT_UNSUPPORTED = {"harness": "harness agents are not supported by greenroom"}
_TOOLSET_IGNORED: set[str] = set()
"""Generic toolset keys greenroom accepts and does not apply (docs/agents.md, Toolsets)."""
_COMMAND_KEYS = {"description", "instruction", "agent"}
_PERMISSION_KEYS = ("allow", "ask", "deny")


def as_amount(value: Any) -> float | None:
    """A non-negative number (USD)."""
    number = as_number(value)
    return number if number is not None and number >= 0 else None


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


# Keys of an ``mcps:`` definition that fill a toolset's empty ones (``env`` is merged instead).
_MCP_FILLED = ("command", "args", "remote", "version", "config", "name", "instruction", "tools")


def _merge_mcp_definition(options: dict[str, Any], definition: Mapping[str, Any]) -> dict[str, Any]:
    """A ``type: mcp`` toolset whose ``ref`` names an ``mcps:`` entry, merged with it (as
    upstream: the definition's ``ref`` replaces the toolset's, its keys fill the toolset's empty
    ones, ``env`` maps are merged with the toolset's values winning)."""
    merged = dict(options)
    merged.pop("ref", None)
    if definition.get("ref"):
        merged["ref"] = definition["ref"]
    for key in (*_MCP_FILLED, "defer"):
        if key in definition and not merged.get(key):
            merged[key] = plain(definition[key])
    env = {**dict(plain(definition.get("env")) or {}), **dict(options.get("env") or {})}
    if env:
        merged["env"] = env
    return merged


def _check_mcps(c: Checker, mcps: Mapping[Any, Any], line: int) -> None:
    """The top-level ``mcps:`` definitions: mappings whose own ``ref`` is ``docker:<name>``."""
    for name, value in mcps.items():
        item_line = line_of(mcps, name, value=False) or line
        definition = as_mapping(value)
        if definition is None:
            c.fail(item_line, f"mcps.{name}", f"expected a mapping, got {kind_of(value)}")
            continue
        ref = definition.get("ref")
        if ref is not None and not (isinstance(ref, str) and ref.startswith("docker:")):
            c.fail(item_line, f"mcps.{name}.ref", "an MCP definition's ref must be docker:<name>")


def _parse_toolsets(
    c: Checker, raw: Any, path: str, line: int, mcps: Mapping[Any, Any]
) -> list[ToolsetConfig]:
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
        if kind is None:
            continue
        if kind not in KNOWN_TOOLSET_TYPES:
            c.fail(
                line_of(mapping, "type") or item_line,
                f"{item_path}.type",
                unknown_type_problem(kind),
            )
            continue
        ref = mapping.get("ref")
        named_ref = isinstance(ref, str) and not ref.startswith("docker:")
        if kind == "mcp" and named_ref and ref not in mcps:
            c.fail(
                line_of(mapping, "ref") or item_line,
                f"{item_path}.ref",
                f"no MCP definition {ref!r} in the file's mcps",
            )
        for key in _TOOLSET_IGNORED & set(mapping):
            c.warn(line_of(mapping, key, value=False) or item_line, f"{item_path}.{key}", IGNORED)
        check_toolset_routing(c, mapping, item_path, item_line)
        if kind == "lsp":
            check_lsp_toolset(c, mapping, item_path, item_line)
        options = {str(k): plain(v) for k, v in mapping.items() if k != "type"}
        definition = as_mapping(mcps.get(ref)) if kind == "mcp" and named_ref else None
        if definition is not None:
            options = _merge_mcp_definition(options, definition)
        toolsets.append(ToolsetConfig(type=kind, options=options, line=item_line))
    return toolsets


def _parse_agent(
    c: Checker,
    name: str,
    raw: Any,
    line: int,
    agents: Mapping[Any, Any],
    refs: ModelRefs,
    mcps: Mapping[Any, Any],
    rag: tuple[Mapping[str, RagSource], set[str]] = ({}, set()),
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
    for key in (
        "max_iterations",
        "max_tool_result_tokens",
        "num_history_items",
        "max_consecutive_tool_calls",
        "max_old_tool_call_tokens",
    ):
        if key in mapping:
            fields[key] = c.typed(mapping, key, path, as_count, "a non-negative integer")
    if "max_cost" in mapping:
        fields["max_cost"] = c.typed(mapping, "max_cost", path, as_amount, "a non-negative number")
    if "add_date" in mapping:
        fields["add_date"] = c.typed(mapping, "add_date", path, as_bool, "a boolean")
    if "safety" in mapping:
        fields["safety"] = _safety(c, mapping, path)
    fields.update(parse_context(c, mapping, path))
    model = fields.get("model")
    if "model" not in mapping:
        c.fail(line, f"{path}.model", "is required")
    elif model is not None and not refs.check(
        c, model, line_of(mapping, "model") or line, f"{path}.model"
    ):
        model = None
    if "fallback" in mapping:
        fields["fallback"] = parse_fallback(
            c, mapping["fallback"], line_of(mapping, "fallback") or line, f"{path}.fallback", refs
        )
    if "structured_output" in mapping:
        fields["structured_output"] = parse_structured_output(
            c,
            mapping["structured_output"],
            line_of(mapping, "structured_output", value=False) or line,
            f"{path}.structured_output",
        )
    if "sub_agents" in mapping:
        fields["sub_agents"] = parse_sub_agents(c, mapping, "sub_agents", path, line, name, agents)
    if "handoffs" in mapping:
        fields["handoffs"] = parse_sub_agents(c, mapping, "handoffs", path, line, name, agents)
    if "toolsets" in mapping:
        toolsets_line = line_of(mapping, "toolsets") or line
        fields["toolsets"] = tuple(
            _parse_toolsets(c, mapping["toolsets"], f"{path}.toolsets", toolsets_line, mcps)
        )
        check_toolset_models(c, fields["toolsets"], f"{path}.toolsets", refs)
    if "rag" in mapping:
        fields["rag"] = agent_rag(c, mapping, path, *rag)
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


def _parse_runtime(c: Checker, raw: Any, line: int) -> tuple[str, bool]:
    """``runtime``: the file's default ``safety`` policy and whether sessions get ``titles``."""
    mapping = as_mapping(raw)
    if mapping is None:
        c.fail(line, "runtime", f"expected a mapping, got {kind_of(raw)}")
        return "", True
    c.keys(mapping, {"safety", "titles"}, set(), "runtime")
    safety = (_safety(c, mapping, "runtime") or "") if "safety" in mapping else ""
    titles = True
    if "titles" in mapping:
        titles = c.typed(mapping, "titles", "runtime", as_bool, "true or false") is not False
    return safety, titles


def _parse_document(
    c: Checker, doc: Any, external: ExternalAgents | None = None
) -> AgentFile | None:
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
    providers = {}
    if "providers" in doc:
        providers = parse_providers(c, doc["providers"], line_of(doc, "providers") or 1)
    raw_models: Mapping[Any, Any] = {}
    if "models" in doc:
        raw_models = c.typed(doc, "models", "", as_mapping, "a mapping") or {}
    raw_providers = as_mapping(doc.get("providers")) or {}
    refs = ModelRefs({str(k): v for k, v in raw_models.items()}, raw_providers)
    models = {}
    for name, raw in raw_models.items():
        line = line_of(raw_models, name, value=False) or 1
        parsed = parse_model(c, str(name), raw, line, refs)
        if parsed is not None:
            models[str(name)] = parsed
    mcps = as_mapping(doc.get("mcps")) or {}
    if "mcps" in doc:
        if as_mapping(doc["mcps"]) is None:
            c.fail(
                line_of(doc, "mcps") or 1, "mcps", f"expected a mapping, got {kind_of(doc['mcps'])}"
            )
        _check_mcps(c, mcps, line_of(doc, "mcps") or 1)
    if "agents" not in doc:
        c.fail(1, "agents", "is required")
        return None
    agents_raw = c.typed(doc, "agents", "", as_mapping, "a mapping")
    if agents_raw is None:
        return None
    if not agents_raw:
        c.fail(line_of(doc, "agents") or 1, "agents", "declares no agent")
    rag = parse_rag(c, doc, refs, models, providers)
    agents = {}
    for name, raw in agents_raw.items():
        line = line_of(agents_raw, name, value=False) or 1
        if not isinstance(name, str):
            c.fail(line, "agents", f"agent name {name!r} is not a string")
            continue
        agent = _parse_agent(c, name, raw, line, agents_raw, refs, mcps, rag)
        if agent is not None:
            agents[name] = agent
    if c.external and external is not None:
        merge_external(c, agents, models, providers, external)
    permissions = None
    if "permissions" in doc:
        permissions = _parse_permissions(c, doc["permissions"], line_of(doc, "permissions") or 1)
    safety, titles = "", True
    if "runtime" in doc:
        safety, titles = _parse_runtime(c, doc["runtime"], line_of(doc, "runtime") or 1)
    if c.problems:
        return None
    return AgentFile(
        path=c.file,
        agents=agents,
        models=models,
        permissions=permissions,
        safety=safety,
        titles=titles,
        version=version,
        warnings=tuple(c.warning_lines()),
        providers=providers,
        mcps=tuple(str(k) for k in mcps),
    )


def parse_agent_file(text: str, file: str, external: ExternalAgents | None = None) -> AgentFile:
    """Parse the text of an agent file; ``file`` names it in error lines and in the result.

    ``external`` resolves sub-agents from a catalog, registry or URL (``greenroom serve``);
    without it they are warned about and left out.

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
    checker.resolve_external = external is not None
    parsed = _parse_document(checker, doc, external)
    if parsed is None:
        first = min(checker.problems, key=lambda p: p[0])
        raise AgentConfigError(checker.lines(), path=first[1])
    return parsed


def load_agent_file(
    path: str | os.PathLike[str], external: ExternalAgents | None = None
) -> AgentFile:
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
    return parse_agent_file(text, name, external)
