"""A turn: the child task of a session actor that drives its runtime, and the title task.

Both see the actor as an :class:`~._context.ActorContext`: they change it only through its
synchronous intent methods (atomic in trio) and its live session's writes. Only ``emit`` and
the store writes await, and every such await is cancellable, so a turn whose client left, or
whose session was deleted, ends promptly. A turn has a durable record: ``running`` with its user
messages before the runtime starts, the intent of each tool call before the tool runs, and how
it ended.
"""

from __future__ import annotations

import logging
import time

import attrs
import trio

from greenroom.agents import (
    Runtime,
    SupportsCompact,
    TitleGenerator,
    mirrors_elicitation,
    supports_priced_titles,
)
from greenroom.domain import (
    Approval,
    ElicitationRequest,
    ErrorEvent,
    ErrorItem,
    Event,
    Message,
    Session,
    SessionTitle,
    StreamStarted,
    Summary,
    ToolCall,
    utcnow,
)
from greenroom.errors import GreenroomError, SessionNotFound
from greenroom.observe import Span, metrics, span, tag_logs, turn_span
from greenroom.persistence import ToolCallIntent, TurnState

from ._commands import Turn
from ._context import ActorContext
from ._entries import LogEntry
from ._eventlog import EventLog

log = logging.getLogger(__name__)

PACE = 8  # events a turn may emit between two scheduling points (``ActorTurnIO._pace``)


class ActorTurnIO:
    """The :class:`~greenroom.agents.TurnIO` a runtime gets for one turn of an actor."""

    def __init__(self, ctx: ActorContext, turn: Turn, runtime: Runtime) -> None:
        self._ctx = ctx
        self._turn = turn
        self._mirrors = mirrors_elicitation(runtime)
        # For the writer's backpressure; a log replaced meanwhile (lost) has ended its wait.
        self._log = ctx.log or EventLog(ctx.id)
        self._unyielded = 0  # events emitted since this turn last yielded (``_pace``)

    @property
    def session(self) -> Session:
        return self._ctx.session

    async def emit(self, event: Event) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()  # a cancelled turn delivers nothing more
        run = self._turn.run
        if isinstance(event, StreamStarted) and run.start is not None and not run.announced:
            run.announced = True  # the run's first stream_started carries its id (issue 25)
            event = attrs.evolve(event, run_id=self._turn.turn_id)
        # A mirroring runtime already delivered its elicitations through the session sink:
        # log them once, but still show them on the run stream.
        self._turn.note(event)
        skip_log = self._mirrors and isinstance(event, ElicitationRequest)
        entry = None if skip_log else self._ctx.log_event(event)
        turn = self._turn
        if isinstance(event, ErrorEvent):
            turn.errored = True
            metrics().errors.labels(event.code or "unknown").inc()
        log_ = self._log
        if log_.uncommitted > log_.max_uncommitted:
            await log_.wait_for_room()  # the writer is behind: wait for it
        if turn.send is None or not turn.stream_open:
            await self._pace()
            return
        # Before the commit, with the seq it will have: the RunStream hands it out once that
        # seq is committed (a seq a client saw is durable).
        item = entry or LogEntry.of(0, event)
        try:
            try:
                turn.send.send_nowait(item)
            except trio.WouldBlock:
                await turn.send.send(item)  # the run stream's reader is behind: wait for room
                return
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            turn.consumer_left()
            return
        await self._pace()

    async def _pace(self) -> None:
        """Yield to the scheduler every ``PACE`` events, not after each: a fast model's tokens
        arrive in bursts, and a scheduling round per token was a tenth of the server's CPU per
        token (decision 0038). Cancellation is still seen at every event (``emit`` starts with
        ``checkpoint_if_cancelled``), and the other tasks run at least every ``PACE`` events."""
        self._unyielded += 1
        if self._unyielded >= PACE:
            self._unyielded = 0
            await trio.lowlevel.checkpoint()

    async def add_message(self, message: Message) -> Message:
        stored = await self._ctx.live.append_message(message, self._turn.turn_id)
        self._turn.run.stored(stored)
        return stored

    async def begin_tool_call(self, call: ToolCall, agent_name: str = "") -> None:
        log_ = self._ctx.log
        intent = ToolCallIntent(
            self._ctx.id,
            call.id,
            self._turn.turn_id,
            call.function.name,
            call.function.arguments,
            log_.last_seq if log_ is not None else 0,
            utcnow(),
            agent_name,
        )
        await self._ctx.live.begin_tool_call(intent)

    async def add_error(self, error: ErrorItem) -> None:
        await self._ctx.live.append_error(error)

    def add_usage(self, input_tokens: int, output_tokens: int, cost: float) -> None:
        self._ctx.live.add_usage(input_tokens, output_tokens, cost)
        self._turn.run.add_usage(input_tokens, output_tokens, cost)

    async def record_approval(self, approval: Approval) -> None:
        await self._ctx.live.record_approval(approval)

    async def add_sub_session(self, sub_session: Session) -> None:
        await self._ctx.live.append_sub_session(sub_session)

    async def add_summary(self, summary: Summary) -> None:
        await self._ctx.live.add_summary(summary)


