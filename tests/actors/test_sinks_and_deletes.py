"""Elicitation sinks, deletes, embedder event sources and recovery exports of the registry.

Counterparts of the upstream session-manager tests on the session-scoped elicitation sink
(#3584), deletion tombstones and RegisterEventSource. Rules: every test runs on the mock clock
(``autojump_clock``) with the in-memory store; ordering comes from
``trio.testing.wait_all_tasks_blocked()`` and explicit checkpoints, never from sleeps; whatever
could hang runs under ``trio.fail_after``. Go goroutine races become trio tasks in a nursery whose
interleaving the test forces (checkpoint offsets), and the Go ``HasEventSource`` is
``registry.has_event_log``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing

from greenroom.actors import LogEntry, Registry, Subscription
from greenroom.agents import QueuedMessage, TurnIO
from greenroom.domain import (
    ElicitationRequest,
    ErrorItem,
    Event,
    Message,
    Session,
    SessionExited,
    Warning,
    recovery_export,
)
from greenroom.errors import SessionNotFound
from greenroom.persistence import MemoryStore
from tests.fakes import FakeFactory, FakeRuntime, MirroringRuntime, collect, drain, user

Delete = Callable[[Registry, list[str]], Awaitable[None]]


def elicitation(session_id: str = "bg-child", elicitation_id: str = "eid-1") -> ElicitationRequest:
    return ElicitationRequest("need input", elicitation_id, "form", session_id=session_id)


async def replay(registry: Registry, session_id: str) -> list[LogEntry]:
    """The session's event log as a fresh ``/events`` client sees it (replay, then quiet)."""
    with await registry.subscribe(session_id) as sub:
        entries, ended = await collect(sub)
    assert not ended
    return entries


async def new_session(registry: Registry) -> str:
    return (await registry.create(Session.new())).id


async def run_once(registry: Registry, factory: FakeFactory, session_id: str, rt: Any) -> None:
    """One complete turn, so the factory builds ``rt`` as the session's server-owned runtime."""
    factory.runtime = rt
    with trio.fail_after(10):
        await drain(await registry.session(session_id).run("agent", (user("hi"),)))


async def delete_each(registry: Registry, session_ids: list[str]) -> None:
    for session_id in session_ids:
        await registry.delete(session_id)


async def batch_delete(registry: Registry, session_ids: list[str]) -> None:
    assert await registry.batch_delete(session_ids) == (len(session_ids), [])


async def wait_stopped(registry: Registry, session_ids: list[str]) -> None:
    with trio.fail_after(10):
        for session_id in session_ids:
            await registry.wait_stopped(session_id)


# --- the session-scoped elicitation sink ---------------------------------------------------


async def test_sink_makes_session_event_log_replayable(
    autojump_clock: trio.testing.MockClock, registry: Registry
) -> None:
    # upstream: TestSessionElicitationSink_MakesSessionEventSourceReplayable
    session_id = await new_session(registry)
    assert not registry.has_event_log(session_id)
    event = elicitation()
    registry.elicitation_sink(session_id)(event)
    assert registry.has_event_log(session_id)
    entries = await replay(registry, session_id)
    assert [e.seq for e in entries] == [1]
    assert entries[0].event is event


async def test_sink_accumulates_across_calls(
    autojump_clock: trio.testing.MockClock, registry: Registry
) -> None:
    # upstream: TestSessionElicitationSink_AccumulatesAcrossCalls
    session_id = await new_session(registry)
    sink = registry.elicitation_sink(session_id)
    first, second = elicitation("bg-child-1", "eid-1"), elicitation("bg-child-2", "eid-2")
    sink(first)
    sink(second)
    await trio.testing.wait_all_tasks_blocked()  # a new log first claims its head from the store
    assert registry.last_event_seq(session_id) == 2
    entries = await replay(registry, session_id)
    assert [e.seq for e in entries] == [1, 2]
    assert entries[0].event is first
    assert entries[1].event is second


