"""The subscription's own queue (decision 0037): what a memory channel gave, kept — a parked
reader wakes for an entry, a cancelled wait leaves it readable, a close from another task ends
the iteration, a second reader is refused, a dropped subscriber still reads what was queued —
and a commit delivers its fresh entries from a full ring in order."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from greenroom.actors import EventLog
from greenroom.domain import AgentChoice


def ev(n: int) -> AgentChoice:
    return AgentChoice(f"chunk {n}")


async def test_a_parked_reader_wakes_for_each_entry_in_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log = EventLog("s", capacity=8)
    got: list[int] = []
    with log.subscribe() as sub:
        async with trio.open_nursery() as nursery:

            async def read() -> None:
                async for entry in sub:
                    got.append(entry.seq)
                    if len(got) == 3:
                        return

            nursery.start_soon(read)
            await trio.sleep(1)  # virtual time: the reader is parked
            for n in range(3):
                log.append(ev(n))
                await trio.sleep(1)  # virtual time (autojump clock)
    assert got == [1, 2, 3]


async def test_a_cancelled_wait_leaves_the_subscription_readable(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log = EventLog("s", capacity=8)
    with log.subscribe() as sub:
        with trio.move_on_after(1) as scope:
            await sub.__anext__()
        assert scope.cancelled_caught
        log.append(ev(1))
        with trio.fail_after(1):
            assert (await sub.__anext__()).seq == 1


async def test_a_close_from_another_task_ends_a_parked_reader(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log = EventLog("s", capacity=8)
    sub = log.subscribe()
    ended = trio.Event()

    async def read() -> None:
        async for _ in sub:
            raise AssertionError("nothing was appended")
        ended.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read)
        await trio.sleep(1)  # virtual time (autojump clock)
        sub.close()
        with trio.fail_after(1):
            await ended.wait()
    assert log.subscriber_count == 0
    log.append(ev(1))  # a closed subscription takes nothing more
    assert sub.ready(10) == []


async def test_a_second_concurrent_reader_is_refused(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log = EventLog("s", capacity=8)
    with log.subscribe() as sub:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sub.__anext__)
            await trio.sleep(1)  # virtual time (autojump clock)
            with pytest.raises(trio.BusyResourceError):
                await sub.__anext__()
            nursery.cancel_scope.cancel()


async def test_a_dropped_subscriber_reads_what_was_queued_then_ends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log = EventLog("s", capacity=16, subscriber_buffer=3)
    with log.subscribe() as sub:
        for n in range(5):
            log.append(ev(n))  # the fourth does not fit: dropped
        assert sub.dropped
        with trio.fail_after(1):
            assert [e.seq async for e in sub] == [1, 2, 3]
        assert log.subscriber_count == 0


async def test_a_commit_delivers_fresh_entries_from_a_full_ring_in_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The ring holds `capacity` committed entries; the fresh ones are found from its end."""
    log = EventLog("s", capacity=64)
    for n in range(100):  # the ring is full of committed entries
        log.append(ev(n))
    with log.subscribe(since=log.committed) as sub:
        for n in range(5):
            log.append(ev(n))
        assert [e.seq for e in sub.ready(10)] == [101, 102, 103, 104, 105]
        assert log.in_memory == 64
