"""Durable turns, crash recovery and decisions on tool calls in doubt, on the in-memory store.

A "crash" is simulated with :class:`CrashableStore`: after ``crash()`` no write lands any more
(events vanish, awaited writes never answer), as when the process dies; the registry is then
shut down (its writes go nowhere), ``revive()`` brings the store back as the next process finds
it, ``recover`` repairs it and a new registry serves it. The real ``kill -9`` of a real server
is tests/test_crash_recovery.py. Rules: mock clock (``autojump_clock``), in-memory store,
ordering by ``wait_all_tasks_blocked``, every wait bounded.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing

from greenroom.actors import (
    LogEntry,
    Registry,
    RegistryConfig,
    open_registry,
    plan_recovery,
    recover,
)
from greenroom.agents import ToolResult, TurnIO
from greenroom.domain import (
    AgentChoice,
    ChatMessage,
    ErrorItem,
    FunctionCall,
    Message,
    Session,
    StreamStarted,
    StreamStopped,
    ToolCall,
)
from greenroom.errors import InvalidRequest, NeedsDecision, SessionBusy, ToolCallNotFound
from greenroom.persistence import EventRow, Lease, MemoryStore, ToolCallRecord, TurnRecord
from tests.fakes import FakeFactory, FakeRuntime, collect, drain, event_json, user

WRITES = (
    "add_session",
    "update_session",
    "delete_session",
    "add_message",
    "update_message",
    "add_error",
    "add_summary",
    "update_title",
    "update_permissions",
    "update_tokens",
    "set_starred",
    "begin_turn",
    "add_turn_message",
    "end_turn",
    "begin_tool_call",
    "begin_rerun",
    "decide",
    "reserve_key",
    "release_key",
)


class CrashableStore(MemoryStore):
    """A memory store that can die like a process: after ``crash()`` nothing is written."""

    def __init__(self) -> None:
        super().__init__()
        self.crashed = False
        for name in WRITES:
            setattr(self, name, self._guard(getattr(self, name)))

    def _guard(self, write: Callable[..., Any]) -> Callable[..., Any]:
        async def guarded(*args: Any, **kwargs: Any) -> Any:
            if self.crashed:
                await trio.sleep_forever()  # a dead process never answers
            return await write(*args, **kwargs)

        return guarded

    def append_event(self, row: EventRow) -> None:
        if not self.crashed:
            super().append_event(row)

    def crash(self) -> None:
        self.crashed = True

    def revive(self) -> None:
        self.crashed = False
        self.listen(None)  # the dead process's registry is gone


def call(call_id: str = "call-1") -> ToolCall:
    return ToolCall(call_id, FunctionCall("side_effect", json.dumps({"n": 1})))


class ToolRuntime(FakeRuntime):
    """Streams ``text``, stores an assistant message calling the side-effect tool, records the
    intent, runs the tool (``ran`` grows; it waits in ``in_tool`` until released), stores the
    result and says a last word. Can run a call again (``rerun_tool``)."""

    def __init__(self, *, text: tuple[str, ...] = ("Let me ", "check."), stop_before: str = ""):
        super().__init__()
        self.text = text
        self.stop_before = stop_before  # "message": hold after streaming, before storing it
        self.in_tool = trio.Event()
        self.leave_tool = trio.Event()
        self.ran: list[str] = []
        self.calls = 0

    async def run_stream(self, io: TurnIO) -> None:
        self.turns += 1
        self.calls += 1
        await io.emit(StreamStarted(io.session.id, "root"))
        for token in self.text:
            await io.emit(AgentChoice(token, "root", io.session.id))
        if self.stop_before == "message":
            self.in_tool.set()
            await trio.sleep_forever()
        tool_call = call(f"call-{self.calls}")
        chat = ChatMessage("assistant", "".join(self.text), tool_calls=(tool_call,))
        await io.add_message(Message(chat, agent_name="root"))
        await io.begin_tool_call(tool_call, "root")
        self.ran.append(tool_call.id)
        self.in_tool.set()
        await self.leave_tool.wait()
        result = ChatMessage("tool", "done", tool_call_id=tool_call.id)
        await io.add_message(Message(result, agent_name="root"))
        await io.emit(AgentChoice("Done.", "root", io.session.id))
        await io.add_message(Message.assistant("Done.", agent_name="root"))
        await io.emit(StreamStopped(io.session.id, "root"))

    async def rerun_tool(self, tool_call: ToolCall, agent_name: str) -> ToolResult:
        await trio.lowlevel.checkpoint()
        self.ran.append(tool_call.id)
        return ToolResult(f"ran {tool_call.function.name} again")


async def crashed_mid_turn(runtime: ToolRuntime) -> tuple[CrashableStore, str, list[LogEntry]]:
    """A session whose turn was in ``runtime``'s tool (or stream) when the process died; what
    an /events subscriber had received by then."""
    store = CrashableStore()
    session_id = (await store.add_session(Session.new())).id
    async with open_registry(store, FakeFactory(runtime)) as registry:
        with await registry.subscribe(session_id, since=0) as sub:
            stream = await registry.session(session_id).run(
                "agent", (user("go"),), on_disconnect="continue"
            )
            stream.close()
            with trio.fail_after(10):
                await runtime.in_tool.wait()
            store.crash()
            seen, _ = await collect(sub)
    store.revive()
    return store, session_id, seen


async def test_a_turn_keeps_its_records_as_it_runs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runtime = ToolRuntime()
    store = MemoryStore()
    session_id = (await store.add_session(Session.new())).id
    async with open_registry(store, FakeFactory(runtime)) as registry:
        stream = await registry.session(session_id).run("agent", (user("go"),))
        with trio.fail_after(10):
            await runtime.in_tool.wait()
        # The user message and the running turn were stored before the runtime started; the
        # intent before the tool ran.
        (turn,) = await store.turns(session_id, ("running",))
        (intent,) = await store.tool_calls(session_id, ("started",))
        assert (intent.tool_call_id, intent.turn_id, intent.name) == (
            "call-1",
            turn.turn_id,
            "side_effect",
        )
        assert runtime.ran == ["call-1"]
        assert await store.interrupted_sessions() == [session_id]
        runtime.leave_tool.set()
        entries = await drain(stream)
    assert entries[-1].json()["type"] == "stream_stopped"
    (done,) = await store.turns(session_id, ("done",))
    assert done.last_seq == entries[-1].seq
    assert [c.tool_call_id for c in await store.tool_calls(session_id, ("finished",))] == ["call-1"]
    assert await store.interrupted_sessions() == []


async def test_recovery_marks_the_turn_interrupted_and_the_call_in_doubt(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store, session_id, seen = await crashed_mid_turn(ToolRuntime())
    assert [e.json()["type"] for e in seen][:3] == [
        "stream_started",
        "agent_choice",
        "agent_choice",
    ]

    report = await recover(store)
    assert (report.sessions, report.turns_interrupted, report.calls_in_doubt) == (1, 1, 1)
    assert report.summary() == "1 turn interrupted, 1 tool call in doubt"
    assert await recover(store) == type(report)()  # done once: nothing left to repair

    stored = await store.get_session(session_id)
    roles = [(i.role, i.message.tool_call_id) for i in stored.items if isinstance(i, Message)]
    assert roles == [("user", ""), ("assistant", ""), ("tool", "call-1")]  # no dangling call
    assert isinstance(stored.items[-1], ErrorItem)
    assert stored.items[-1].code == "turn_interrupted"

    runtime = ToolRuntime()
    async with open_registry(store, FakeFactory(runtime)) as registry:
        handle = registry.session(session_id)
        with pytest.raises(NeedsDecision):
            await handle.run("agent", (user("again"),))
        with await registry.subscribe(session_id, since=seen[-1].seq) as sub:
            rest, _ = await collect(sub)
        # The log goes on after what subscribers saw: no seq is named twice.
        assert [e.seq for e in rest] == list(range(seen[-1].seq + 1, seen[-1].seq + 4))
        assert [e.json()["type"] for e in rest] == [
            "turn_interrupted",
            "tool_call_in_doubt",
            "stream_stopped",
        ]
        in_doubt = rest[1].json()
        assert in_doubt["tool_call"]["function"] == {"name": "side_effect", "arguments": '{"n": 1}'}
        assert in_doubt["started_at"]
        (pending,) = await handle.pending_decisions()
        assert pending.tool_call_id == "call-1"


async def test_text_streamed_before_the_crash_becomes_an_interrupted_message(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runtime = ToolRuntime(text=("Hello ", "wor"), stop_before="message")
    store, session_id, seen = await crashed_mid_turn(runtime)
    assert "".join(e.json().get("content", "") for e in seen) == "Hello wor"
    report = await recover(store)
    assert (report.turns_interrupted, report.calls_in_doubt) == (1, 0)
    assert (await store.ownership.claim(session_id)).state == "idle"  # nothing to decide
    messages = [i for i in (await store.get_session(session_id)).items if isinstance(i, Message)]
    assert [(m.role, m.content) for m in messages] == [
        ("user", "go"),
        ("assistant", "Hello wor\n\n[response interrupted]"),  # what subscribers saw
    ]
    async with open_registry(store, FakeFactory(FakeRuntime(reply="fine"))) as registry:
        await drain(await registry.session(session_id).run("agent", (user("again"),)))


async def decided(registry: Registry, session_id: str, action: str, **kwargs: Any) -> Any:
    return await registry.session(session_id).decide("call-1", action, **kwargs)


@pytest.mark.parametrize(
    ("action", "result", "text", "is_error"),
    [
        ("skip", None, "was not run again", True),
        ("done", None, "result was not recorded", False),
        ("done", "42 files", "42 files", False),
    ],
)
async def test_a_decision_replaces_the_placeholder_and_lets_the_session_run(
    autojump_clock: trio.testing.MockClock,
    action: str,
    result: str | None,
    text: str,
    is_error: bool,
) -> None:
    store, session_id, _ = await crashed_mid_turn(ToolRuntime())
    await recover(store)
    async with open_registry(store, FakeFactory(FakeRuntime(reply="next"))) as registry:
        with await registry.subscribe(session_id) as sub:
            outcome = await decided(registry, session_id, action, result=result, decided_by="ada")
            events, _ = await collect(sub)
        assert (outcome.action, outcome.is_error, outcome.pending) == (action, is_error, 0)
        assert text in outcome.result
        assert event_json(events[-1]) == {
            "type": "tool_call_decided",
            "tool_call_id": "call-1",
            "action": action,
            "result": outcome.result,
            "decided_by": "ada",
            "session_id": session_id,
        }
        with pytest.raises(ToolCallNotFound):  # decided once, for good
            await decided(registry, session_id, "skip")
        await drain(await registry.session(session_id).run("agent", (user("again"),)))
    (record,) = await store.tool_calls(session_id, ("resolved",))
    assert (record.decision, record.decided_by, record.decided_at is not None) == (
        action,
        "ada",
        True,
    )
    tool_messages = [
        m for m in (await store.get_session(session_id)).items
        if isinstance(m, Message) and m.role == "tool"
    ]  # fmt: skip
    assert [m.content for m in tool_messages] == [outcome.result]  # replaced, not added


async def test_rerun_runs_the_tool_once_more_while_the_session_is_busy(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store, session_id, _ = await crashed_mid_turn(ToolRuntime())
    await recover(store)
    runtime = ToolRuntime()
    async with open_registry(store, FakeFactory(runtime)) as registry:
        outcome = await decided(registry, session_id, "rerun", decided_by="bob")
        assert runtime.ran == ["call-1"]  # exactly once, by the decision
        assert outcome.result == "ran side_effect again"
        assert (await store.ownership.claim(session_id)).state == "idle"
        runtime.leave_tool.set()
        await drain(await registry.session(session_id).run("agent", (user("again"),)))


async def test_decisions_that_cannot_be_taken(autojump_clock: trio.testing.MockClock) -> None:
    store, session_id, _ = await crashed_mid_turn(ToolRuntime())
    await recover(store)
    async with open_registry(store, FakeFactory(FakeRuntime())) as registry:
        with pytest.raises(ToolCallNotFound):
            await registry.session(session_id).decide("call-9", "skip")
        with pytest.raises(InvalidRequest) as bad:
            await decided(registry, session_id, "maybe")
        assert bad.value.path == "$.action"
        with pytest.raises(InvalidRequest) as bad:
            await decided(registry, session_id, "skip", result="nope")
        assert bad.value.path == "$.result"
        assert len(await registry.session(session_id).pending_decisions()) == 1


async def test_a_crash_during_a_rerun_leaves_the_call_in_doubt_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store, session_id, _ = await crashed_mid_turn(ToolRuntime())
    await recover(store)

    class StuckRerun(ToolRuntime):
        async def rerun_tool(self, tool_call: ToolCall, agent_name: str) -> ToolResult:
            self.ran.append(tool_call.id)
            self.in_tool.set()
            await trio.sleep_forever()

    runtime = StuckRerun()
    async with (
        open_registry(store, FakeFactory(runtime)) as registry,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(decided, registry, session_id, "rerun")
        with trio.fail_after(10):
            await runtime.in_tool.wait()
        with pytest.raises(SessionBusy):  # the rerun holds the session
            await registry.session(session_id).add_message(Message.user("meanwhile"))
        store.crash()
        nursery.cancel_scope.cancel()
    store.revive()
    report = await recover(store)
    assert (report.turns_interrupted, report.calls_in_doubt) == (0, 1)
    (call_record,) = await store.tool_calls(session_id, ("in_doubt",))
    tool_messages = [
        m for m in (await store.get_session(session_id)).items
        if isinstance(m, Message) and m.role == "tool"
    ]  # fmt: skip
    assert [m.id for m in tool_messages] == [call_record.placeholder_id]  # still one placeholder


async def test_follow_up_keys_survive_a_restart(autojump_clock: trio.testing.MockClock) -> None:
    store = MemoryStore()
    session_id = (await store.add_session(Session.new())).id
    runtime = FakeRuntime(hold=True)
    for restart in range(2):
        async with open_registry(store, FakeFactory(runtime)) as registry:
            handle = registry.session(session_id)
            stream = await handle.run("agent", (user("hi"),))
            result = await handle.follow_up((), "key-1")
            assert result.duplicate is (restart == 1)
            runtime.release()
            await drain(stream)
            runtime.rearm()


async def test_a_log_the_writer_cannot_commit_is_lost_and_claimed_afresh(
    autojump_clock: trio.testing.MockClock,
) -> None:
    class Fencing(MemoryStore):
        fence_next = False

        def append_event(self, row: EventRow) -> None:
            if self.fence_next:
                self.fence_next = False
                row = row._replace(seq=row.seq + 5)  # as if another writer had moved on
            super().append_event(row)

    store = Fencing()
    session_id = (await store.add_session(Session.new())).id
    async with open_registry(store, FakeFactory(FakeRuntime())) as registry:
        registry.append_event(session_id, AgentChoice("one"))
        with await registry.subscribe(session_id, since=0) as sub:
            store.fence_next = True
            registry.append_event(session_id, AgentChoice("lost"))
            entries, ended = await collect(sub)
        assert ([e.seq for e in entries], ended) == ([1], True)  # ended, no session_exited
        assert session_id not in registry.live_ids()
        # The next request claims the session again, going on from what was committed.
        await registry.session(session_id).snapshot()
        registry.append_event(session_id, AgentChoice("two"))
        with await registry.subscribe(session_id, since=0) as sub:
            entries, _ = await collect(sub)
        assert [(e.seq, e.json()["content"]) for e in entries] == [(1, "one"), (2, "two")]


async def test_a_registry_config_limits_how_far_a_turn_runs_ahead_of_the_writer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    class Slow(MemoryStore):
        held: list[EventRow]

        def __init__(self) -> None:
            super().__init__()
            self.held = []
            self.holding = False

        def append_event(self, row: EventRow) -> None:
            if self.holding:
                self.held.append(row)
            else:
                super().append_event(row)

        def flush(self) -> None:
            self.holding = False
            held, self.held = self.held, []
            for row in held:
                super().append_event(row)

    store = Slow()
    session_id = (await store.add_session(Session.new())).id
    runtime = FakeRuntime(script=[AgentChoice(str(n)) for n in range(10)])
    config = RegistryConfig(max_uncommitted=3)
    async with open_registry(store, FakeFactory(runtime), config) as registry:
        await registry.session(session_id).snapshot()
        store.holding = True
        stream = await registry.session(session_id).run("agent", (user("go"),))
        await trio.testing.wait_all_tasks_blocked()
        assert runtime.streams == 1  # waiting for the writer, not done
        assert len(store.held) == 4  # max_uncommitted + 1 appended, then it waits
        store.flush()
        entries = await drain(stream)
    assert [e.json()["content"] for e in entries] == [str(n) for n in range(10)]


def test_plan_a_call_that_never_started_gets_a_result_and_is_not_in_doubt() -> None:
    now = dt.datetime(2024, 5, 1, tzinfo=dt.UTC)
    items = (
        Message.user("go"),
        Message(ChatMessage("assistant", "", tool_calls=(call("a"), call("b"))), "root"),
        Message(ChatMessage("tool", "old result", tool_call_id="x")),  # an unrelated result
    )
    started = [ToolCallRecord("s", "a", "t", "side_effect", "{}", "started", 3, now, "root")]
    turn = TurnRecord("t", "s", 1, "running", 1, 3, now, "agent", "root")
    plan = plan_recovery(Lease("s", 2, 7), items, [turn], started, [], now=now, created_at=5.0)
    (placeholder, for_a), (never_ran, for_b), (error, _) = plan.items
    assert isinstance(placeholder, Message) and isinstance(never_ran, Message)
    assert (for_a, placeholder.message.tool_call_id) == ("a", "a")
    assert (for_b, never_ran.message.tool_call_id) == ("", "b")
    assert "did not run" in never_ran.content
    assert isinstance(error, ErrorItem)
    assert plan.in_doubt == ("a",)
    assert plan.head_state == "needs_decision"
    assert [(r.seq, r.epoch, r.type) for r in plan.events] == [
        (8, 2, "turn_interrupted"),
        (9, 2, "tool_call_in_doubt"),
        (10, 2, "stream_stopped"),
    ]
