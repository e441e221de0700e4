"""Unit tests of a session's event log (greenroom/actors/_eventlog.py).

Rules: the log is driven directly, without a registry. ``append``/``subscribe``/``close`` are
synchronous, so a test that wants "right after" simply calls them back to back; reading a
subscription is async and always runs under ``trio.fail_after`` on the mock clock
(``autojump_clock``). ``collect`` reads until the subscription ends or stays quiet for a
(virtual) second, so a missing end shows up as a wrong list, never as a hang.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from greenroom.actors import EventLog, LogEntry, Subscription
from greenroom.actors._eventlog import DEFAULT_CAPACITY
from greenroom.actors._subscription import REPLAY_PAGE
from greenroom.domain import AgentChoice, Gap, SessionExited, Warning
from greenroom.persistence import EventRow, Lease, StoredEvent
from tests.fakes import collect, event_json


def ev(n: int) -> AgentChoice:
    return AgentChoice(f"chunk {n}")


def seqs(entries: list[LogEntry]) -> list[int]:
    return [e.seq for e in entries]


def filled(n: int, **kwargs: Any) -> EventLog:
    log = EventLog("s", **kwargs)
    for i in range(1, n + 1):
        log.append(ev(i))
    return log


async def test_sequence_numbers_start_at_one(autojump_clock: trio.testing.MockClock) -> None:
    log = EventLog("s")
    assert log.last_seq == 0
    first = log.append(ev(1))
    second = log.append(ev(2))
    assert first is not None and second is not None
    assert (first.seq, second.seq) == (1, 2)
    assert log.last_seq == 2
    assert event_json(first) == {"type": "agent_choice", "content": "chunk 1"}


async def test_ring_is_bounded_at_capacity(autojump_clock: trio.testing.MockClock) -> None:
    log = filled(10, capacity=4)
    assert log.last_seq == 10
    assert seqs(list(log.backlog(None))) == [7, 8, 9, 10]


async def test_subscribe_since_replays_only_later_events(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log = filled(5)
    with log.subscribe(since=3) as sub:
        entries, ended = await collect(sub)
    assert seqs(entries) == [4, 5]
    assert not ended
    assert all(isinstance(e.event, AgentChoice) for e in entries)


async def test_subscribe_without_since_replays_the_whole_ring(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log = filled(3)
    with log.subscribe() as sub:
        entries, _ = await collect(sub)
    assert seqs(entries) == [1, 2, 3]


async def test_subscribe_at_head_replays_nothing(autojump_clock: trio.testing.MockClock) -> None:
    log = filled(3)
    with log.subscribe(since=3) as sub:
        entries, ended = await collect(sub)
    assert entries == []
    assert not ended


@pytest.mark.parametrize("since", [0, 1, 5])
async def test_resume_point_older_than_ring_gets_gap_then_ring(
    autojump_clock: trio.testing.MockClock, since: int
) -> None:
    log = filled(10, capacity=4)  # ring holds 7..10; resuming after 6 is still seamless
    with log.subscribe(since=since) as sub:
        entries, _ = await collect(sub)
    assert seqs(entries) == [0, 7, 8, 9, 10]
    assert isinstance(entries[0].event, Gap)
    assert event_json(entries[0]) == {"type": "gap"}


async def test_resume_right_before_the_oldest_kept_event_has_no_gap(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log = filled(10, capacity=4)
    with log.subscribe(since=6) as sub:
        entries, _ = await collect(sub)
    assert seqs(entries) == [7, 8, 9, 10]


async def test_empty_log_from_the_start_is_caught_up(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log = EventLog("s")
    with log.subscribe(since=0) as sub:
        log.append(ev(1))
        entries, ended = await collect(sub)
    assert seqs(entries) == [1]  # no gap: nothing was missed
    assert not ended


@pytest.mark.parametrize("filled_with", [0, 3])
async def test_since_ahead_of_the_log_gets_a_gap_then_live_events(
    autojump_clock: trio.testing.MockClock, filled_with: int
) -> None:
    # Impossible while seqs are committed before they are delivered; after a database restore
    # a client can be ahead: it is told to resync, then gets what comes.
    log = filled(filled_with)
    with log.subscribe(since=7) as sub:
        log.append(ev(99))
        entries, _ = await collect(sub)
    assert seqs(entries) == [0, filled_with + 1]
    assert isinstance(entries[0].event, Gap)


async def test_subscribe_takes_backlog_and_registers_atomically(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log = filled(3)
    sub = log.subscribe(since=1)
    # Appended before the subscriber read anything: each must arrive exactly once, in order.
    for i in range(4, 7):
        log.append(ev(i))
    with sub:
        entries, _ = await collect(sub)
    assert seqs(entries) == [2, 3, 4, 5, 6]
    assert [e.event for e in entries] == [ev(i) for i in range(2, 7)]


async def test_live_events_reach_a_waiting_subscriber(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log = EventLog("s")
    received: list[int] = []

    async def reader(sub: Subscription) -> None:
        async for entry in sub:
            received.append(entry.seq)

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader, log.subscribe())
            await trio.testing.wait_all_tasks_blocked()
            log.append(ev(1))
            await trio.testing.wait_all_tasks_blocked()
            assert received == [1]
            log.append(ev(2))
            log.close()
    assert received == [1, 2, 3]


async def test_full_subscriber_is_dropped_without_blocking_the_producer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log = EventLog("s", subscriber_buffer=2)
    slow = log.subscribe()
    fast = log.subscribe()
    fast_seen: list[int] = []

    async def fast_reader() -> None:
        async for entry in fast:
            fast_seen.append(entry.seq)

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(fast_reader)
            await trio.testing.wait_all_tasks_blocked()
            for i in range(1, 6):
                # Synchronous: the producer cannot block, whatever the subscribers do.
                assert log.append(ev(i)) is not None
                await trio.testing.wait_all_tasks_blocked()
            assert slow.dropped
            assert not fast.dropped
            assert log.subscriber_count == 1
            log.append(ev(6))
            await trio.testing.wait_all_tasks_blocked()
            assert fast_seen == [1, 2, 3, 4, 5, 6]
            slow_entries, slow_ended = await collect(slow)
            # It gets what fitted in its buffer, then its stream ends without session_exited.
            assert seqs(slow_entries) == [1, 2]
            assert slow_ended
            assert not any(isinstance(e.event, SessionExited) for e in slow_entries)
            log.close()
    assert fast_seen == [1, 2, 3, 4, 5, 6, 7]


async def test_dropped_subscriber_can_resume_from_its_last_seq(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log = EventLog("s", subscriber_buffer=1)
    sub = log.subscribe()
    log.append(ev(1))
    log.append(ev(2))  # does not fit: dropped
    entries, ended = await collect(sub)
    assert (seqs(entries), ended) == ([1], True)
    with log.subscribe(since=entries[-1].seq) as again:
        resumed, _ = await collect(again)
    assert seqs(resumed) == [2]


async def test_close_appends_sequenced_session_exited_and_ends_every_subscription(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log = filled(2)
    first = log.subscribe()
    second = log.subscribe(since=2)
    log.close("bye")
    assert log.closed
    assert log.last_seq == 3
    assert log.subscriber_count == 0
    one, one_ended = await collect(first)
    two, two_ended = await collect(second)
    assert (seqs(one), one_ended) == ([1, 2, 3], True)
    assert (seqs(two), two_ended) == ([3], True)
    assert two[0].event == SessionExited("bye")
    assert event_json(two[0])["type"] == "session_exited"


async def test_close_is_idempotent_and_a_closed_log_drops_appends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log = filled(1)
    log.close()
    log.close()
    assert log.append(ev(2)) is None
    assert log.last_seq == 2  # the single session_exited


async def test_subscribing_to_a_closed_log_replays_up_to_session_exited_and_ends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log = filled(2)
    log.close()
    with log.subscribe(since=1) as sub:
        entries, ended = await collect(sub)
    assert seqs(entries) == [2, 3]
    assert isinstance(entries[-1].event, SessionExited)
    assert ended
    assert log.subscriber_count == 0


async def test_each_event_is_serialised_once(autojump_clock: trio.testing.MockClock) -> None:
    log = EventLog("s")
    a = log.subscribe()
    b = log.subscribe()
    log.append(Warning("careful"))
    (from_a,), _ = await collect(a)
    (from_b,), _ = await collect(b)
    assert from_a.data is from_b.data
    with log.subscribe() as replay:
        (from_replay,), _ = await collect(replay)
    assert from_replay.data is from_a.data
    assert event_json(from_a) == {"type": "warning", "message": "careful"}


async def test_end_subscribers_ends_without_session_exited(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log = filled(2)
    sub = log.subscribe()
    log.end_subscribers()
    assert log.subscriber_count == 0
    assert not log.closed
    entries, ended = await collect(sub)
    assert (seqs(entries), ended) == ([1, 2], True)
    assert not any(isinstance(e.event, SessionExited) for e in entries)
    # The log itself goes on: a reconnecting client resumes after its last seq.
    log.append(ev(3))
    with log.subscribe(since=2) as again:
        resumed, _ = await collect(again)
    assert seqs(resumed) == [3]


async def test_closing_a_subscription_unregisters_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log = EventLog("s")
    sub = log.subscribe()
    assert log.subscriber_count == 1
    sub.close()
    assert log.subscriber_count == 0
    assert log.append(ev(1)) is not None
    entries, ended = await collect(sub)
    assert (entries, ended) == ([], True)


async def test_ready_takes_what_is_waiting_without_blocking(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log = EventLog("s", capacity=8)
    for i in range(3):
        log.append(AgentChoice(str(i)))
    with log.subscribe(since=None) as subscription:
        log.append(AgentChoice("live"))
        first = await subscription.__anext__()
        rest = subscription.ready(10)
        assert [e.seq for e in [first, *rest]] == [1, 2, 3, 4]
        assert subscription.ready(10) == []
        log.append(AgentChoice("more"))
        log.append(AgentChoice("again"))
        assert [e.seq for e in subscription.ready(1)] == [5]
        assert [e.seq for e in subscription.ready(1)] == [6]


# --- a durable log: commit before deliver, replay from the store -----------------------------


class ManualWriter:
    """Collects the rows a log hands over; the test commits them when it likes."""

    def __init__(self) -> None:
        self.rows: list[EventRow] = []

    def append_event(self, row: EventRow) -> None:
        self.rows.append(row)


class RowReader:
    """Reads back what was "committed" (the rows the test lets through), minus ``removed``."""

    def __init__(self, writer: ManualWriter) -> None:
        self.writer = writer
        self.committed = 0
        self.removed: set[int] = set()
        self.reads: list[tuple[int, int]] = []

    async def read_events(self, session_id: str, after: int, limit: int) -> list[StoredEvent]:
        await trio.lowlevel.checkpoint()
        self.reads.append((after, limit))
        rows = [r for r in self.writer.rows if after < r.seq <= self.committed]
        rows = [r for r in rows if r.seq not in self.removed]
        return [StoredEvent(r.seq, r.type, r.body) for r in rows[:limit]]


def durable(
    capacity: int = DEFAULT_CAPACITY, head: int = 0
) -> tuple[EventLog, ManualWriter, RowReader]:
    writer = ManualWriter()
    reader = RowReader(writer)
    log = EventLog("s", capacity=capacity, writer=writer, reader=reader)  # type: ignore[arg-type]
    log.start(Lease("s", 1, head))
    return log, writer, reader


def commit(log: EventLog, reader: RowReader, seq: int) -> None:
    reader.committed = seq
    log.on_committed(seq)


async def test_subscribers_see_an_event_only_once_it_is_committed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log, writer, reader = durable()
    with log.subscribe(since=0) as sub:
        first = log.append(ev(1))
        log.append(ev(2))
        assert first is not None and first.seq == 1  # numbered at once (the run stream's copy)
        assert [r.seq for r in writer.rows] == [1, 2]
        assert writer.rows[0].body is first.data  # the one encoding is what gets stored
        assert await collect(sub) == ([], False)
        commit(log, reader, 1)
        entries, _ = await collect(sub)
        assert seqs(entries) == [1]
        commit(log, reader, 2)
        entries, _ = await collect(sub)
        assert seqs(entries) == [2]
    assert log.uncommitted == 0


async def test_a_late_subscriber_gets_the_committed_backlog_then_the_rest_on_commit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log, _, reader = durable()
    for i in range(1, 5):
        log.append(ev(i))
    commit(log, reader, 2)
    with log.subscribe(since=0) as sub:
        entries, _ = await collect(sub)
        assert seqs(entries) == [1, 2]
        commit(log, reader, 4)
        entries, _ = await collect(sub)
        assert seqs(entries) == [3, 4]


async def test_a_resume_point_seen_before_the_commit_is_not_sent_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log, _, reader = durable()
    for i in range(1, 4):
        log.append(ev(i))
    commit(log, reader, 1)
    with log.subscribe(since=2) as sub:  # the run stream showed 1 and 2 already
        commit(log, reader, 3)
        entries, _ = await collect(sub)
    assert seqs(entries) == [3]


async def test_replay_older_than_the_ring_comes_from_the_store_then_live(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log, _, reader = durable(capacity=3)
    for i in range(1, 11):
        log.append(ev(i))
    commit(log, reader, 10)  # the ring keeps 8..10
    with log.subscribe(since=2) as sub:
        log.append(ev(11))
        commit(log, reader, 11)
        entries, _ = await collect(sub)
    assert seqs(entries) == list(range(3, 12))  # no duplicate, no hole, no gap
    assert reader.reads[0] == (2, 5)  # only 3..7 came from the store
    assert [e.json()["content"] for e in entries[:5]] == [f"chunk {i}" for i in range(3, 8)]


async def test_replay_pages_through_a_long_store_range(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log, _, reader = durable(capacity=2)
    total = REPLAY_PAGE * 2 + 7
    for i in range(1, total + 1):
        log.append(ev(i))
    commit(log, reader, total)
    with log.subscribe(since=0) as sub:
        entries, _ = await collect(sub, limit=total + 1)
    assert seqs(entries) == list(range(1, total + 1))
    assert len(reader.reads) == 3


async def test_gap_marks_where_retention_removed_events(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log, _, reader = durable(capacity=2)
    for i in range(1, 9):
        log.append(ev(i))
    commit(log, reader, 8)  # the ring keeps 7..8
    reader.removed = {3, 4}
    with log.subscribe(since=1) as sub:
        entries, _ = await collect(sub)
    assert seqs(entries) == [2, 0, 5, 6, 7, 8]  # one gap, where the hole is
    assert isinstance(entries[1].event, Gap)
    reader.removed = {1, 2, 3, 4, 5, 6}
    with log.subscribe(since=0) as sub:
        entries, _ = await collect(sub)
    assert seqs(entries) == [0, 7, 8]


async def test_close_ends_subscribers_once_session_exited_is_committed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log, _, reader = durable()
    log.append(ev(1))
    with log.subscribe(since=0) as sub:
        exited = log.close("deleted")
        assert exited is not None and exited.seq == 2
        assert await collect(sub) == ([], False)  # nothing committed yet: still open
        commit(log, reader, 2)
        entries, ended = await collect(sub)
    assert (seqs(entries), ended) == ([1, 2], True)
    assert isinstance(entries[-1].event, SessionExited)


async def test_a_failed_log_ends_subscribers_without_session_exited(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log, _, reader = durable()
    log.append(ev(1))
    commit(log, reader, 1)
    with log.subscribe(since=0) as sub:
        log.append(ev(2))
        log.fail()
        entries, ended = await collect(sub)
    assert (seqs(entries), ended) == ([1], True)
    assert log.append(ev(3)) is None


async def test_events_appended_before_the_head_is_known_are_numbered_after_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    writer = ManualWriter()
    log = EventLog("s", writer=writer, reader=RowReader(writer))  # type: ignore[arg-type]
    assert log.append(ev(1)) is None  # waits for the claim
    assert log.append(ev(2)) is None
    assert writer.rows == []
    log.start(Lease("s", 3, 41))  # the store's committed head: 41
    assert [(r.seq, r.epoch) for r in writer.rows] == [(42, 3), (43, 3)]
    assert log.last_seq == 43


async def test_the_producer_waits_when_the_writer_falls_behind(
    autojump_clock: trio.testing.MockClock,
) -> None:
    writer = ManualWriter()
    reader = RowReader(writer)
    log = EventLog("s", writer=writer, reader=reader, max_uncommitted=2)  # type: ignore[arg-type]
    log.start(Lease("s", 1, 0))
    for i in range(1, 4):
        log.append(ev(i))
    waited = trio.Event()

    async def producer() -> None:
        await log.wait_for_room()
        waited.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(producer)
        await trio.testing.wait_all_tasks_blocked()
        assert not waited.is_set()
        commit(log, reader, 1)
        await trio.testing.wait_all_tasks_blocked()
        assert waited.is_set()


async def test_a_successor_hands_commits_of_the_closed_logs_tail_back(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log, writer, reader = durable()
    log.append(ev(1))
    with log.subscribe(since=0) as old_sub:
        log.close()  # seq 2, not committed yet
        new = log.successor()
        assert new.append(ev(3)) is not None
        with new.subscribe(since=0) as new_sub:
            commit(new, reader, 3)
            old, old_ended = await collect(old_sub)
            fresh, _ = await collect(new_sub)
    assert (seqs(old), old_ended) == ([1, 2], True)  # the old subscriber got its end
    assert seqs(fresh) == [1, 2, 3]  # one numbering across both
    assert [r.seq for r in writer.rows] == [1, 2, 3]


async def test_between_turns_a_stored_log_keeps_only_its_newest_entries_in_memory(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log, _, reader = durable()
    for n in range(1, 201):  # a turn of 200 tokens
        log.append(ev(n))
    log.idle(True)  # the turn ended before its last events were committed
    assert log.in_memory == 200  # nothing uncommitted is dropped
    commit(log, reader, 200)
    assert seqs(log.backlog(None)) == list(range(185, 201))  # the newest IDLE_RING
    with trio.fail_after(5), log.subscribe(since=0) as sub:  # older ones: from the store
        entries, _ = await collect(sub)
    assert seqs(entries) == list(range(1, 201))
    log.idle(False)  # the next turn keeps up to capacity again
    for n in range(201, 301):
        log.append(ev(n))
    commit(log, reader, 300)
    assert log.in_memory == 116


def test_a_log_without_a_store_keeps_its_ring_between_turns() -> None:
    log = filled(40, capacity=32)
    log.idle(True)
    assert seqs(log.backlog(None)) == list(range(9, 41))
