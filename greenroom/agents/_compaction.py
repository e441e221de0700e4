"""Compaction: a model summarises the history, and the summary stands in for it in prompts.

docker-agent's behaviour (``pkg/compaction``, ``pkg/runtime/session_compaction.go``): a
``session_compaction`` event ``started``, the summary request, a stored summary item and a
``session_summary`` event, then ``session_compaction`` ``completed`` (also when it failed).

What greenroom adds:

- The turn being answered is kept: the summary covers the history before the last user
  message, and that message and what followed it stay in the prompt after the summary
  (``Summary.first_kept_entry``). When there is nothing before it, everything is summarised.
- The conversation goes to the summary model as one transcript (roles, tool calls and results
  as text), so the request needs no tool definitions and any part of it can be cut off.
- The summary request must itself fit: when it is estimated over the window (or the provider
  says it overflowed), the oldest half is summarised first and the rest is summarised after
  that summary, recursively, at most :data:`MAX_CALLS` model calls in all.
- Every call's tokens and cost count for the session; the summary item carries their total.
"""

from __future__ import annotations

import attrs

from greenroom.domain import (
    ChatMessage,
    Item,
    Message,
    SessionCompaction,
    SessionSummaryEvent,
    Summary,
    Usage,
    Warning,
)
from greenroom.errors import ModelContextOverflow
from greenroom.observe import metrics, model_call, model_call_span, record_model_response

from ._prompt import since_summary
from ._runtime import TurnIO
from ._tokens import CHARS_PER_TOKEN
from .providers._base import Delta, ModelConfig, ModelRequest, Provider
from .providers._facts import ModelFacts, facts_for

SYSTEM_PROMPT = (
    "You summarise conversations between a user and an AI assistant so that the assistant can "
    "go on without the full transcript. Be concise and factual; keep names, paths, numbers, "
    "decisions and open questions."
)
USER_PROMPT = (
    "Write a summary of the conversation above for continuing it: what was asked, what was "
    "done and found (files, commands, results), what is being done now and what comes next. "
    "The new session will not see the conversation itself, only your summary."
)
SUMMARY_MAX_TOKENS = 2048
"""Output tokens a summary may take (less when the model's output limit is lower)."""
MAX_CALLS = 16
"""Summary requests one compaction may make (splitting a history that does not fit)."""
EMPTY = "Session is empty. Start a conversation before compacting."


async def _ignore(_: Delta) -> None:
    pass


def _render(entry: ChatMessage | Message) -> str:
    chat = entry.message if isinstance(entry, Message) else entry
    text = chat.content or "".join(part.text for part in chat.multi_content)
    if chat.role == "tool":
        return f"[tool result]\n{text}"
    calls = "".join(
        f"\n[tool call] {call.function.name}({call.function.arguments})" for call in chat.tool_calls
    )
    return f"[{chat.role}]\n{text}{calls}"


def _kept_from(items: tuple[Item, ...]) -> int:
    """The index of the last user message after the last summary (0: keep nothing)."""
    for index in range(len(items) - 1, -1, -1):
        item = items[index]
        if isinstance(item, Summary):
            return 0
        if isinstance(item, Message) and item.role == "user" and not item.implicit:
            return index
    return 0


