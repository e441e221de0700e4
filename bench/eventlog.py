"""The durable event log on the SQLite store: rows per second, and bytes per turn. Run by hand.

    .venv/bin/python bench/eventlog.py [--runs 3] [--sessions 50] [--turns 20]

Throughput: ``--sessions`` sessions play 200-token turns at once, as session actors do: each
turn stores its user message and turn record together (awaited), appends 200 ``agent_choice``
events write-behind (waiting only when 4,096 of its session's events are not committed yet),
stores the assistant message (awaited) and its end (awaited). Rows are everything the writer
commits: events, messages, turn records. The clock runs until the last event is committed
(the commit listener says so); CPU is the whole process's (trio and writer threads). Event
bodies are encoded beforehand, as the log does when it appends: what is measured is the store.

Storage: the file size (database plus WAL, after a checkpoint and VACUUM) per 200-token turn of
one session: its two messages alone (what was stored before events were), with every event, and
after retention removed the deltas (every other event stays).

Every run uses a fresh temporary file.
"""

from __future__ import annotations

import argparse
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

import trio

from greenroom.domain import (
    AgentChoice,
    Event,
    Message,
    Session,
    StreamStarted,
    StreamStopped,
    TokenUsage,
    TokenUsageInfo,
    encode_event,
    event_type,
    utcnow,
)
from greenroom.persistence import (
    EventRow,
    RetentionPolicy,
    SqliteStore,
    TurnEnd,
    TurnMark,
    TurnStart,
    open_sqlite_store,
)

TOKENS = 200
WINDOW = 4096  # a log's max_uncommitted
SESSION_ID = "6b1f6c1e-3f2a-4c55-9a53-0d6f2b9d7e11"  # the length of a real id


def turn_events(session_id: str) -> list[tuple[str, bytes]]:
    """The events of a 200-token turn of LocalRuntime: (type, body), encoded once."""
    events: list[Event] = [StreamStarted(session_id, "root")]
    events += [AgentChoice(f"word{n} ", "root", session_id) for n in range(TOKENS)]
    events += [TokenUsage(TokenUsageInfo(120, TOKENS, 320), session_id, "root")]
    events += [StreamStopped(session_id, "root")]
    return [(event_type(e), encode_event(e)) for e in events]


class Committed:
    """The commit listener: the committed head of each session, and a wake-up."""

    def __init__(self) -> None:
        self.heads: dict[str, int] = {}
        self.changed = trio.Event()

    def __call__(self, heads: Mapping[str, int], failed: Mapping[str, str]) -> None:
        if failed:
            raise RuntimeError(f"events failed: {dict(failed)}")
        self.heads.update(heads)
        self.changed.set()
        self.changed = trio.Event()

    async def until(self, session_id: str, seq: int) -> None:
        while self.heads.get(session_id, 0) < seq:
            await self.changed.wait()


async def play(store: SqliteStore, committed: Committed, session_id: str, turns: int) -> int:
    """``turns`` turns of one session; the rows it wrote."""
    lease = await store.ownership.claim(session_id)
    events = turn_events(session_id)
    seq, rows = lease.last_seq, 0
    for _ in range(turns):
        turn_id = uuid.uuid4().hex
        start = TurnStart(turn_id, session_id, seq + 1, utcnow(), "bench", "root")
        await store.writer.begin_turn(lease, start, (Message.user("Tell me a story."),))
        for kind, body in events:
            seq += 1
            store.writer.append_event(
                EventRow(session_id, seq, lease.epoch, kind, body, time.time())
            )
            if seq - committed.heads.get(session_id, 0) > WINDOW:
                await committed.until(session_id, seq - WINDOW)
            elif seq % 50 == 0:
                await trio.lowlevel.checkpoint()  # a turn yields as its provider streams
        message = Message.assistant("word " * TOKENS, agent_name="root")
        await store.writer.add_turn_message(session_id, message, TurnMark(turn_id, seq))
        await store.writer.end_turn(lease, TurnEnd(turn_id, session_id, "done", seq))
        rows += len(events) + 4  # user message, turn record, assistant message, turn end
    await committed.until(session_id, seq)
    return rows


