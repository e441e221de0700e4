"""One small handler per actor command. Each runs inside the actor task, one at a time."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import attrs
import trio

from greenroom.agents import ModelChoice, Runtime, check_grant, supports_compact
from greenroom.domain import ChatMessage, Message, Permissions, utcnow
from greenroom.errors import (
    AgentMismatch,
    CompactionNotSupported,
    GreenroomError,
    InvalidMessageId,
    ModelSwitchingNotSupported,
    NeedsDecision,
    QueueFull,
    SessionNotRunning,
)
from greenroom.persistence import ToolCallRecord

from . import _commands as c
from ._context import ActorContext, runtime_for
from ._decisions import decide
from ._results import (
    FollowUpResult,
    PendingDecision,
    QueueDepth,
    RunStream,
    SessionSnapshot,
    SessionStatus,
)
from ._switch import apply_agent_switch_commands
from ._table import handles, require_idle, require_runtime
from ._turn import generate_title, run_compaction, run_turn

log = logging.getLogger(__name__)


def _require_decided(ctx: ActorContext) -> None:
    if ctx.in_doubt:
        calls = ", ".join(sorted(ctx.in_doubt))
        raise NeedsDecision(
            f"tool calls of an interrupted turn are in doubt ({calls}): decide each one at "
            f"POST /api/sessions/{ctx.id}/recovery/decisions before running again"
        )


def _require_same_agent(ctx: ActorContext, source: str, agent_name: str) -> None:
    """Decision 0019: a session runs one agent file; a run naming another file, or another
    agent of it than the session's current one, is refused (409) naming both."""
    session = ctx.session
    built = ctx.runtime is not None
    file = session.agent_file or (ctx.runtime_source if built else "")
    current = session.agent_name or (ctx.agent_name() if built else "")
    if (file and source != file) or (agent_name and current and agent_name != current):
        ours = f"{file}/{current}" if current else file
        asked = f"{source}/{agent_name}" if agent_name else source
        raise AgentMismatch(
            f'session {ctx.id} runs agent "{ours}"; this run names "{asked}": '
            f'run "{ours}" here, or start a new session for "{asked}"'
        )


async def _record_agent(ctx: ActorContext, source: str, runtime: Runtime) -> None:
    """Store the session's agent at its first run and after an agent switch."""
    name = runtime.current_agent().name
    session = ctx.session
    file = source or session.agent_file
    if (session.agent_file, session.agent_name) != (file, name):
        await ctx.live.update(None, agent_file=file, agent_name=name)


# --- queries -----------------------------------------------------------------------------


@handles(c.GetSnapshot)
async def _snapshot(ctx: ActorContext, _: c.GetSnapshot) -> SessionSnapshot:
    log_ = ctx.log
    return SessionSnapshot(
        session=ctx.session,
        streaming=ctx.streaming,
        agent=ctx.agent_name(),
        last_event_seq=log_.last_seq if log_ is not None else 0,
    )


@handles(c.GetStatus)
async def _status(ctx: ActorContext, _: c.GetStatus) -> SessionStatus:
    if not ctx.building:
        require_runtime(ctx)
    s = ctx.session
    return SessionStatus(
        s.id,
        s.title,
        ctx.streaming,
        ctx.agent_name(),
        s.input_tokens,
        s.output_tokens,
        ctx.num_messages(),
        building=ctx.building,
    )


@handles(c.GetQueueDepth)
async def _queue_depth(ctx: ActorContext, _: c.GetQueueDepth) -> QueueDepth:
    q = require_runtime(ctx).queue_status()
    return QueueDepth(q.steer_depth, q.steer_capacity, q.followup_depth, q.followup_capacity)


@handles(c.GetModels)
async def _models(ctx: ActorContext, _: c.GetModels) -> tuple[str, str, list[ModelChoice]]:
    runtime = require_runtime(ctx)
    if not runtime.supports_model_switching():
        raise ModelSwitchingNotSupported()
    agent = runtime.current_agent().name
    override = ctx.session.agent_model_overrides.get(agent, "")
    return (agent, override, await runtime.available_models())


@handles(c.GetPendingDecisions)
async def _pending_decisions(ctx: ActorContext, _: c.GetPendingDecisions) -> list[ToolCallRecord]:
    await trio.lowlevel.checkpoint()
    return sorted(ctx.in_doubt.values(), key=lambda call: call.started_seq)


