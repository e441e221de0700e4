"""One small handler per actor command. Each runs inside the actor task, one at a time."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import attrs
import trio

from greenroom.agents import Runtime, supports_recall
from greenroom.domain import ChatMessage, Message, Permissions, SessionExited, utcnow
from greenroom.errors import (
    GreenroomError,
    InvalidMessageId,
    InvalidRequest,
    ModelSwitchingNotSupported,
    NeedsDecision,
    SessionBusy,
    SessionNotFound,
    SessionNotRunning,
)

from . import _commands as c
from ._build import NeedsRuntime
from ._decisions import decide
from ._eventlog import LogEntry
from ._switch import apply_agent_switch_commands
from ._turn import Turn, generate_title, run_turn

if TYPE_CHECKING:
    from ._session import SessionActor

log = logging.getLogger(__name__)

Handler = Callable[["SessionActor", Any], Awaitable[Any]]
TABLE: dict[type[Any], Handler] = {}


def handles(command: type[Any]) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        TABLE[command] = fn
        return fn

    return register


def _require_idle(actor: SessionActor) -> None:
    if actor.streaming:
        raise SessionBusy()


def _require_decided(actor: SessionActor) -> None:
    if actor.in_doubt:
        calls = ", ".join(sorted(actor.in_doubt))
        raise NeedsDecision(
            f"tool calls of an interrupted turn are in doubt ({calls}): decide each one at "
            f"POST /api/sessions/{actor.id}/recovery/decisions before running again"
        )


def _require_runtime(actor: SessionActor) -> Runtime:
    if actor.runtime is None:
        raise SessionNotRunning()
    return actor.runtime


# --- queries -----------------------------------------------------------------------------


@handles(c.Snapshot)
async def _snapshot(actor: SessionActor, _: c.Snapshot) -> c.SessionSnapshot:
    log_ = actor.registry.ensure_log(actor.id)
    return c.SessionSnapshot(
        session=actor.session,
        streaming=actor.streaming,
        agent=actor.agent_name(),
        last_event_seq=log_.last_seq if log_ is not None else 0,
    )


@handles(c.Status)
async def _status(actor: SessionActor, _: c.Status) -> c.SessionStatus:
    if not actor.building:
        _require_runtime(actor)
    s = actor.session
    return c.SessionStatus(
        s.id,
        s.title,
        actor.streaming,
        actor.agent_name(),
        s.input_tokens,
        s.output_tokens,
        actor.num_messages(),
        building=actor.building,
    )


@handles(c.GetQueueDepth)
async def _queue_depth(actor: SessionActor, _: c.GetQueueDepth) -> c.QueueDepth:
    q = _require_runtime(actor).queue_status()
    return c.QueueDepth(q.steer_depth, q.steer_capacity, q.followup_depth, q.followup_capacity)


@handles(c.ListModels)
async def _list_models(actor: SessionActor, _: c.ListModels) -> tuple[str, str, list[Any]]:
    runtime = _require_runtime(actor)
    if not runtime.supports_model_switching():
        raise ModelSwitchingNotSupported()
    agent = runtime.current_agent().name
    return (
        agent,
        actor.session.agent_model_overrides.get(agent, ""),
        await runtime.available_models(),
    )


# --- turns -------------------------------------------------------------------------------


def _runtime_for(actor: SessionActor, source: str, agent_name: str) -> Runtime:
    """The runtime; without one the actor parks the command while it builds (NeedsRuntime)."""
    if actor.runtime is None:
        raise NeedsRuntime(source, agent_name)
    return actor.runtime


async def _ensure_runtime(actor: SessionActor, source: str, agent_name: str) -> Runtime:
    await trio.lowlevel.checkpoint()
    return _runtime_for(actor, source, agent_name)


@handles(c.InstallRuntime)
async def _install_runtime(actor: SessionActor, cmd: c.InstallRuntime) -> None:
    """The build task built the runtime: install it, then let the parked runs go on."""
    built = cmd.built
    runtime = built.runtime
    session = actor.session
    if built.safety_default and not session.safety_policy and not session.items:
        # The author's default, for a fresh session only (older sessions are never defaulted).
        policy = built.safety_default
        await actor.update(None, safety_policy=policy, tools_approved=policy == "autonomous")
    actor.runtime = runtime
    actor.runtime_source, actor.runtime_agent = cmd.source, cmd.agent_name
    actor.title_generator = built.title_generator
    runtime.on_elicitation_request(actor.registry.elicitation_sink(actor.id))
    if supports_recall(runtime):
        runtime.set_recall_handler(actor.registry.recall_handler(actor.id))
    if runtime.supports_model_switching():
        for agent, ref in actor.session.agent_model_overrides.items():
            try:
                await runtime.set_agent_model(agent, ref)
            except Exception:
                log.warning("session %s: could not restore model %r for %r", actor.id, ref, agent)
    actor.registry.mark_ready()
    await actor.redispatch(actor.take_parked())


async def _apply_model(
    actor: SessionActor, runtime: Runtime, ref: str
) -> Callable[[], Awaitable[None]]:
    """Switch the current agent's model to ``ref``; returns the undo."""
    if not runtime.supports_model_switching():
        raise ModelSwitchingNotSupported()
    agent = runtime.current_agent().name
    before = actor.session
    previous = before.agent_model_overrides.get(agent, "")
    await runtime.set_agent_model(agent, ref)
    overrides = {**before.agent_model_overrides, agent: ref}
    custom = list(before.custom_models_used)
    if "/" in ref and ref not in custom:
        custom.append(ref)
    actor.session = attrs.evolve(before, agent_model_overrides=overrides, custom_models_used=custom)

    async def undo() -> None:
        actor.session = attrs.evolve(
            actor.session,
            agent_model_overrides=before.agent_model_overrides,
            custom_models_used=before.custom_models_used,
        )
        try:
            await runtime.set_agent_model(agent, previous)
        except Exception:
            log.exception("session %s: could not restore model of %r", actor.id, agent)

    return undo


