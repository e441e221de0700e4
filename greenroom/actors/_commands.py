"""Commands a session actor takes from its mailbox, the call that carries one, and a turn.

Commands are imperative nouns; each is a :class:`Request` typed by what it answers with and has
exactly one handler (in ``_handlers.py`` or ``_metadata.py``, found through ``_table.py``). A
:class:`Call` carries a command with a one-slot reply channel. :class:`Turn` is the state of
one running turn, shared by the actor (which starts and ends it) and the turn task;
:class:`NeedsRuntime` is how a handler asks for the runtime to be built first.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import attrs
import outcome
import trio

from greenroom.agents import BuiltRuntime, ModelChoice, QueuedMessage, ResumeRequest, Runtime
from greenroom.domain import (
    AgentChoice,
    AgentChoiceReasoning,
    ChatMessage,
    ErrorEvent,
    Event,
    Message,
    Permissions,
    Session,
    StreamStopped,
    Summary,
    TokenUsage,
)
from greenroom.observe import capture
from greenroom.persistence import ToolCallRecord

from ._entries import LogEntry
from ._results import (
    DisconnectPolicy,
    FollowUpInjector,
    FollowUpResult,
    GuardTicket,
    PendingDecision,
    QueueDepth,
    RunStream,
    SessionSnapshot,
    SessionStatus,
    discard_reply,
)
from ._runs import RunFacts

if TYPE_CHECKING:
    from opentelemetry.context import Context

R = TypeVar("R")


class Request(Generic[R]):
    """A command whose handler answers with an ``R``."""

    __slots__ = ()


@attrs.frozen
class Call:
    """A command with a one-slot reply channel (the actor never blocks on a reply)."""

    request: Request[Any]
    reply: trio.MemorySendChannel[outcome.Outcome[Any]]
    # The sender's trace context and when it sent (tracing on only): the actor handles the
    # command under it, so a turn's spans continue the request's trace (decision 0025).
    trace: Context | None = None
    sent_at: float = 0.0


class MailboxClosed(Exception):
    """The actor closed its mailbox (it retired, was lost or stopped) before taking the call."""


async def send_call(
    mailbox: trio.MemorySendChannel[Call], request: Request[Any]
) -> outcome.Outcome[Any]:
    """Put ``request`` in ``mailbox`` and wait for its answer.

    Raises:
      MailboxClosed: the actor did not take the call.
      trio.EndOfChannel: the actor took the call but stopped (or crashed) before answering.
    """
    send, receive = trio.open_memory_channel[outcome.Outcome[Any]](1)
    context = capture()
    call = Call(request, send)
    if context is not None:  # tracing: the actor handles it under the sender's context
        call = Call(request, send, context, trio.current_time())
    try:
        await mailbox.send(call)
    except (trio.ClosedResourceError, trio.BrokenResourceError):
        send.close()
        receive.close()
        raise MailboxClosed from None
    async with receive:
        try:
            return await receive.receive()
        except trio.EndOfChannel:
            raise
        except BaseException:
            # Cancelled with the answer already here: nobody else will take it.
            with contextlib.suppress(trio.WouldBlock, trio.EndOfChannel):
                discard_reply(receive.receive_nowait())
            raise


class NeedsRuntime(Exception):
    """A handler needs the session's runtime, which is not built yet: the actor parks the call,
    builds the runtime (agent ``source``, starting on ``agent_name``) and dispatches the call
    again once it is installed. Raise it before changing anything."""

    def __init__(self, source: str, agent_name: str) -> None:
        super().__init__(source, agent_name)
        self.source = source
        self.agent_name = agent_name


ANSWER_EVENTS = (AgentChoice, AgentChoiceReasoning, TokenUsage)
"""Events that show a model answered (the turn is worth a title)."""


@attrs.define(eq=False)
class Turn:
    """One running turn. ``send`` is None for turns nobody streams (recall after a job).

    The turn task and the actor's handlers (cancel, delete) share it; ``settled`` is set once
    the model first answered, the turn failed before that, or the turn ended (the title task
    waits for it); ``stopped`` once ``stream_stopped`` went out (nothing is offered to the run
    stream after it).
    """

    scope: trio.CancelScope
    send: trio.MemorySendChannel[LogEntry] | None
    on_disconnect: DisconnectPolicy = "cancel"
    stream_open: bool = True
    terminal: LogEntry | None = None  # the run stream's last entry once the turn ended (delete)
    settled: trio.Event = attrs.Factory(trio.Event)
    answered: bool = False
    failed: bool = False
    stopped: bool = False
    turn_id: str = attrs.field(factory=lambda: uuid.uuid4().hex)
    errored: bool = False  # it reported an error (the turn record says failed)
    cancel_reason: str = ""
    run: RunFacts = attrs.Factory(RunFacts)  # what its run record will say (issue 25)

    @property
    def streamed(self) -> bool:
        """Whether a client still reads this turn's run stream."""
        return self.send is not None and self.stream_open

    def note(self, event: Event) -> None:
        """Watch the turn's events: settled (for the title task), stopped, the run record."""
        self.run.note(event)
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


