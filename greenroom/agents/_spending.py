"""What a turn spends: budgets checked before a model call, the ``token_usage`` of a call, and
the repeated-tool-call guard (``max_consecutive_tool_calls``)."""

from __future__ import annotations

import attrs

from greenroom.domain import (
    MessageUsage,
    Session,
    SubSession,
    TokenUsageInfo,
    ToolCall,
    Usage,
)
from greenroom.errors import BudgetExceeded

from ._config import AgentConfig
from ._runtime import TurnIO
from ._tokens import estimate_tokens
from .providers._base import ModelRequest
from .providers._facts import PER_TOKENS, ModelFacts


def total_cost(session: Session) -> float:
    """What ``session`` and its finished sub-sessions (delegated tasks) have cost."""
    subs = (item.session for item in session.items if isinstance(item, SubSession))
    return session.cost + sum(total_cost(sub) for sub in subs)


def spent(io: TurnIO) -> float:
    """What the session a frame belongs to has cost so far: its own calls, its finished
    sub-sessions, and, inside a delegated task, the delegating frames' (as far up as it goes)."""
    parent = getattr(io, "parent", None)  # a sub-session's IO (ChildIO) knows its parent
    return total_cost(io.session) + (spent(parent) if parent is not None else 0.0)


def check_budget(
    agent: AgentConfig, max_session_cost: float, io: TurnIO, facts: ModelFacts, estimate: int
) -> None:
    """Raise BudgetExceeded when a call of ``estimate`` input tokens would take the session past
    its budget: the lower of the agent's ``max_cost`` and the server's (0: none). A team's
    delegated tasks count toward it."""
    limits = [
        (value, what)
        for value, what in (
            (agent.max_cost, f"max_cost of agent {agent.name}"),
            (max_session_cost, "--max-session-cost"),
        )
        if value > 0
    ]
    if not limits:
        return
    budget, what = min(limits)
    so_far = spent(io)
    upcoming = estimate * (facts.input_price or 0.0) / PER_TOKENS
    if so_far + upcoming > budget:
        raise BudgetExceeded(
            f"the session has cost ${so_far:.4f}; the next model call (about ${upcoming:.4f} of "
            f"input) would take it past its budget of ${budget:.4f} ({what})"
        )


def usage_info(
    session: Session, usage: Usage, cost: float | None, facts: ModelFacts, model: str
) -> TokenUsageInfo:
    """A ``token_usage`` body: the session's totals (after this call), the context this call
    held against the window, and the call itself (``last_message``)."""
    return TokenUsageInfo(
        input_tokens=session.input_tokens,
        output_tokens=session.output_tokens,
        context_length=(
            usage.input_tokens
            + usage.cached_input_tokens
            + usage.cached_write_tokens
            + usage.output_tokens
        ),
        context_limit=facts.context or 0,
        cost=session.cost if cost is not None or session.cost else None,
        last_message=MessageUsage(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cached_input_tokens=usage.cached_input_tokens,
            cached_write_tokens=usage.cached_write_tokens,
            reasoning_tokens=usage.reasoning_tokens,
            cost=cost,
            model=model,
        ),
    )


def worth_compacting(request: ModelRequest, facts: ModelFacts) -> bool:
    """Whether the conversation is a real share of the window (a system prompt and tools that
    fill it alone are not helped by a summary, and would be summarised on every call)."""
    history = estimate_tokens([m for m in request.messages if m.role != "system"])
    return history * 4 > (facts.context or 0)


@attrs.define
class Repeats:
    """How many model responses in a row asked for the same tool calls (same arguments)."""

    last: tuple[tuple[str, str], ...] = ()
    count: int = 0

    def seen(self, calls: tuple[ToolCall, ...]) -> int:
        key = tuple((c.function.name, c.function.arguments) for c in calls)
        self.count = self.count + 1 if key == self.last else 1
        self.last = key
        return self.count
