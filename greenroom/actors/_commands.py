"""Commands a session actor takes from its mailbox, and the values it answers with.

Commands are imperative nouns; each has exactly one handler in ``_handlers.py``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

import attrs
import outcome
import trio

from greenroom.agents import BuiltRuntime, QueuedMessage, ResumeRequest, Runtime
from greenroom.domain import ChatMessage, Message, Permissions, Session, Summary
from greenroom.errors import GreenroomError, SessionGone

from ._eventlog import LogEntry

FollowUpInjector = Callable[[str], Awaitable[None]]
DisconnectPolicy = Literal["cancel", "continue"]


# --- results -----------------------------------------------------------------------------


@attrs.frozen
class SessionSnapshot:
    """The session as its actor holds it, plus live state, for resync."""

    session: Session
    streaming: bool
    agent: str
    last_event_seq: int


@attrs.frozen
class SessionStatus:
    id: str
    title: str
    streaming: bool
    agent: str
    input_tokens: int
    output_tokens: int
    num_messages: int
    building: bool = False  # the runtime is being built (MCP servers starting)


@attrs.frozen
class FollowUpResult:
    streaming: bool
    duplicate: bool

    @property
    def status(self) -> str:
        if self.duplicate:
            return "duplicate"
        return "queued_streaming" if self.streaming else "queued_idle"


@attrs.frozen
class QueueDepth:
    steer_depth: int
    steer_capacity: int
    followup_depth: int
    followup_capacity: int


class RunStream:
    """The events of one turn as the caller sees them. Iterate with ``async for``; closing it
    early cancels the turn unless it was started with ``on_disconnect="continue"``."""

    def __init__(
        self,
        receive: trio.MemoryReceiveChannel[LogEntry],
        on_close: Callable[[], None] | None = None,
        terminal: Callable[[], LogEntry | None] | None = None,
    ) -> None:
        self._receive = receive
        self._on_close = on_close
        # Read once the channel has ended: an entry that closes the stream (session_exited
        # after a delete), delivered after everything the turn sent.
        self._terminal = terminal

    def __aiter__(self) -> RunStream:
        return self

    async def __anext__(self) -> LogEntry:
        try:
            return await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            entry = self._take_terminal()
            if entry is None:
                raise StopAsyncIteration from None
            return entry

    def _take_terminal(self) -> LogEntry | None:
        if self._terminal is None:
            return None
        entry, self._terminal = self._terminal(), None
        return entry

    def ready(self, limit: int) -> list[LogEntry]:
        """Up to ``limit`` entries that are already waiting (never blocks)."""
        entries: list[LogEntry] = []
        while len(entries) < limit:
            try:
                entries.append(self._receive.receive_nowait())
            except trio.WouldBlock:
                break
            except (trio.EndOfChannel, trio.ClosedResourceError):
                entry = self._take_terminal()
                if entry is not None:
                    entries.append(entry)
                break
        return entries

    async def __aenter__(self) -> RunStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self.close()
        await trio.lowlevel.checkpoint()

    def close(self) -> None:
        """Stop reading: the turn is cancelled unless it was asked to outlive its stream."""
        self._receive.close()
        if self._on_close is not None:
            self._on_close()


def discard_reply(result: outcome.Outcome[Any]) -> None:
    """A reply whose caller left without taking it: a run stream nobody will read is closed,
    so its turn is cancelled (or detached) instead of holding the session busy."""
    if isinstance(result, outcome.Value) and isinstance(result.value, RunStream):
        result.value.close()


@attrs.frozen
class DecisionOutcome:
    tool_call_id: str
    action: str
    result: str
    is_error: bool
    decided_by: str
    decided_at: dt.datetime
    pending: int  # calls of the session still in doubt


@attrs.define(eq=False)
class PendingDecision:
    """The answer to a Decide command: at once, or once the tool ran again (a rerun runs in
    a child task of the actor, so its mailbox keeps serving meanwhile)."""

    done: trio.Event = attrs.field(factory=trio.Event)
    outcome: DecisionOutcome | None = None
    error: GreenroomError | None = None

    def finish(self, outcome: DecisionOutcome | None, error: GreenroomError | None = None) -> None:
        if not self.done.is_set():
            self.outcome, self.error = outcome, error
            self.done.set()

    async def wait(self) -> DecisionOutcome:
        await self.done.wait()
        if self.outcome is None:
            raise self.error or SessionGone()
        return self.outcome


@attrs.define(eq=False)
class GuardTicket:
    """A queued request for the streaming guard of an attached runtime."""

    granted: trio.Event = attrs.field(factory=trio.Event)
    abandoned: bool = False


# --- commands ----------------------------------------------------------------------------


@attrs.frozen
class Snapshot:
    pass


@attrs.frozen
class Status:
    pass


@attrs.frozen
class RunTurn:
    source: str
    agent_name: str
    messages: tuple[ChatMessage, ...]
    model: str = ""
    on_disconnect: DisconnectPolicy = "cancel"


@attrs.frozen
class CancelTurn:
    """Cancel the running turn, if any (its stream ends; what it did is kept)."""


@attrs.frozen
class Steer:
    messages: tuple[QueuedMessage, ...]


@attrs.frozen
class FollowUp:
    messages: tuple[QueuedMessage, ...]
    idempotency_key: str = ""


@attrs.frozen
class Resume:
    request: ResumeRequest


@attrs.frozen
class AnswerElicitation:
    action: str
    content: Mapping[str, Any] | None
    elicitation_id: str = ""


@attrs.frozen
class AddMessage:
    message: Message


@attrs.frozen
class UpdateMessage:
    message_id: str
    message: Message


@attrs.frozen
class AddSummary:
    summary: Summary


@attrs.frozen
class SetTitle:
    title: str


@attrs.frozen
class SetPermissions:
    permissions: Permissions | None


@attrs.frozen
class SetTokens:
    input_tokens: int
    output_tokens: int
    cost: float | None = None


@attrs.frozen
class SetStarred:
    starred: bool


@attrs.frozen
class SetSafetyPolicy:
    policy: str


@attrs.frozen
class ToggleToolApproval:
    pass


@attrs.frozen
class ToggleThinking:
    pass


@attrs.frozen
class Delete:
    pass


@attrs.frozen
class AttachRuntime:
    runtime: Runtime
    done: trio.Event


@attrs.frozen
class AcquireGuard:
    ticket: GuardTicket


@attrs.frozen
class RegisterInjector:
    injector: FollowUpInjector | None


@attrs.frozen
class Recall:
    message: QueuedMessage
    sub_session: Session | None = None  # a finished background task's record, added first


@attrs.frozen
class InstallRuntime:
    """Sent by the actor's build task: the runtime is built (its services started)."""

    built: BuiltRuntime
    source: str
    agent_name: str


@attrs.frozen
class GetQueueDepth:
    pass


@attrs.frozen
class ListModels:
    pass


@attrs.frozen
class SetModel:
    agent: str
    ref: str


@attrs.frozen
class GetPendingDecisions:
    """The tool calls in doubt a person must decide before the session runs again."""


@attrs.frozen
class Decide:
    tool_call_id: str
    action: str  # rerun | done | skip
    result: str | None = None  # for done: what the tool returned, if the person knows
    decided_by: str = ""


@attrs.frozen
class Stop:
    """Persist and stop (registry shutdown)."""
