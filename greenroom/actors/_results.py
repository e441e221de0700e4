"""What callers of a session actor get back: snapshots, statuses, run streams, decisions.

These are plain values and the two small synchronisation objects a caller waits on (a run
stream, a pending decision). They sit below the commands that answer with them.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import attrs
import outcome
import trio

from greenroom.domain import Message, Session
from greenroom.errors import GreenroomError, SessionGone

from ._entries import LogEntry

FollowUpInjector = Callable[[str], Awaitable[None]]
DisconnectPolicy = Literal["cancel", "continue"]


class StreamState(enum.Enum):
    IDLE = "idle"
    RUNNING = "running"  # a turn task of this actor
    GUARDED = "guarded"  # an embedder holds the guard of its attached runtime


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


COMMIT_WAIT = 30.0  # seconds a run stream waits for an event's commit before it drops the seq


class RunStream:
    """The events of one turn as the caller sees them. Iterate with ``async for``; closing it
    early cancels the turn unless it was started with ``on_disconnect="continue"``.

    A sequenced event is handed out only once its seq is committed (``committed`` /
    ``wait_committed``: the session's log), so a seq seen on a run stream is durable and names
    the same event after a crash, as on ``/events`` (issue 23). An event whose commit does
    not come (the log was lost) goes out without its seq (0)."""

    def __init__(
        self,
        receive: trio.MemoryReceiveChannel[LogEntry],
        on_close: Callable[[], None] | None = None,
        terminal: Callable[[], LogEntry | None] | None = None,
        committed: Callable[[], int] | None = None,
        wait_committed: Callable[[int], Awaitable[bool]] | None = None,
        *,
        run_id: str = "",
        answer: Callable[[], Message | None] | None = None,
    ) -> None:
        self.run_id = run_id  # the run's id ("" for none): GET .../runs/{run_id}
        self._answer = answer
        self._receive = receive
        self._on_close = on_close
        # Read once the channel has ended: an entry that closes the stream (session_exited
        # after a delete), delivered after everything the turn sent.
        self._terminal = terminal
        self._committed = committed
        self._wait_committed = wait_committed
        self._held: LogEntry | None = None  # taken by ready() before its commit

    def __aiter__(self) -> RunStream:
        return self

    async def __anext__(self) -> LogEntry:
        held, self._held = self._held, None
        if held is not None:
            return await self._durable(held)
        try:
            return await self._durable(await self._receive.receive())
        except (trio.EndOfChannel, trio.ClosedResourceError):
            terminal = self._take_terminal()
            if terminal is None:
                raise StopAsyncIteration from None
            return await self._durable(terminal)

    async def _durable(self, entry: LogEntry) -> LogEntry:
        if entry.seq <= 0 or self._wait_committed is None:
            return entry
        if self._committed is not None and self._committed() >= entry.seq:
            return entry
        committed = False
        with trio.move_on_after(COMMIT_WAIT):
            committed = await self._wait_committed(entry.seq)
        return entry if committed else attrs.evolve(entry, seq=0)

    def _ready_now(self, entry: LogEntry) -> bool:
        if entry.seq <= 0 or self._committed is None:
            return True
        return self._committed() >= entry.seq

    def answer(self) -> Message | None:
        """The last assistant message the run stored (read once the stream ended)."""
        return self._answer() if self._answer is not None else None

    def _take_terminal(self) -> LogEntry | None:
        if self._terminal is None:
            return None
        entry, self._terminal = self._terminal(), None
        return entry

    def ready(self, limit: int) -> list[LogEntry]:
        """Up to ``limit`` entries that are already waiting and committed (never blocks)."""
        entries: list[LogEntry] = []
        while len(entries) < limit and self._held is None:
            try:
                entry = self._receive.receive_nowait()
            except trio.WouldBlock:
                break
            except (trio.EndOfChannel, trio.ClosedResourceError):
                terminal = self._take_terminal()
                if terminal is not None:
                    if self._ready_now(terminal):
                        entries.append(terminal)
                    else:
                        self._held = terminal
                break
            if self._ready_now(entry):
                entries.append(entry)
            else:
                self._held = entry  # the next __anext__ waits for its commit
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


@attrs.frozen
class SessionStatistics:
    """What a live session's actor is doing, read synchronously (tests, readiness, benchmarks).

    ``live`` is False when no actor runs for the session; the other actor fields are then at
    their defaults. The log fields describe the session's event log on this node, if any.
    """

    live: bool = False
    state: StreamState = StreamState.IDLE
    building: bool = False
    run_stream_open: bool = False  # a turn runs and a client still reads its run stream
    mailbox_used: int = 0  # commands waiting in the mailbox now
    mailbox_peak: int = 0  # the most commands that ever waited (mailbox sizing)
    has_log: bool = False
    subscribers: int = 0
    last_seq: int = 0
    queued_follow_ups: int = 0  # follow-up messages the runtime holds for the turn's end
