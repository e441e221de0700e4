"""The pieces every vendor provider shares: stream assembly, idle limit, retries, keys.

Rules: no sockets here; time comes from ``autojump_clock``.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

import pytest
import trio

from greenroom.agents.providers import KEYLESS_PLACEHOLDER, Backoff, Delta, TextDelta
from greenroom.agents.providers._keys import read_key
from greenroom.agents.providers._retry import Retryable, with_retries
from greenroom.agents.providers._stream import StreamAssembly, next_within
from greenroom.domain import FunctionCall, ToolCall
from greenroom.errors import (
    ModelError,
    ModelKeyMissing,
    ModelRateLimited,
    ModelStreamMalformed,
    ModelTimeout,
)


async def ignore(delta: Delta) -> None:
    pass


async def test_assembly_forwards_text_and_skips_empty_fragments() -> None:
    got: list[Delta] = []

    async def on_delta(delta: Delta) -> None:
        got.append(delta)

    asm = StreamAssembly(on_delta)
    await asm.text("")
    emitted_before = asm.emitted
    await asm.text("a")
    await asm.text("b")
    assert (emitted_before, asm.emitted) == (False, True)
    assert got == [TextDelta("a"), TextDelta("b")]
    assert asm.response().content == "ab"


def test_assembly_joins_fragments_by_position() -> None:
    asm = StreamAssembly(ignore)
    asm.tool_fragment(0, call_id="a", name="one", arguments='{"x"')
    asm.tool_fragment(1, call_id="b", name="two")
    asm.tool_fragment(0, arguments=": 1}")
    asm.tool_fragment(0, call_id="a", arguments="")  # a repeated id continues the call
    assert asm.response().tool_calls == (
        ToolCall("a", FunctionCall("one", '{"x": 1}')),
        ToolCall("b", FunctionCall("two", "{}")),
    )


def test_assembly_starts_a_new_call_on_a_new_id_at_a_used_position() -> None:
    asm = StreamAssembly(ignore)
    asm.tool_fragment(0, call_id="a", name="one", arguments="{}")
    asm.tool_fragment(0, call_id="b", name="two", arguments='{"y": 2}')
    asm.tool_fragment(3, name="three")
    assert asm.response().tool_calls == (
        ToolCall("a", FunctionCall("one", "{}")),
        ToolCall("b", FunctionCall("two", '{"y": 2}')),
        ToolCall("call_2", FunctionCall("three", "{}")),
    )


def test_assembly_rejects_a_call_without_a_name() -> None:
    asm = StreamAssembly(ignore)
    asm.tool_fragment(0, call_id="a", arguments="{}")
    with pytest.raises(ModelStreamMalformed):
        asm.response()


async def _events(*delays: float) -> AsyncGenerator[int, None]:
    for n, delay in enumerate(delays):
        await trio.sleep(delay)  # virtual time (autojump clock)
        yield n


async def test_next_within_returns_events_then_none(autojump_clock: trio.testing.MockClock) -> None:
    events = _events(1, 100)
    assert await next_within(events, 5, "m") == 0
    assert await next_within(events, None, "m") == 1
    assert await next_within(events, None, "m") is None


async def test_next_within_times_out_when_idle(autojump_clock: trio.testing.MockClock) -> None:
    events = _events(10)
    with pytest.raises(ModelTimeout, match="no data from the model for 2s"):
        await next_within(events, 2, "m")
    await events.aclose()


async def test_retries_back_off_exponentially_up_to_the_cap(
    autojump_clock: trio.testing.MockClock,
) -> None:
    attempts: list[float] = []

    async def attempt() -> str:
        attempts.append(trio.current_time())
        if len(attempts) < 5:
            raise Retryable(ModelRateLimited("busy"))
        return "ok"

    start = trio.current_time()
    assert await with_retries(Backoff(attempts=5, base=0.5, cap=3), attempt) == "ok"
    waits = [b - a for a, b in zip([start, *attempts], attempts, strict=False)][1:]
    assert waits == pytest.approx([0.5, 1.0, 2.0, 3.0])


async def test_exhausted_retries_raise_the_last_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    cause = RuntimeError("sdk said no")
    calls = 0

    async def attempt() -> str:
        nonlocal calls
        calls += 1
        raise Retryable(ModelRateLimited(f"busy {calls}")) from cause

    with pytest.raises(ModelRateLimited) as caught:
        await with_retries(Backoff(attempts=3), attempt)
    assert caught.value.message == "busy 3 (gave up after 3 attempts)"
    assert caught.value.__cause__ is cause
    assert calls == 3


async def test_other_errors_are_not_retried() -> None:
    calls = 0

    async def attempt() -> str:
        nonlocal calls
        calls += 1
        raise ModelError("bad request")

    with pytest.raises(ModelError, match="bad request"):
        await with_retries(Backoff(attempts=3), attempt)
    assert calls == 1


async def test_backoff_sleep_is_cancelled_by_the_caller(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def attempt() -> str:
        raise Retryable(ModelError("down"))

    with trio.move_on_after(1) as scope:
        await with_retries(Backoff(attempts=3, base=10), attempt)
    assert scope.cancelled_caught


def test_read_key() -> None:
    assert read_key({"K": " sk "}, "K", required=True, ref="p/m") == "sk"
    assert read_key({}, "K", required=False, ref="p/m") == KEYLESS_PLACEHOLDER
    assert read_key({"K": "sk"}, "", required=False, ref="p/m") == KEYLESS_PLACEHOLDER
    with pytest.raises(ModelKeyMissing, match="set the environment variable K"):
        read_key({"K": ""}, "K", required=True, ref="p/m")
    with pytest.raises(ModelKeyMissing, match="token_key"):
        read_key({}, "", required=True, ref="p/m")
