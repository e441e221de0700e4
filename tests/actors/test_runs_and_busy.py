"""Runs, the busy state and the attached stream guard (spec §7 items 1-16, plus design promises).

The upstream streaming lock is the actor's stream state (RUNNING for its own turn, GUARDED while
an embedder holds the :class:`StreamGuard` that ``attach_runtime`` returns). A Go context
cancellation maps to closing the :class:`RunStream` (the client left) or to trio cancellation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from greenroom.actors import DisconnectPolicy, Registry, RegistryConfig, StreamState, open_registry
from greenroom.agents import BuiltRuntime, QueuedMessage, TurnIO
from greenroom.domain import (
    AgentChoice,
    Approval,
    ErrorItem,
    Event,
    Message,
    Session,
    SessionTitle,
    Summary,
    ToolCall,
)
from greenroom.errors import (
    InvalidMessageId,
    MessageNotFound,
    ModelError,
    ModelSwitchingNotSupported,
    NotFound,
    SessionBusy,
)
from greenroom.persistence import Lease, MemoryStore, TurnStart
from tests.fakes import FakeFactory, FakeRuntime, GatedTitles, drain, user

# --- helpers -----------------------------------------------------------------------------


class BlockingStore(MemoryStore):
    """Once ``armed``, add_message/update_message signal ``entered`` and wait for ``release``
    before writing: the test pauses the actor mid-mutation, after its busy check passed."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.entered = trio.Event()
        self.release = trio.Event()
        self.on_write: Callable[[], None] | None = None  # runs synchronously, before the gate

    async def _gate(self) -> None:
        if self.on_write is not None:
            self.on_write()
        if self.armed:
            self.entered.set()
            await self.release.wait()

    async def add_message(self, session_id: str, message: Message) -> int:
        await self._gate()
        return await super().add_message(session_id, message)

    async def update_message(self, session_id: str, message_id: int, message: Message) -> None:
        await self._gate()
        await super().update_message(session_id, message_id, message)

    async def begin_turn(
        self, lease: Lease, turn: TurnStart, messages: tuple[Message, ...]
    ) -> tuple[int, ...]:
        await self._gate()  # a run stores its user messages here
        return await super().begin_turn(lease, turn, messages)


@attrs.define
class PerSessionFactory:
    """Builds a fresh FakeRuntime for each session (``hold`` as given)."""

    hold: bool = False
    made: dict[str, FakeRuntime] = attrs.field(factory=dict)

    async def build(self, source: str, agent_name: str, session: Session) -> BuiltRuntime:
        await trio.lowlevel.checkpoint()
        runtime = FakeRuntime(hold=self.hold)
        self.made[session.id] = runtime
        return BuiltRuntime(runtime)


class EmbedderIO:
    """What an embedder hands its own runtime when it streams outside any run (not the actor's
    TurnIO): events go to a list, messages nowhere."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self.events: list[Event] = []

    @property
    def session(self) -> Session:
        return self._session

    async def emit(self, event: Event) -> None:
        self.events.append(event)
        await trio.lowlevel.checkpoint()

    async def add_message(self, message: Message) -> Message:
        await trio.lowlevel.checkpoint()
        return message

    async def add_error(self, error: ErrorItem) -> None:
        await trio.lowlevel.checkpoint()

    async def begin_tool_call(self, call: ToolCall, agent_name: str) -> None:
        await trio.lowlevel.checkpoint()

    def add_usage(self, input_tokens: int, output_tokens: int, cost: float) -> None:
        pass

    async def record_approval(self, approval: Approval) -> None:
        await trio.lowlevel.checkpoint()

    async def add_sub_session(self, sub_session: Session) -> None:
        await trio.lowlevel.checkpoint()

    async def add_summary(self, summary: Summary) -> None:
        await trio.lowlevel.checkpoint()


class TwoPhaseRuntime(FakeRuntime):
    """Holds like FakeRuntime, then (once released) emits ``after`` and adds a message."""

    def __init__(self, after: list[Event]) -> None:
        super().__init__(hold=True)
        self.after = after
        self.finished = trio.Event()

    async def run_stream(self, io: TurnIO) -> None:
        await super().run_stream(io)
        for event in self.after:
            await io.emit(event)
        await io.add_message(Message.assistant("late reply"))
        self.finished.set()


class FailingRuntime(FakeRuntime):
    """Raises ``error`` from the first turn after emitting one event; later turns succeed."""

    def __init__(self, error: Exception) -> None:
        super().__init__(script=[AgentChoice("partial")])
        self.error: Exception | None = error

    async def run_stream(self, io: TurnIO) -> None:
        await super().run_stream(io)
        error, self.error = self.error, None
        if error is not None:
            raise error


def messages_of(session: Session) -> list[str]:
    return [item.content for item in session.items if isinstance(item, Message)]


def state_of(registry: Registry, session_id: str) -> StreamState | None:
    """The actor's stream state read without awaiting (None: no live actor)."""
    stats = registry.statistics(session_id)
    return stats.state if stats.live else None


