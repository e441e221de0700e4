"""The registry: spawns session actors on demand, retires idle ones, holds event logs and the
permanent tombstones of deleted sessions, and supervises actors one-for-one.

It is not an actor: a plain object owned by one nursery. Its lookups are synchronous (atomic in
trio); spawning is serialised per session id, so one session never has two actors.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager, suppress
from typing import Any

import attrs
import outcome
import trio

from greenroom.agents import QueuedMessage, RecallHandler, Runtime, RuntimeFactory
from greenroom.domain import (
    ErrorEvent,
    Event,
    Session,
    SessionSummary,
    branch,
    next_fork_title,
)
from greenroom.errors import (
    GreenroomError,
    NodeFenced,
    OwnedElsewhere,
    SessionGone,
    SessionNotFound,
    StoreError,
)
from greenroom.persistence import Lease, Persistence, ToolCallRecord

from . import _commands as c
from ._eventlog import DEFAULT_SUBSCRIBER_BUFFER, EventLog, LogEntry, Subscription
from ._handle import SessionHandle, StreamGuard
from ._recovery import recover_session
from ._session import Call, SessionActor

log = logging.getLogger(__name__)

EventSource = Callable[[Callable[[Event], None]], Awaitable[None]]
"""An embedder's event stream: called with an ``append`` function, runs until it ends."""


@attrs.frozen
class RegistryConfig:
    idle_timeout: float = 300.0  # an idle actor with no stream, guard or subscriber retires
    mailbox_size: int = 64  # commands queued per actor before callers wait
    stream_buffer: int = 64  # run-stream events buffered ahead of a slow client
    log_capacity: int = 1024  # committed events kept in memory for replay per session
    # Events queued per /events subscriber before it is dropped: at least one commit's worth.
    subscriber_buffer: int = DEFAULT_SUBSCRIBER_BUFFER
    max_uncommitted: int = 4096  # events a turn may run ahead of the writer before it waits
    title_budget: float = 30.0
    shutdown_grace: float = 5.0
    store_write_grace: float = 30.0  # a history write the store has not confirmed by then fails


@attrs.define(eq=False)
class _LogSlot:
    log: EventLog
    lazy: bool = True
    pump: trio.CancelScope | None = None


