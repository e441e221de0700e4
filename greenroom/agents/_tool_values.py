"""What a tool call gives back: the values the runtime contract and every tool share.

They sit below ``_runtime.py`` (whose ``SupportsToolRerun`` returns a :class:`ToolResult`) and
below the ``tools`` package, so neither has to name the other; ``tools/_base.py`` re-exports them.
"""

from __future__ import annotations

from typing import Any

import attrs


@attrs.frozen
class Image:
    data: str  # base64
    mime_type: str


@attrs.frozen
class ToolResult:
    """What a tool returns: ``output`` for the model, ``meta`` for user interfaces only."""

    output: str
    is_error: bool = False
    meta: Any = None
    images: tuple[Image, ...] = ()


def error(output: str, meta: Any = None) -> ToolResult:
    return ToolResult(output, is_error=True, meta=meta)