async def test_sink_reuses_attached_event_log(
    autojump_clock: trio.testing.MockClock, registry: Registry
) -> None:
    # upstream: TestSessionElicitationSink_ReusesAttachedEventLog
    session_id = await new_session(registry)
    pumped = trio.Event()
    attached_event = Warning("attached-event")

    async def source(append: Callable[[Event], None]) -> None:
        append(attached_event)
        pumped.set()
        await trio.sleep_forever()  # stays alive: the pump keeps the log open

    registry.register_event_source(session_id, source)
    with trio.fail_after(5):
        await pumped.wait()
    attached = registry.ensure_log(session_id)
    assert attached is not None
    event = elicitation()
    registry.elicitation_sink(session_id)(event)
    assert registry.ensure_log(session_id) is attached
    assert registry.last_event_seq(session_id) == 2
    entries = await replay(registry, session_id)
    assert [e.event for e in entries] == [attached_event, event]
    assert entries[1].event is event
    registry.drop_log(session_id)  # ends the pump (Go: the t.Cleanup cancel)


async def test_runtime_built_by_factory_has_session_sink_registered(
    autojump_clock: trio.testing.MockClock, registry: Registry, factory: FakeFactory
) -> None:
    # upstream: TestRuntimeForSession_RegistersSessionScopedElicitationSink
    session_id = await new_session(registry)
    rt = FakeRuntime()
    await run_once(registry, factory, session_id, rt)
    assert factory.builds == [("agent", "", session_id)]
    assert registry.last_event_seq(session_id) == 0  # the actor's log (opened with it) is empty
    # Through the sink registered on this very runtime, as a background job would.
    rt.emit_elicitation(elicitation(session_id))
    assert registry.has_event_log(session_id)
    assert registry.last_event_seq(session_id) == 1


async def test_answer_elicitation_routes_verbatim_to_runtime(
    autojump_clock: trio.testing.MockClock, registry: Registry, factory: FakeFactory
) -> None:
    # upstream: TestElicitationEndpoint_RoutesAnswerToSessionRuntime
    # At the session-handle level; the HTTP 200 half is tested with the transport.
    session_id = await new_session(registry)
    rt = FakeRuntime()
    await run_once(registry, factory, session_id, rt)
    await registry.session(session_id).answer_elicitation("accept", {"confirmed": True}, "eid-42")
    assert rt.elicitation_answers == [("accept", {"confirmed": True}, "eid-42")]


async def wait_idle(registry: Registry, session_id: str) -> None:
    with trio.fail_after(10):
        await trio.testing.wait_all_tasks_blocked()
        assert not (await registry.session(session_id).snapshot()).streaming


async def test_recall_skips_mirrored_elicitation_copy(
    autojump_clock: trio.testing.MockClock, registry: Registry, factory: FakeFactory
) -> None:
    # upstream: TestRecallSession_SkipsMirroredElicitationOnRunStream
    session_id = await new_session(registry)
    rt = MirroringRuntime()
    await run_once(registry, factory, session_id, rt)  # the session now has this runtime
    assert registry.last_event_seq(session_id) == 0
    elicit, other = elicitation(), Warning("heads up", "root")
    rt.script = [elicit, other]
    registry.elicitation_sink(session_id)(elicit)  # the reliable path: delivered once
    assert await registry.recall_handler(session_id)(QueuedMessage("wake up"))
    await wait_idle(registry, session_id)
    assert rt.turns == 2
    assert registry.last_event_seq(session_id) == 2
    entries = await replay(registry, session_id)
    assert len(entries) == 2
    assert entries[0].event is elicit
    assert entries[1].event is other


async def test_recall_keeps_elicitation_from_non_mirroring_runtime(
    autojump_clock: trio.testing.MockClock, registry: Registry, factory: FakeFactory
) -> None:
    # upstream: TestRecallSession_KeepsElicitationFromNonMirroringRuntime
    session_id = await new_session(registry)
    rt = FakeRuntime()
    await run_once(registry, factory, session_id, rt)
    elicit = elicitation()
    rt.script = [elicit]
    registry.ensure_log(session_id)  # as an attached session would have it
    assert await registry.recall_handler(session_id)(QueuedMessage("wake up"))
    await wait_idle(registry, session_id)
    assert rt.turns == 2
    assert registry.last_event_seq(session_id) == 1
    entries = await replay(registry, session_id)
    assert len(entries) == 1
    assert entries[0].event is elicit


# --- deletes end lazy logs and cannot resurrect them ---------------------------------------


