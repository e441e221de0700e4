"""The session actor: one trio task that owns one live session.

It owns the live session (:class:`~._live.LiveSession`), the runtime, the stream state (idle /
running a turn / guarded by an embedder), the title task, the follow-up injector and the
idempotency keys. Commands arrive on a bounded mailbox and run one at a time; a command that
checks state and then awaits (a store write, a runtime call) finishes before the next one
starts, so no check-then-act can interleave.

Only this module writes the actor's state, which is grouped in a few records (runtime, title,
lifecycle, stream). Handlers, the turn and title tasks, the build task and decisions see the
actor as an :class:`~._context.ActorContext`: they read it and call its intent methods, which
are synchronous (atomic in trio) unless they say otherwise.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar, cast

import outcome
import trio

from greenroom.agents import (
    BuiltRuntime,
    Runtime,
    RuntimeFactory,
    TitleGenerator,
    is_busy,
    supports_recall,
)
from greenroom.domain import Event, Session, SessionExited, visible_messages
from greenroom.errors import GreenroomError, SessionGone, SessionNotFound
from greenroom.observe import attached, command_span, detached, tag_logs
from greenroom.persistence import EventReader, Lease, Store, ToolCallRecord, Writer

from . import _handlers, _metadata  # noqa: F401  (each registers its handlers)
from ._build import build_runtime
from ._commands import Call, MailboxClosed, NeedsRuntime, Request, Turn, send_call
from ._context import ActorHost
from ._entries import LogEntry
from ._eventlog import EventLog
from ._idempotency import IdempotencyCache
from ._live import LiveSession
from ._results import FollowUpInjector, GuardTicket, SessionStatistics, StreamState, discard_reply
from ._state import Lifecycle, RuntimeSlot, StreamSlot, TitleSlot
from ._table import TABLE

log = logging.getLogger(__name__)

R = TypeVar("R")
PARKS = (NeedsRuntime,)  # a command that waits for the runtime is no error of its span


class SessionActor:
    """One live session (see the module docstring): ``run`` it in a nursery, then send it
    :class:`~._commands.Call`s through ``mailbox``; closing the mailbox retires it."""

    __slots__ = (
        "__weakref__",
        "_host",
        "_in_doubt",
        "_inbox",
        "_injector",
        "_life",
        "_nursery",
        "_persistence",
        "_runtime",
        "_stream",
        "_title",
        "config",
        "exited",
        "id",
        "idempotency",
        "live",
        "mailbox",
    )

    def __init__(
        self, host: ActorHost, session: Session, in_doubt: list[ToolCallRecord] | None = None
    ) -> None:
        self.id = session.id
        self._host = host
        persistence = host.persistence
        self._persistence = persistence
        self.config = host.config
        self.live = LiveSession(
            session,
            persistence.store,
            persistence.writer,
            self,
            write_grace=self.config.store_write_grace,
            close_grace=self.config.shutdown_grace,
        )
        # Tool calls of an interrupted turn that a person must decide before the next run.
        self._in_doubt = {call.tool_call_id: call for call in in_doubt or ()}
        self._runtime = RuntimeSlot()
        self._title = TitleSlot()
        self._life = Lifecycle(last_active=trio.current_time())
        self._stream = StreamSlot()
        self._stream.guard_free.set()
        self._injector: FollowUpInjector | None = None
        self.idempotency = IdempotencyCache()
        self.exited = trio.Event()  # set by the registry once this actor's task has ended
        self._nursery: trio.Nursery | None = None
        # The registry holds the only send end; closing it retires the actor.
        self.mailbox, self._inbox = trio.open_memory_channel[Call](self.config.mailbox_size)

    # --- what the context reads ----------------------------------------------------------

    @property
    def store(self) -> Store:
        return self._persistence.store

    @property
    def writer(self) -> Writer:
        return self._persistence.writer

    @property
    def events(self) -> EventReader:
        return self._persistence.events

    @property
    def factory(self) -> RuntimeFactory:
        return self._host.factory

    @property
    def session(self) -> Session:
        return self.live.session

    @property
    def runtime(self) -> Runtime | None:
        return self._runtime.runtime

    @property
    def runtime_source(self) -> str:
        return self._runtime.source

    @property
    def title_generator(self) -> TitleGenerator | None:
        return self._runtime.title_generator

    @property
    def title_due(self) -> bool:
        return self._title.scope is None and not self._title.requested

    @property
    def building(self) -> bool:
        return self._runtime.building

    @property
    def attached(self) -> bool:
        return self._runtime.attached_done is not None

    @property
    def state(self) -> StreamState:
        return self._stream.state

    @property
    def streaming(self) -> bool:
        return self._stream.state is not StreamState.IDLE

    @property
    def turn(self) -> Turn | None:
        return self._stream.turn

    @property
    def deleted(self) -> bool:
        return self._life.deleted

    @property
    def lost(self) -> bool:
        return self._life.lost

    @property
    def in_doubt(self) -> Mapping[str, ToolCallRecord]:
        return self._in_doubt

    @property
    def injector(self) -> FollowUpInjector | None:
        return self._injector

    @property
    def log(self) -> EventLog | None:
        if self._life.lost:  # never a new log (and claim) for an actor the registry forgot
            return None
        return self._host.logs.ensure(self.id)

    @property
    def lease(self) -> Lease:
        return self.live.lease

    def agent_name(self) -> str:
        runtime = self._runtime.runtime
        return runtime.current_agent().name if runtime is not None else ""

    def num_messages(self) -> int:
        return sum(1 for _ in visible_messages(self.session.items))

    def statistics(self) -> SessionStatistics:
        logs = self._host.logs
        turn = self._stream.turn
        return SessionStatistics(
            live=True,
            state=self._stream.state,
            building=self._runtime.building,
            run_stream_open=turn is not None and turn.streamed,
            mailbox_used=self._inbox.statistics().current_buffer_used,
            mailbox_peak=self._stream.mailbox_peak,
            has_log=logs.has_log(self.id),
            subscribers=logs.subscriber_count(self.id),
            last_seq=logs.last_seq(self.id),
            queued_follow_ups=queued_follow_ups(self._runtime.runtime),
        )

    # --- lifecycle -----------------------------------------------------------------------

    async def run(
        self, *, task_status: trio.TaskStatus[SessionActor] = trio.TASK_STATUS_IGNORED
    ) -> None:
        tag_logs(session_id=self.id)  # this task's lines, and its turns', name the session
        with detached():  # not the trace of the request that happened to spawn this actor
            await self._run(task_status)

    async def _run(self, task_status: trio.TaskStatus[SessionActor]) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started(self)
            async with self._inbox:
                try:
                    await self._serve()
                finally:
                    self._fail_queued_calls()
                    self.fail_parked(SessionNotFound(self.id) if self.deleted else SessionGone())
            if self.deleted:
                # Stopped means: the cancelled turn finished and the embedder let go.
                await self._stream.guard_free.wait()
            elif self._stream.turn is not None:
                # Shutting down: the cancelled turn gets a moment to persist what it did.
                with trio.move_on_after(self.config.shutdown_grace):
                    await self._stream.turn_ended.wait()
            nursery.cancel_scope.cancel(reason=f"session actor {self.id} stopped")
        runtime = self._runtime.runtime
        if runtime is not None and not self.attached:
            with trio.move_on_after(self.config.shutdown_grace, shield=True):
                if not self.deleted:  # the delete already cleared it, exactly once
                    runtime.on_elicitation_request(None)
                await runtime.aclose()

    async def _serve(self) -> None:
        life, stream = self._life, self._stream
        while not (life.deleted or life.stopping):
            with trio.move_on_at(life.last_active + self.config.idle_timeout) as idle:
                try:
                    call = await self._inbox.receive()
                except trio.EndOfChannel:  # lost: the registry closed the mailbox
                    return
            if idle.cancelled_caught:
                if self._try_retire():
                    return
                life.last_active = trio.current_time()  # busy: look again an idle period later
                continue
            waiting = self._inbox.statistics().current_buffer_used + 1
            if waiting > stream.mailbox_peak:
                stream.mailbox_peak = waiting
            await self._dispatch(call)
            life.last_active = trio.current_time()

    def _busy_otherwise(self) -> bool:
        runtime = self._runtime.runtime
        return (
            self.streaming
            or self._runtime.building
            or is_busy(runtime)  # background agent tasks
            or self.attached
            or self._injector is not None
            or self._title.scope is not None
            or self._host.logs.pinned(self.id)
        )

    def _try_retire(self) -> bool:
        # Synchronous: no sender can slip a command in between the check and the close.
        if self._busy_otherwise() or self._inbox.statistics().current_buffer_used:
            return False
        self._host.retire(self.id, self)
        self.mailbox.close()
        return True

    def _fail_queued_calls(self) -> None:
        while True:
            try:
                call = self._inbox.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel):
                return
            with call.reply:
                if self.deleted:
                    error: GreenroomError = SessionNotFound(self.id)
                    with contextlib.suppress(trio.BrokenResourceError):
                        call.reply.send_nowait(outcome.Error(error))

    async def _dispatch(self, call: Call) -> None:
        handler = TABLE[type(call.request)]
        result: outcome.Outcome[Any]
        try:
            with attached(call.trace), command_span(self.id, call.request, call.sent_at, PARKS):
                result = outcome.Value(await handler(self, call.request))
        except NeedsRuntime as need:
            # Answered once the runtime is built: the build never holds the mailbox.
            self._park(call, need.source, need.agent_name)
            return
        except GreenroomError as exc:
            result = outcome.Error(exc)
        except BaseException:
            call.reply.close()  # no caller hangs; anything else is a bug that crashes this
            raise  # actor only (the registry supervises)
        with call.reply:
            try:
                call.reply.send_nowait(result)
            except trio.BrokenResourceError:
                discard_reply(result)

    def _park(self, call: Call, source: str, agent_name: str) -> None:
        slot = self._runtime
        slot.parked.append(call)
        if not slot.building:
            slot.building = True
            scope = slot.scope = trio.CancelScope()
            assert self._nursery is not None
            with attached(call.trace):  # the build is part of the first run's trace
                self._nursery.start_soon(build_runtime, self, scope, source, agent_name)

    async def call_self(self, request: Request[R]) -> R:
        try:
            result = await send_call(self.mailbox, request)
        except MailboxClosed:
            raise SessionGone() from None
        except trio.EndOfChannel:
            raise (SessionNotFound(self.id) if self.deleted else SessionGone()) from None
        return cast(R, result.unwrap())

    # --- intents: the runtime --------------------------------------------------------------

    def install_runtime(self, built: BuiltRuntime, source: str, agent_name: str) -> None:
        slot = self._runtime
        slot.runtime, slot.source, slot.agent = built.runtime, source, agent_name
        slot.title_generator = built.title_generator
        built.runtime.on_elicitation_request(self._host.elicitation_sink(self.id))
        if supports_recall(built.runtime):
            built.runtime.set_recall_handler(self._host.recall_handler(self.id))
        self._host.mark_ready()

    def attach(self, runtime: Runtime, done: trio.Event) -> None:
        slot = self._runtime
        slot.runtime, slot.attached_done, slot.title_generator = runtime, done, None
        if supports_recall(runtime):
            runtime.set_recall_handler(self._host.recall_handler(self.id))
        self._host.mark_ready()

    def fail_parked(self, error: Exception) -> None:
        self._runtime.building = False
        parked, self._runtime.parked = self._runtime.parked, []
        for call in parked:
            with call.reply, contextlib.suppress(trio.BrokenResourceError):
                call.reply.send_nowait(outcome.Error(error))

    async def resume_parked(self) -> None:
        self._runtime.building = False
        parked, self._runtime.parked = self._runtime.parked, []
        for call in parked:
            await self._dispatch(call)

    def build_ended(self, scope: trio.CancelScope) -> None:
        if self._runtime.scope is scope:
            self._runtime.scope = None

    def set_injector(self, injector: FollowUpInjector | None) -> None:
        self._injector = injector

    # --- intents: turns, titles, guards -----------------------------------------------------

    def start_turn(self, turn: Turn, body: Callable[[], Awaitable[None]]) -> None:
        stream = self._stream
        stream.state = StreamState.RUNNING
        stream.turn = turn
        stream.turn_ended = trio.Event()
        self._host.logs.between_turns(self.id, False)
        assert self._nursery is not None
        self._nursery.start_soon(body)

    async def wait_turn_over(self) -> None:
        """Until this session runs no turn."""
        while self._stream.turn is not None:
            await self._stream.turn_ended.wait()

    def end_turn(self, turn: Turn) -> None:
        stream = self._stream
        if stream.turn is turn:
            stream.turn = None
            stream.state = StreamState.IDLE
            stream.turn_ended.set()
            self._life.last_active = trio.current_time()
            self._grant_guard()
        if turn.send is not None:
            turn.send.close()
        self._host.logs.between_turns(self.id, True)

    def start_title(self, body: Callable[[], Awaitable[None]]) -> None:
        scope = self._title.scope = trio.CancelScope()

        async def title_task() -> None:
            try:
                with scope:
                    await body()
            finally:
                self._title.scope = None

        assert self._nursery is not None
        self._nursery.start_soon(title_task)

    def on_title_asked(self) -> None:
        self._title.requested = True

    def decided(self, tool_call_id: str) -> None:
        self._in_doubt.pop(tool_call_id, None)

    def _grant_guard(self) -> None:
        stream = self._stream
        while stream.state is StreamState.IDLE and stream.guard_queue:
            ticket = stream.guard_queue.pop(0)
            if not ticket.abandoned:
                stream.state = StreamState.GUARDED
                stream.guard_free = trio.Event()
                ticket.granted.set()

    def acquire_guard(self, ticket: GuardTicket) -> None:
        self._stream.guard_queue.append(ticket)
        self._grant_guard()

    def release_guard(self) -> None:
        if self._stream.state is StreamState.GUARDED:
            self._stream.state = StreamState.IDLE
            self._stream.guard_free.set()
            self._grant_guard()

    # --- intents: endings ------------------------------------------------------------------

    def mark_deleted(self) -> None:
        self._life.deleted = True  # from here on the actor writes nothing: no resurrection
        exited = self._host.logs.drop(self.id)  # tombstone: no sink or source brings it back
        turn, slot = self._stream.turn, self._runtime
        if turn is not None:  # its run stream ends with session_exited too, after the rest
            turn.terminal = exited or LogEntry.of(0, SessionExited("session ended"))
        if slot.runtime is not None:
            if slot.attached_done is not None:
                slot.attached_done.set()  # the embedder's stream is its own: it ends it
            else:
                slot.runtime.on_elicitation_request(None)
        if slot.scope is not None:
            slot.scope.cancel(reason="session deleted")  # a build, MCP servers, tasks
        self.fail_parked(SessionNotFound(self.id))
        if turn is not None:
            turn.cancel("session deleted")
        if self._title.scope is not None:
            self._title.scope.cancel(reason="session deleted")
        self._injector = None

    def mark_stopping(self) -> None:
        self._life.stopping = True
        if self._stream.turn is not None:
            self._stream.turn.cancel("server shutting down")

    def lose(self, reason: str = "event log lost") -> None:
        """The session's log could not be written, or the node was fenced: stop serving it at
        once (the registry has forgotten this actor; the next request claims it afresh). What
        its cancelled turn still reports is dropped: the session is not this actor's any more,
        and a late event must not claim it again (say, after the node rejoined)."""
        self._life.stopping = True
        self._life.lost = True
        if self._stream.turn is not None:
            self._stream.turn.cancel(reason)
        if self._title.scope is not None:
            self._title.scope.cancel(reason=reason)
        self.mailbox.close()

    def log_event(self, event: Event) -> LogEntry | None:
        if self._life.lost:
            return None
        return self._host.logs.append(self.id, event)


def queued_follow_ups(runtime: Runtime | None) -> int:
    """The follow-ups ``runtime`` holds (0 without one, or one that cannot say)."""
    if runtime is None:
        return 0
    try:
        return runtime.queue_status().followup_depth
    except Exception:  # an embedder's runtime may not implement it: read at scrape time
        return 0