async def streaming(registry: Registry, session_id: str) -> bool:
    return (await registry.session(session_id).snapshot()).streaming


# --- upstream counterparts -----------------------------------------------------------------


async def test_attach_runtime_registers_runtime_for_external_driver(
    autojump_clock: trio.testing.MockClock,
    registry: Registry,
    store: MemoryStore,
    factory: FakeFactory,
) -> None:
    # upstream: TestAttachRuntime_RegistersRuntimeForExternalDriver
    session = await store.add_session(Session.new())
    attached = FakeRuntime()
    await registry.attach_runtime(session.id, attached, session)
    with trio.fail_after(5):
        await registry.session(session.id).steer((QueuedMessage("hi"),))
    assert attached.steered == [QueuedMessage("hi")]
    assert factory.builds == []  # the attached runtime served it; none was built


async def test_title_can_finish_after_runtime_stream(
    autojump_clock: trio.testing.MockClock,
    registry: Registry,
    store: MemoryStore,
    factory: FakeFactory,
) -> None:
    # upstream: TestRunSession_TitleCanFinishAfterRuntimeStream
    factory.runtime = FakeRuntime()  # the turn ends at once
    titles = GatedTitles("Delayed title")
    factory.titles = titles
    session = await registry.create(Session.new())
    with trio.fail_after(5):
        stream = await registry.session(session.id).run("agent", (user("hello"),))
        await titles.started.wait()  # started without waiting for the caller to read
        entries = await drain(stream)  # the stream closes while the title is pending
    assert all(not isinstance(e.event, SessionTitle) for e in entries)
    assert (await registry.get(session.id)).title == ""
    titles.release()
    await trio.testing.wait_all_tasks_blocked()
    assert (await registry.get(session.id)).title == "Delayed title"
    assert (await store.get_session(session.id)).title == "Delayed title"
    assert titles.calls == [["hello"]]


async def test_cancellation_unblocks_existing_title(
    autojump_clock: trio.testing.MockClock, store: MemoryStore, factory: FakeFactory
) -> None:
    # upstream: TestRunSession_CancellationUnblocksExistingTitle
    # No Go context here: the client closing its RunStream before reading is the cancellation;
    # an unbuffered stream makes the session_title re-emit block exactly like Go's channel send.
    config = RegistryConfig(stream_buffer=0)
    runtime = FakeRuntime(hold=True)
    factory.runtime = runtime
    async with open_registry(store, factory, config) as registry:
        session = await registry.create(Session.new(title="Existing title"))
        with trio.fail_after(5):
            stream = await registry.session(session.id).run("agent", (user("hello"),))
            await trio.testing.wait_all_tasks_blocked()
            assert state_of(registry, session.id) is StreamState.RUNNING
            stream.close()  # nobody ever read the title event
            await trio.testing.wait_all_tasks_blocked()
            assert state_of(registry, session.id) is StreamState.IDLE
            assert not await streaming(registry, session.id)
            assert await drain(stream) == []  # the stream is closed
        assert runtime.streams == 0  # the turn was cancelled, not left running
        # The title event still reached the session's event log (seq 1).
        assert registry.last_event_seq(session.id) == 1


