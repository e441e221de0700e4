"""The keys of an ``lsp`` toolset, checked when the agent file is read (docker-agent's rules).

``command`` is required (upstream refuses the file without it); ``file_types`` is a list of
extensions; ``version`` (upstream's auto-install of the command) is accepted and not applied.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._yaml_checks import IGNORED, Checker, as_str_list, kind_of, line_of


def check_lsp_toolset(c: Checker, mapping: Mapping[Any, Any], path: str, line: int) -> None:
    command = mapping.get("command")
    if not isinstance(command, str) or not command:
        where = line_of(mapping, "command") or line
        c.fail(where, f"{path}.command", "lsp toolset requires a command to be set")
    if "file_types" in mapping and as_str_list(mapping["file_types"]) is None:
        where = line_of(mapping, "file_types") or line
        got = kind_of(mapping["file_types"])
        c.fail(where, f"{path}.file_types", f"expected a list of extensions, got {got}")
    if "version" in mapping:
        where = line_of(mapping, "version", value=False) or line
        c.warn(where, f"{path}.version", f"{IGNORED} (the command must be on PATH)")
