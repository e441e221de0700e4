"""Helpers shared by the provider tests (real fake servers on the real clock)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import trio

from greenroom.agents.providers import Delta


class Deltas:
    """An ``on_delta`` that records what it is given; ``first`` is set by the first one."""

    def __init__(self) -> None:
        self.got: list[Delta] = []
        self.first = trio.Event()

    async def __call__(self, delta: Delta) -> None:
        self.got.append(delta)
        self.first.set()


async def cancel_once_streaming(
    complete: Callable[[Deltas], Awaitable[Any]], deltas: Deltas
) -> None:
    """Run ``complete(deltas)`` and cancel it as soon as the first delta arrived (not after a
    fixed time: on a loaded machine the first token may take longer than any guess)."""
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:

            async def cancel_on_first() -> None:
                await deltas.first.wait()
                scope.cancel()

            nursery.start_soon(cancel_on_first)
            await complete(deltas)
            raise AssertionError("the stream ended before it was cancelled")
    assert scope.cancelled_caught
