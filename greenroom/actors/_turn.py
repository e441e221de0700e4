"""A turn: the child task of a session actor that drives its runtime, and the title task.

Both report back through synchronous actor methods (atomic in trio); only ``emit`` and the store
writes await, and every such await is cancellable so a turn whose client left, or whose session
was deleted, ends promptly. A turn has a durable record: ``running`` with its user messages
before the runtime starts, the intent of each tool call before the tool runs, and how it ended.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from typing import TYPE_CHECKING

import attrs
import trio

from greenroom.agents import Runtime, TitleGenerator, mirrors_elicitation
from greenroom.domain import (
    AgentChoice,
    AgentChoiceReasoning,
    Approval,
    ElicitationRequest,
    ErrorEvent,
    ErrorItem,
    Event,
    Message,
    Session,
    SessionTitle,
    StreamStopped,
    TokenUsage,
    ToolCall,
    utcnow,
)
from greenroom.errors import GreenroomError, SessionNotFound
from greenroom.persistence import ToolCallIntent, TurnState

from ._commands import DisconnectPolicy
from ._eventlog import EventLog, LogEntry

if TYPE_CHECKING:
    from ._session import SessionActor

log = logging.getLogger(__name__)

ANSWER_EVENTS = (AgentChoice, AgentChoiceReasoning, TokenUsage)
"""Events that show a model answered (the turn is worth a title)."""


@attrs.define(eq=False)
class Turn:
    """One running turn. ``send`` is None for turns nobody streams (recall after a job)."""

    scope: trio.CancelScope
    send: trio.MemorySendChannel[LogEntry] | None
    on_disconnect: DisconnectPolicy = "cancel"
    stream_open: bool = True
    terminal: LogEntry | None = None  # the run stream's last entry once the turn ended (delete)
    settled: trio.Event = attrs.Factory(trio.Event)
    """Set once the model first answered, the turn failed before that, or the turn ended."""
    answered: bool = False
    failed: bool = False
    stopped: bool = False
    """``stream_stopped`` went out: nothing is offered to the run stream after it."""

    def note(self, event: Event) -> None:
        """Watch the turn's events: settled (for the title task), stopped."""
        if isinstance(event, StreamStopped):
            self.stopped = True
        if self.settled.is_set():
            return
        if isinstance(event, ANSWER_EVENTS):
            self.answered = True
            self.settled.set()
        elif isinstance(event, ErrorEvent):
            self.failed = True
            self.settled.set()

    turn_id: str = attrs.field(factory=lambda: uuid.uuid4().hex)
    errored: bool = False  # it reported an error (the turn record says failed)
    cancel_reason: str = ""

    def cancel(self, reason: str) -> None:
        if not self.cancel_reason:
            self.cancel_reason = reason
        self.scope.cancel(reason=reason)

    def consumer_left(self) -> None:
        """The client stopped reading: cancel the turn unless it should outlive its stream."""
        self.stream_open = False
        if self.on_disconnect == "cancel":
            self.cancel("client left")

    def offer(self, entry: LogEntry) -> None:
        """Best-effort, non-blocking delivery (used by tasks that must not hold the stream)."""
        if self.send is None or not self.stream_open or self.stopped:
            return
        with contextlib.suppress(
            trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError
        ):
            self.send.send_nowait(entry)


