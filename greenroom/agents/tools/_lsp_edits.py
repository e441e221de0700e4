"""Positions and text edits of the Language Server Protocol, on the text of a file.

A position is a 0-based line and a column in UTF-16 code units (the protocol's default
encoding); the tools take 1-based lines and 1-based columns in characters, converted here from
the line's text. Lines end at ``\\n``, ``\\r\\n`` or ``\\r`` as the protocol says. Edits are
applied from the last to the first, each against the original text.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from typing import Any

_EOL = re.compile(r"\r\n|\r|\n")


class EditError(Exception):
    """An edit the server sent cannot be applied (the message says why)."""


def line_starts(text: str) -> list[int]:
    """The index where each line of ``text`` starts."""
    return [0, *(m.end() for m in _EOL.finditer(text))]


def _line(text: str, starts: Sequence[int], line: int) -> str:
    start = starts[line]
    end = starts[line + 1] if line + 1 < len(starts) else len(text)
    return text[start:end].rstrip("\r\n")


def utf16_column(text: str, line: int, column: int) -> int:
    """The UTF-16 offset of 0-based character ``column`` on 0-based ``line`` of ``text``
    (a line or column past the end is taken as given: the server decides what it means)."""
    starts = line_starts(text)
    if line < 0 or line >= len(starts):
        return column
    content = _line(text, starts, line)
    head = content[:column]
    return len(head.encode("utf-16-le")) // 2 + max(0, column - len(content))


def _char_column(content: str, utf16: int) -> int:
    """The character index of UTF-16 offset ``utf16`` in ``content`` (clamped to its end)."""
    units = 0
    for index, char in enumerate(content):
        if units >= utf16:
            return index
        units += 2 if ord(char) > 0xFFFF else 1
    return len(content)


def offset_of(text: str, starts: Sequence[int], position: Mapping[str, Any]) -> int:
    """The index in ``text`` of an LSP position (past the end: clamped, as the protocol says)."""
    line, character = position.get("line"), position.get("character")
    if not isinstance(line, int) or not isinstance(character, int) or line < 0 or character < 0:
        raise EditError(f"bad position {dict(position)!r}")
    if line >= len(starts):
        return len(text)
    return starts[line] + _char_column(_line(text, starts, line), character)


def apply_edits(text: str, edits: Sequence[Mapping[str, Any]]) -> str:
    """``text`` with the LSP ``TextEdit`` list applied.

    Raises:
        EditError: a malformed edit, or two edits that overlap.
    """
    starts = line_starts(text)
    spans: list[tuple[int, int, str]] = []
    for edit in edits:
        rng, new = edit.get("range"), edit.get("newText")
        if not isinstance(rng, Mapping) or not isinstance(new, str):
            raise EditError("an edit without range or newText")
        start, end = rng.get("start"), rng.get("end")
        if not isinstance(start, Mapping) or not isinstance(end, Mapping):
            raise EditError("an edit whose range has no start or end")
        first, last = offset_of(text, starts, start), offset_of(text, starts, end)
        if last < first:
            raise EditError("an edit whose range ends before it starts")
        spans.append((first, last, new))
    spans.sort(key=lambda s: (s[0], s[1]))
    for before, after in itertools.pairwise(spans):
        if after[0] < before[1]:
            raise EditError("edits that overlap")
    out = text
    for first, last, new in reversed(spans):
        out = out[:first] + new + out[last:]
    return out


def changes_of(edit: Mapping[str, Any]) -> dict[str, list[Mapping[str, Any]]]:
    """The text edits of a ``WorkspaceEdit`` by document URI (``changes`` and
    ``documentChanges``).

    Raises:
        EditError: it creates, renames or deletes files (not applied), or is malformed.
    """
    found: dict[str, list[Mapping[str, Any]]] = {}
    document_changes = edit.get("documentChanges")
    if isinstance(document_changes, list):
        for change in document_changes:
            if not isinstance(change, Mapping) or "kind" in change:
                raise EditError("the server's edit creates, renames or deletes files")
            document, edits = change.get("textDocument"), change.get("edits")
            uri = document.get("uri") if isinstance(document, Mapping) else None
            if not isinstance(uri, str) or not isinstance(edits, list):
                raise EditError("a malformed document change")
            found.setdefault(uri, []).extend(e for e in edits if isinstance(e, Mapping))
        return found
    changes = edit.get("changes")
    if isinstance(changes, Mapping):
        for uri, edits in changes.items():
            if isinstance(uri, str) and isinstance(edits, list):
                found.setdefault(uri, []).extend(e for e in edits if isinstance(e, Mapping))
    return found
