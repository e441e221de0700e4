"""SSE bodies write the events that wait as one chunk, and pause FLUSH_INTERVAL between writes.

Mock clock (autojump): the producer's timing is virtual, so the chunks are exact.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncGenerator
from typing import cast

import trio
import trio.testing

from greenroom.actors import EventLog, LogEntry, RunStream
from greenroom.domain import AgentChoice
from greenroom.transport._sse import (  # white-box: the SSE bodies on their own
    FLUSH_INTERVAL,
    frame,
    log_events,
    run_events,
)

ENTRIES = {n: LogEntry.of(n, AgentChoice(f"t{n}", "root", "s")) for n in range(1, 12)}


def entry(n: int) -> LogEntry:
    return ENTRIES[n]


async def test_a_fast_stream_is_written_in_batches_and_the_first_event_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    send, receive = trio.open_memory_channel[LogEntry](64)
    chunks: list[tuple[float, bytes]] = []

    async def produce() -> None:
        async with send:
            await send.send(entry(1))  # alone: written at once
            for n in range(2, 12):  # a token every FLUSH_INTERVAL / 5
                await trio.sleep(FLUSH_INTERVAL / 5)  # virtual time (autojump clock)
                await send.send(entry(n))

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(produce)
            start = trio.current_time()
            async for chunk in run_events(RunStream(receive)):
                chunks.append((trio.current_time() - start, chunk))
    assert chunks[0] == (0.0, frame(entry(1)))
    assert b"".join(c for _, c in chunks) == b"".join(frame(entry(n)) for n in range(1, 12))
    assert len(chunks) <= 4, "ten events over two intervals go out in a few writes"
    gaps = [later - earlier for (earlier, _), (later, _) in itertools.pairwise(chunks)]
    assert all(gap >= FLUSH_INTERVAL for gap in gaps)


async def test_a_pausing_log_reader_keeps_up_with_bursts_of_committed_events(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log = EventLog("s", subscriber_buffer=200)
    subscription = log.subscribe()
    stop = trio.Event()
    body = cast("AsyncGenerator[bytes, None]", log_events(subscription, heartbeat=60, stop=stop))
    with trio.fail_after(5):
        assert await body.__anext__() == b": connected\n\n"
        for burst in range(3):  # 150 events at once, three times, each within a pause
            for n in range(150):
                log.append(AgentChoice(f"b{burst}-{n}", "root", "s"))
            chunk = await body.__anext__()
            assert chunk.count(b"data: ") == 150
        assert not subscription.dropped
        stop.set()
        await body.aclose()