async def closes_lazy_elicitation_log(registry: Registry, delete: Delete) -> None:
    session_id = await new_session(registry)
    registry.elicitation_sink(session_id)(elicitation(session_id))
    assert registry.has_event_log(session_id)
    received: list[LogEntry] = []
    ended = trio.Event()

    async def stream_events(sub: Subscription) -> None:
        with sub:
            async for entry in sub:
                received.append(entry)
        ended.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(stream_events, await registry.subscribe(session_id))
        await trio.testing.wait_all_tasks_blocked()
        assert len(received) == 1  # connected: the replay arrived
        await delete(registry, [session_id])
        with trio.fail_after(2):
            await ended.wait()
    assert len(received) == 2
    assert isinstance(received[1].event, SessionExited)
    assert received[1].json()["type"] == "session_exited"
    assert received[1].seq == 2


async def test_delete_closes_lazy_elicitation_log(
    autojump_clock: trio.testing.MockClock, registry: Registry
) -> None:
    # upstream: TestDeleteSession_ClosesLazyElicitationEventLog
    await closes_lazy_elicitation_log(registry, delete_each)


async def test_batch_delete_closes_lazy_elicitation_log(
    autojump_clock: trio.testing.MockClock, registry: Registry
) -> None:
    # upstream: TestBatchDeleteSessions_ClosesLazyElicitationEventLog
    await closes_lazy_elicitation_log(registry, batch_delete)


async def test_delete_stale_sink_cannot_resurrect_event_log(
    autojump_clock: trio.testing.MockClock, registry: Registry
) -> None:
    # upstream: TestDeleteSession_StaleSinkAfterDeleteCannotResurrectEventLog
    session_id = await new_session(registry)
    sink = registry.elicitation_sink(session_id)
    event = elicitation(session_id)
    sink(event)
    assert registry.has_event_log(session_id)
    await registry.delete(session_id)
    assert not registry.has_event_log(session_id)
    sink(event)
    assert not registry.has_event_log(session_id)
    # Never had a log: deleted first, the sink fires afterwards.
    other = await new_session(registry)
    late_sink = registry.elicitation_sink(other)
    await registry.delete(other)
    late_sink(event)
    assert not registry.has_event_log(other)


async def test_batch_delete_stale_sink_cannot_resurrect_event_log(
    autojump_clock: trio.testing.MockClock, registry: Registry
) -> None:
    # upstream: TestBatchDeleteSessions_StaleSinkAfterDeleteCannotResurrectEventLog
    with_log, without_log = await new_session(registry), await new_session(registry)
    sink_with_log = registry.elicitation_sink(with_log)
    sink_without_log = registry.elicitation_sink(without_log)
    event = elicitation(with_log)
    sink_with_log(event)
    assert registry.has_event_log(with_log)
    assert await registry.batch_delete([with_log, without_log]) == (2, [])
    sink_with_log(event)
    sink_without_log(event)
    assert not registry.has_event_log(with_log)
    assert not registry.has_event_log(without_log)


async def concurrent_sink_vs_delete(registry: Registry, delete: Delete) -> None:
    # upstream: testConcurrentSinkVsDelete
    session_id = await new_session(registry)
    sink = registry.elicitation_sink(session_id)
    event = elicitation(session_id)
    stop = trio.Event()
    deleting = False
    calls_during_delete = 0

    async def hammer() -> None:
        nonlocal calls_during_delete
        for _ in range(100_000):
            if stop.is_set():
                return
            sink(event)
            calls_during_delete += deleting
            await trio.lowlevel.checkpoint()  # every delete step may run between two calls
        raise AssertionError("the delete never finished")

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for _ in range(8):
                nursery.start_soon(hammer)
            for _ in range(3):
                await trio.lowlevel.checkpoint()
            assert registry.has_event_log(session_id)  # the hammering has begun
            deleting = True
            await delete(registry, [session_id])
            deleting = False
            stop.set()
    sink(event)
    assert calls_during_delete > 0  # the sink really ran while the delete was in progress
    assert not registry.has_event_log(session_id)


async def test_delete_concurrent_sink_calls_cannot_resurrect_event_log(
    autojump_clock: trio.testing.MockClock, registry: Registry
) -> None:
    # upstream: TestDeleteSession_ConcurrentSinkInvocationsCannotResurrectEventLog
    await concurrent_sink_vs_delete(registry, delete_each)


async def test_batch_delete_concurrent_sink_calls_cannot_resurrect_event_log(
    autojump_clock: trio.testing.MockClock, registry: Registry
) -> None:
    # upstream: TestBatchDeleteSessions_ConcurrentSinkInvocationsCannotResurrectEventLog
    await concurrent_sink_vs_delete(registry, batch_delete)


