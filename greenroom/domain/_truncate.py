"""Middle-out truncation of tool results, applied to the copies sent to a model, never to storage.

Tokens are estimated as bytes / 4. A result over the cap keeps its head and its tail and loses
the middle, because tool output usually says what it is at the start and how it ended at the end.
"""

from __future__ import annotations

import attrs

from ._types import Message, MessagePart

MARKER = "\n[...tool result truncated: middle omitted...]\n"
_SHORT_MARKER = "..."


def estimate_tokens(text: str) -> int:
    return len(text.encode()) // 4


def _head(data: bytes, size: int) -> bytes:
    # Shrink to a UTF-8 character boundary: never cut a multi-byte character in half.
    while 0 < size < len(data) and (data[size] & 0xC0) == 0x80:
        size -= 1
    return data[:size]


def _tail(data: bytes, size: int) -> bytes:
    start = len(data) - size
    while start < len(data) and (data[start] & 0xC0) == 0x80:
        start += 1
    return data[start:]


def truncate_middle(text: str, max_bytes: int) -> str:
    """``text`` if it fits in ``max_bytes`` (UTF-8), else head + marker + tail within the budget."""
    data = text.encode()
    if len(data) <= max_bytes:
        return text
    for marker in (MARKER, _SHORT_MARKER):
        keep = max_bytes - len(marker.encode())
        if keep >= 2:
            head = _head(data, (keep + 1) // 2)
            tail = _tail(data, keep // 2)
            return head.decode() + marker + tail.decode()
    return ""


def cap_tool_result(message: Message, max_tokens: int) -> Message:
    """Cap a tool message's content and text parts to ``max_tokens`` in total (0 = no cap).

    Content is charged first, then text parts left to right; the first text part that repeats
    the content is rewritten with it and charged once. Idempotent.
    """
    if max_tokens <= 0 or message.role != "tool":
        return message
    budget = max_tokens * 4
    original = message.content
    content = truncate_middle(original, budget)
    budget -= len(content.encode())
    parts: list[MessagePart] = []
    duplicate_pending = bool(original)
    for part in message.message.multi_content:
        if part.type == "text":
            if duplicate_pending and part.text == original:
                duplicate_pending = False
                part = attrs.evolve(part, text=content)
            else:
                text = truncate_middle(part.text, max(budget, 0))
                budget -= len(text.encode())
                part = attrs.evolve(part, text=text)
        parts.append(part)
    chat = attrs.evolve(message.message, content=content, multi_content=tuple(parts))
    return attrs.evolve(message, message=chat)