# --- turns -------------------------------------------------------------------------------


@handles(c.InstallRuntime)
async def _install_runtime(ctx: ActorContext, cmd: c.InstallRuntime) -> None:
    """The build task built the runtime: install it, then let the parked runs go on."""
    built = cmd.built
    session = ctx.session
    if built.safety_default and not session.safety_policy and not session.items:
        # The author's default, for a fresh session only (older sessions are never defaulted).
        policy = built.safety_default
        await ctx.live.update(None, safety_policy=policy, tools_approved=policy == "autonomous")
    ctx.install_runtime(built, cmd.source, cmd.agent_name)
    runtime = built.runtime
    if runtime.supports_model_switching():
        for agent, ref in ctx.session.agent_model_overrides.items():
            try:
                await runtime.set_agent_model(agent, ref)
            except Exception:
                log.warning("session %s: could not restore model %r for %r", ctx.id, ref, agent)
    await ctx.resume_parked()


async def _apply_model(
    ctx: ActorContext, runtime: Runtime, ref: str
) -> Callable[[], Awaitable[None]]:
    """Switch the current agent's model to ``ref``; returns the undo."""
    if not runtime.supports_model_switching():
        raise ModelSwitchingNotSupported()
    agent = runtime.current_agent().name
    before = ctx.session
    previous = before.agent_model_overrides.get(agent, "")
    await runtime.set_agent_model(agent, ref)
    overrides = {**before.agent_model_overrides, agent: ref}
    custom = list(before.custom_models_used)
    if "/" in ref and ref not in custom:
        custom.append(ref)
    ctx.live.revise(agent_model_overrides=overrides, custom_models_used=custom)

    async def undo() -> None:
        ctx.live.revise(
            agent_model_overrides=before.agent_model_overrides,
            custom_models_used=before.custom_models_used,
        )
        try:
            await runtime.set_agent_model(agent, previous)
        except Exception:
            log.exception("session %s: could not restore model of %r", ctx.id, agent)

    return undo


@handles(c.RunTurn)
async def _run_turn(ctx: ActorContext, cmd: c.RunTurn) -> RunStream:
    require_idle(ctx)  # before any mutation: a refused run changes nothing
    _require_decided(ctx)
    _require_same_agent(ctx, cmd.source, cmd.agent_name)
    # A session that ran before goes on with its agent (after a restart too).
    runtime = runtime_for(ctx, cmd.source, cmd.agent_name or ctx.session.agent_name)
    undo = await _apply_model(ctx, runtime, cmd.model) if cmd.model else None
    turn = c.Turn(trio.CancelScope(), None, cmd.on_disconnect)
    turn.run.created_at = cmd.created_at or turn.run.created_at
    turn.run.webhook, turn.run.model = cmd.webhook, cmd.model
    try:
        messages = await apply_agent_switch_commands(runtime, cmd.messages)
        await _record_agent(ctx, ctx.runtime_source or cmd.source, runtime)
        stamped = tuple(
            Message(chat if chat.created_at else attrs.evolve(chat, created_at=utcnow()))
            for chat in messages
        )
        texts = [m.content for m in stamped if m.role == "user" and m.content.strip()]
        # The durability point before the model is called: messages and turn record at once.
        source = ctx.runtime_source or cmd.source
        await ctx.live.begin_turn(stamped, turn.turn_id, source, turn.run)
        if undo is not None:
            await ctx.live.persist()
    except BaseException:
        if undo is not None:
            with trio.CancelScope(shield=True):
                await undo()
        raise

    send, receive = trio.open_memory_channel[Any](ctx.config.stream_buffer)
    turn.send = send
    title = ctx.session.title
    generator = ctx.title_generator
    # One title request per session: none while one is under way or after one was made.
    needs_title = bool(not title and texts and generator is not None and ctx.title_due)
    announce = "" if needs_title else title
    ctx.start_turn(turn, partial(run_turn, ctx, turn, runtime, announce))
    if needs_title and generator is not None:
        budget = ctx.config.title_budget
        ctx.start_title(partial(generate_title, ctx, generator, texts, turn, budget))
    log = ctx.log
    run = turn.run
    if log is None:
        return RunStream(
            receive,
            turn.consumer_left,
            lambda: turn.terminal,
            run_id=turn.turn_id,
            answer=lambda: run.answer,
        )
    return RunStream(
        receive,
        turn.consumer_left,
        lambda: turn.terminal,
        committed=lambda: log.committed,
        wait_committed=log.wait_committed,
        run_id=turn.turn_id,
        answer=lambda: run.answer,
    )