async def clears_sink_on_server_owned_runtime_only(
    registry: Registry, factory: FakeFactory, *, batch: bool
) -> None:
    owned = await new_session(registry)
    owned_rt = FakeRuntime()
    await run_once(registry, factory, owned, owned_rt)  # server-owned: built by the factory
    assert len(owned_rt.sinks) == 1 and owned_rt.sinks[0] is not None
    attached_session = await registry.create(Session.new())
    attached_rt = FakeRuntime()
    await registry.attach_runtime(attached_session.id, attached_rt, attached_session)
    if batch:
        await batch_delete(registry, [owned, attached_session.id])
    else:
        await delete_each(registry, [owned, attached_session.id])
    await wait_stopped(registry, [owned, attached_session.id])
    assert owned_rt.sinks[1:] == [None]  # exactly one clearing registration
    assert attached_rt.sinks == []  # the embedder owns its runtime's sink


async def test_delete_clears_sink_on_server_owned_runtime_only(
    autojump_clock: trio.testing.MockClock, registry: Registry, factory: FakeFactory
) -> None:
    # upstream: TestDeleteSession_ClearsElicitationSinkOnServerOwnedRuntimeOnly
    await clears_sink_on_server_owned_runtime_only(registry, factory, batch=False)


async def test_batch_delete_clears_sink_on_server_owned_runtime_only(
    autojump_clock: trio.testing.MockClock, registry: Registry, factory: FakeFactory
) -> None:
    # upstream: TestBatchDeleteSessions_ClearsElicitationSinkOnServerOwnedRuntimeOnly
    await clears_sink_on_server_owned_runtime_only(registry, factory, batch=True)


async def test_delete_silences_live_runtime_elicitation_delivery(
    autojump_clock: trio.testing.MockClock, registry: Registry, factory: FakeFactory
) -> None:
    # upstream: TestDeleteSession_SilencesLiveRuntimeElicitationDelivery
    session_id = await new_session(registry)
    rt = FakeRuntime()
    await run_once(registry, factory, session_id, rt)
    await registry.delete(session_id)
    # The runtime lives on (a detached background job holds it) and raises an elicitation.
    rt.emit_elicitation(elicitation(session_id))
    assert not registry.has_event_log(session_id)


# --- embedder event sources ----------------------------------------------------------------


@pytest.mark.parametrize("ending", ["source_returns", "drop_log"])
async def test_register_event_source_adopts_lazy_event_log(
    autojump_clock: trio.testing.MockClock, registry: Registry, ending: str
) -> None:
    # upstream: TestRegisterEventSource_AdoptsLazyEventLog
    # Go cancels the registered entry; here the pump ends when its source returns or on drop.
    session_id = await new_session(registry)
    event = elicitation()
    registry.elicitation_sink(session_id)(event)
    lazy = registry.ensure_log(session_id)
    received: list[LogEntry] = []
    ended = trio.Event()
    pumped, finish = trio.Event(), trio.Event()
    source_event = Warning("source-event")

    async def stream_events(sub: Subscription) -> None:
        with sub:
            async for entry in sub:
                received.append(entry)
        ended.set()

    async def source(append: Callable[[Event], None]) -> None:
        append(source_event)
        pumped.set()
        await finish.wait()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(stream_events, await registry.subscribe(session_id))
        await trio.testing.wait_all_tasks_blocked()
        assert len(received) == 1  # the listener is connected before the source attaches
        registry.register_event_source(session_id, source)
        with trio.fail_after(2):
            await pumped.wait()
        assert registry.ensure_log(session_id) is lazy
        assert registry.last_event_seq(session_id) == 2
        if ending == "source_returns":
            finish.set()
        else:
            registry.drop_log(session_id)
        with trio.fail_after(2):
            await ended.wait()
    assert [e.seq for e in received] == [1, 2, 3]
    assert received[0].event is event
    assert received[1].event is source_event
    assert isinstance(received[2].event, SessionExited)
    assert received[2].json()["type"] == "session_exited"


async def register_event_source_after_delete(registry: Registry, delete: Delete) -> None:
    # upstream: testRegisterEventSourceAfterDelete
    had_log, never_had_log = await new_session(registry), await new_session(registry)
    registry.elicitation_sink(had_log)(elicitation(had_log))
    assert registry.has_event_log(had_log)
    await delete(registry, [had_log, never_had_log])
    assert not registry.has_event_log(had_log)
    started: list[str] = []
    for session_id in (had_log, never_had_log):

        async def source(append: Callable[[Event], None], session_id: str = session_id) -> None:
            started.append(session_id)
            await trio.lowlevel.checkpoint()

        registry.register_event_source(session_id, source)
        assert not registry.has_event_log(session_id)
    await trio.testing.wait_all_tasks_blocked()
    await trio.sleep(1)  # virtual time: a pump, had one been launched, would have run by now
    assert started == []