@handles(c.RunTurn)
async def _run_turn(actor: SessionActor, cmd: c.RunTurn) -> c.RunStream:
    _require_idle(actor)  # before any mutation: a refused run changes nothing
    _require_decided(actor)
    runtime = _runtime_for(actor, cmd.source, cmd.agent_name)
    undo = await _apply_model(actor, runtime, cmd.model) if cmd.model else None
    turn = Turn(trio.CancelScope(), None, cmd.on_disconnect)
    try:
        messages = await apply_agent_switch_commands(runtime, cmd.messages)
        stamped = tuple(
            Message(chat if chat.created_at else attrs.evolve(chat, created_at=utcnow()))
            for chat in messages
        )
        texts = [m.content for m in stamped if m.role == "user" and m.content.strip()]
        # The durability point before the model is called: messages and turn record at once.
        await actor.add_turn_messages(stamped, turn, actor.runtime_source or cmd.source)
        if undo is not None:
            await actor.persist()
    except BaseException:
        if undo is not None:
            with trio.CancelScope(shield=True):
                await undo()
        raise

    send, receive = trio.open_memory_channel[Any](actor.config.stream_buffer)
    turn.send = send
    actor.start_turn(turn)
    title = actor.session.title
    # One title request per session: none while one is under way or after one was made.
    needs_title = (
        not title
        and texts
        and actor.title_generator is not None
        and actor.title_scope is None
        and not actor.title_requested
    )
    assert actor.nursery is not None
    actor.nursery.start_soon(run_turn, actor, turn, runtime, "" if needs_title else title)
    if needs_title and actor.title_generator is not None:
        _start_title(actor, texts, turn)
    return c.RunStream(receive, turn.consumer_left, lambda: turn.terminal)


def _start_title(actor: SessionActor, texts: list[str], turn: Turn) -> None:
    generator = actor.title_generator
    assert generator is not None and actor.nursery is not None
    scope = trio.CancelScope()
    actor.title_scope = scope

    async def title_task() -> None:
        try:
            with scope:
                await generate_title(actor, generator, texts, turn, actor.config.title_budget)
        finally:
            actor.title_done()

    actor.nursery.start_soon(title_task)