@handles(c.Recall)
async def _recall(ctx: ActorContext, cmd: c.Recall) -> bool:
    if cmd.sub_session is not None:
        await ctx.live.append_sub_session(cmd.sub_session)
    if ctx.injector is not None:
        await ctx.injector(cmd.message.content)
        return True
    runtime = require_runtime(ctx)
    if ctx.streaming:
        await runtime.steer(cmd.message)
        return True
    _require_decided(ctx)
    chat = ChatMessage("user", cmd.message.content, cmd.message.multi_content, created_at=utcnow())
    turn = c.Turn(trio.CancelScope(), None, "continue")
    await ctx.live.begin_turn((Message(chat),), turn.turn_id, ctx.runtime_source, turn.run)
    ctx.start_turn(turn, partial(run_turn, ctx, turn, runtime, ""))
    return True


@handles(c.Compact)
async def _compact(ctx: ActorContext, cmd: c.Compact) -> None:
    """Start compacting as a turn of its own (the session is busy meanwhile); its events go to
    the session's event log."""
    require_idle(ctx)
    _require_decided(ctx)
    if ctx.runtime is None and not cmd.source:
        raise SessionNotRunning("the session has no runtime yet: name its agent file (agent)")
    runtime = runtime_for(ctx, cmd.source, cmd.agent_name)
    if not supports_compact(runtime):
        raise CompactionNotSupported()
    turn = c.Turn(trio.CancelScope(), None, "continue")
    ctx.start_turn(turn, partial(run_compaction, ctx, turn, runtime, cmd.instructions))


@handles(c.CancelTurn)
async def _cancel_turn(ctx: ActorContext, _: c.CancelTurn) -> bool:
    """True when a turn of this actor was running and is now cancelled. An embedder's own
    stream (guarded) is not the actor's to cancel."""
    await trio.lowlevel.checkpoint()
    if ctx.turn is None:
        return False
    ctx.turn.cancel("cancelled by a client")  # the run record keeps the reason
    return True


@handles(c.Steer)
async def _steer(ctx: ActorContext, cmd: c.Steer) -> None:
    runtime = require_runtime(ctx)
    status = runtime.queue_status()
    _check_room(len(cmd.messages), status.steer_depth, status.steer_capacity, "steer")
    for message in cmd.messages:
        await runtime.steer(message)


def _check_room(count: int, depth: int, capacity: int, queue: str) -> None:
    """QueueFull (429) before anything is queued unless all ``count`` messages fit: a batch
    is queued whole or not at all, so a retry never duplicates part of it."""
    if capacity and depth + count > capacity:
        raise QueueFull(
            f"{queue} queue full: {count} message(s) do not fit ({depth} of {capacity} used)"
        )


@handles(c.FollowUp)
async def _follow_up(ctx: ActorContext, cmd: c.FollowUp) -> FollowUpResult:
    if ctx.runtime is None and ctx.injector is None:
        raise SessionNotRunning()
    key = cmd.idempotency_key
    if key and not ctx.idempotency.reserve(key):
        return FollowUpResult(streaming=False, duplicate=True)
    if key:  # durable: a retry after a restart is still a duplicate
        try:
            fresh = await ctx.writer.reserve_key(ctx.id, key)
        except BaseException:
            ctx.idempotency.release(key)
            raise
        if not fresh:
            return FollowUpResult(streaming=False, duplicate=True)
    try:
        if ctx.injector is not None:
            for message in cmd.messages:
                await ctx.injector(message.content)
            return FollowUpResult(streaming=True, duplicate=False)
        runtime = require_runtime(ctx)
        status = runtime.queue_status()
        _check_room(len(cmd.messages), status.followup_depth, status.followup_capacity, "follow-up")
        for message in cmd.messages:
            await runtime.follow_up(message)
    except BaseException:
        if key:
            ctx.idempotency.release(key)
            with trio.move_on_after(ctx.config.store_write_grace, shield=True):
                try:
                    await ctx.writer.release_key(ctx.id, key)
                except GreenroomError:
                    log.exception("session %s: could not release key %r", ctx.id, key)
        raise
    return FollowUpResult(streaming=ctx.streaming, duplicate=False)


