"""The registry: spawns session actors on demand, retires idle ones, supervises them
one-for-one, and runs the session operations that are not one actor's (create, list, fork,
export, delete, the cluster fence). The event logs and tombstones live in :class:`EventLogs`.

It is not an actor: a plain object owned by one nursery. Its lookups are synchronous (atomic in
trio); spawning is serialised per session id, so one session never has two actors.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import TypeVar, cast

import trio

from greenroom.agents import QueuedMessage, RecallHandler, Runtime, RuntimeFactory
from greenroom.domain import (
    ErrorEvent,
    Event,
    Session,
    SessionPage,
    SessionQuery,
    SessionSummary,
    branch,
    next_fork_title,
)
from greenroom.errors import (
    GreenroomError,
    NodeFenced,
    OwnedElsewhere,
    SessionExists,
    SessionGone,
    SessionNotFound,
)
from greenroom.persistence import Persistence, RunRecord, ToolCallRecord

from . import _commands as c
from ._context import RegistryConfig
from ._entries import LogEntry
from ._eventlog import EventLog
from ._handle import SessionHandle, StreamGuard
from ._logs import EventLogs, EventSource
from ._readiness import Readiness, readiness
from ._results import GuardTicket, SessionStatistics
from ._runs import RunningTurn, RunReader
from ._session import SessionActor
from ._subscription import Subscription

log = logging.getLogger(__name__)

R = TypeVar("R")

RETRIES = 8
"""Lookups a call makes when the actor it found retires before taking it. Each retry finds a
fresh actor (a retiring one is forgotten synchronously), so more than one is already rare."""


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
        self.logs = EventLogs(
            persistence,
            nursery,
            capacity=config.log_capacity,
            subscriber_buffer=config.subscriber_buffer,
            max_uncommitted=config.max_uncommitted,
            on_lost=self._lose,
        )
        self._actors: dict[str, SessionActor] = {}
        self._spawning: dict[str, trio.Event] = {}
        self._stopped: dict[str, trio.Event] = {}
        self._fork_lock = trio.Lock()
        self.ready = trio.Event()
        self.fenced = False  # this node lost its cluster lease: no actor until it rejoins
        self._runs = RunReader(persistence.run_log, self.logs.is_deleted, self._running)

    # --- reading -----------------------------------------------------------------------

    def live_ids(self) -> list[str]:
        return list(self._actors)

    def is_deleted(self, session_id: str) -> bool:
        return self.logs.is_deleted(session_id)

    def statistics(self, session_id: str) -> SessionStatistics:
        """What the session's actor (and log) on this node are doing, read synchronously."""
        actor = self._actors.get(session_id)
        if actor is not None:
            return actor.statistics()
        log_ = self.logs.get(session_id)
        if log_ is None:
            return SessionStatistics()
        return SessionStatistics(
            has_log=True, subscribers=log_.subscriber_count, last_seq=log_.last_seq
        )

    async def readiness(self, budget: float) -> Readiness:
        """Whether this node can serve: see :func:`~._readiness.readiness`."""
        return await readiness(self.store, self.persistence.membership, self.fenced, budget)

    # --- actors --------------------------------------------------------------------------

    async def _actor(self, session_id: str, *, initial: Session | None = None) -> SessionActor:
        while True:
            if self.logs.is_deleted(session_id):
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
                if self.logs.is_deleted(session_id):
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
        log_ = self.logs.ensure(session_id)
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
            self.logs.append(
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

    def retire(self, session_id: str, actor: object) -> None:
        """Called by an idle actor as it leaves (synchronously, before its mailbox closes)."""
        if self._actors.get(session_id) is actor:
            del self._actors[session_id]
        self.logs.release(session_id)

    def _lose(self, session_id: str) -> None:
        actor = self._actors.pop(session_id, None)
        if actor is not None:
            actor.lose()

    async def _call_actor(self, actor: SessionActor, request: c.Request[R]) -> R:
        try:
            result = await c.send_call(actor.mailbox, request)
        except trio.EndOfChannel:
            if actor.deleted:
                raise SessionNotFound(actor.id) from None
            if self.fenced:
                raise NodeFenced() from None
            raise SessionGone() from None
        try:
            return cast(R, result.unwrap())
        except SessionGone:
            if self.fenced:  # stopped by the fence, not by a crash
                raise NodeFenced() from None
            raise

    async def call(self, session_id: str, request: c.Request[R]) -> R:
        """Send ``request`` to the session's actor (spawning it) and return its answer."""
        for _ in range(RETRIES):
            actor = await self._actor(session_id)
            try:
                return await self._call_actor(actor, request)
            except c.MailboxClosed:
                continue  # it retired between lookup and send: a fresh actor takes the call
        raise SessionGone()

    def session(self, session_id: str) -> SessionHandle:
        return SessionHandle(self, session_id)

    async def acquire_guard(self, session_id: str) -> Callable[[], None]:
        """Wait for the streaming guard of the session's actor; returns its release."""
        ticket = GuardTicket()
        actor = await self._actor(session_id)
        try:
            # Inside the try: a caller cancelled while its request waits in the mailbox must
            # not be granted the guard later (nobody would release it).
            await self._call_actor(actor, c.AcquireGuard(ticket))
            await ticket.granted.wait()
        except BaseException:
            ticket.abandoned = True
            if ticket.granted.is_set():
                actor.release_guard()
            raise
        return actor.release_guard

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
        if self.logs.is_deleted(session_id):
            raise SessionNotFound(session_id)
        if session_id in self._actors or session_id in self._spawning:
            return (await self.call(session_id, c.GetSnapshot())).session
        membership = self.persistence.membership
        if membership is not None:
            owner = await membership.owner_of(session_id)
            if owner is not None and owner.node_id != membership.node_id:
                raise OwnedElsewhere(owner=owner.node_id, owner_url=owner.advertise_url)
        return await self.store.get_session(session_id)

    async def runs(self, session_id: str, limit: int = 50) -> list[RunRecord]:
        """The session's newest runs, newest first (:class:`RunReader`)."""
        return await self._runs.runs(session_id, limit)

    async def run(self, session_id: str, run_id: str) -> RunRecord:
        return await self._runs.run(session_id, run_id)

    def _running(self, session_id: str) -> RunningTurn | None:
        actor = self._actors.get(session_id)
        return actor.turn if actor is not None else None

    async def list_sessions(self) -> list[SessionSummary]:
        return await self.store.list_sessions()

    async def search_sessions(self, query: SessionQuery) -> SessionPage:
        """A page of the stored root sessions matching ``query`` (decision 0026)."""
        return await self.store.search_sessions(query)

    async def delete(self, session_id: str) -> None:
        """Tombstone the session, cancel its turn and title, end its event log, delete it."""
        stopped = self._stopped.setdefault(session_id, trio.Event())
        try:
            await self.call(session_id, c.Delete())
        except BaseException:
            if not stopped.is_set() and (
                not self.logs.is_deleted(session_id) or session_id not in self._actors
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
            with contextlib.suppress(SessionExists):  # it exists already: fine
                session = await self.store.add_session(session)
        actor = await self._actor(session_id, initial=session)
        done = trio.Event()
        await self._call_actor(actor, c.AttachRuntime(runtime, done))
        return StreamGuard(self, session_id, done)

    def recall_handler(self, session_id: str) -> RecallHandler:
        async def recall(message: QueuedMessage, sub_session: Session | None = None) -> bool:
            try:
                return await self.call(session_id, c.Recall(message, sub_session))
            except GreenroomError as exc:
                log.info("recall of session %s not handled: %s", session_id, exc)
                return False

        return recall

    # --- event logs (the embedder's view of EventLogs) --------------------------------------

    def ensure_log(self, session_id: str) -> EventLog | None:
        """The session's log, created lazily; None once the session is deleted."""
        return self.logs.ensure(session_id)

    def has_event_log(self, session_id: str) -> bool:
        return self.logs.has_log(session_id)

    def last_event_seq(self, session_id: str) -> int:
        return self.logs.last_seq(session_id)

    def append_event(self, session_id: str, event: Event) -> LogEntry | None:
        """Append to the session's log (creating it); dropped for a deleted session."""
        return self.logs.append(session_id, event)

    def drop_log(self, session_id: str) -> LogEntry | None:
        """Tombstone ``session_id`` for good and end its log with ``session_exited``."""
        return self.logs.drop(session_id)

    def register_event_source(self, session_id: str, source: EventSource) -> None:
        """Pump an embedder's events into the session's log until the source ends or the
        session is deleted. A no-op for a deleted session."""
        self.logs.register_source(session_id, source)

    def observe_commits(self, observer: Callable[[Mapping[str, int]], None]) -> None:
        """Call ``observer`` with the newest committed seq per session after each of this
        node's commits (in the trio thread; it must not block)."""
        self.logs.observe_commits(observer)

    def elicitation_sink(self, session_id: str) -> Callable[[Event], bool]:
        """The sink a server-built runtime reports elicitations (and other events raised
        outside a turn) to. It answers whether anybody will see the event: an ``/events``
        subscriber, or the open run stream of the session's turn."""

        def sink(event: Event) -> bool:
            self.logs.append(session_id, event)
            return self.is_heard(session_id)

        return sink

    def is_heard(self, session_id: str) -> bool:
        if self.logs.subscriber_count(session_id) > 0:
            return True
        actor = self._actors.get(session_id)
        turn = actor.turn if actor is not None else None
        return turn is not None and turn.streamed

    async def subscribe(self, session_id: str, since: int | None = None) -> Subscription:
        """Replay after ``since`` then tail the session's log. SessionNotFound once deleted."""
        if self.logs.is_deleted(session_id):
            raise SessionNotFound(session_id, "no event source for session")
        if not self.logs.has_log(session_id):
            await self._actor(session_id)  # the session must exist
        log_ = self.logs.ensure(session_id)
        if log_ is None:
            raise SessionNotFound(session_id, "no event source for session")
        await log_.wait_ready()
        return log_.subscribe(since)

    async def adopt(self, session_id: str) -> None:
        """Claim a session whose owner died with its head running and repair it now (the
        sweeper), so every subscriber sees the turn end; keep no actor for it. OwnedElsewhere
        when another node was faster."""
        if session_id in self._actors:
            return  # ours already: it was repaired when it was claimed
        await self.logs.adopt(session_id, in_use=lambda: session_id in self._actors)

    # --- the cluster fence -----------------------------------------------------------------

    def fence_all(self, reason: str = "node fenced") -> None:
        """This node lost its lease: stop every actor and end every log at once, writing
        nothing more (another node may own the sessions already). Subscribers' streams end
        without ``session_exited`` (clients resume on any node); calls answer NodeFenced, and
        so does every request that needs an actor until :meth:`unfence`."""
        self.fenced = True
        self.logs.fail_all(reason)
        actors, self._actors = self._actors, {}
        for actor in actors.values():
            actor.lose(reason)
        log.error("node fenced (%s): %d session(s) stopped", reason, len(actors))

    def unfence(self) -> None:
        """The node joined again: sessions are claimed afresh by the requests that need them."""
        self.fenced = False

    # --- shutdown ------------------------------------------------------------------------

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
        self.logs.end_subscriptions()

    async def _stop_all(self) -> None:
        """Ask every actor to persist and stop, and wait until each has (server shutdown)."""

        async def stop(actor: SessionActor) -> None:
            with contextlib.suppress(GreenroomError, c.MailboxClosed):
                await self._call_actor(actor, c.Stop())
            await actor.exited.wait()

        async with trio.open_nursery() as nursery:
            for actor in list(self._actors.values()):
                nursery.start_soon(stop, actor)


@asynccontextmanager
async def open_registry(
    persistence: Persistence, factory: RuntimeFactory, config: RegistryConfig | None = None
) -> AsyncIterator[Registry]:
    """Run session actors for the duration of the block; on exit each persists and stops."""
    config = config or RegistryConfig()
    async with trio.open_nursery() as nursery:
        registry = Registry(persistence, factory, config, nursery)
        persistence.writer.listen(registry.logs.on_commit)
        try:
            yield registry
        finally:
            # Each actor may wait up to shutdown_grace for its cancelled turn, then persists.
            with trio.move_on_after(2 * config.shutdown_grace, shield=True):
                await registry._stop_all()
            nursery.cancel_scope.cancel(reason="registry closed")
            persistence.writer.listen(None)
