"""The session actor: one trio task that owns one live session.

It owns the live :class:`Session`, the runtime, the stream state (idle / running a turn /
guarded by an embedder), the title task, the follow-up injector and idempotency keys. Commands
arrive on a bounded mailbox and run one at a time; a command that checks state and then awaits
(a store write, a runtime call) finishes before the next one starts, so no check-then-act can
interleave. Child tasks (the turn, the title) report back through the synchronous methods at the
bottom of this class, which trio runs atomically.
"""

from __future__ import annotations

import contextlib
import enum
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import attrs
import outcome
import trio

from greenroom.agents import Runtime, TitleGenerator
from greenroom.domain import (
    Approval,
    ErrorItem,
    Event,
    Message,
    Session,
    SessionTitle,
    SubSession,
    utcnow,
    visible_messages,
)
from greenroom.errors import GreenroomError, SessionGone, SessionNotFound, StoreError
from greenroom.persistence import (
    Lease,
    ToolCallIntent,
    ToolCallRecord,
    TurnEnd,
    TurnMark,
    TurnStart,
    TurnState,
)

from . import _handlers
from ._build import NeedsRuntime, build_runtime
from ._commands import GuardTicket, discard_reply
from ._eventlog import EventLog, LogEntry
from ._idempotency import IdempotencyCache
from ._turn import Turn

if TYPE_CHECKING:
    from ._commands import FollowUpInjector
    from ._registry import Registry

log = logging.getLogger(__name__)

MAX_APPROVALS = 1000
"""Approval records kept per session; the oldest are dropped first."""


class StreamState(enum.Enum):
    IDLE = "idle"
    RUNNING = "running"  # a turn task of this actor
    GUARDED = "guarded"  # an embedder holds the guard of its attached runtime


@attrs.frozen
class Call:
    """A command with a one-slot reply channel (the actor never blocks on a reply)."""

    request: Any
    reply: trio.MemorySendChannel[outcome.Outcome[Any]]