async def run_turn(ctx: ActorContext, turn: Turn, runtime: Runtime, announce_title: str) -> None:
    """The turn task: run the runtime, report failures as events, persist, then end the turn."""
    with turn_span(ctx.id, turn.turn_id, ctx.agent_name()) as traced:
        await _run_turn(ctx, turn, runtime, announce_title, traced)


async def _run_turn(
    ctx: ActorContext, turn: Turn, runtime: Runtime, announce_title: str, traced: Span
) -> None:
    io = ActorTurnIO(ctx, turn, runtime)
    tag_logs(turn_id=turn.turn_id)  # the turn task's lines (and its tool calls') name it
    started = time.monotonic()
    counted = False
    try:
        with turn.scope:
            if announce_title:
                await io.emit(SessionTitle(ctx.id, announce_title))
            try:
                await runtime.run_stream(io)
            except GreenroomError as exc:
                await io.emit(ErrorEvent(exc.message, exc.code, ctx.id))
            except Exception:
                log.exception("runtime of session %s failed", ctx.id)
                await io.emit(ErrorEvent("the agent runtime failed", "internal_error", ctx.id))
        state: TurnState = "failed" if turn.errored else "done"
        reason = ""
        if turn.scope.cancelled_caught:
            state, reason = "cancelled", turn.cancel_reason
        metrics().turn_ended(ctx.session.agent_name, state, time.monotonic() - started)
        counted = True
        traced.set_attribute("greenroom.turn.state", state)
        await ctx.live.persist(shielded=True)
        await ctx.live.end_turn(turn.turn_id, state, reason, turn.run)
    except BaseException as exc:
        if not counted:  # cut off from outside its own scope (the registry closing): it ended
            outcome = "failed" if isinstance(exc, Exception) else "cancelled"
            metrics().turn_ended(ctx.session.agent_name, outcome, time.monotonic() - started)
            traced.set_attribute("greenroom.turn.state", outcome)
        raise
    finally:
        turn.settled.set()
        ctx.end_turn(turn)


async def run_compaction(
    ctx: ActorContext, turn: Turn, runtime: SupportsCompact, instructions: str
) -> None:
    """An on-demand compaction, run like a turn without a record (it runs no tool)."""
    io = ActorTurnIO(ctx, turn, runtime)  # type: ignore[arg-type]
    try:
        with turn.scope:
            try:
                await runtime.compact(io, instructions)
            except GreenroomError as exc:
                await io.emit(ErrorEvent(exc.message, exc.code, ctx.id))
            except Exception:
                log.exception("compaction of session %s failed", ctx.id)
                await io.emit(ErrorEvent("the compaction failed", "internal_error", ctx.id))
        await ctx.live.persist(shielded=True)
    finally:
        turn.settled.set()
        ctx.end_turn(turn)


async def generate_title(
    ctx: ActorContext, generator: TitleGenerator, texts: list[str], turn: Turn, budget: float
) -> None:
    """The title task: may finish after the turn's stream closed; never overwrites a title.

    It waits until the model answered (or the turn ended): a turn that failed before any answer
    (no key, an unknown model, a provider error) gets no title attempt, and a later turn may
    try. Once a title was asked of a model, the actor asks no more (one title request per
    session, even when it failed or answered nothing usable). A failed attempt logs one line.
    """
    await turn.settled.wait()
    if turn.failed and not turn.answered:
        log.info("session %s: no title, the turn failed before the model answered", ctx.id)
        return
    title = ""
    ctx.on_title_asked()
    with trio.move_on_after(budget), span("generate_title", {"greenroom.session.id": ctx.id}):
        try:
            if supports_priced_titles(generator):
                priced = await generator.generate_priced(texts)
                title = priced.title.strip()
                if not ctx.deleted and (priced.input_tokens or priced.output_tokens):
                    ctx.live.add_usage(
                        priced.input_tokens, priced.output_tokens, priced.cost or 0.0
                    )
                    await ctx.live.persist()  # the totals count the title call
            else:
                title = (await generator.generate(texts)).strip()
        except GreenroomError as exc:
            log.warning("title generation for session %s failed: %s", ctx.id, exc.message)
        except Exception as exc:
            log.warning("title generation for session %s failed: %r", ctx.id, exc)
            log.debug("title generation failure", exc_info=True)
    if not title or ctx.deleted or ctx.session.title:
        return
    ctx.live.revise(title=title)
    entry = ctx.log_event(SessionTitle(ctx.id, title))
    if entry is not None:
        turn.offer(entry)
    try:
        await ctx.store.update_title(ctx.id, title)
    except SessionNotFound:  # deleted meanwhile: nothing to keep
        pass
    except GreenroomError as exc:  # e.g. an unstorable title: the session lives on without it
        log.warning("storing the title of session %s failed: %s", ctx.id, exc.message)
        ctx.live.forget_title(title)