async def throughput(path: Path, sessions: int, turns: int) -> tuple[float, float, float]:
    """(rows per second, CPU µs per row, rows per commit)."""
    async with open_sqlite_store(path) as store:
        committed = Committed()
        store.writer.listen(committed)
        ids = [(await store.add_session(Session.new())).id for _ in range(sessions)]
        batches = store.batches
        rows: list[int] = []

        async def one(session_id: str) -> None:
            rows.append(await play(store, committed, session_id, turns))

        started, cpu = time.perf_counter(), time.process_time()
        async with trio.open_nursery() as nursery:
            for session_id in ids:
                nursery.start_soon(one, session_id)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        total = sum(rows)
        return total / elapsed, cpu / total * 1e6, total / (store.batches - batches)


def file_bytes(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("VACUUM")
    finally:
        conn.close()
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))


async def messages_only(path: Path, turns: int) -> float:
    """Bytes per turn of a session that stores only each turn's two messages."""
    async with open_sqlite_store(path) as store:
        session_id = (await store.add_session(Session.new(session_id=SESSION_ID))).id
    empty = await trio.to_thread.run_sync(file_bytes, path)
    async with open_sqlite_store(path) as store:
        for _ in range(turns):
            await store.add_message(session_id, Message.user("Tell me a story."))
            await store.add_message(session_id, Message.assistant("word " * TOKENS))
    return (await trio.to_thread.run_sync(file_bytes, path) - empty) / turns


async def storage(path: Path, turns: int) -> tuple[float, float, int]:
    """(bytes per turn with every delta, after retention removed them, events per turn)."""
    async with open_sqlite_store(path) as store:
        committed = Committed()
        store.writer.listen(committed)
        session_id = (await store.add_session(Session.new(session_id=SESSION_ID))).id
    empty = await trio.to_thread.run_sync(file_bytes, path)
    async with open_sqlite_store(path) as store:
        committed = Committed()
        store.writer.listen(committed)
        await play(store, committed, session_id, turns)
    full = await trio.to_thread.run_sync(file_bytes, path)
    async with open_sqlite_store(path) as store:
        await store.writer.apply_retention(RetentionPolicy(0.0, None), time.time() + 1)
    kept = await trio.to_thread.run_sync(file_bytes, path)
    return (full - empty) / turns, (kept - empty) / turns, len(turn_events(session_id))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--turns", type=int, default=20, help="turns per session")
    args = parser.parse_args()
    print("command:", " ".join([Path(sys.executable).name, *sys.argv]))
    print(
        f"machine: {os.cpu_count()} CPUs ({platform.machine()}), Python "
        f"{platform.python_version()}, SQLite {sqlite3.sqlite_version}"
    )
    print(f"load average before: {', '.join(f'{v:.2f}' for v in os.getloadavg())}")
    results = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="greenroom-bench-") as directory:
            results.append(
                trio.run(throughput, Path(directory) / "log.db", args.sessions, args.turns)
            )
    rates = [rate for rate, _, _ in results]
    print()
    print(f"{args.sessions} sessions x {args.turns} turns of {TOKENS} tokens, {args.runs} runs:")
    runs = ", ".join(f"{r:,.0f}" for r in rates)
    print(f"  rows/s: median {statistics.median(rates):,.0f} ({runs})")
    print(f"  CPU µs/row: {statistics.median(c for _, c, _ in results):.1f}")
    print(f"  rows/commit: {statistics.median(b for _, _, b in results):.0f}")
    with tempfile.TemporaryDirectory(prefix="greenroom-bench-") as directory:
        full, kept, events = trio.run(storage, Path(directory) / "size.db", 50)
        before = trio.run(messages_only, Path(directory) / "before.db", 50)
    print()
    print(f"storage per 200-token turn ({events} events, one session, 50 turns, after VACUUM):")
    print(f"  messages only (no log): {before / 1024:,.1f} KiB")
    print(f"  every delta kept:       {full / 1024:,.1f} KiB")
    print(f"  deltas removed:         {kept / 1024:,.1f} KiB")
    print(f"load average after: {', '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