@handles(c.Recall)
async def _recall(actor: SessionActor, cmd: c.Recall) -> bool:
    if cmd.sub_session is not None:
        await actor.append_sub_session(cmd.sub_session)
    if actor.injector is not None:
        await actor.injector(cmd.message.content)
        return True
    runtime = _require_runtime(actor)
    if actor.streaming:
        await runtime.steer(cmd.message)
        return True
    _require_decided(actor)
    chat = ChatMessage("user", cmd.message.content, cmd.message.multi_content, created_at=utcnow())
    turn = Turn(trio.CancelScope(), None, "continue")
    await actor.add_turn_messages((Message(chat),), turn, actor.runtime_source)
    actor.start_turn(turn)
    assert actor.nursery is not None
    actor.nursery.start_soon(run_turn, actor, turn, runtime, "")
    return True


@handles(c.CancelTurn)
async def _cancel_turn(actor: SessionActor, _: c.CancelTurn) -> bool:
    """True when a turn of this actor was running and is now cancelled. An embedder's own
    stream (guarded) is not the actor's to cancel."""
    await trio.lowlevel.checkpoint()
    if actor.turn is None:
        return False
    actor.turn.scope.cancel(reason="cancelled by a client")
    return True


@handles(c.Steer)
async def _steer(actor: SessionActor, cmd: c.Steer) -> None:
    runtime = _require_runtime(actor)
    for message in cmd.messages:
        await runtime.steer(message)


@handles(c.FollowUp)
async def _follow_up(actor: SessionActor, cmd: c.FollowUp) -> c.FollowUpResult:
    if actor.runtime is None and actor.injector is None:
        raise SessionNotRunning()
    key = cmd.idempotency_key
    if key and not actor.idempotency.reserve(key):
        return c.FollowUpResult(streaming=False, duplicate=True)
    if key:  # durable: a retry after a restart is still a duplicate
        try:
            fresh = await actor.writer.reserve_key(actor.id, key)
        except BaseException:
            actor.idempotency.release(key)
            raise
        if not fresh:
            return c.FollowUpResult(streaming=False, duplicate=True)
    try:
        if actor.injector is not None:
            for message in cmd.messages:
                await actor.injector(message.content)
            return c.FollowUpResult(streaming=True, duplicate=False)
        assert actor.runtime is not None
        for message in cmd.messages:
            await actor.runtime.follow_up(message)
    except BaseException:
        if key:
            actor.idempotency.release(key)
            with trio.move_on_after(actor.config.store_write_grace, shield=True):
                try:
                    await actor.writer.release_key(actor.id, key)
                except GreenroomError:
                    log.exception("session %s: could not release key %r", actor.id, key)
        raise
    return c.FollowUpResult(streaming=actor.streaming, duplicate=False)


_LEGACY_CONFIRMATIONS = {
    "approve-session": "approve-autonomous",
    "approve-safe": "approve-balanced",
    "approve-safer": "approve-balanced",
}
CONFIRMATIONS = ("approve", "approve-balanced", "approve-autonomous", "approve-tool", "reject")


def normalize_confirmation(value: str) -> str:
    value = _LEGACY_CONFIRMATIONS.get(value, value)
    if value not in CONFIRMATIONS:
        raise InvalidRequest(
            f"$.confirmation: expected one of {', '.join(CONFIRMATIONS)}, got {value!r}",
            path="$.confirmation",
        )
    return value