@pytest.mark.parametrize("policy", ["cancel", "continue"])
async def test_send_stream_event_cancellation_unblocks(
    autojump_clock: trio.testing.MockClock,
    store: MemoryStore,
    factory: FakeFactory,
    policy: DisconnectPolicy,
) -> None:
    # upstream: TestSendStreamEvent_CancellationUnblocks
    # Go's sendStreamEvent is the turn's emit: an emit blocked on an unread, unbuffered stream
    # must return as soon as the client leaves (here: closes its RunStream).
    runtime = FakeRuntime(script=[AgentChoice("one"), AgentChoice("two")], hold=True)
    factory.runtime = runtime
    async with open_registry(store, factory, RegistryConfig(stream_buffer=0)) as registry:
        session = await registry.create(Session.new())
        with trio.fail_after(5):
            stream = await registry.session(session.id).run(
                "agent", (user("hi"),), on_disconnect=policy
            )
            await runtime.turn_started.wait()
            await trio.testing.wait_all_tasks_blocked()
            # The runtime is stuck in its first emit: logged, but nobody took it.
            assert registry.last_event_seq(session.id) == 1
            assert runtime.streams == 1
            stream.close()
            await trio.testing.wait_all_tasks_blocked()
        if policy == "cancel":
            # The blocked emit gave way to the turn's cancellation: nothing more ran.
            assert registry.last_event_seq(session.id) == 1
        else:
            # The blocked emit returned and the turn outlived its stream: the runtime went on
            # to its second event and now waits for release.
            assert registry.last_event_seq(session.id) == 2
            assert runtime.streams == 1
            runtime.release()
            await trio.testing.wait_all_tasks_blocked()
        assert runtime.streams == 0
        assert state_of(registry, session.id) is StreamState.IDLE


async def test_concurrent_request_returns_session_busy(
    autojump_clock: trio.testing.MockClock, registry: Registry, runtime: FakeRuntime
) -> None:
    # upstream: TestRunSession_ConcurrentRequestReturnsErrSessionBusy
    session = await registry.create(Session.new())
    handle = registry.session(session.id)
    with trio.fail_after(5):
        first = await handle.run("agent", (user("first"),))  # busy as soon as run returns
        with pytest.raises(SessionBusy):
            await handle.run("agent", (user("second"),))
        runtime.release()
        await drain(first)
        third = await handle.run("agent", (user("third"),))  # at once: not refused
        await drain(third)
    assert runtime.turns == 2
    assert runtime.max_concurrent == 1
    assert messages_of(await registry.get(session.id)) == ["first", "third"]


async def test_messages_not_added_when_busy(
    autojump_clock: trio.testing.MockClock,
    registry: Registry,
    store: MemoryStore,
    factory: FakeFactory,
) -> None:
    # upstream: TestRunSession_MessagesNotAddedWhenBusy
    runtime = FakeRuntime(hold=True, model_switching=True)
    factory.runtime = runtime
    session = await registry.create(Session.new())
    handle = registry.session(session.id)
    with trio.fail_after(5):
        first = await handle.run("agent", (user("first"),))
        before = await registry.get(session.id)
        with pytest.raises(SessionBusy):
            # A model override rides along: a refused run must not apply it either.
            await handle.run("agent", (user("should not be added"),), model="openai/gpt-4o")
        after = await registry.get(session.id)
        assert messages_of(after) == messages_of(before) == ["first"]
        assert messages_of(await store.get_session(session.id)) == ["first"]
        assert after.agent_model_overrides == {}
        assert runtime.model_calls == []
        runtime.release()
        await drain(first)


async def test_add_message_rejects_while_session_streaming(
    autojump_clock: trio.testing.MockClock,
    registry: Registry,
    store: MemoryStore,
    runtime: FakeRuntime,
) -> None:
    # upstream: TestAddMessage_RejectsWhileSessionStreaming
    session = await registry.create(Session.new())
    handle = registry.session(session.id)
    with trio.fail_after(5):
        stream = await handle.run("agent", (user("hi"),))
        with pytest.raises(SessionBusy):
            await handle.add_message(Message.user("should be rejected"))
        runtime.release()
        await drain(stream)
        message_id = await handle.add_message(Message.user("accepted"))
    assert message_id > 0
    assert messages_of(await store.get_session(session.id)) == ["hi", "accepted"]
    assert messages_of(await registry.get(session.id)) == ["hi", "accepted"]


