"""A run stream hands out a sequenced event only once its seq is committed (issue 23, item 8):
after a crash, a seq seen on a run stream used to name another event (``turn_interrupted``),
and a client resuming ``/events`` from it skipped the interruption."""

from __future__ import annotations

import trio
import trio.testing

from greenroom.actors import LogEntry, RunStream
from greenroom.domain import AgentChoice


class Cursor:
    """A committed cursor a test moves by hand, and a log that can be lost."""

    def __init__(self) -> None:
        self.committed = 0
        self.lost = False
        self._moved = trio.Event()

    def commit(self, seq: int) -> None:
        self.committed = seq
        self._moved.set()
        self._moved = trio.Event()

    def lose(self) -> None:
        self.lost = True
        self._moved.set()

    async def wait_committed(self, seq: int) -> bool:
        while self.committed < seq:
            if self.lost:
                return False
            await self._moved.wait()
        return True


def entry(seq: int) -> LogEntry:
    return LogEntry.of(seq, AgentChoice(f"word{seq}"))


async def test_uncommitted_events_wait_for_their_commit(autojump_clock) -> None:
    send, receive = trio.open_memory_channel[LogEntry](16)
    cursor = Cursor()
    stream = RunStream(
        receive, committed=lambda: cursor.committed, wait_committed=cursor.wait_committed
    )
    for seq in (1, 2, 3):
        send.send_nowait(entry(seq))
    send.send_nowait(LogEntry.of(0, AgentChoice("unsequenced")))
    cursor.commit(1)
    assert (await stream.__anext__()).seq == 1
    assert stream.ready(10) == []  # seq 2 is not committed: held back, nothing after it either
    got: list[int] = []

    async def read_one() -> None:
        got.append((await stream.__anext__()).seq)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read_one)
        await trio.testing.wait_all_tasks_blocked()
        assert got == []  # waiting for the commit
        cursor.commit(3)
    assert got == [2]
    assert [e.seq for e in stream.ready(10)] == [3, 0]


async def test_an_event_whose_log_was_lost_goes_out_without_its_seq(autojump_clock) -> None:
    send, receive = trio.open_memory_channel[LogEntry](16)
    cursor = Cursor()
    stream = RunStream(
        receive, committed=lambda: cursor.committed, wait_committed=cursor.wait_committed
    )
    send.send_nowait(entry(1))
    cursor.lose()
    got = await stream.__anext__()
    assert (got.seq, got.type) == (0, "agent_choice")
