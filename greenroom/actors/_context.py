"""The contracts between a session actor, the code that runs inside it, and its registry.

- :class:`ActorContext` is what a handler, a turn task, the build task and a decision may see
  and do. Everything it shows is read-only; every change to the actor's state is an intent
  method, written in ``_session.py`` only, and every change to the session value goes through
  the :class:`~._live.LiveSession`. A handler can be tested against a small fake of it.
- :class:`ActorHost` is what an actor needs of its registry; :class:`SessionCaller` and
  :class:`GuardHost` are what a session handle and a stream guard need of it.

Nothing in this module imports the actor or the registry, so the actors folder imports in one
direction: registry, actor, handlers, the tasks (turn, build, decisions) and handles, this
module, then the commands and values below it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol, TypeVar

import attrs
import trio

from greenroom.agents import BuiltRuntime, RecallHandler, Runtime, RuntimeFactory, TitleGenerator
from greenroom.domain import Event, Session
from greenroom.persistence import EventReader, Lease, Persistence, Store, ToolCallRecord, Writer

from ._commands import NeedsRuntime, Request, Turn
from ._entries import LogEntry
from ._eventlog import DEFAULT_SUBSCRIBER_BUFFER, EventLog
from ._idempotency import IdempotencyCache
from ._live import LiveSession
from ._logs import EventLogs
from ._results import FollowUpInjector, GuardTicket

R = TypeVar("R")


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


class ActorHost(Protocol):
    """What a session actor uses of its registry."""

    @property
    def config(self) -> RegistryConfig: ...

    @property
    def persistence(self) -> Persistence: ...

    @property
    def factory(self) -> RuntimeFactory: ...

    @property
    def logs(self) -> EventLogs: ...

    def retire(self, session_id: str, actor: object) -> None:
        """``actor`` leaves while idle (synchronously, before its mailbox closes)."""

    def recall_handler(self, session_id: str) -> RecallHandler: ...

    def elicitation_sink(self, session_id: str) -> Callable[[Event], bool]: ...

    def mark_ready(self) -> None:
        """A runtime was installed or attached (``/api/ready`` answers)."""


class SessionCaller(Protocol):
    """What a :class:`~._handle.SessionHandle` needs: a call to the session's actor."""

    async def call(self, session_id: str, request: Request[R]) -> R: ...


class GuardHost(Protocol):
    """What a :class:`~._handle.StreamGuard` needs: the guard of the session's actor."""

    async def acquire_guard(self, session_id: str) -> Callable[[], None]: ...


class ActorContext(Protocol):
    """What runs inside a session actor may see (read-only) and ask of it (intents)."""

    # --- what it reads -----------------------------------------------------------------

    @property
    def id(self) -> str: ...

    @property
    def config(self) -> RegistryConfig: ...

    @property
    def store(self) -> Store: ...

    @property
    def writer(self) -> Writer: ...

    @property
    def events(self) -> EventReader: ...

    @property
    def factory(self) -> RuntimeFactory: ...

    @property
    def live(self) -> LiveSession:
        """The session value and the writes that change it."""

    @property
    def session(self) -> Session:
        """The live session (``live.session``)."""

    @property
    def runtime(self) -> Runtime | None: ...

    @property
    def runtime_source(self) -> str:
        """The agent source the runtime was built from ("" for none or an attached one)."""

    @property
    def title_generator(self) -> TitleGenerator | None: ...

    @property
    def title_due(self) -> bool:
        """No title task runs and none was asked of a model yet (one request per session)."""

    @property
    def building(self) -> bool: ...

    @property
    def streaming(self) -> bool: ...

    @property
    def turn(self) -> Turn | None: ...

    @property
    def deleted(self) -> bool: ...

    @property
    def in_doubt(self) -> Mapping[str, ToolCallRecord]: ...

    @property
    def injector(self) -> FollowUpInjector | None: ...

    @property
    def idempotency(self) -> IdempotencyCache: ...

    @property
    def log(self) -> EventLog | None:
        """The session's log (created lazily); None for a deleted session or a lost actor."""

    @property
    def lease(self) -> Lease: ...

    def agent_name(self) -> str: ...

    def num_messages(self) -> int: ...

    # --- what it asks (intents; each runs synchronously unless it says otherwise) ----------

    def install_runtime(self, built: BuiltRuntime, source: str, agent_name: str) -> None:
        """Serve ``built``: the session's sinks and recall handler are wired to it."""

    def attach(self, runtime: Runtime, done: trio.Event) -> None:
        """Serve an embedder's runtime; ``done`` is set when the session is deleted."""

    async def resume_parked(self) -> None:
        """Dispatch the calls that waited for the runtime (after ``install_runtime``)."""

    def fail_parked(self, error: Exception) -> None:
        """Answer every call waiting for the runtime with ``error``."""

    def build_ended(self, scope: trio.CancelScope) -> None:
        """The build task that ran under ``scope`` (and then its services) has ended."""

    def set_injector(self, injector: FollowUpInjector | None) -> None: ...

    def acquire_guard(self, ticket: GuardTicket) -> None: ...

    def start_turn(self, turn: Turn, body: Callable[[], Awaitable[None]]) -> None:
        """Mark the session running ``turn`` and run ``body`` as the turn task."""

    def end_turn(self, turn: Turn) -> None:
        """Idle again *before* the stream closes: a client that drains it can run again."""

    def start_title(self, body: Callable[[], Awaitable[None]]) -> None:
        """Run ``body`` as the title task (cancelled on delete and lose)."""

    def on_title_asked(self) -> None:
        """A title was asked of a model: no more are asked for this session."""

    def decided(self, tool_call_id: str) -> None:
        """A tool call in doubt was decided."""

    def mark_deleted(self) -> None:
        """The session is deleted: tombstone it, cancel everything, write nothing more."""

    def mark_stopping(self) -> None:
        """The server shuts down: cancel the turn, stop after this command."""

    def log_event(self, event: Event) -> LogEntry | None:
        """Append ``event`` to the session's log (None: dropped, the actor was lost)."""

    async def call_self(self, request: Request[R]) -> R:
        """Send ``request`` to this very actor's mailbox (from one of its child tasks)."""


def runtime_for(ctx: ActorContext, source: str, agent_name: str) -> Runtime:
    """The runtime; without one the actor parks the command while it builds (NeedsRuntime)."""
    if ctx.runtime is None:
        raise NeedsRuntime(source, agent_name)
    return ctx.runtime