async def test_update_message_rejects_wrong_session_and_malformed_id(
    autojump_clock: trio.testing.MockClock, registry: Registry, store: MemoryStore
) -> None:
    # upstream: TestUpdateMessageRejectsWrongSessionAndMalformedID
    owner = await store.add_session(Session.new())
    other = await store.add_session(Session.new())
    message_id = await store.add_message(owner.id, Message.user("original"))
    guard = await registry.attach_runtime(owner.id, FakeRuntime(), owner)
    with trio.fail_after(5):
        async with guard:
            with pytest.raises(NotFound) as wrong:
                await registry.session(other.id).update_message(
                    str(message_id), Message.user("wrong session")
                )
            assert isinstance(wrong.value, MessageNotFound)
            with pytest.raises(SessionBusy):
                await registry.session(owner.id).update_message(
                    str(message_id), Message.user("busy bypass")
                )
            with pytest.raises(InvalidMessageId, match="invalid message ID"):
                await registry.session(other.id).update_message(
                    f"{message_id}junk", Message.user("malformed")
                )
    assert messages_of(await store.get_session(owner.id)) == ["original"]
    assert messages_of(await store.get_session(other.id)) == []


async def test_update_message_rejects_while_session_streaming(
    autojump_clock: trio.testing.MockClock,
    registry: Registry,
    store: MemoryStore,
    runtime: FakeRuntime,
) -> None:
    # upstream: TestUpdateMessage_RejectsWhileSessionStreaming
    session = await registry.create(Session.new())
    message_id = str(await store.add_message(session.id, Message.user("original")))
    handle = registry.session(session.id)
    with trio.fail_after(5):
        stream = await handle.run("agent", (user("hi"),))
        with pytest.raises(SessionBusy):
            await handle.update_message(message_id, Message.user("should be rejected"))
        runtime.release()
        await drain(stream)
        await handle.update_message(message_id, Message.user("accepted"))
    assert messages_of(await store.get_session(session.id)) == ["accepted", "hi"]
    assert messages_of(await registry.get(session.id)) == ["accepted", "hi"]


async def test_attached_stream_add_and_update_message_reject_while_streaming(
    autojump_clock: trio.testing.MockClock, registry: Registry, store: MemoryStore
) -> None:
    # upstream: TestAttachedStream_AddMessageAndUpdateMessageRejectWhileStreaming
    session = await store.add_session(Session.new())
    message_id = str(await store.add_message(session.id, Message.user("original")))
    attached = FakeRuntime(hold=True)
    guard = await registry.attach_runtime(session.id, attached, session)
    handle = registry.session(session.id)
    io = EmbedderIO(session)
    with trio.fail_after(5):
        async with guard, trio.open_nursery() as nursery:
            # The embedder streams its runtime directly, never through run().
            nursery.start_soon(attached.run_stream, io)
            await attached.turn_started.wait()
            with pytest.raises(SessionBusy):
                await handle.add_message(Message.user("should be rejected"))
            with pytest.raises(SessionBusy):
                await handle.update_message(message_id, Message.user("should be rejected"))
            with pytest.raises(SessionBusy):  # and runs are refused too
                await handle.run("agent", (user("run"),))
            attached.release()
        # The attached stream ended and the guard is released: both succeed now.
        await handle.add_message(Message.user("accepted"))
        await handle.update_message(message_id, Message.user("accepted"))
    assert attached.turns == 1  # only the embedder's own stream ran
    assert messages_of(await store.get_session(session.id)) == ["accepted", "accepted"]


async def _assert_guard_blocked_during_mutation(
    registry: Registry, store: BlockingStore, session: Session, mutate: Any
) -> None:
    guard = await registry.attach_runtime(session.id, FakeRuntime(), session)
    results: list[object] = []
    acquired = trio.Event()

    async def run_mutation() -> None:
        results.append(await mutate())

    async def take_guard() -> None:
        await guard.acquire()
        acquired.set()

    store.armed = True
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_mutation)
            await store.entered.wait()  # the busy check passed; the write is in flight
            nursery.start_soon(take_guard)
            await trio.testing.wait_all_tasks_blocked()
            assert not acquired.is_set(), "guard granted before the mutation completed"
            assert results == []
            store.release.set()
            await acquired.wait()
            assert len(results) == 1  # the mutation had returned (successfully) first
            guard.release()
    assert state_of(registry, session.id) is StreamState.IDLE