@handles(c.Resume)
async def _resume(actor: SessionActor, cmd: c.Resume) -> None:
    runtime = _require_runtime(actor)
    request = cmd.request
    session = actor.session
    lasting = request.expires_in is None  # a grant with expires_in lives in the audit record
    if request.type == "approve-balanced":
        session = attrs.evolve(session, safety_policy="balanced", tools_approved=False)
    elif request.type == "approve-autonomous" and lasting:
        session = attrs.evolve(session, safety_policy="autonomous", tools_approved=True)
    elif request.type == "approve-tool" and request.tool_name and lasting:
        perms = session.permissions or Permissions()
        if request.tool_name not in perms.allow:
            perms = attrs.evolve(perms, allow=(*perms.allow, request.tool_name))
        session = attrs.evolve(session, permissions=perms)
    if session is not actor.session:
        actor.session = session
        await actor.persist(shielded=True)
    await runtime.resume(request)


@handles(c.AnswerElicitation)
async def _answer_elicitation(actor: SessionActor, cmd: c.AnswerElicitation) -> None:
    runtime = _require_runtime(actor)
    await runtime.resume_elicitation(cmd.action, cmd.content, cmd.elicitation_id)


# --- history -----------------------------------------------------------------------------


@handles(c.AddMessage)
async def _add_message(actor: SessionActor, cmd: c.AddMessage) -> int:
    _require_idle(actor)  # and no guard can be granted until this write is done
    return (await actor.append_message(cmd.message)).id


_MESSAGE_ID = re.compile(r"-?[0-9]{1,18}")  # within the store's 64-bit ids


@handles(c.UpdateMessage)
async def _update_message(actor: SessionActor, cmd: c.UpdateMessage) -> None:
    _require_idle(actor)
    if not _MESSAGE_ID.fullmatch(cmd.message_id):
        raise InvalidMessageId(f"invalid message ID: {cmd.message_id!r}", path="$.msg_id")
    message_id = int(cmd.message_id)
    await actor.store.update_message(actor.id, message_id, cmd.message)
    stored = attrs.evolve(cmd.message, id=message_id)
    items = tuple(
        stored if isinstance(item, Message) and item.id == message_id else item
        for item in actor.session.items
    )
    actor.session = attrs.evolve(actor.session, items=items)


@handles(c.AddSummary)
async def _add_summary(actor: SessionActor, cmd: c.AddSummary) -> None:
    await actor.store.add_summary(actor.id, cmd.summary)
    actor.session = actor.session.with_item(cmd.summary)


# --- metadata ----------------------------------------------------------------------------


@handles(c.SetTitle)
async def _set_title(actor: SessionActor, cmd: c.SetTitle) -> None:
    await actor.update(partial(actor.store.update_title, actor.id, cmd.title), title=cmd.title)


@handles(c.SetPermissions)
async def _set_permissions(actor: SessionActor, cmd: c.SetPermissions) -> None:
    write = partial(actor.store.update_permissions, actor.id, cmd.permissions)
    await actor.update(write, permissions=cmd.permissions)


@handles(c.SetTokens)
async def _set_tokens(actor: SessionActor, cmd: c.SetTokens) -> None:
    cost = actor.session.cost if cmd.cost is None else cmd.cost
    write = partial(actor.store.update_tokens, actor.id, cmd.input_tokens, cmd.output_tokens, cost)
    await actor.update(
        write, input_tokens=cmd.input_tokens, output_tokens=cmd.output_tokens, cost=cost
    )


@handles(c.SetStarred)
async def _set_starred(actor: SessionActor, cmd: c.SetStarred) -> None:
    await actor.update(partial(actor.store.set_starred, actor.id, cmd.starred), starred=cmd.starred)


SAFETY_POLICIES = {
    "": "",
    "strict": "strict",
    "balanced": "balanced",
    "restricted": "restricted",
    "autonomous": "autonomous",
    "unsafe": "autonomous",
    "safer": "balanced",
    "safe-auto": "balanced",
}


@handles(c.SetSafetyPolicy)
async def _set_safety_policy(actor: SessionActor, cmd: c.SetSafetyPolicy) -> None:
    if cmd.policy not in SAFETY_POLICIES:
        raise InvalidRequest(
            f"$.safety_policy: unknown safety policy {cmd.policy!r}", path="$.safety_policy"
        )
    policy = SAFETY_POLICIES[cmd.policy]
    await actor.update(None, safety_policy=policy, tools_approved=policy == "autonomous")