async def test_delete_register_event_source_after_delete_is_noop(
    autojump_clock: trio.testing.MockClock, registry: Registry
) -> None:
    # upstream: TestDeleteSession_RegisterEventSourceAfterDeleteIsNoOp
    await register_event_source_after_delete(registry, delete_each)


async def test_batch_delete_register_event_source_after_delete_is_noop(
    autojump_clock: trio.testing.MockClock, registry: Registry
) -> None:
    # upstream: TestBatchDeleteSessions_RegisterEventSourceAfterDeleteIsNoOp
    await register_event_source_after_delete(registry, batch_delete)


async def test_register_event_source_racing_delete_never_leaves_event_log(
    autojump_clock: trio.testing.MockClock, registry: Registry
) -> None:
    # upstream: TestRegisterEventSource_RacingDeleteNeverLeavesEventLogBehind
    # The 50 races are forced: race i registers after i checkpoints of the running delete.
    before_tombstone = after_tombstone = 0
    for i in range(50):
        session_id = await new_session(registry)
        pump = {"started": False, "stopped": False}

        async def source(append: Callable[[Event], None], pump: dict[str, bool] = pump) -> None:
            pump["started"] = True
            try:
                await trio.sleep_forever()
            finally:
                pump["stopped"] = True

        async def register_after(checkpoints: int, session_id: str = session_id) -> None:
            nonlocal before_tombstone, after_tombstone
            for _ in range(checkpoints):
                await trio.lowlevel.checkpoint()
            if registry.is_deleted(session_id):
                after_tombstone += 1
            else:
                before_tombstone += 1
            registry.register_event_source(session_id, source)

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(registry.delete, session_id)
                nursery.start_soon(register_after, i)
            await trio.testing.wait_all_tasks_blocked()
        assert not registry.has_event_log(session_id), f"race {i} left a log behind"
        if pump["started"]:
            assert pump["stopped"], f"race {i}: the pump that won was not cancelled"
    # Both orders were exercised: registrations the delete tore down, and rejected ones.
    assert before_tombstone > 0
    assert after_tombstone > 0


async def test_batch_delete_tolerates_session_without_runtime(
    autojump_clock: trio.testing.MockClock, registry: Registry, store: MemoryStore
) -> None:
    # upstream: TestBatchDeleteSessions_ToleratesNilRuntimeCancel
    # No runtime entry without a cancel exists here: the nearest case is no runtime at all.
    session_id = await new_session(registry)
    assert await registry.batch_delete([session_id]) == (1, [])
    await wait_stopped(registry, [session_id])
    assert session_id not in registry.live_ids()
    with pytest.raises(SessionNotFound):
        await store.get_session(session_id)


# --- deletes, /events and stopping ---------------------------------------------------------


async def test_deleted_session_events_subscription_gets_session_exited(
    autojump_clock: trio.testing.MockClock, registry: Registry
) -> None:
    session_id = await new_session(registry)
    with await registry.subscribe(session_id) as sub:
        assert await collect(sub) == ([], False)
        await registry.delete(session_id)
        entries, ended = await collect(sub)
    assert ended
    assert [(e.seq, e.json()["type"]) for e in entries] == [(1, "session_exited")]


async def test_subscribe_to_deleted_session_is_not_found(
    autojump_clock: trio.testing.MockClock, registry: Registry
) -> None:
    session_id = await new_session(registry)
    registry.elicitation_sink(session_id)(elicitation(session_id))
    await registry.delete(session_id)
    with pytest.raises(SessionNotFound):
        await registry.subscribe(session_id)
    with pytest.raises(SessionNotFound):
        await registry.subscribe(session_id, since=1)


class SlowToStopRuntime(FakeRuntime):
    """Holds its turn; once cancelled it takes (virtual) time to wind down and then tries to
    write to the session, as a runtime flushing its last message would."""

    def __init__(self) -> None:
        super().__init__(hold=True)
        self.turn_ended = False
        self.late_write_refused = False

    async def run_stream(self, io: TurnIO) -> None:
        try:
            await super().run_stream(io)
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(5)  # virtual time (autojump clock)
                try:
                    await io.add_message(Message.assistant("last words"))
                except SessionNotFound:
                    self.late_write_refused = True
            self.turn_ended = True


