"""The prompt-context and hook keys of an agent (docker-agent's names and shapes).

``add_environment_info``, ``add_description_parameter`` and ``code_mode_tools`` (the tools as
functions of one JavaScript tool: ``_codemode.py``) are booleans, ``add_prompt_files``
a list of file names, ``skills`` a boolean (``true`` = ``["local"]``) or a list of sources, and
``hooks`` docker-agent's ``HooksConfig``: ``pre_tool_use`` / ``post_tool_use`` are lists of
``{matcher, hooks}``; ``session_start``, ``session_end`` and ``on_user_input`` lists of hooks;
a hook is ``{type: command, command, timeout}`` (seconds, 60 when absent). A malformed hook is
an error with its line, as upstream's validation refuses it; a matcher that is not a valid
regular expression too (upstream skips it with a log line at run time).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ._config import HookCommand, HookMatcher, HooksConfig, ToolsetConfig
from ._yaml_checks import Checker, as_bool, as_mapping, as_str_list, kind_of, line_of, own_line

if TYPE_CHECKING:
    from ._yaml_models import ModelRefs

CONTEXT_KEYS = {
    "add_environment_info",
    "add_prompt_files",
    "skills",
    "add_description_parameter",
    "code_mode_tools",
    "hooks",
}
_MATCHED = ("pre_tool_use", "post_tool_use")
_PLAIN = ("session_start", "session_end", "on_user_input")
_HOOK_KEYS = {"type", "command", "timeout"}
DEFAULT_HOOK_TIMEOUT = 60.0


def parse_context(c: Checker, mapping: Mapping[Any, Any], path: str) -> dict[str, Any]:
    """The fields of :class:`AgentConfig` these keys set (a key in error maps to None)."""
    fields: dict[str, Any] = {}
    for key in ("add_environment_info", "add_description_parameter", "code_mode_tools"):
        if key in mapping:
            fields[key] = c.typed(mapping, key, path, as_bool, "a boolean")
    if "add_prompt_files" in mapping:
        names = c.typed(mapping, "add_prompt_files", path, as_str_list, "a list of file names")
        fields["add_prompt_files"] = tuple(names) if names is not None else None
    if "skills" in mapping:
        fields["skills"] = _skills(c, mapping, path)
    if "hooks" in mapping:
        line = line_of(mapping, "hooks") or own_line(mapping, 1)
        fields["hooks"] = parse_hooks(c, mapping["hooks"], f"{path}.hooks", line)
    return fields


def _skills(c: Checker, mapping: Mapping[Any, Any], path: str) -> tuple[str, ...] | None:
    value = mapping["skills"]
    if isinstance(value, bool):
        return ("local",) if value else ()
    sources = as_str_list(value)
    if sources is None:
        line = line_of(mapping, "skills") or own_line(mapping, 1)
        expected = f"expected a boolean or a list of sources, got {kind_of(value)}"
        c.fail(line, f"{path}.skills", expected)
        return None
    return tuple(sources)


def parse_hooks(c: Checker, raw: Any, path: str, line: int) -> HooksConfig | None:
    mapping = as_mapping(raw)
    if mapping is None:
        c.fail(line, path, f"expected a mapping, got {kind_of(raw)}")
        return None
    before = len(c.problems)
    c.keys(mapping, {*_MATCHED, *_PLAIN}, set(), path)
    fields: dict[str, Any] = {}
    for key in _MATCHED:
        if key in mapping:
            key_line = line_of(mapping, key) or line
            fields[key] = _matchers(c, mapping[key], f"{path}.{key}", key_line)
    for key in _PLAIN:
        if key in mapping:
            key_line = line_of(mapping, key) or line
            fields[key] = _hook_list(c, mapping[key], f"{path}.{key}", key_line)
    if len(c.problems) > before:
        return None
    return HooksConfig(**fields)


def _matchers(c: Checker, raw: Any, path: str, line: int) -> tuple[HookMatcher, ...]:
    if not isinstance(raw, list):
        c.fail(line, path, f"expected a list, got {kind_of(raw)}")
        return ()
    out = []
    for index, item in enumerate(raw):
        item_path, item_line = f"{path}[{index}]", line_of(raw, index) or line
        mapping = as_mapping(item)
        if mapping is None:
            c.fail(item_line, item_path, f"expected a mapping, got {kind_of(item)}")
            continue
        c.keys(mapping, {"matcher", "hooks"}, set(), item_path)
        matcher = mapping.get("matcher", "")
        if not isinstance(matcher, str):
            c.fail(item_line, f"{item_path}.matcher", f"expected a string, got {kind_of(matcher)}")
            continue
        if matcher not in ("", "*"):
            try:
                re.compile(matcher)
            except re.error as exc:
                where = line_of(mapping, "matcher") or item_line
                c.fail(where, f"{item_path}.matcher", f"not a valid regular expression: {exc}")
        hooks_line = line_of(mapping, "hooks") or item_line
        raw_hooks = mapping.get("hooks")
        if raw_hooks is None or raw_hooks == []:
            c.fail(hooks_line, f"{item_path}.hooks", "at least one hook is required")
            continue
        hooks = _hook_list(c, raw_hooks, f"{item_path}.hooks", hooks_line)
        if not hooks:
            continue  # each bad hook is reported
        out.append(HookMatcher(str(matcher), hooks))
    return tuple(out)


def _hook_list(c: Checker, raw: Any, path: str, line: int) -> tuple[HookCommand, ...]:
    if not isinstance(raw, list):
        c.fail(line, path, f"expected a list, got {kind_of(raw)}")
        return ()
    out = []
    for index, item in enumerate(raw):
        hook = _hook(c, item, f"{path}[{index}]", line_of(raw, index) or line)
        if hook is not None:
            out.append(hook)
    return tuple(out)


def _hook(c: Checker, raw: Any, path: str, line: int) -> HookCommand | None:
    mapping = as_mapping(raw)
    if mapping is None:
        c.fail(line, path, f"expected a mapping, got {kind_of(raw)}")
        return None
    c.keys(mapping, _HOOK_KEYS, set(), path)
    kind = mapping.get("type")
    if not kind:
        c.fail(line, f"{path}.type", "is required")
        return None
    if kind != "command":
        where = line_of(mapping, "type") or line
        c.fail(where, f"{path}.type", f"unsupported hook type {kind!r} (only 'command' is)")
        return None
    command = mapping.get("command")
    if not isinstance(command, str) or not command.strip():
        where = line_of(mapping, "command") or line
        c.fail(where, f"{path}.command", "a command hook needs a non-empty command string")
        return None
    timeout = mapping.get("timeout", 0)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0:
        where = line_of(mapping, "timeout") or line
        c.fail(where, f"{path}.timeout", f"expected seconds (a number), got {kind_of(timeout)}")
        return None
    seconds = float(timeout) if timeout > 0 else DEFAULT_HOOK_TIMEOUT
    return HookCommand(str(command), seconds, line=line)


def check_toolset_routing(c: Checker, mapping: Mapping[Any, Any], path: str, line: int) -> None:
    """A toolset's ``toon`` (comma-separated regexes) and ``model`` (a string) are well formed."""
    if "toon" in mapping:
        toon = mapping["toon"]
        where = line_of(mapping, "toon") or line
        if not isinstance(toon, str):
            c.fail(
                where,
                f"{path}.toon",
                f"expected a string of tool-name patterns, got {kind_of(toon)}",
            )
        else:
            for part in toon.split(","):
                try:
                    re.compile(part.strip())
                except re.error as exc:
                    c.fail(
                        where,
                        f"{path}.toon",
                        f"{part.strip()!r} is not a valid regular expression: {exc}",
                    )
    if "model" in mapping and not isinstance(mapping["model"], str):
        where = line_of(mapping, "model") or line
        c.fail(where, f"{path}.model", f"expected a model ref, got {kind_of(mapping['model'])}")


def check_toolset_models(
    c: Checker, toolsets: tuple[ToolsetConfig, ...], path: str, refs: ModelRefs
) -> None:
    """Each toolset's ``model`` names a model of the file (or ``provider/model``)."""
    for index, toolset in enumerate(toolsets):
        model = toolset.options.get("model")
        if isinstance(model, str):
            refs.check(c, model, toolset.line, f"{path}[{index}].model")