class SessionActor:
    """One live session: see the module docstring."""

    def __init__(
        self, registry: Registry, session: Session, in_doubt: list[ToolCallRecord] | None = None
    ) -> None:
        self.id = session.id
        self.session = session
        self.registry = registry
        self.store = registry.store
        self.writer = registry.persistence.writer
        self.config = registry.config
        self.runtime: Runtime | None = None
        self.runtime_source = ""  # the agent source and agent the runtime was built from
        self.runtime_agent = ""
        # Tool calls of an interrupted turn that a person must decide before the next run.
        self.in_doubt = {call.tool_call_id: call for call in in_doubt or ()}
        # Building a runtime (and starting its MCP servers) runs in a child task, so the
        # mailbox keeps serving; runs that need the runtime wait here until it is installed.
        self.building = False
        self.parked: list[Call] = []
        self.runtime_scope: trio.CancelScope | None = None  # the build task, then the services
        self.attached_done: trio.Event | None = None  # set on delete: the attach context ended
        self.title_generator: TitleGenerator | None = None
        self.state = StreamState.IDLE
        self.turn: Turn | None = None
        self.title_scope: trio.CancelScope | None = None
        self.title_requested = False  # a title was asked of a model (asked once per actor)
        # A list, not a deque: it is nearly always empty, and an empty deque costs ~700 bytes.
        self.guard_queue: list[GuardTicket] = []
        self.injector: FollowUpInjector | None = None
        self.idempotency = IdempotencyCache()
        self.deleted = False
        self.stopping = False
        self.lost = False  # lose(): the registry forgot this actor; its late events are dropped
        self.exited = trio.Event()  # set by the registry once this actor's task has ended
        self.nursery: trio.Nursery | None = None
        # The registry holds the only send end; closing it retires the actor.
        self.mailbox, self._inbox = trio.open_memory_channel[Call](self.config.mailbox_size)
        self._handlers: dict[type[Any], Callable[[SessionActor, Any], Awaitable[Any]]] = (
            _handlers.TABLE
        )
        self._guard_free = trio.Event()
        self._guard_free.set()
        self._turn_ended = trio.Event()
        self._last_active = trio.current_time()

    @property
    def attached(self) -> bool:
        return self.attached_done is not None

    @property
    def streaming(self) -> bool:
        return self.state is not StreamState.IDLE

    # --- lifecycle -----------------------------------------------------------------------

    async def run(
        self, *, task_status: trio.TaskStatus[SessionActor] = trio.TASK_STATUS_IGNORED
    ) -> None:
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            task_status.started(self)
            async with self._inbox:
                try:
                    await self._serve()
                finally:
                    self._fail_queued_calls()
                    self.fail_parked(SessionNotFound(self.id) if self.deleted else SessionGone())
            if self.deleted:
                # Stopped means: the cancelled turn finished and the embedder let go.
                await self._guard_free.wait()
            elif self.turn is not None:
                # Shutting down: the cancelled turn gets a moment to persist what it did.
                with trio.move_on_after(self.config.shutdown_grace):
                    await self._turn_ended.wait()
            nursery.cancel_scope.cancel(reason=f"session actor {self.id} stopped")
        if self.runtime is not None and not self.attached:
            with trio.move_on_after(self.config.shutdown_grace, shield=True):
                if not self.deleted:  # the delete already cleared it, exactly once
                    self.runtime.on_elicitation_request(None)
                await self.runtime.aclose()

    async def _serve(self) -> None:
        while not (self.deleted or self.stopping):
            with trio.move_on_at(self._last_active + self.config.idle_timeout) as idle:
                try:
                    call = await self._inbox.receive()
                except trio.EndOfChannel:  # lost: the registry closed the mailbox
                    return
            if idle.cancelled_caught:
                if self._try_retire():
                    return
                self._last_active = trio.current_time()  # busy: look again an idle period later
                continue
            await self._dispatch(call)
            self._last_active = trio.current_time()

    def _busy_otherwise(self) -> bool:
        return (
            self.streaming
            or self.building
            or bool(getattr(self.runtime, "busy", False))  # background agent tasks
            or self.attached
            or self.injector is not None
            or self.title_scope is not None
            or self.registry.log_pinned(self.id)
        )

    def _try_retire(self) -> bool:
        # Synchronous: no sender can slip a command in between the check and the close.
        if self._busy_otherwise() or self._inbox.statistics().current_buffer_used:
            return False
        self.registry.retire(self)
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
        handler = self._handlers[type(call.request)]
        result: outcome.Outcome[Any]
        try:
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
        self.parked.append(call)
        if not self.building:
            self.building = True
            assert self.nursery is not None
            self.nursery.start_soon(build_runtime, self, source, agent_name)

    def fail_parked(self, error: GreenroomError) -> None:
        """Answer every run waiting for the runtime with ``error`` (the build failed, or the
        session is gone)."""
        self.building = False
        parked, self.parked = self.parked, []
        for call in parked:
            with call.reply, contextlib.suppress(trio.BrokenResourceError):
                call.reply.send_nowait(outcome.Error(error))

    def take_parked(self) -> list[Call]:
        self.building = False
        parked, self.parked = self.parked, []
        return parked

    async def redispatch(self, calls: list[Call]) -> None:
        for call in calls:
            await self._dispatch(call)

    # --- shared steps (awaited inside one command or by the turn task) ---------------------

    async def persist(self, *, shielded: bool = False) -> None:
        """Write the session's metadata; never for a deleted session (no resurrection)."""
        if self.deleted:
            return
        if not shielded:
            await self.store.update_session(self.session)
            return
        with trio.move_on_after(self.config.shutdown_grace, shield=True):
            try:
                await self.store.update_session(self.session)
            except GreenroomError:
                log.exception("persisting session %s failed", self.id)

    async def update(self, write: Callable[[], Awaitable[None]] | None, **fields: Any) -> None:
        """Set ``fields`` on the live session, then await ``write`` (None: write the session's
        metadata). If the store refuses it, the fields this call set are put back (those a
        child task changed meanwhile stay), so the live session never holds what the store
        refused; the error goes to the caller and the actor keeps serving."""
        before = {name: getattr(self.session, name) for name in fields}
        self.session = attrs.evolve(self.session, **fields)
        try:
            await (self.persist() if write is None else write())
        except GreenroomError:
            kept = {n: v for n, v in before.items() if getattr(self.session, n) == fields[n]}
            self.session = attrs.evolve(self.session, **kept)
            raise

    @property
    def log(self) -> EventLog | None:
        if self.lost:  # never a new log (and claim) for an actor the registry has forgotten
            return None
        return self.registry.ensure_log(self.id)

    @property
    def lease(self) -> Lease:
        if self.lost:
            raise SessionGone()
        log_ = self.log
        if log_ is None or log_.lease is None:
            raise SessionNotFound(self.id)
        return log_.lease

    async def append_message(self, message: Message, turn_id: str = "") -> Message:
        """Store ``message`` and add it to the live history. Within a turn (``turn_id``) the
        turn's record learns that its streamed text so far is stored, and a tool result
        finishes its call's record, in the same transaction."""
        if self.deleted:
            raise SessionNotFound(self.id)
        # Shielded: the store keeps a write whose caller was cancelled (as SQLite does), so the
        # live copy must take it too or the two histories part. Bounded: a store that does not
        # answer in time fails the write instead of holding the turn forever.
        message_id = None
        with trio.move_on_after(self.config.store_write_grace, shield=True):
            if turn_id:
                log_ = self.log
                mark = TurnMark(turn_id, log_.last_seq if log_ is not None else 0)
                message_id = await self.writer.add_turn_message(self.id, message, mark)
            else:
                message_id = await self.store.add_message(self.id, message)
        if message_id is None:
            raise StoreError(f"the store did not confirm a message of session {self.id} in time")
        stored = attrs.evolve(message, id=message_id)
        self.session = self.session.with_item(stored)
        return stored

    async def record_approval(self, approval: Approval) -> None:
        """Audit ``approval`` on the session (the newest MAX_APPROVALS are kept) and persist."""
        kept = (*self.session.approvals, approval)[-MAX_APPROVALS:]
        self.session = attrs.evolve(self.session, approvals=kept)
        await self.persist(shielded=True)

    async def append_sub_session(self, sub_session: Session) -> None:
        """Add a finished sub-session to the history (shielded and bounded as a message)."""
        if self.deleted:
            raise SessionNotFound(self.id)
        with trio.move_on_after(self.config.store_write_grace, shield=True) as scope:
            await self.store.add_sub_session(self.id, sub_session)
        if scope.cancelled_caught:
            raise StoreError(f"the store did not confirm a sub-session of session {self.id}")
        self.session = self.session.with_item(SubSession(sub_session))

    async def append_error(self, error: ErrorItem) -> None:
        if self.deleted:
            raise SessionNotFound(self.id)
        with trio.move_on_after(self.config.store_write_grace, shield=True) as scope:
            await self.store.add_error(self.id, error)  # shielded and bounded as above
        if scope.cancelled_caught:
            raise StoreError(f"the store did not confirm an error of session {self.id} in time")
        self.session = self.session.with_item(error)

    async def add_turn_messages(
        self, messages: tuple[Message, ...], turn: Turn, source: str
    ) -> tuple[Message, ...]:
        """Store a turn's user messages together with its ``running`` record (one commit, the
        durability point before the model is called), and add them to the live history."""
        if self.deleted:
            raise SessionNotFound(self.id)
        log_ = self.log
        start = TurnStart(
            turn.turn_id,
            self.id,
            (log_.last_seq if log_ is not None else 0) + 1,
            utcnow(),
            source,
            self.agent_name(),
        )
        ids = None
        with trio.move_on_after(self.config.store_write_grace, shield=True):  # as above
            ids = await self.writer.begin_turn(self.lease, start, messages)
        if ids is None:
            raise StoreError(f"the store did not confirm a turn of session {self.id} in time")
        stored = tuple(attrs.evolve(m, id=i) for m, i in zip(messages, ids, strict=True))
        for message in stored:
            self.session = self.session.with_item(message)
        return stored

    async def end_turn_record(self, turn: Turn, state: TurnState, reason: str = "") -> None:
        """Record how the turn ended (shielded and bounded: a cancelled turn records it too).
        A lost actor records nothing: the session's next owner repairs the turn."""
        if self.deleted or self.lost:
            return
        log_ = self.log
        end = TurnEnd(turn.turn_id, self.id, state, log_.last_seq if log_ else 0, reason)
        with trio.move_on_after(self.config.shutdown_grace, shield=True):
            try:
                await self.writer.end_turn(self.lease, end)
            except GreenroomError:
                log.exception("recording the end of a turn of session %s failed", self.id)

    async def begin_tool_call(self, intent: ToolCallIntent) -> None:
        """The durability point before a tool runs: its intent is committed."""
        if self.deleted:
            raise SessionNotFound(self.id)
        await self.writer.begin_tool_call(self.lease, intent)

    # --- synchronous reports (atomic in trio) ----------------------------------------------

    def lose(self, reason: str = "event log lost") -> None:
        """The session's log could not be written, or the node was fenced: stop serving it at
        once (the registry has forgotten this actor; the next request claims it afresh). What
        its cancelled turn still reports is dropped: the session is not this actor's any more,
        and a late event must not claim it again (say, after the node rejoined)."""
        self.stopping = True
        self.lost = True
        if self.turn is not None:
            self.turn.cancel(reason)
        if self.title_scope is not None:
            self.title_scope.cancel(reason=reason)
        self.mailbox.close()

    def log_event(self, event: Event) -> LogEntry | None:
        if self.lost:
            return None
        return self.registry.append_event(self.id, event)

    def add_usage(self, input_tokens: int, output_tokens: int, cost: float) -> None:
        s = self.session
        self.session = attrs.evolve(
            s,
            input_tokens=s.input_tokens + input_tokens,
            output_tokens=s.output_tokens + output_tokens,
            cost=s.cost + cost,
        )

    def set_title_now(self, title: str) -> LogEntry | None:
        self.session = attrs.evolve(self.session, title=title)
        return self.log_event(SessionTitle(self.id, title))

    def start_turn(self, turn: Turn) -> None:
        self.state = StreamState.RUNNING
        self.turn = turn
        self._turn_ended = trio.Event()
        self.registry.log_between_turns(self.id, False)

    async def wait_turn_over(self) -> None:
        """Until this session runs no turn."""
        while self.turn is not None:
            await self._turn_ended.wait()

    def end_turn(self, turn: Turn) -> None:
        """Idle again *before* the stream closes: a client that drains it can run again."""
        if self.turn is turn:
            self.turn = None
            self.state = StreamState.IDLE
            self._turn_ended.set()
            self._last_active = trio.current_time()
            self._grant_guard()
        if turn.send is not None:
            turn.send.close()
        self.registry.log_between_turns(self.id, True)

    def replace_placeholder(self, message_id: int, message: Message) -> None:
        """A decided tool call's result takes the place of its placeholder in the live history
        (or, if the placeholder was edited away, comes last, as the store does)."""
        stored = attrs.evolve(message, id=message_id)
        items = tuple(
            stored if isinstance(item, Message) and item.id == message_id else item
            for item in self.session.items
        )
        if stored not in items:
            items = (*items, message)
        self.session = attrs.evolve(self.session, items=items)

    def title_done(self) -> None:
        self.title_scope = None

    def _grant_guard(self) -> None:
        while self.state is StreamState.IDLE and self.guard_queue:
            ticket = self.guard_queue.pop(0)
            if not ticket.abandoned:
                self.state = StreamState.GUARDED
                self._guard_free = trio.Event()
                ticket.granted.set()

    def acquire_guard(self, ticket: GuardTicket) -> None:
        self.guard_queue.append(ticket)
        self._grant_guard()

    def release_guard(self) -> None:
        if self.state is StreamState.GUARDED:
            self.state = StreamState.IDLE
            self._guard_free.set()
            self._grant_guard()

    def num_messages(self) -> int:
        return sum(1 for _ in visible_messages(self.session.items))

    def agent_name(self) -> str:
        return self.runtime.current_agent().name if self.runtime is not None else ""