async def test_attached_guard_cannot_start_between_busy_check_and_add_message(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # upstream: TestReview_AttachedGuardCannotStartBetweenBusyCheckAndMutation_AddMessage
    store = BlockingStore()
    session = await store.add_session(Session.new())
    async with open_registry(store, FakeFactory()) as registry:
        handle = registry.session(session.id)
        await _assert_guard_blocked_during_mutation(
            registry, store, session, lambda: handle.add_message(Message.user("mutating"))
        )
    assert messages_of(await store.get_session(session.id)) == ["mutating"]


async def test_attached_guard_cannot_start_between_busy_check_and_update_message(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # upstream: TestReview_AttachedGuardCannotStartBetweenBusyCheckAndMutation_UpdateMessage
    store = BlockingStore()
    session = await store.add_session(Session.new())
    message_id = str(await store.add_message(session.id, Message.user("original")))
    async with open_registry(store, FakeFactory()) as registry:
        handle = registry.session(session.id)
        await _assert_guard_blocked_during_mutation(
            registry,
            store,
            session,
            lambda: handle.update_message(message_id, Message.user("mutating")),
        )
    assert messages_of(await store.get_session(session.id)) == ["mutating"]


async def test_add_message_busy_maps_to_409_while_streaming(
    autojump_clock: trio.testing.MockClock, registry: Registry, runtime: FakeRuntime
) -> None:
    # upstream: TestServer_AddMessage_Returns409WhileSessionStreaming
    # At the session layer: SessionBusy carrying status 409; the HTTP round trip (POST
    # /api/sessions/:id/messages -> 409) is tested with the transport.
    session = await registry.create(Session.new())
    handle = registry.session(session.id)
    with trio.fail_after(5):
        stream = await handle.run("agent", (user("hi"),))
        with pytest.raises(SessionBusy) as busy:
            await handle.add_message(Message.user("should be rejected"))
        runtime.release()
        await drain(stream)
    assert busy.value.status == 409
    assert busy.value.code == "session_busy"


async def test_update_message_busy_maps_to_409_while_streaming(
    autojump_clock: trio.testing.MockClock,
    registry: Registry,
    store: MemoryStore,
    runtime: FakeRuntime,
) -> None:
    # upstream: TestServer_UpdateMessage_Returns409WhileSessionStreaming
    # At the session layer: SessionBusy carrying status 409; the HTTP round trip (PATCH
    # /api/sessions/:id/messages/:msg_id -> 409) is tested with the transport.
    session = await registry.create(Session.new())
    message_id = str(await store.add_message(session.id, Message.user("original")))
    handle = registry.session(session.id)
    with trio.fail_after(5):
        stream = await handle.run("agent", (user("hi"),))
        with pytest.raises(SessionBusy) as busy:
            await handle.update_message(message_id, Message.user("should be rejected"))
        runtime.release()
        await drain(stream)
    assert busy.value.status == 409
    assert busy.value.code == "session_busy"
    assert messages_of(await store.get_session(session.id))[0] == "original"


async def test_sequential_requests_succeed(
    autojump_clock: trio.testing.MockClock, registry: Registry, factory: FakeFactory
) -> None:
    # upstream: TestRunSession_SequentialRequestsSucceed
    runtime = FakeRuntime()
    factory.runtime = runtime
    session = await registry.create(Session.new())
    with trio.fail_after(5):
        for _ in range(3):
            await drain(await registry.session(session.id).run("agent", (user("hello"),)))
    assert runtime.turns == 3
    assert runtime.max_concurrent == 1


async def test_different_sessions_run_concurrently(
    autojump_clock: trio.testing.MockClock, store: MemoryStore
) -> None:
    # upstream: TestRunSession_DifferentSessionsConcurrently
    factory = PerSessionFactory(hold=True)
    async with open_registry(store, factory) as registry:
        first = await registry.create(Session.new())
        second = await registry.create(Session.new())
        done: list[str] = []

        async def run(session_id: str, text: str) -> None:
            await drain(await registry.session(session_id).run("agent", (user(text),)))
            done.append(session_id)

        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run, first.id, "a")
                nursery.start_soon(run, second.id, "b")
                await trio.testing.wait_all_tasks_blocked()
                # Both turns are streaming at once: neither waits for the other.
                assert {sid: rt.streams for sid, rt in factory.made.items()} == {
                    first.id: 1,
                    second.id: 1,
                }
                for rt in factory.made.values():
                    rt.release()
        assert sorted(done) == sorted([first.id, second.id])
        assert [rt.max_concurrent for rt in factory.made.values()] == [1, 1]
        assert [rt.turns for rt in factory.made.values()] == [1, 1]


# --- design promises -----------------------------------------------------------------------


async def test_closing_run_stream_cancels_turn_and_actor_is_idle(
    autojump_clock: trio.testing.MockClock, registry: Registry, factory: FakeFactory
) -> None:
    runtime = TwoPhaseRuntime(after=[AgentChoice("after")])
    factory.runtime = runtime
    session = await registry.create(Session.new())
    handle = registry.session(session.id)
    with trio.fail_after(5):
        stream = await handle.run("agent", (user("hi"),))  # on_disconnect="cancel"
        await runtime.turn_started.wait()
        stream.close()
        await trio.testing.wait_all_tasks_blocked()
        assert runtime.streams == 0
        assert not runtime.finished.is_set()  # cancelled in its hold: no second phase
        assert not await streaming(registry, session.id)
        assert messages_of(await registry.get(session.id)) == ["hi"]
        # The actor is idle: the next run starts (and this time runs to completion).
        runtime.rearm()
        runtime.release()
        await drain(await handle.run("agent", (user("again"),)))
    assert runtime.finished.is_set()
    assert messages_of(await registry.get(session.id)) == ["hi", "again", "late reply"]


async def test_continue_policy_keeps_turn_running_and_feeding_event_log(
    autojump_clock: trio.testing.MockClock,
    registry: Registry,
    store: MemoryStore,
    factory: FakeFactory,
) -> None:
    runtime = TwoPhaseRuntime(after=[AgentChoice("after the client left")])
    factory.runtime = runtime
    session = await registry.create(Session.new())
    handle = registry.session(session.id)
    subscription = await registry.subscribe(session.id)
    with trio.fail_after(5), subscription:
        stream = await handle.run("agent", (user("hi"),), on_disconnect="continue")
        await runtime.turn_started.wait()
        stream.close()
        await trio.testing.wait_all_tasks_blocked()
        assert runtime.streams == 1  # still running
        assert await streaming(registry, session.id)
        with pytest.raises(SessionBusy):
            await handle.run("agent", (user("meanwhile"),))
        runtime.release()
        seen = [entry.event async for entry in _take(subscription, 1)]
        assert seen == [AgentChoice("after the client left")]
        await trio.testing.wait_all_tasks_blocked()
    assert runtime.finished.is_set()
    assert not await streaming(registry, session.id)
    assert messages_of(await store.get_session(session.id)) == ["hi", "late reply"]


async def _take(subscription: Any, count: int) -> Any:
    """The first ``count`` entries of ``subscription`` (an async generator, bounded)."""
    taken = 0
    async for entry in subscription:
        yield entry
        taken += 1
        if taken >= count:
            return


async def test_actor_idle_before_run_stream_closes(
    autojump_clock: trio.testing.MockClock, registry: Registry, factory: FakeFactory
) -> None:
    runtime = FakeRuntime(script=[AgentChoice("x")])
    factory.runtime = runtime
    session = await registry.create(Session.new())
    handle = registry.session(session.id)
    with trio.fail_after(5):
        for round_ in range(5):
            stream = await handle.run("agent", (user(f"run {round_}"),))
            entries = []
            async for entry in stream:
                entries.append(entry)
            # The stream just ended and nothing else ran since: the actor is already idle.
            assert state_of(registry, session.id) is StreamState.IDLE
            assert [e.event for e in entries] == [AgentChoice("x")]
    assert runtime.turns == 5


@pytest.mark.parametrize(
    ("error", "code", "text"),
    [
        (RuntimeError("boom"), "internal_error", "the agent runtime failed"),
        (ModelError("provider said no"), "model_error", "provider said no"),
    ],
)
async def test_runtime_failure_ends_turn_with_error_event(
    autojump_clock: trio.testing.MockClock,
    registry: Registry,
    factory: FakeFactory,
    error: Exception,
    code: str,
    text: str,
) -> None:
    runtime = FailingRuntime(error)
    factory.runtime = runtime
    session = await registry.create(Session.new())
    handle = registry.session(session.id)
    with trio.fail_after(5):
        entries = await drain(await handle.run("agent", (user("first"),)))
        assert [e.json()["type"] for e in entries] == ["agent_choice", "error"]
        failure = entries[-1].json()
        assert failure["code"] == code
        assert failure["error"] == text
        assert registry.last_event_seq(session.id) == 2  # the error is in the log too
        assert not await streaming(registry, session.id)
        again = await drain(await handle.run("agent", (user("second"),)))
    assert [e.json()["type"] for e in again] == ["agent_choice"]
    assert runtime.turns == 2
    assert messages_of(await registry.get(session.id)) == ["first", "second"]


async def test_model_override_without_switching_mutates_nothing(
    autojump_clock: trio.testing.MockClock,
    registry: Registry,
    store: MemoryStore,
    factory: FakeFactory,
) -> None:
    runtime = FakeRuntime()  # model_switching=False
    factory.runtime = runtime
    session = await registry.create(Session.new())
    handle = registry.session(session.id)
    with trio.fail_after(5):
        with pytest.raises(ModelSwitchingNotSupported) as refused:
            await handle.run("agent", (user("hi"),), model="openai/gpt-4o")
        assert refused.value.status == 422
        live = await registry.get(session.id)
        assert messages_of(live) == []
        assert live.agent_model_overrides == {}
        assert live.custom_models_used == ()
        stored = await store.get_session(session.id)
        assert messages_of(stored) == []
        assert stored.agent_model_overrides == {}
        assert runtime.model_calls == []
        assert runtime.turns == 0
        assert not await streaming(registry, session.id)
        await drain(await handle.run("agent", (user("hi"),)))  # without override: runs
    assert runtime.turns == 1


async def test_caller_cancelled_during_run_call_does_not_leave_session_busy(
    autojump_clock: trio.testing.MockClock, factory: FakeFactory
) -> None:
    # The trio form of a request context cancelled mid-RunSession: the caller is cancelled
    # while the actor is starting the turn, so it never receives the RunStream. The turn must
    # not be left running for nobody (spec §3.7: a cancelled request never leaves the lock held).
    store = BlockingStore()
    session = await store.add_session(Session.new())
    runtime = FakeRuntime(hold=True)
    factory.runtime = runtime
    async with open_registry(store, factory) as registry:
        handle = registry.session(session.id)
        store.armed = True
        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                caller = trio.CancelScope()

                async def call_run() -> None:
                    with caller:
                        await handle.run("agent", (user("hi"),))
                        raise AssertionError("the caller should have been cancelled")

                nursery.start_soon(call_run)
                await store.entered.wait()  # the actor is appending the user message
                caller.cancel()
                await trio.testing.wait_all_tasks_blocked()
                store.release.set()
            await trio.testing.wait_all_tasks_blocked()
            assert runtime.streams == 0
            assert not await streaming(registry, session.id)
            store.armed = False
            runtime.rearm()
            runtime.release()
            await drain(await handle.run("agent", (user("again"),)))


async def test_caller_cancelled_after_actor_answered_does_not_leave_session_busy(
    autojump_clock: trio.testing.MockClock, factory: FakeFactory
) -> None:
    # As above, but the answer is already waiting in the caller's reply channel when the
    # caller's cancellation lands: the caller is cancelled from inside the store write, which
    # does not yield, so the actor answers before the cancelled caller runs again.
    store = BlockingStore()
    session = await store.add_session(Session.new())
    runtime = FakeRuntime(hold=True)
    factory.runtime = runtime
    async with open_registry(store, factory) as registry:
        handle = registry.session(session.id)
        caller = trio.CancelScope()
        store.on_write = caller.cancel
        with trio.fail_after(5):
            with caller:
                await handle.run("agent", (user("hi"),))
                raise AssertionError("the caller should have been cancelled")
            store.on_write = None
            await trio.testing.wait_all_tasks_blocked()
            assert runtime.turns == 1  # the turn did start
            assert runtime.streams == 0
            assert not await streaming(registry, session.id)
            runtime.rearm()
            runtime.release()
            await drain(await handle.run("agent", (user("again"),)))
