"""Middle-out truncation of tool results (only ever applied to copies sent to a model)."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given, strategies as st

from greenroom.domain import (
    MARKER,
    ChatMessage,
    Message,
    MessagePart,
    cap_tool_result,
    estimate_tokens,
    truncate_middle,
)


def test_short_text_is_untouched() -> None:
    assert truncate_middle("hello", 5) == "hello"


def test_keeps_head_and_tail_within_budget() -> None:
    text = "HEAD" + "x" * 100_000 + "TAIL"
    out = truncate_middle(text, 400)
    assert out.startswith("HEAD") and out.endswith("TAIL")
    assert MARKER in out
    assert len(out.encode()) <= 400


def test_tiny_budgets_fall_back_to_dots_then_nothing() -> None:
    assert (
        truncate_middle("abcdefghij", 6) == "ab...j" or len(truncate_middle("abcdefghij", 6)) <= 6
    )
    assert "..." in truncate_middle("abcdefghij", 6)
    assert truncate_middle("abcdefghij", 3) == ""


@given(st.text(min_size=0, max_size=300), st.integers(min_value=0, max_value=400))
def test_never_exceeds_budget_and_never_splits_characters(text: str, budget: int) -> None:
    out = truncate_middle(text, budget)
    assert len(out.encode()) <= max(
        budget, len(text.encode()) if len(text.encode()) <= budget else 0
    )
    out.encode().decode()  # valid UTF-8 by construction: str round-trips
    if len(text.encode()) <= budget:
        assert out == text


def tool_message(content: str, parts: tuple[MessagePart, ...] = ()) -> Message:
    return Message(ChatMessage("tool", content, multi_content=parts, tool_call_id="c"))


# upstream: TestAddMessage_SQLitePersistedToolResultCappedOnReload (the capping half)
def test_cap_tool_result_bounds_a_100kb_result() -> None:
    raw = "HEAD" + "y" * 100_000 + "TAIL"
    capped = cap_tool_result(tool_message(raw), 100)
    assert capped.content.startswith("HEAD") and capped.content.endswith("TAIL")
    assert estimate_tokens(capped.content) <= 100
    assert cap_tool_result(capped, 100) == capped  # idempotent


def test_cap_rewrites_duplicate_text_part_in_lockstep_and_charges_once() -> None:
    raw = "A" * 1000
    message = tool_message(raw, (MessagePart("text", raw), MessagePart("text", "B" * 1000)))
    capped = cap_tool_result(message, 100)
    parts = capped.message.multi_content
    assert parts[0].text == capped.content
    total = len(capped.content) + len(parts[1].text)
    assert total <= 400


@pytest.mark.parametrize("role", ["user", "assistant"])
def test_cap_only_applies_to_tool_results(role: str) -> None:
    message = Message(ChatMessage(role, "z" * 10_000))  # type: ignore[arg-type]
    assert cap_tool_result(message, 10) is message


def test_cap_zero_means_no_cap() -> None:
    message = tool_message("z" * 10_000)
    assert cap_tool_result(message, 0) is message
    assert attrs.evolve(message) == message