@attrs.define
class _Call:
    """The summary requests of one compaction: their model, budget and running totals."""

    model: ModelConfig
    provider: Provider
    facts: ModelFacts
    additional: str = ""
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = 0.0

    @property
    def budget(self) -> int | None:
        """Characters a transcript may take (None: the window is unknown)."""
        if not self.facts.context:
            return None
        window = max(self.facts.context - self.max_tokens, 256) * CHARS_PER_TOKEN
        return window - len(SYSTEM_PROMPT) - len(USER_PROMPT) - len(self.additional)

    @property
    def max_tokens(self) -> int:
        """The summary's output cap: it and the request must fit in the window together."""
        limits = [SUMMARY_MAX_TOKENS, self.facts.output or SUMMARY_MAX_TOKENS]
        if self.facts.context:
            limits.append(max(self.facts.context // 10, 32))
        return min(limits)

    async def summarise(self, chunks: list[str]) -> str:
        """One summary of ``chunks`` (oldest first), splitting when they do not fit."""
        text = "\n\n".join(chunks)
        budget = self.budget
        if budget is not None and len(text) > budget:
            return await self._split(chunks, budget)
        try:
            return await self._ask(text)
        except ModelContextOverflow:
            if self.calls >= MAX_CALLS:
                raise
            return await self._split(chunks, len(text) // 2)

    async def _split(self, chunks: list[str], budget: int) -> str:
        if self.calls >= MAX_CALLS:
            raise ModelContextOverflow("the history is too long to summarise within the window")
        if len(chunks) == 1:  # one entry alone is too long: keep its start and its end
            half = max(budget // 2 - 20, 1)
            text = chunks[0]
            return await self.summarise([f"{text[:half]}\n[...]\n{text[-half:]}"])
        middle = len(chunks) // 2
        earlier = await self.summarise(chunks[:middle])
        return await self.summarise([f"[summary of the earlier part]\n{earlier}", *chunks[middle:]])

    async def _ask(self, transcript: str) -> str:
        self.calls += 1
        prompt = USER_PROMPT
        if self.additional:
            prompt += f"\n\nAdditional instructions from the user: {self.additional}"
        request = ModelRequest(
            model=attrs.evolve(self.model, max_tokens=self.max_tokens),
            messages=(
                ChatMessage(role="system", content=SYSTEM_PROMPT),
                ChatMessage(role="user", content=f"{transcript}\n\n---\n\n{prompt}"),
            ),
            max_tokens=self.max_tokens,
            thinking=False,  # a summary needs no reasoning budget (as titles)
        )
        model = self.model
        with (
            model_call(model.provider, model.model) as call,  # counted and timed (metrics)
            model_call_span(model.provider, model.model, purpose="compaction") as traced,
        ):
            response = await self.provider.complete(request, _ignore)
            record_model_response(traced, response)
        usage = response.usage
        self.input_tokens += usage.input_tokens + usage.cached_input_tokens
        self.output_tokens += usage.output_tokens
        facts = self.facts
        answered = response.answered_by  # a fallback's answer is priced at its own price
        if answered is not None:
            facts = facts_for(answered.provider, answered.model, answered.facts)
        cost = facts.cost(usage)
        self.cost = None if cost is None or self.cost is None else self.cost + cost
        call.usage(usage.input_tokens, usage.output_tokens, cost or 0.0)
        return response.content.strip()


async def compact(
    io: TurnIO,
    agent_name: str,
    model: ModelConfig,
    provider: Provider,
    facts: ModelFacts,
    *,
    additional: str = "",
) -> Summary | None:
    """Summarise ``io.session``'s history and store the summary; None when there was nothing
    to summarise (a ``warning`` says so) or the model answered nothing.

    Raises:
        ModelError: a summary request failed (the events are sent all the same).
    """
    session = io.session
    await io.emit(SessionCompaction("started", session.id, agent_name))
    try:
        items = session.items
        kept = _kept_from(items)
        entries = list(since_summary(items[:kept] if kept else items))
        if kept and not any(isinstance(e, Message) for e in entries):
            kept = 0  # nothing but the turn itself: summarise it all
            entries = list(since_summary(items))
        chunks = [text for text in map(_render, entries) if text.strip()]
        if not any(isinstance(e, Message) for e in entries):
            if not additional:
                await io.emit(Warning(EMPTY, agent_name))
            return None
        call = _Call(model, provider, facts, additional)
        try:
            text = await call.summarise(chunks)
        except Exception:
            metrics().compactions.labels("failed").inc()
            raise
        finally:
            if call.calls:
                io.add_usage(call.input_tokens, call.output_tokens, call.cost or 0.0)
        if not text:
            return None
        summary = Summary(
            summary=text,
            first_kept_entry=kept,
            cost=call.cost or 0.0,
            model=model.ref,
            usage=Usage(input_tokens=call.input_tokens, output_tokens=call.output_tokens),
        )
        await io.add_summary(summary)
        metrics().compactions.labels("done").inc()
        await io.emit(SessionSummaryEvent(text, session.id, agent_name))
        return summary
    finally:
        await io.emit(SessionCompaction("completed", session.id, agent_name))