class ActorTurnIO:
    """The :class:`~greenroom.agents.TurnIO` a runtime gets for one turn of an actor."""

    def __init__(self, actor: SessionActor, turn: Turn, runtime: Runtime) -> None:
        self._actor = actor
        self._turn = turn
        self._mirrors = mirrors_elicitation(runtime)
        # For the writer's backpressure; a log replaced meanwhile (lost) has ended its wait.
        self._log = actor.log or EventLog(actor.id)

    @property
    def session(self) -> Session:
        return self._actor.session

    async def emit(self, event: Event) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()  # a cancelled turn delivers nothing more
        # A mirroring runtime already delivered its elicitations through the session sink:
        # log them once, but still show them on the run stream.
        self._turn.note(event)
        skip_log = self._mirrors and isinstance(event, ElicitationRequest)
        entry = None if skip_log else self._actor.log_event(event)
        turn = self._turn
        if isinstance(event, ErrorEvent):
            turn.errored = True
        log_ = self._log
        if log_.uncommitted > log_.max_uncommitted:
            await log_.wait_for_room()  # the writer is behind: wait for it
        if turn.send is None or not turn.stream_open:
            await trio.lowlevel.checkpoint()
            return
        try:
            # Before the commit, with the seq it will have: the run stream is not resumable.
            await turn.send.send(entry or LogEntry.of(0, event))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            turn.consumer_left()

    async def add_message(self, message: Message) -> Message:
        return await self._actor.append_message(message, self._turn.turn_id)

    async def begin_tool_call(self, call: ToolCall, agent_name: str = "") -> None:
        log_ = self._actor.log
        intent = ToolCallIntent(
            self._actor.id,
            call.id,
            self._turn.turn_id,
            call.function.name,
            call.function.arguments,
            log_.last_seq if log_ is not None else 0,
            utcnow(),
            agent_name,
        )
        await self._actor.begin_tool_call(intent)

    async def add_error(self, error: ErrorItem) -> None:
        await self._actor.append_error(error)

    def add_usage(self, input_tokens: int, output_tokens: int, cost: float) -> None:
        self._actor.add_usage(input_tokens, output_tokens, cost)

    async def record_approval(self, approval: Approval) -> None:
        await self._actor.record_approval(approval)

    async def add_sub_session(self, sub_session: Session) -> None:
        await self._actor.append_sub_session(sub_session)


async def run_turn(actor: SessionActor, turn: Turn, runtime: Runtime, announce_title: str) -> None:
    """The turn task: run the runtime, report failures as events, persist, then end the turn."""
    io = ActorTurnIO(actor, turn, runtime)
    try:
        with turn.scope:
            if announce_title:
                await io.emit(SessionTitle(actor.id, announce_title))
            try:
                await runtime.run_stream(io)
            except GreenroomError as exc:
                await io.emit(ErrorEvent(exc.message, exc.code, actor.id))
            except Exception:
                log.exception("runtime of session %s failed", actor.id)
                await io.emit(ErrorEvent("the agent runtime failed", "internal_error", actor.id))
        state: TurnState = "failed" if turn.errored else "done"
        reason = ""
        if turn.scope.cancelled_caught:
            state, reason = "cancelled", turn.cancel_reason
        await actor.persist(shielded=True)
        await actor.end_turn_record(turn, state, reason)
    finally:
        turn.settled.set()
        actor.end_turn(turn)


async def generate_title(
    actor: SessionActor, generator: TitleGenerator, texts: list[str], turn: Turn, budget: float
) -> None:
    """The title task: may finish after the turn's stream closed; never overwrites a title.

    It waits until the model answered (or the turn ended): a turn that failed before any answer
    (no key, an unknown model, a provider error) gets no title attempt, and a later turn may
    try. Once a title was asked of a model, the actor asks no more (one title request per
    session, even when it failed or answered nothing usable). A failed attempt logs one line.
    """
    await turn.settled.wait()
    if turn.failed and not turn.answered:
        log.info("session %s: no title, the turn failed before the model answered", actor.id)
        return
    title = ""
    actor.title_requested = True
    with trio.move_on_after(budget):
        try:
            title = (await generator.generate(texts)).strip()
        except GreenroomError as exc:
            log.warning("title generation for session %s failed: %s", actor.id, exc.message)
        except Exception as exc:
            log.warning("title generation for session %s failed: %r", actor.id, exc)
            log.debug("title generation failure", exc_info=True)
    if not title or actor.deleted or actor.session.title:
        return
    entry = actor.set_title_now(title)
    if entry is not None:
        turn.offer(entry)
    try:
        await actor.store.update_title(actor.id, title)
    except SessionNotFound:  # deleted meanwhile: nothing to keep
        pass
    except GreenroomError as exc:  # e.g. an unstorable title: the session lives on without it
        log.warning("storing the title of session %s failed: %s", actor.id, exc.message)
        if actor.session.title == title:
            actor.session = attrs.evolve(actor.session, title="")
