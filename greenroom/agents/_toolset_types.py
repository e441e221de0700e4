"""docker-agent's toolset types: every ``type`` an agent file may name, whatever greenroom serves.

A type missing from :data:`KNOWN_TOOLSET_TYPES` is a mistake in the file (``shel``); a known type
without a builder in ``TOOLSET_BUILDERS`` is one greenroom does not serve yet (a warning).
"""

from __future__ import annotations

import difflib

KNOWN_TOOLSET_TYPES = frozenset(
    {
        "a2a",
        "api",
        "background_agents",
        "fetch",
        "filesystem",
        "lsp",
        "mcp",
        "memory",
        "model_picker",
        "openapi",
        "script",
        "shell",
        "tasks",
        "think",
        "todo",
        "user_prompt",
    }
)
"""The types docker-agent's toolset registry builds (its ``teamloader`` registry)."""


def unknown_type_problem(kind: str) -> str:
    """The error text for an unknown toolset type, with the closest known one when there is."""
    close = difflib.get_close_matches(kind, sorted(KNOWN_TOOLSET_TYPES), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    known = ", ".join(sorted(KNOWN_TOOLSET_TYPES))
    return f"unknown toolset type {kind!r}{hint}; known types: {known}"