@handles(c.Resume)
async def _resume(ctx: ActorContext, cmd: c.Resume) -> None:
    runtime = require_runtime(ctx)
    request = cmd.request
    session = ctx.session
    fields: dict[str, Any] = {}
    lasting = request.expires_in is None  # a grant with expires_in lives in the audit record
    if request.type == "approve-balanced":
        fields = {"safety_policy": "balanced", "tools_approved": False}
    elif request.type == "approve-autonomous" and lasting:
        fields = {"safety_policy": "autonomous", "tools_approved": True}
    elif request.type == "approve-tool" and request.tool_name and lasting:
        perms = session.permissions or Permissions()
        if request.tool_name not in perms.allow:
            perms = attrs.evolve(perms, allow=(*perms.allow, request.tool_name))
        fields = {"permissions": perms}
    if request.type == "approve-tool":
        check_grant(request, "")  # a pattern is refused before anything changes
    # The answer first: refused (no question waiting, another tool named) changes nothing. The
    # turn cannot run before this handler awaits, so it sees the new rules and policy.
    await runtime.resume(request)
    if fields:
        ctx.live.revise(**fields)
        await ctx.live.persist(shielded=True)


@handles(c.AnswerElicitation)
async def _answer_elicitation(ctx: ActorContext, cmd: c.AnswerElicitation) -> None:
    runtime = require_runtime(ctx)
    await runtime.resume_elicitation(cmd.action, cmd.content, cmd.elicitation_id)


@handles(c.Decide)
async def _decide(ctx: ActorContext, cmd: c.Decide) -> PendingDecision:
    if cmd.action == "rerun":
        require_idle(ctx)
    return await decide(ctx, cmd)


# --- history -----------------------------------------------------------------------------


@handles(c.AddMessage)
async def _add_message(ctx: ActorContext, cmd: c.AddMessage) -> int:
    require_idle(ctx)  # and no guard can be granted until this write is done
    return (await ctx.live.append_message(cmd.message)).id


_MESSAGE_ID = re.compile(r"-?[0-9]{1,18}")  # within the store's 64-bit ids


@handles(c.UpdateMessage)
async def _update_message(ctx: ActorContext, cmd: c.UpdateMessage) -> None:
    require_idle(ctx)
    if not _MESSAGE_ID.fullmatch(cmd.message_id):
        raise InvalidMessageId(f"invalid message ID: {cmd.message_id!r}", path="$.msg_id")
    await ctx.live.update_message(int(cmd.message_id), cmd.message)


@handles(c.AddSummary)
async def _add_summary(ctx: ActorContext, cmd: c.AddSummary) -> None:
    await ctx.live.add_summary(cmd.summary)


# --- embedders ---------------------------------------------------------------------------


@handles(c.AttachRuntime)
async def _attach(ctx: ActorContext, cmd: c.AttachRuntime) -> None:
    ctx.attach(cmd.runtime, cmd.done)
    await trio.lowlevel.checkpoint()


@handles(c.AcquireGuard)
async def _acquire_guard(ctx: ActorContext, cmd: c.AcquireGuard) -> None:
    ctx.acquire_guard(cmd.ticket)
    await trio.lowlevel.checkpoint()


@handles(c.RegisterInjector)
async def _register_injector(ctx: ActorContext, cmd: c.RegisterInjector) -> None:
    ctx.set_injector(cmd.injector)
    await trio.lowlevel.checkpoint()


# --- endings -----------------------------------------------------------------------------


@handles(c.Delete)
async def _delete(ctx: ActorContext, _: c.Delete) -> None:
    ctx.mark_deleted()
    await ctx.store.delete_session(ctx.id)


@handles(c.Stop)
async def _stop(ctx: ActorContext, _: c.Stop) -> None:
    ctx.mark_stopping()
    await ctx.live.persist(shielded=True)