class Registry:
    """Live session actors by id, their event logs and the tombstones of deleted sessions."""

    def __init__(
        self,
        persistence: Persistence,
        factory: RuntimeFactory,
        config: RegistryConfig,
        nursery: trio.Nursery,
    ) -> None:
        self.persistence = persistence
        self.store = persistence.store
        self.factory = factory
        self.config = config
        self._nursery = nursery
        self._actors: dict[str, SessionActor] = {}
        self._spawning: dict[str, trio.Event] = {}
        self._stopped: dict[str, trio.Event] = {}
        self._logs: dict[str, _LogSlot] = {}
        # Logs of deleted sessions whose session_exited is not committed yet: their
        # subscribers end once it is.
        self._draining: dict[str, EventLog] = {}
        self._tombstones: set[str] = set()
        self._fork_lock = trio.Lock()
        self.ready = trio.Event()
        self.fenced = False  # this node lost its cluster lease: no actor until it rejoins
        # Told of this node's own commits (a cluster's mirrors: the bus brings only others').
        self._commit_observers: list[Callable[[Mapping[str, int]], None]] = []

    # --- actors --------------------------------------------------------------------------

    def live_ids(self) -> list[str]:
        return list(self._actors)

    def is_deleted(self, session_id: str) -> bool:
        return session_id in self._tombstones

    async def _actor(self, session_id: str, *, initial: Session | None = None) -> SessionActor:
        while True:
            if session_id in self._tombstones:
                raise SessionNotFound(session_id)
            if self.fenced:
                raise NodeFenced()
            actor = self._actors.get(session_id)
            if actor is not None:
                return actor
            pending = self._spawning.get(session_id)
            if pending is not None:
                await pending.wait()
                continue
            done = trio.Event()
            self._spawning[session_id] = done
            try:
                session = initial or await self.store.get_session(session_id)
                in_doubt = await self._open_log(session_id)
                if session_id in self._tombstones:
                    raise SessionNotFound(session_id)
                if self.fenced:  # fenced while claiming: its log is failed already
                    raise NodeFenced()
                started: SessionActor = await self._nursery.start(
                    self._supervise, SessionActor(self, session, in_doubt)
                )
                self._actors[session_id] = started
                return started
            finally:
                del self._spawning[session_id]
                done.set()

    async def _open_log(self, session_id: str) -> list[ToolCallRecord]:
        """The session's log, its head claimed; the tool calls a person must decide first."""
        log_ = self.ensure_log(session_id)
        if log_ is None:
            raise SessionNotFound(session_id)
        await log_.wait_ready()
        if log_.lease is None or log_.lease.state != "needs_decision":
            return []
        return await self.persistence.events.tool_calls(session_id, ("in_doubt",))

    async def _supervise(
        self, actor: SessionActor, *, task_status: trio.TaskStatus[SessionActor]
    ) -> None:
        try:
            await actor.run(task_status=task_status)
        except Exception:
            # One-for-one: this session's actor stops; the next request rebuilds it from the
            # store. Its clients learn it from the event log.
            log.exception("session actor %s crashed", actor.id)
            self.append_event(
                actor.id,
                ErrorEvent(
                    "session crashed; it restarts on the next request", "internal_error", actor.id
                ),
            )
        finally:
            actor.exited.set()
            if self._actors.get(actor.id) is actor:
                del self._actors[actor.id]
            stopped = self._stopped.pop(actor.id, None)
            if stopped is not None:
                stopped.set()

    def retire(self, actor: SessionActor) -> None:
        """Called by an idle actor as it leaves (synchronously, before its mailbox closes)."""
        if self._actors.get(actor.id) is actor:
            del self._actors[actor.id]
        slot = self._logs.get(actor.id)
        if slot is not None and not self.log_pinned(actor.id):
            del self._logs[actor.id]
            if slot.log.lease is not None:
                self.persistence.ownership.release_lease(slot.log.lease)

    async def _call_actor(self, actor: SessionActor, request: Any) -> Any:
        send, receive = trio.open_memory_channel[outcome.Outcome[Any]](1)
        try:
            await actor.mailbox.send(Call(request, send))
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            send.close()
            receive.close()
            raise _Retired from None
        async with receive:
            try:
                result = await receive.receive()
            except trio.EndOfChannel:
                if actor.deleted:
                    raise SessionNotFound(actor.id) from None
                if self.fenced:
                    raise NodeFenced() from None
                raise SessionGone() from None
            except BaseException:
                # Cancelled with the answer already here: nobody else will take it.
                with suppress(trio.WouldBlock, trio.EndOfChannel):
                    c.discard_reply(receive.receive_nowait())
                raise
        try:
            return result.unwrap()
        except SessionGone:
            if self.fenced:  # stopped by the fence, not by a crash
                raise NodeFenced() from None
            raise

    async def call_actor(self, actor: SessionActor, request: Any) -> Any:
        """Send ``request`` to this very actor (not a successor). Raises SessionGone when it
        has stopped taking commands."""
        try:
            return await self._call_actor(actor, request)
        except _Retired:
            raise NodeFenced() if self.fenced else SessionGone() from None

    async def call(self, session_id: str, request: Any) -> Any:
        """Send ``request`` to the session's actor (spawning it) and return its answer."""
        for _ in range(8):
            actor = await self._actor(session_id)
            try:
                return await self._call_actor(actor, request)
            except _Retired:
                continue  # it retired between lookup and send: a fresh actor takes the call
        raise SessionGone()

    def session(self, session_id: str) -> SessionHandle:
        return SessionHandle(self, session_id)

    def mark_ready(self) -> None:
        self.ready.set()

    # --- registry-level operations ---------------------------------------------------------

    async def create(self, session: Session) -> Session:
        if self.fenced:
            raise NodeFenced()
        return await self.store.add_session(session)

    async def get(self, session_id: str) -> Session:
        """The live session: its actor's copy when it has one, else the stored one (reading a
        session does not spawn an actor). In a cluster, a session another live node owns
        raises OwnedElsewhere: its owner's copy is the live one."""
        if session_id in self._tombstones:
            raise SessionNotFound(session_id)
        if session_id in self._actors or session_id in self._spawning:
            snapshot: c.SessionSnapshot = await self.call(session_id, c.Snapshot())
            return snapshot.session
        membership = self.persistence.membership
        if membership is not None:
            owner = await membership.owner_of(session_id)
            if owner is not None and owner.node_id != membership.node_id:
                raise OwnedElsewhere(owner=owner.node_id, owner_url=owner.advertise_url)
        return await self.store.get_session(session_id)

    async def list_sessions(self) -> list[SessionSummary]:
        return await self.store.list_sessions()

    async def delete(self, session_id: str) -> None:
        """Tombstone the session, cancel its turn and title, end its event log, delete it."""
        stopped = self._stopped.setdefault(session_id, trio.Event())
        try:
            await self.call(session_id, c.Delete())
        except BaseException:
            if not stopped.is_set() and (
                session_id not in self._tombstones or session_id not in self._actors
            ):  # no actor will ever set it (a repeated delete after the actor stopped)
                self._stopped.pop(session_id, None)
            raise

    async def batch_delete(self, session_ids: list[str]) -> tuple[int, list[str]]:
        deleted, failed = 0, []
        for session_id in session_ids:
            try:
                await self.delete(session_id)
            except GreenroomError:
                failed.append(session_id)
            else:
                deleted += 1
        return deleted, failed

    async def wait_stopped(self, session_id: str) -> None:
        """Until a deleted session's actor has stopped (its turn ended, its guard released)."""
        stopped = self._stopped.get(session_id)
        if stopped is not None:
            await stopped.wait()
        else:
            await trio.lowlevel.checkpoint()

    async def fork(self, parent_id: str, ordinal: int) -> Session:
        """A new session with the parent's history before its ``ordinal``-th user message."""
        parent = await self.get(parent_id)
        async with self._fork_lock:  # one title counter for siblings and forks of forks
            title = next_fork_title(parent.title, await self.store.titles())
            return await self.store.add_session(branch(parent, ordinal, title=title))

    async def export(self, session_ids: list[str]) -> list[Session]:
        sessions = []
        for session_id in session_ids:
            try:
                try:
                    sessions.append(await self.get(session_id))
                except OwnedElsewhere:  # an export reads what is stored
                    sessions.append(await self.store.get_session(session_id))
            except SessionNotFound:
                continue
        return sessions

    async def attach_runtime(
        self, session_id: str, runtime: Runtime, session: Session | None = None
    ) -> StreamGuard:
        """Hand an embedder's runtime to the session; returns the guard the embedder holds
        around each of its own turns (the same busy state runs and edits check)."""
        if session is not None and session_id not in self._actors:
            # Insert-or-keep in one store call (a get-then-add would race another attach).
            # The embedder's session is the live one either way.
            try:
                session = await self.store.add_session(session)
            except StoreError:
                await self.store.get_session(session_id)  # it exists already: fine
        actor = await self._actor(session_id, initial=session)
        done = trio.Event()
        await self._call_actor(actor, c.AttachRuntime(runtime, done))
        return StreamGuard(self, session_id, done)

    def recall_handler(self, session_id: str) -> RecallHandler:
        async def recall(message: QueuedMessage, sub_session: Session | None = None) -> bool:
            try:
                return bool(await self.call(session_id, c.Recall(message, sub_session)))
            except GreenroomError as exc:
                log.info("recall of session %s not handled: %s", session_id, exc)
                return False

        return recall

    # --- event logs ----------------------------------------------------------------------

    def ensure_log(self, session_id: str) -> EventLog | None:
        """The session's log, created lazily; None once the session is deleted.

        A new log claims the session's head from the store in the background (events appended
        meanwhile wait for their seqs). A log closed because an embedder's event source ended
        is replaced by a fresh one that goes on with the same numbering.
        """
        slot = self._logs.get(session_id)
        if slot is not None and not slot.log.closed:
            return slot.log
        if session_id in self._tombstones:
            return None
        if slot is not None and slot.log.started:
            log_ = slot.log.successor()
            self._logs[session_id] = _LogSlot(log_)
            return log_
        log_ = EventLog(
            session_id,
            capacity=self.config.log_capacity,
            subscriber_buffer=self.config.subscriber_buffer,
            max_uncommitted=self.config.max_uncommitted,
            writer=self.persistence.writer,
            reader=self.persistence.events,
        )
        self._logs[session_id] = _LogSlot(log_)
        self._nursery.start_soon(self._claim, log_)
        return log_

    async def _claim(self, log_: EventLog) -> None:
        session_id = log_.session_id
        try:
            lease = await self._claim_repaired(session_id)
        except Exception as exc:
            if not isinstance(exc, GreenroomError):
                log.exception("claiming the log of session %s failed", session_id)
                exc = StoreError(f"claiming the log of session {session_id} failed")
            log_.abort(exc)
            slot = self._logs.get(session_id)
            if slot is not None and slot.log is log_:
                del self._logs[session_id]
            return
        log_.start(lease)

    async def _claim_repaired(self, session_id: str) -> Lease:
        """Claim the session's head; a head left ``running`` (its owner died mid-turn, on
        another node or before a lost log) is repaired by crash recovery first, with this very
        lease, so the actor only ever starts on a head that is idle or needs a decision."""
        lease = await self.persistence.ownership.claim(session_id)
        if lease.state != "running":
            return lease
        plan = await recover_session(self.persistence, session_id, reason="owner_lost", lease=lease)
        log.warning(
            "session %s taken over: %d turn(s) interrupted, %d tool call(s) in doubt",
            session_id,
            len(plan.interrupted_turns),
            len(plan.in_doubt),
        )
        return attrs.evolve(
            lease, last_seq=lease.last_seq + len(plan.events), state=plan.head_state
        )

    async def adopt(self, session_id: str) -> None:
        """Claim a session whose owner died with its head running and repair it now (the
        sweeper), so every subscriber sees the turn end; keep no actor for it. OwnedElsewhere
        when another node was faster."""
        if session_id in self._actors or session_id in self._logs:
            return  # ours already: it was repaired when it was claimed
        log_ = self.ensure_log(session_id)
        if log_ is None:
            return
        await log_.wait_ready()
        slot = self._logs.get(session_id)
        if slot is None or slot.log is not log_ or session_id in self._actors:
            return
        if not self.log_pinned(session_id):  # nobody uses it: give the session up again
            del self._logs[session_id]
            if log_.lease is not None:
                self.persistence.ownership.release_lease(log_.lease)

    # --- the cluster fence -----------------------------------------------------------------

    def fence_all(self, reason: str = "node fenced") -> None:
        """This node lost its lease: stop every actor and end every log at once, writing
        nothing more (another node may own the sessions already). Subscribers' streams end
        without ``session_exited`` (clients resume on any node); calls answer NodeFenced, and
        so does every request that needs an actor until :meth:`unfence`."""
        self.fenced = True
        logs, self._logs = self._logs, {}
        draining, self._draining = self._draining, {}
        for slot in logs.values():
            if slot.pump is not None:
                slot.pump.cancel(reason=reason)
            slot.log.fail()
        for log_ in draining.values():
            log_.fail()
        actors, self._actors = self._actors, {}
        for actor in actors.values():
            actor.lose(reason)
        log.error("node fenced (%s): %d session(s) stopped", reason, len(actors))

    def unfence(self) -> None:
        """The node joined again: sessions are claimed afresh by the requests that need them."""
        self.fenced = False

    def observe_commits(self, observer: Callable[[Mapping[str, int]], None]) -> None:
        """Call ``observer`` with the newest committed seq per session after each of this
        node's commits (in the trio thread; it must not block)."""
        self._commit_observers.append(observer)

    def _on_commit(self, heads: Mapping[str, int], failed: Mapping[str, str]) -> None:
        """The writer's report (trio thread, after each commit): deliver what is committed;
        a log that could not be written is lost, and so is its actor (the next request claims
        the session afresh from what the store has)."""
        for observer in self._commit_observers:
            observer(heads)
        for session_id, seq in heads.items():
            slot = self._logs.get(session_id)
            if slot is not None:
                slot.log.on_committed(seq)
            draining = self._draining.get(session_id)
            if draining is not None:
                draining.on_committed(seq)
                if not draining.uncommitted:
                    del self._draining[session_id]
        for session_id, reason in failed.items():
            draining = self._draining.pop(session_id, None)
            if draining is not None:
                draining.fail()
            slot = self._logs.get(session_id)
            if slot is None or slot.log.closed:
                continue
            log.error("the event log of session %s was lost: %s", session_id, reason)
            del self._logs[session_id]
            if slot.pump is not None:
                slot.pump.cancel(reason="event log lost")
            slot.log.fail()
            actor = self._actors.pop(session_id, None)
            if actor is not None:
                actor.lose()

    def has_event_log(self, session_id: str) -> bool:
        return session_id in self._logs

    def last_event_seq(self, session_id: str) -> int:
        slot = self._logs.get(session_id)
        return slot.log.last_seq if slot is not None else 0

    def append_event(self, session_id: str, event: Event) -> LogEntry | None:
        """Append to the session's log (creating it); dropped for a deleted session."""
        log_ = self.ensure_log(session_id)
        return log_.append(event) if log_ is not None else None

    def log_between_turns(self, session_id: str, between: bool) -> None:
        """A turn of the session started (False) or ended (True): see ``EventLog.idle``."""
        slot = self._logs.get(session_id)
        if slot is not None:
            slot.log.idle(between)

    def elicitation_sink(self, session_id: str) -> Callable[[Event], bool]:
        """The sink a server-built runtime reports elicitations (and other events raised
        outside a turn) to. It answers whether anybody will see the event: an ``/events``
        subscriber, or the open run stream of the session's turn."""

        def sink(event: Event) -> bool:
            self.append_event(session_id, event)
            return self.is_heard(session_id)

        return sink

    def is_heard(self, session_id: str) -> bool:
        slot = self._logs.get(session_id)
        if slot is not None and slot.log.subscriber_count > 0:
            return True
        actor = self._actors.get(session_id)
        turn = actor.turn if actor is not None else None
        return turn is not None and turn.send is not None and turn.stream_open

    def drop_log(self, session_id: str) -> LogEntry | None:
        """Tombstone ``session_id`` for good and end its log with ``session_exited``; returns
        that terminal entry (None when the session had no log)."""
        self._tombstones.add(session_id)
        slot = self._logs.pop(session_id, None)
        if slot is None:
            return None
        if slot.pump is not None:
            slot.pump.cancel(reason="session deleted")
        self._draining[session_id] = slot.log  # before: the commit may be reported at once
        exited = slot.log.close()
        if not slot.log.uncommitted:
            self._draining.pop(session_id, None)
        return exited

    def log_pinned(self, session_id: str) -> bool:
        """Whether the log must outlive an idle actor: it has subscribers or a pump, or events
        not committed yet (a new log would claim a head behind them)."""
        slot = self._logs.get(session_id)
        return slot is not None and (
            slot.log.subscriber_count > 0
            or slot.pump is not None
            or slot.log.uncommitted > 0
            or not slot.log.ready.is_set()
        )

    def register_event_source(self, session_id: str, source: EventSource) -> None:
        """Pump an embedder's events into the session's log (adopting a lazy log) until the
        source ends or the session is deleted. A no-op for a deleted session."""
        if session_id in self._tombstones:
            return
        self.ensure_log(session_id)
        slot = self._logs[session_id]
        if slot.pump is not None:
            slot.pump.cancel(reason="replaced by a new event source")
        slot.lazy = False
        scope = trio.CancelScope()
        slot.pump = scope
        self._nursery.start_soon(self._pump, slot, source, scope)

    async def _pump(self, slot: _LogSlot, source: EventSource, scope: trio.CancelScope) -> None:
        def append(event: Event) -> None:
            slot.log.append(event)

        with scope:
            try:
                await source(append)
            except Exception:
                log.exception("event source of session %s failed", slot.log.session_id)
        if slot.pump is scope:
            slot.pump = None
            slot.log.close()

    async def subscribe(self, session_id: str, since: int | None = None) -> Subscription:
        """Replay after ``since`` then tail the session's log. SessionNotFound once deleted."""
        if session_id in self._tombstones:
            raise SessionNotFound(session_id, "no event source for session")
        if session_id not in self._logs:
            await self._actor(session_id)  # the session must exist
        log_ = self.ensure_log(session_id)
        if log_ is None:
            raise SessionNotFound(session_id, "no event source for session")
        await log_.wait_ready()
        return log_.subscribe(since)

    def cancel_turns(self) -> None:
        """Cancel every running turn (server shutdown): their run streams end, their
        sessions persist."""
        for actor in self._actors.values():
            if actor.turn is not None:
                actor.turn.cancel("server shutting down")

    def running_turns(self) -> int:
        return sum(1 for actor in self._actors.values() if actor.turn is not None)

    async def wait_turns_over(self) -> None:
        """Until no session of this node runs a turn (a draining server waits for this; its
        caller bounds the wait). Turns that start meanwhile are waited for too."""
        while True:
            running = [actor for actor in self._actors.values() if actor.turn is not None]
            if not running:
                return
            await running[0].wait_turn_over()

    def end_subscriptions(self) -> None:
        """End every live subscription without ``session_exited`` (server shutdown: clients
        reconnect with their last seq)."""
        for slot in self._logs.values():
            slot.log.end_subscribers()

    # --- shutdown ------------------------------------------------------------------------

    async def _stop_all(self) -> None:
        """Ask every actor to persist and stop, and wait until each has (server shutdown)."""

        async def stop(actor: SessionActor) -> None:
            with contextlib.suppress(GreenroomError, _Retired):
                await self._call_actor(actor, c.Stop())
            await actor.exited.wait()

        async with trio.open_nursery() as nursery:
            for actor in list(self._actors.values()):
                nursery.start_soon(stop, actor)


class _Retired(Exception):
    """The actor closed its mailbox (retired) before taking the call."""


@asynccontextmanager
async def open_registry(
    persistence: Persistence, factory: RuntimeFactory, config: RegistryConfig | None = None
) -> AsyncIterator[Registry]:
    """Run session actors for the duration of the block; on exit each persists and stops."""
    config = config or RegistryConfig()
    async with trio.open_nursery() as nursery:
        registry = Registry(persistence, factory, config, nursery)
        persistence.writer.listen(registry._on_commit)
        try:
            yield registry
        finally:
            # Each actor may wait up to shutdown_grace for its cancelled turn, then persists.
            with trio.move_on_after(2 * config.shutdown_grace, shield=True):
                await registry._stop_all()
            nursery.cancel_scope.cancel(reason="registry closed")
            persistence.writer.listen(None)
