"""Cheap token arithmetic on prompts: an estimate before sending, and the two trims of history.

The estimate is docker-agent's heuristic (``pkg/compaction``): four characters a token plus a
few tokens per message, counting content, text parts, reasoning and tool-call names and
arguments. It overestimates code and JSON a little, which is the safe side for deciding to
compact before a model refuses a prompt. The trims work on copies: storage never changes.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from greenroom.domain import ChatMessage

from .providers._base import ToolSpec

CHARS_PER_TOKEN = 4
PER_MESSAGE_TOKENS = 5
"""Role, ids and delimiters of one message."""
COMPACT_AT = 0.9
"""Compact when a prompt is estimated above this fraction of the context window."""
MAX_OLD_TOOL_CALL_TOKENS = 40_000
"""Tool results kept whole in a prompt, newest first (docker-agent's ``MaxToolCallTokens``)."""
TRUNCATED = "[content truncated]"


def message_tokens(message: ChatMessage) -> int:
    # Runs once per message of every prompt (bench/growth.py: 5,000 messages): the empty
    # sequences most messages have are skipped rather than summed through a generator.
    chars = len(message.content) + len(message.reasoning_content)
    if message.multi_content:
        chars += sum(len(part.text) for part in message.multi_content)
    if message.tool_calls:
        chars += sum(len(c.function.name) + len(c.function.arguments) for c in message.tool_calls)
    return chars // CHARS_PER_TOKEN + PER_MESSAGE_TOKENS


def estimate_tokens(messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()) -> int:
    """Tokens ``messages`` (and the tool definitions) are estimated to take in a prompt."""
    total = sum(map(message_tokens, messages))
    for tool in tools:
        total += (len(tool.name) + len(tool.description) + len(str(tool.parameters))) // 4
    return total


def should_compact(estimated: int, context_limit: int | None) -> bool:
    """Over :data:`COMPACT_AT` of a known window (an unknown one never triggers)."""
    return bool(context_limit) and estimated > int(context_limit * COMPACT_AT)  # type: ignore[operator]


def truncate_old_tool_results(
    messages: Sequence[ChatMessage], budget: int = MAX_OLD_TOOL_CALL_TOKENS
) -> list[ChatMessage]:
    """Tool results newer than ``budget`` tokens stay whole; from the first one that does not
    fit, every older one reads :data:`TRUNCATED` (docker-agent's ``truncateOldToolContent``)."""
    out = list(messages)
    if budget <= 0:
        return out
    left = budget
    for index in range(len(out) - 1, -1, -1):
        message = out[index]
        if message.role != "tool":
            continue
        tokens = len(message.content) // CHARS_PER_TOKEN
        if left >= tokens:
            left -= tokens
        else:
            out[index] = attrs.evolve(message, content=TRUNCATED, multi_content=())
            left = 0
    return out


def trim_history(messages: Sequence[ChatMessage], max_items: int) -> list[ChatMessage]:
    """At most ``max_items`` conversation messages, oldest dropped first (docker-agent's
    ``num_history_items``): system and user messages are never dropped, and the results of
    a dropped assistant message's tool calls go with it."""
    conversation = [m for m in messages if m.role != "system"]
    if max_items <= 0 or len(conversation) <= max_items:
        return list(messages)
    to_drop = len(conversation) - max_items
    dropped: set[int] = set()
    calls: set[str] = set()
    for index, message in enumerate(messages):
        if len(dropped) >= to_drop:
            break
        if message.role in ("system", "user"):
            continue
        dropped.add(index)
        calls.update(call.id for call in message.tool_calls)
    return [
        m
        for index, m in enumerate(messages)
        if index not in dropped and not (m.role == "tool" and m.tool_call_id in calls)
    ]