# --- queries -----------------------------------------------------------------------------


@attrs.frozen
class GetSnapshot(Request[SessionSnapshot]):
    pass


@attrs.frozen
class GetStatus(Request[SessionStatus]):
    pass


@attrs.frozen
class GetQueueDepth(Request[QueueDepth]):
    pass


@attrs.frozen
class GetModels(Request[tuple[str, str, list[ModelChoice]]]):
    """The current agent, its model override and the models it may switch to."""


@attrs.frozen
class GetPendingDecisions(Request[list[ToolCallRecord]]):
    """The tool calls in doubt a person must decide before the session runs again."""


# --- turns -------------------------------------------------------------------------------


@attrs.frozen
class RunTurn(Request[RunStream]):
    source: str
    agent_name: str
    messages: tuple[ChatMessage, ...]
    model: str = ""
    on_disconnect: DisconnectPolicy = "cancel"
    webhook: str = ""  # where the run's summary goes when it ends (checked by the transport)
    created_at: dt.datetime | None = None  # when the run was asked for


@attrs.frozen
class Compact(Request[None]):
    """Compact the history now (between turns): a summary made by the agent's model. Without
    a runtime, ``source`` names the agent file to build one from ("": refused)."""

    source: str = ""
    agent_name: str = ""
    instructions: str = ""


@attrs.frozen
class CancelTurn(Request[bool]):
    """Cancel the running turn, if any (its stream ends; what it did is kept)."""


@attrs.frozen
class Steer(Request[None]):
    messages: tuple[QueuedMessage, ...]


@attrs.frozen
class FollowUp(Request[FollowUpResult]):
    messages: tuple[QueuedMessage, ...]
    idempotency_key: str = ""


@attrs.frozen
class Resume(Request[None]):
    request: ResumeRequest


@attrs.frozen
class AnswerElicitation(Request[None]):
    action: str
    content: Mapping[str, Any] | None
    elicitation_id: str = ""


@attrs.frozen
class Recall(Request[bool]):
    message: QueuedMessage
    sub_session: Session | None = None  # a finished background task's record, added first


@attrs.frozen
class Decide(Request[PendingDecision]):
    tool_call_id: str
    action: str  # rerun | done | skip
    result: str | None = None  # for done: what the tool returned, if the person knows
    decided_by: str = ""


# --- history and metadata ------------------------------------------------------------------


@attrs.frozen
class AddMessage(Request[int]):
    message: Message


@attrs.frozen
class UpdateMessage(Request[None]):
    message_id: str
    message: Message


@attrs.frozen
class AddSummary(Request[None]):
    summary: Summary


@attrs.frozen
class SetTitle(Request[None]):
    title: str


@attrs.frozen
class SetPermissions(Request[None]):
    permissions: Permissions | None


@attrs.frozen
class SetTokens(Request[None]):
    input_tokens: int
    output_tokens: int
    cost: float | None = None


@attrs.frozen
class SetStarred(Request[None]):
    starred: bool


@attrs.frozen
class SetSafetyPolicy(Request[None]):
    policy: str


@attrs.frozen
class ToggleToolApproval(Request[None]):
    decided_by: str = ""  # audited on the session (GET /approvals)


@attrs.frozen
class ToggleThinking(Request[None]):
    pass


@attrs.frozen
class SetModel(Request[None]):
    agent: str
    ref: str


# --- runtimes and embedders ----------------------------------------------------------------


@attrs.frozen
class InstallRuntime(Request[None]):
    """Sent by the actor's build task: the runtime is built (its services started)."""

    built: BuiltRuntime
    source: str
    agent_name: str


@attrs.frozen
class AttachRuntime(Request[None]):
    runtime: Runtime
    done: trio.Event


@attrs.frozen
class AcquireGuard(Request[None]):
    ticket: GuardTicket


@attrs.frozen
class RegisterInjector(Request[None]):
    injector: FollowUpInjector | None


# --- endings -----------------------------------------------------------------------------


@attrs.frozen
class Delete(Request[None]):
    pass


@attrs.frozen
class Stop(Request[None]):
    """Persist and stop (registry shutdown)."""
