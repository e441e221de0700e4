"""A Server-Sent Events parser over an httpx response's lines.

A plain async iterator (not an async generator), so a reader may stop mid-stream without
leaving a generator for the garbage collector. Frames without data (``retry:`` only, comments
such as ``: ping``) are reported as :class:`Frame` with ``data`` None, so a reader can treat
them as signs of life.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import attrs


@attrs.frozen
class Frame:
    id: int | None = None
    data: Any = None  # the decoded JSON of the data lines; None for comments and empty frames


class SSEParser:
    def __init__(self, lines: AsyncIterator[str]) -> None:
        self._lines = lines
        self._done = False

    def __aiter__(self) -> SSEParser:
        return self

    async def __anext__(self) -> Frame:
        if self._done:
            raise StopAsyncIteration
        ident: int | None = None
        data: list[str] = []
        seen = False
        while True:
            try:
                line = await self._lines.__anext__()
            except StopAsyncIteration:
                self._done = True
                if not seen:
                    raise
                line = ""
            line = line.rstrip("\r")
            if not line:
                if seen:
                    return Frame(ident, _decode(data))
                continue
            seen = True
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "id" and value.isdigit():
                ident = int(value)
            elif field == "data":
                data.append(value)


def _decode(lines: list[str]) -> Any:
    text = "\n".join(lines)
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None
