"""Placeholders in toolset options: ``${name}``/``${obj.key}`` and environment variables.

Shared by the toolsets that take text from an agent file (``api``, ``openapi``, ``shell``) and by
the MCP server specs (``mcp/_spec.py``), so those need only this, not another toolset.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

_PLACEHOLDER = re.compile(r"\$\{\s*([A-Za-z_][A-Za-z0-9_]*)(?:\.([A-Za-z_][A-Za-z0-9_]*))?\s*\}")


def expand(text: str, values: Mapping[str, Any], *, quote: bool = False) -> str:
    """``${name}`` and ``${obj.key}`` replaced from ``values``; unknown ones stay verbatim."""

    def one(match: re.Match[str]) -> str:
        head, tail = match.group(1), match.group(2)
        value = values.get(head)
        if tail is not None:
            value = value.get(tail) if isinstance(value, Mapping) else None
        if value is None or isinstance(value, Mapping):
            return match.group(0)
        text = str(value)
        return urllib.parse.quote(text, safe="") if quote else text

    return _PLACEHOLDER.sub(one, text)


def expand_env(text: str, env: Mapping[str, str]) -> str:
    """``${env.NAME}``, ``$NAME`` and ``${NAME}`` replaced by the variable ("" if unset)."""
    out = text
    for key in sorted(env, key=len, reverse=True):
        out = out.replace("${env." + key + "}", env[key])
    out = re.sub(r"\$\{env\.[A-Za-z_][A-Za-z0-9_]*\}", "", out)
    return re.sub(
        r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)",
        lambda m: env.get(m.group(1) or m.group(2), ""),
        out,
    )
