"""What context management costs per turn, and what one compaction costs. Run by hand.

    .venv/bin/python bench/compaction.py [--messages 200] [--size 2000] [--repeat 200]

Per turn (CPU, this process): a model call's prompt is built from the session's history
(``build_messages``: the summary, the trims, the truncation of old tool results, the pairing)
and estimated (``estimate_tokens``, 4 characters a token) before it is sent. The history has
``--messages`` messages of ``--size`` characters, a third of them tool results; the figure is
the median of ``--repeat`` builds, with and without the estimate.

One compaction: ``compact`` over the same history against an in-process model that answers at
once (so what is measured is greenroom's side: the transcript, the splits, the stored summary),
for a window that fits the summary request in one call and for one that forces splits; with
each the number of model calls and, at gpt-4o-mini's models.dev prices, what the calls would
cost for the tokens they carry.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time

import trio

from greenroom.agents import parse_agent_file
from greenroom.agents._compaction import compact
from greenroom.agents._prompt import build_messages
from greenroom.agents._tokens import estimate_tokens
from greenroom.agents.providers import ModelConfig, ModelRequest, ModelResponse, OnDelta
from greenroom.agents.providers._facts import ModelFacts, lookup
from greenroom.domain import (
    ChatMessage,
    Event,
    FunctionCall,
    Message,
    Session,
    Summary,
    ToolCall,
    Usage,
)

AGENT = parse_agent_file("agents:\n  root:\n    model: openai/gpt-4o-mini\n", "bench.yaml").agent()


def history(messages: int, size: int) -> Session:
    session = Session.new()
    for index in range(messages):
        kind = index % 3
        if kind == 0:
            chat = ChatMessage(role="user", content="q" * size)
        elif kind == 1:
            call = ToolCall(f"c{index}", FunctionCall("read_file", '{"path": "x"}'))
            chat = ChatMessage(role="assistant", content="a" * (size // 4), tool_calls=(call,))
        else:
            chat = ChatMessage(role="tool", content="t" * size, tool_call_id=f"c{index - 1}")
        session = session.with_item(Message(chat))
    return session


def per_turn(session: Session, repeat: int) -> tuple[float, float]:
    """Median µs to build a prompt, and to build and estimate it."""
    build, both = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        messages = build_messages(session, AGENT)
        middle = time.perf_counter()
        estimate_tokens(messages)
        end = time.perf_counter()
        build.append(middle - start)
        both.append(end - start)
    return statistics.median(build) * 1e6, statistics.median(both) * 1e6


class InstantModel:
    """Answers a summary at once; refuses nothing (the budget does the splitting)."""

    def __init__(self) -> None:
        self.calls = 0
        self.input_chars = 0

    async def complete(self, request: ModelRequest, on_delta: OnDelta) -> ModelResponse:
        self.calls += 1
        chars = sum(len(m.content) for m in request.messages)
        self.input_chars += chars
        await trio.lowlevel.checkpoint()
        return ModelResponse(content="A summary. " * 40, usage=Usage(chars // 4, 110))


class MemoryIO:
    def __init__(self, session: Session) -> None:
        self.session = session
        self.input_tokens = 0
        self.output_tokens = 0
        self.cost = 0.0

    async def emit(self, event: Event) -> None:
        await trio.lowlevel.checkpoint()

    async def add_summary(self, summary: Summary) -> None:
        self.session = self.session.with_item(summary)

    def add_usage(self, input_tokens: int, output_tokens: int, cost: float) -> None:
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        self.cost += cost


async def one_compaction(session: Session, context: int) -> tuple[float, int, int, float]:
    """ms of greenroom's CPU, model calls, input tokens sent, USD at gpt-4o-mini prices."""
    published = lookup("openai", "gpt-4o-mini") or ModelFacts()
    facts = ModelFacts(
        context=context,
        output=published.output,
        input_price=published.input_price,
        output_price=published.output_price,
    )
    model = InstantModel()
    io = MemoryIO(session.with_item(Message.user("the question now")))
    config = ModelConfig(name="m", provider="openai", model="gpt-4o-mini")
    start = time.perf_counter()
    await compact(io, "root", config, model, facts)  # type: ignore[arg-type]
    elapsed = (time.perf_counter() - start) * 1e3
    return elapsed, model.calls, io.input_tokens, io.cost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--size", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    session = history(args.messages, args.size)
    chars = sum(len(i.content) for i in session.items if isinstance(i, Message))
    print(f"python {platform.python_version()} on {platform.machine()}, {sys.platform}")
    print(f"history: {args.messages} messages, {chars} characters (~{chars // 4} tokens)")
    build, both = per_turn(session, args.repeat)
    print(
        f"per turn: build {build:.0f} µs, build + estimate {both:.0f} µs "
        f"(estimate {both - build:.0f} µs)"
    )
    for context in (200_000, chars // 4 // 3):
        ms, calls, tokens, usd = trio.run(one_compaction, session, context)
        print(
            f"compaction, window {context} tokens: {ms:.1f} ms, {calls} model call(s), "
            f"{tokens} input tokens, ${usd:.4f} at gpt-4o-mini prices"
        )


if __name__ == "__main__":
    main()
