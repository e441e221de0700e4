"""The messages a model call sees, built from the session's history.

Nothing here changes the history: tool results are capped on copies, and the tool-call pairing is
repaired on the way out: a tool result without its call (or a second result for one call) is
dropped, and a call left without a result (a cancelled turn) gets a synthetic error result, so
provider APIs that insist on the pairing accept the conversation.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator, Sequence

from greenroom.domain import ChatMessage, Item, Message, Session, Summary, cap_tool_result

from ._config import AgentConfig
from ._tokens import MAX_OLD_TOOL_CALL_TOKENS, trim_history, truncate_old_tool_results

NO_RESULT = "No result provided"
SUMMARY_HEADING = "Summary of the conversation so far:"


def system_prompt(
    agent: AgentConfig,
    today: dt.date | None,
    instructions: Sequence[str] = (),
    context: Sequence[str] = (),
) -> str:
    """The agent's instruction, the toolsets' instructions, the date, then ``context``
    (environment info and prompt files, as docker-agent orders them)."""
    parts = [agent.instruction.strip()] if agent.instruction.strip() else []
    parts += [text.strip() for text in instructions if text.strip()]
    if agent.add_date and today is not None:
        parts.append(f"Today's date: {today.isoformat()}")
    parts += [text.strip() for text in context if text.strip()]
    return "\n\n".join(parts)


def summary_message(summary: str) -> ChatMessage:
    return ChatMessage(role="user", content=f"{SUMMARY_HEADING}\n{summary}")


def since_summary(items: tuple[Item, ...]) -> Iterator[ChatMessage | Message]:
    """The last summary (as a user message) and the messages after it; else every message.

    A summary with ``first_kept_entry`` (a compaction that kept the turn it ran in) is
    followed by the messages from that entry up to it, then the ones after it.
    """
    start = 0
    for index in range(len(items) - 1, -1, -1):
        item = items[index]
        if isinstance(item, Summary):
            yield summary_message(item.summary)
            kept = items[item.first_kept_entry : index] if item.first_kept_entry > 0 else ()
            for entry in kept:
                if isinstance(entry, Message) and entry.role != "system":
                    yield entry
            start = index + 1
            break
    for item in items[start:]:
        if isinstance(item, Message) and item.role != "system":
            yield item


def _paired(messages: Iterable[ChatMessage]) -> Iterator[ChatMessage]:
    pending: dict[str, None] = {}

    def unanswered() -> Iterator[ChatMessage]:
        for call_id in pending:
            yield ChatMessage(role="tool", content=NO_RESULT, tool_call_id=call_id, is_error=True)
        pending.clear()

    for chat in messages:
        if chat.role == "tool":
            if chat.tool_call_id in pending:
                del pending[chat.tool_call_id]
                yield chat
            continue
        yield from unanswered()
        if chat.role == "assistant" and chat.tool_calls:
            pending.update(dict.fromkeys(call.id for call in chat.tool_calls))
        yield chat
    yield from unanswered()


def build_messages(
    session: Session,
    agent: AgentConfig,
    *,
    max_tool_result_tokens: int = 0,
    today: dt.date | None = None,
    instructions: Sequence[str] = (),
    num_history_items: int = 0,
    max_old_tool_call_tokens: int = MAX_OLD_TOOL_CALL_TOKENS,
    context: Sequence[str] = (),
) -> tuple[ChatMessage, ...]:
    """System prompt first, then the history since the last summary, ready for a provider.

    Args:
        session: the session whose top-level history is sent (sub-sessions are not).
        agent: the agent answering (its instruction and ``add_date``).
        max_tool_result_tokens: cap of each tool result (0 = none), applied to copies.
        today: the date stamped into the system prompt when the agent has ``add_date``.
        instructions: the toolsets' instructions, appended to the agent's.
        num_history_items: conversation messages kept at most (0: all; see ``_tokens``).
        max_old_tool_call_tokens: tool results beyond this many tokens (newest first) read
            ``[content truncated]``.
        context: environment info and prompt files, after the date.
    """
    history: list[ChatMessage] = []
    for entry in since_summary(session.items):
        if isinstance(entry, Message):
            entry = cap_tool_result(entry, max_tool_result_tokens).message
        history.append(entry)
    history = trim_history(history, num_history_items)
    system = system_prompt(agent, today, instructions, context)
    head = (ChatMessage(role="system", content=system),) if system else ()
    paired = truncate_old_tool_results(list(_paired(history)), max_old_tool_call_tokens)
    return head + tuple(paired)
