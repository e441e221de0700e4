"""The durable-log contract: one suite, run against the memory, SQLite and PostgreSQL stores.

Events are write-behind (the commit listener hears of them), every other write returns once
committed. Real clock: the SQLite store works in threads; every wait is bounded.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
import trio

from greenroom.domain import (
    AgentChoice,
    ChatMessage,
    ErrorItem,
    FunctionCall,
    Message,
    Session,
    ToolCall,
    Warning,
    encode_event,
    event_type,
)
from greenroom.errors import SessionNotFound, ToolCallNotFound
from greenroom.persistence import (
    Decision,
    EventRow,
    Lease,
    MemoryStore,
    RecoveryPlan,
    RetentionPolicy,
    SqliteStore,
    ToolCallIntent,
    TurnEnd,
    TurnMark,
    TurnStart,
    open_memory_store,
    open_sqlite_store,
)
from greenroom.persistence.postgres import PostgresStore
from tests.slowness import slow

from .pg import postgres_store

T0 = dt.datetime(2024, 5, 1, 12, 0, 0, tzinfo=dt.UTC)
Store = MemoryStore | SqliteStore | PostgresStore


class Commits:
    """The commit listener: what was committed and what failed, with a bounded wait."""

    def __init__(self) -> None:
        self.heads: dict[str, int] = {}
        self.failed: dict[str, str] = {}
        self._changed = trio.Event()

    def __call__(self, heads: Mapping[str, int], failed: Mapping[str, str]) -> None:
        self.heads.update(heads)
        self.failed.update(failed)
        self._changed.set()
        self._changed = trio.Event()

    async def until(self, session_id: str, seq: int = 0, *, failed: bool = False) -> None:
        with trio.fail_after(slow(10)):
            while not (
                (failed and session_id in self.failed)
                or (not failed and self.heads.get(session_id, 0) >= seq)
            ):
                await self._changed.wait()


def open_kind(kind: str, path: Path) -> AbstractAsyncContextManager[Any]:
    if kind == "postgres":
        return postgres_store()
    return open_memory_store() if kind == "memory" else open_sqlite_store(path)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    async with open_kind(request.param, tmp_path / "log.db") as opened:
        yield opened


@pytest.fixture
def commits(store: Store) -> Commits:
    listener = Commits()
    store.writer.listen(listener)
    return listener


async def new_session(store: Store, *items: Message) -> str:
    return (await store.add_session(Session.new(items=items))).id


def row(lease: Lease, seq: int, event: Any, created_at: float = 0.0) -> EventRow:
    body = encode_event(event)
    return EventRow(lease.session_id, seq, lease.epoch, event_type(event), body, created_at)


async def append(store: Store, commits: Commits, lease: Lease, *events: Any) -> list[EventRow]:
    rows = [row(lease, lease.last_seq + n, e) for n, e in enumerate(events, 1)]
    for r in rows:
        store.writer.append_event(r)
    await commits.until(lease.session_id, rows[-1].seq)
    return rows


def tool_message(call_id: str, text: str = "ok") -> Message:
    return Message(ChatMessage("tool", text, tool_call_id=call_id))


def assistant_calling(*call_ids: str) -> Message:
    calls = tuple(ToolCall(c, FunctionCall("side_effect", '{"n": 1}')) for c in call_ids)
    return Message(ChatMessage("assistant", "", tool_calls=calls))


# --- events --------------------------------------------------------------------------------


async def test_events_commit_in_order_and_read_back_byte_for_byte(
    store: Store, commits: Commits
) -> None:
    sid = await new_session(store)
    lease = await store.ownership.claim(sid)
    assert (lease.last_seq, lease.state) == (0, "idle")
    rows = await append(store, commits, lease, *(AgentChoice(f"t{n} ✓") for n in range(5)))
    stored = await store.events.read_events(sid, 0, 100)
    assert [(e.seq, e.type, e.body) for e in stored] == [(r.seq, r.type, r.body) for r in rows]
    assert [e.seq for e in await store.events.read_events(sid, 2, 2)] == [3, 4]
    assert await store.events.last_seq(sid) == 5
    again = await store.ownership.claim(sid)
    assert again.last_seq == 5  # a new owner goes on at 6


async def test_a_row_that_does_not_continue_the_head_is_fenced(
    store: Store, commits: Commits
) -> None:
    sid = await new_session(store)
    other = await new_session(store)
    lease = await store.ownership.claim(sid)
    await append(store, commits, lease, Warning("one"))
    store.writer.append_event(row(lease, 1, Warning("seq 1 again")))  # a reused seq
    await commits.until(sid, failed=True)
    assert "fenced" in commits.failed[sid] or "moved on" in commits.failed[sid]
    # Nothing of it was stored, and another session's log is unaffected.
    assert [e.body for e in await store.events.read_events(sid, 0, 10)] == [
        encode_event(Warning("one"))
    ]
    await append(store, commits, await store.ownership.claim(other), Warning("fine"))
    assert await store.events.last_seq(other) == 1


async def test_unknown_and_deleted_sessions(store: Store, commits: Commits) -> None:
    with pytest.raises(SessionNotFound):
        await store.ownership.claim("nope")
    sid = await new_session(store)
    lease = await store.ownership.claim(sid)
    await append(store, commits, lease, Warning("a"), Warning("b"))
    await store.delete_session(sid)
    # A cluster keeps a deleted session's log (its session_exited ends other nodes' mirrors);
    # a single node drops it.
    kept = [1, 2] if isinstance(store, PostgresStore) else []
    assert [e.seq for e in await store.events.read_events(sid, 0, 10)] == kept
    with pytest.raises(SessionNotFound):
        await store.ownership.claim(sid)
    store.writer.append_event(row(lease, 3, Warning("after the delete")))
    await commits.until(sid, failed=True)  # no event can bring the session back
    assert [e.seq for e in await store.events.read_events(sid, 0, 10)] == kept


# --- turns and tool calls ------------------------------------------------------------------


async def test_a_turn_with_a_tool_call_from_start_to_end(store: Store, commits: Commits) -> None:
    sid = await new_session(store)
    lease = await store.ownership.claim(sid)
    start = TurnStart("turn-1", sid, 1, T0, "agent", "root")
    (user_id,) = await store.writer.begin_turn(lease, start, (Message.user("hi"),))
    assert user_id > 0
    assert await store.events.interrupted_sessions() == [sid]
    assert (await store.ownership.claim(sid)).state == "running"
    (turn,) = await store.events.turns(sid, ("running",))
    assert (turn.turn_id, turn.first_seq, turn.text_seq, turn.source) == ("turn-1", 1, 0, "agent")

    await append(store, commits, lease, AgentChoice("calling"))
    mark = TurnMark("turn-1", 1)
    await store.writer.add_turn_message(sid, assistant_calling("c1"), mark)
    intent = ToolCallIntent(sid, "c1", "turn-1", "side_effect", '{"n": 1}', 1, T0, "root")
    await store.writer.begin_tool_call(lease, intent)
    (started,) = await store.events.tool_calls(sid, ("started",))
    assert (started.tool_call_id, started.name, started.arguments) == (
        "c1",
        "side_effect",
        '{"n": 1}',
    )
    await store.writer.add_turn_message(sid, tool_message("c1"), TurnMark("turn-1", 1))
    assert await store.events.tool_calls(sid, ("started",)) == []
    assert [c.tool_call_id for c in await store.events.tool_calls(sid, ("finished",))] == ["c1"]

    await store.writer.end_turn(lease, TurnEnd("turn-1", sid, "done", 1))
    assert await store.events.interrupted_sessions() == []
    (done,) = await store.events.turns(sid, ("done",))
    assert (done.last_seq, done.text_seq, done.ended_at is not None) == (1, 1, True)
    history = (await store.get_session(sid)).items
    assert [m.role for m in history if isinstance(m, Message)] == ["user", "assistant", "tool"]


async def recovered(store: Store, commits: Commits) -> tuple[str, Lease, int]:
    """A session as recovery leaves it: a turn interrupted, call c1 in doubt (placeholder)."""
    sid = await new_session(store)
    lease = await store.ownership.claim(sid)
    await store.writer.begin_turn(lease, TurnStart("t", sid, 1, T0), (Message.user("go"),))
    await store.writer.add_turn_message(sid, assistant_calling("c1"), TurnMark("t", 0))
    intent = ToolCallIntent(sid, "c1", "t", "side_effect", "{}", 0, T0)
    await store.writer.begin_tool_call(lease, intent)
    lease = await store.ownership.claim(sid)
    placeholder = tool_message("c1", "in doubt")
    plan = RecoveryPlan(
        lease=lease,
        items=((placeholder, "c1"), (ErrorItem("interrupted", "turn_interrupted"), "")),
        events=(row(lease, 1, Warning("turn interrupted")),),
        in_doubt=("c1",),
        interrupted_turns=("t",),
        reason="server_restart",
        ended_at=T0,
    )
    ids = await store.writer.apply_recovery(plan)
    await commits.until(sid, 1)
    return sid, lease, ids[0]


async def test_recovery_is_written_at_once(store: Store, commits: Commits) -> None:
    sid, _, placeholder_id = await recovered(store, commits)
    assert (await store.ownership.claim(sid)).state == "needs_decision"
    assert await store.events.interrupted_sessions() == []
    (call,) = await store.events.tool_calls(sid, ("in_doubt",))
    assert (call.tool_call_id, call.placeholder_id) == ("c1", placeholder_id)
    (turn,) = await store.events.turns(sid, ("interrupted",))
    assert (turn.reason, turn.last_seq) == ("server_restart", 1)
    history = (await store.get_session(sid)).items
    assert isinstance(history[-1], ErrorItem)
    assert [e.type for e in await store.events.read_events(sid, 0, 10)] == ["warning"]


async def test_a_decision_replaces_the_placeholder_and_frees_the_session(
    store: Store, commits: Commits
) -> None:
    sid, _, placeholder_id = await recovered(store, commits)
    result = attrs_evolve_id(tool_message("c1", "skipped"), 0)
    with pytest.raises(ToolCallNotFound):
        await store.writer.decide(Decision(sid, "c9", "skip", "ada", T0, result))
    remaining = await store.writer.decide(Decision(sid, "c1", "skip", "ada", T0, result))
    assert remaining == 0
    assert (await store.ownership.claim(sid)).state == "idle"
    (call,) = await store.events.tool_calls(sid, ("resolved",))
    assert (call.decision, call.decided_by, call.decided_at) == ("skip", "ada", T0)
    history = (await store.get_session(sid)).items
    replaced = [m for m in history if isinstance(m, Message) and m.id == placeholder_id]
    assert [m.content for m in replaced] == ["skipped"]
    with pytest.raises(ToolCallNotFound):  # decided once, for good
        await store.writer.decide(Decision(sid, "c1", "done", "bob", T0, result))


async def test_a_rerun_starts_the_call_again(store: Store, commits: Commits) -> None:
    sid, lease, _ = await recovered(store, commits)
    await store.writer.begin_rerun(lease, sid, "c1")
    assert await store.events.interrupted_sessions() == [sid]  # a crash now: in doubt again
    (call,) = await store.events.tool_calls(sid, ("started",))
    assert call.decision == "rerun"
    decision = Decision(sid, "c1", "rerun", "ada", T0, tool_message("c1", "ran again"))
    assert await store.writer.decide(decision) == 0
    assert (await store.ownership.claim(sid)).state == "idle"


def attrs_evolve_id(message: Message, message_id: int) -> Message:
    return Message(message.message, message.agent_name, message.implicit, message_id)


# --- idempotency keys and retention ------------------------------------------------------


async def test_idempotency_keys(store: Store) -> None:
    sid = await new_session(store)
    assert await store.writer.reserve_key(sid, "old") is True
    day_later = time.time() + 86400 + 60
    assert await store.writer.apply_retention(RetentionPolicy(None, None), day_later) == 1
    assert await store.writer.reserve_key(sid, "old") is True  # expired: a new key again
    assert await store.writer.reserve_key(sid, "k1") is True
    assert await store.writer.reserve_key(sid, "k1") is False
    other = await new_session(store)
    assert await store.writer.reserve_key(other, "k1") is True  # keys are per session
    await store.writer.release_key(sid, "k1")
    assert await store.writer.reserve_key(sid, "k1") is True
    with pytest.raises(SessionNotFound):
        await store.writer.reserve_key("nope", "k1")


async def test_retention_removes_old_and_surplus_deltas_only(
    store: Store, commits: Commits
) -> None:
    sid = await new_session(store)
    lease = await store.ownership.claim(sid)
    events = [Warning("w0"), AgentChoice("old"), AgentChoice("old2"), Warning("w1")]
    events += [AgentChoice(f"new{n}") for n in range(4)]
    rows = [
        row(lease, n, e, created_at=100.0 if n <= 4 else 1000.0) for n, e in enumerate(events, 1)
    ]
    for r in rows:
        store.writer.append_event(r)
    await commits.until(sid, 8)
    # By age: deltas older than 900 s at t=1050 (seqs 2 and 3) go.
    assert await store.writer.apply_retention(RetentionPolicy(900.0, None), 1050.0) == 2
    assert [e.seq for e in await store.events.read_events(sid, 0, 20)] == [1, 4, 5, 6, 7, 8]
    # By count: two deltas per session are kept (the newest).
    assert await store.writer.apply_retention(RetentionPolicy(None, 2), 1050.0) == 2
    kept = await store.events.read_events(sid, 0, 20)
    assert [e.seq for e in kept] == [1, 4, 7, 8]
    assert await store.events.last_seq(sid) == 8  # the head never moves back


# --- SQLite across processes -----------------------------------------------------------------


async def test_the_log_and_keys_survive_a_reopen_with_a_new_boot_epoch(tmp_path: Path) -> None:
    path = tmp_path / "reopen.db"
    async with open_sqlite_store(path) as first:
        commits = Commits()
        first.writer.listen(commits)
        sid = await new_session(first)
        lease = await first.ownership.claim(sid)
        rows = await append(first, commits, lease, AgentChoice("kept"), Warning("too"))
        assert await first.writer.reserve_key(sid, "key")
        epoch = lease.epoch
    async with open_sqlite_store(path) as again:
        lease = await again.ownership.claim(sid)
        assert (lease.epoch, lease.last_seq) == (epoch + 1, 2)
        stored = await again.events.read_events(sid, 0, 10)
        assert [e.body for e in stored] == [r.body for r in rows]
        assert await again.writer.reserve_key(sid, "key") is False