@handles(c.ToggleThinking)
async def _toggle_thinking(actor: SessionActor, _: c.ToggleThinking) -> None:
    await actor.update(None, thinking=not actor.session.thinking)


@handles(c.ToggleToolApproval)
async def _toggle_tool_approval(actor: SessionActor, _: c.ToggleToolApproval) -> None:
    approved = not actor.session.tools_approved
    await actor.update(
        None, tools_approved=approved, safety_policy="autonomous" if approved else ""
    )


@handles(c.SetModel)
async def _set_model(actor: SessionActor, cmd: c.SetModel) -> None:
    runtime = _require_runtime(actor)
    if not runtime.supports_model_switching():
        raise ModelSwitchingNotSupported()
    await runtime.set_agent_model(cmd.agent, cmd.ref)
    overrides = dict(actor.session.agent_model_overrides)
    if cmd.ref:
        overrides[cmd.agent] = cmd.ref
    else:
        overrides.pop(cmd.agent, None)
    await actor.update(None, agent_model_overrides=overrides)


# --- recovery ----------------------------------------------------------------------------


@handles(c.GetPendingDecisions)
async def _pending_decisions(actor: SessionActor, _: c.GetPendingDecisions) -> list[Any]:
    await trio.lowlevel.checkpoint()
    return sorted(actor.in_doubt.values(), key=lambda call: call.started_seq)


@handles(c.Decide)
async def _decide(actor: SessionActor, cmd: c.Decide) -> c.PendingDecision:
    if cmd.action == "rerun":
        _require_idle(actor)
    return await decide(actor, cmd, _ensure_runtime)


# --- embedders ---------------------------------------------------------------------------


@handles(c.AttachRuntime)
async def _attach(actor: SessionActor, cmd: c.AttachRuntime) -> None:
    actor.runtime = cmd.runtime
    actor.attached_done = cmd.done
    actor.title_generator = None
    if supports_recall(cmd.runtime):
        cmd.runtime.set_recall_handler(actor.registry.recall_handler(actor.id))
    actor.registry.mark_ready()
    await trio.lowlevel.checkpoint()


@handles(c.AcquireGuard)
async def _acquire_guard(actor: SessionActor, cmd: c.AcquireGuard) -> None:
    actor.acquire_guard(cmd.ticket)
    await trio.lowlevel.checkpoint()


@handles(c.RegisterInjector)
async def _register_injector(actor: SessionActor, cmd: c.RegisterInjector) -> None:
    actor.injector = cmd.injector
    await trio.lowlevel.checkpoint()


# --- endings -----------------------------------------------------------------------------


@handles(c.Delete)
async def _delete(actor: SessionActor, _: c.Delete) -> None:
    actor.deleted = True  # from here on the actor writes nothing: no resurrection
    exited = actor.registry.drop_log(actor.id)  # tombstone: no sink or source brings a log back
    if actor.turn is not None:  # its run stream ends with session_exited too, after the rest
        actor.turn.terminal = exited or LogEntry.of(0, SessionExited("session ended"))
    if actor.runtime is not None:
        if actor.attached_done is not None:
            actor.attached_done.set()  # the embedder's stream is its own: it ends it
        else:
            actor.runtime.on_elicitation_request(None)
    if actor.runtime_scope is not None:
        actor.runtime_scope.cancel(reason="session deleted")  # a build, MCP servers, tasks
    actor.fail_parked(SessionNotFound(actor.id))
    if actor.turn is not None:
        actor.turn.cancel("session deleted")
    if actor.title_scope is not None:
        actor.title_scope.cancel(reason="session deleted")
    actor.injector = None
    await actor.store.delete_session(actor.id)


@handles(c.Stop)
async def _stop(actor: SessionActor, _: c.Stop) -> None:
    actor.stopping = True
    if actor.turn is not None:
        actor.turn.cancel("server shutting down")
    await actor.persist(shielded=True)