async def test_delete_cancels_running_turn_without_resaving_session(
    autojump_clock: trio.testing.MockClock,
    registry: Registry,
    factory: FakeFactory,
    store: MemoryStore,
    runtime: FakeRuntime,
) -> None:
    session_id = await new_session(registry)
    stream = await registry.session(session_id).run("agent", (user("hi"),))
    with trio.fail_after(10):
        await runtime.turn_started.wait()
        await registry.delete(session_id)
        await registry.wait_stopped(session_id)
        assert runtime.streams == 0  # cancelled: it was never released
        assert [e.event for e in await drain(stream)] == [SessionExited("session ended")]
        await trio.testing.wait_all_tasks_blocked()
    with pytest.raises(SessionNotFound):
        await store.get_session(session_id)
    assert await store.list_sessions() == []


async def test_wait_stopped_waits_for_a_slow_cancelled_turn(
    autojump_clock: trio.testing.MockClock,
    registry: Registry,
    factory: FakeFactory,
    store: MemoryStore,
) -> None:
    session_id = await new_session(registry)
    rt = SlowToStopRuntime()
    factory.runtime = rt
    stream = await registry.session(session_id).run("agent", (user("hi"),))
    with trio.fail_after(10):
        await rt.turn_started.wait()
        await registry.delete(session_id)
        await registry.wait_stopped(session_id)
        assert rt.turn_ended  # stopped means: the cancelled turn has finished
        assert rt.late_write_refused
        assert rt.streams == 0
        assert [e.event for e in await drain(stream)] == [SessionExited("session ended")]
        await trio.testing.wait_all_tasks_blocked()
    with pytest.raises(SessionNotFound):
        await store.get_session(session_id)
    assert await store.list_sessions() == []


async def test_wait_stopped_for_attached_session_waits_for_guard_release(
    autojump_clock: trio.testing.MockClock, registry: Registry
) -> None:
    session = await registry.create(Session.new())
    guard = await registry.attach_runtime(session.id, FakeRuntime(), session)
    stopped = trio.Event()

    async def wait_stopped_task() -> None:
        await registry.wait_stopped(session.id)
        stopped.set()

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            async with guard:
                await registry.delete(session.id)
                assert guard.done.is_set()  # the embedder is told to end its stream
                nursery.start_soon(wait_stopped_task)
                await trio.sleep(5)  # virtual: however long the embedder takes
                assert not stopped.is_set()
            await stopped.wait()


# --- recovery export -----------------------------------------------------------------------


class ErrorRecordingRuntime(FakeRuntime):
    async def run_stream(self, io: TurnIO) -> None:
        await io.add_error(
            ErrorItem(
                "the conversation has exceeded the model's context window", "context_exceeded"
            )
        )
        await super().run_stream(io)


@pytest.mark.parametrize("recorded_by", ["store", "turn"])
async def test_export_for_recovery_includes_errors(
    autojump_clock: trio.testing.MockClock,
    registry: Registry,
    factory: FakeFactory,
    store: MemoryStore,
    recorded_by: str,
) -> None:
    # upstream: TestExportSessionForRecovery_IncludesErrors
    if recorded_by == "store":
        session = await store.add_session(Session.new(items=(Message.user("hi"),)))
        await store.add_error(
            session.id,
            ErrorItem(
                "the conversation has exceeded the model's context window",
                "context_exceeded",
                "root",
            ),
        )
    else:
        session = await registry.create(Session.new())
        await run_once(registry, factory, session.id, ErrorRecordingRuntime())
    export = recovery_export(await registry.get(session.id))
    assert [e["code"] for e in export["errors"]] == ["context_exceeded"]
    assert len(export["messages"]) == 1  # error items do not leak into messages


async def test_export_for_recovery_omits_errors_key_when_none(
    autojump_clock: trio.testing.MockClock, registry: Registry, store: MemoryStore
) -> None:
    # upstream: TestExportSessionForRecovery_OmitsErrorsKeyWhenNone
    session = await store.add_session(Session.new(items=(Message.user("hi"),)))
    export = recovery_export(await registry.get(session.id))
    assert "errors" not in export
    assert len(export["messages"]) == 1
