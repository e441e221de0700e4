"""A toolset's ``toon``: the results of the named tools re-encoded as TOON for the model.

``toon`` is a comma-separated list of regular expressions matched anywhere in a tool's name
(docker-agent's rule: ``".*"`` takes every tool of the toolset). A matching tool's output that
is a JSON object is re-encoded in TOON (Token-Oriented Object Notation, the ``toon-format``
package: decision 0017), which carries the same data in fewer tokens; any other output
(an error, plain text, a JSON array) is passed on as it is.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from typing import Any

import attrs

from ..providers._base import ToolSpec
from ._base import Tool, ToolAnnotations, ToolResult

log = logging.getLogger(__name__)


def toon_patterns(value: object) -> tuple[re.Pattern[str], ...]:
    """The patterns of a ``toon`` value ("" or not a string: none). Raises re.error."""
    if not isinstance(value, str) or not value.strip():
        return ()
    return tuple(re.compile(part.strip()) for part in value.split(","))


def to_toon(output: str) -> str | None:
    """``output`` in TOON when it is a JSON object, else None."""
    try:
        value = json.loads(output)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    from toon_format import encode  # small, but only agents with ``toon`` need it

    try:
        return encode(value)
    except Exception:  # the encoder refusing a value leaves the JSON as it was
        log.warning("TOON encoding failed; the JSON result is kept", exc_info=True)
        return None


@attrs.frozen
class ToonTool:
    """``inner`` whose JSON-object results are re-encoded as TOON."""

    inner: Tool

    @property
    def spec(self) -> ToolSpec:
        return self.inner.spec

    @property
    def annotations(self) -> ToolAnnotations:
        return self.inner.annotations

    @property
    def category(self) -> str:
        return self.inner.category

    async def call(self, arguments: Mapping[str, Any]) -> ToolResult:
        result = await self.inner.call(arguments)
        if result.is_error:
            return result
        encoded = to_toon(result.output)
        return result if encoded is None else attrs.evolve(result, output=encoded)


def with_toon(tool: Tool, patterns: tuple[re.Pattern[str], ...]) -> Tool:
    """``tool`` wrapped when one of ``patterns`` matches its name, else itself."""
    if any(p.search(tool.spec.name) for p in patterns):
        return ToonTool(tool)
    return tool
