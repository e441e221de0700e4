"""The contract between a session actor and the thing that runs agent turns.

A :class:`Runtime` runs turns of one session. The actor owns the session; the runtime reads it
and reports back through the :class:`TurnIO` it is handed for each turn, so the actor stays the
only writer of session state and of the store.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal, Protocol, runtime_checkable

import attrs
import trio
from typing_extensions import TypeIs

from greenroom.domain import (
    Approval,
    ErrorItem,
    Event,
    Message,
    MessagePart,
    Session,
    Summary,
    ToolCall,
)

from ._tool_values import ToolResult

ElicitationSink = Callable[[Event], "bool | None"]
"""Receives elicitation requests (and other events raised outside any turn) for the session's
event log; sync, so it never blocks the runtime. It may answer whether anybody will see the
event (an open run stream or an ``/events`` subscriber): ``False`` makes an elicitation decline
at once instead of waiting for an answer nobody can give."""

ConfirmationKind = Literal[
    "approve", "approve-balanced", "approve-autonomous", "approve-tool", "reject"
]


@attrs.frozen
class QueuedMessage:
    """A steer or follow-up message waiting for the runtime."""

    content: str
    multi_content: tuple[MessagePart, ...] = ()


@attrs.frozen
class ResumeRequest:
    """The answer to a ``tool_call_confirmation``.

    ``expires_in`` (seconds) makes an ``approve-tool`` or ``approve-autonomous`` answer a
    grant that ends then; ``decided_by`` names who answered (the token's label), for the audit.
    """

    type: ConfirmationKind
    reason: str = ""
    tool_name: str = ""
    expires_in: float | None = None
    decided_by: str = ""


@attrs.frozen
class Command:
    """A slash command of an agent; ``agent`` makes it an agent-switch command."""

    description: str = ""
    instruction: str = ""
    agent: str = ""


@attrs.frozen
class CurrentAgent:
    name: str
    description: str = ""
    commands: Mapping[str, Command] = attrs.field(factory=dict)


@attrs.frozen
class ModelChoice:
    name: str
    ref: str
    provider: str = ""
    model: str = ""
    is_default: bool = False
    is_current: bool = False
    is_custom: bool = False


@attrs.frozen
class QueueStatus:
    steer_depth: int = 0
    steer_capacity: int = 0
    followup_depth: int = 0
    followup_capacity: int = 0


class TurnIO(Protocol):
    """What a runtime may do during one turn. Every ``await`` here is cancellable."""

    @property
    def session(self) -> Session:
        """The live session as it is now (history included)."""

    async def emit(self, event: Event) -> None:
        """Deliver ``event`` to the run stream and the session's event log."""

    async def add_message(self, message: Message) -> Message:
        """Append ``message`` to the history and persist it; returns it with its store id."""

    async def add_error(self, error: ErrorItem) -> None:
        """Record a run failure in the history."""

    async def begin_tool_call(self, call: ToolCall, agent_name: str) -> None:
        """Durability point: record that ``call`` is about to run; returns once committed.

        Call it right before the tool starts, never earlier (a call that never ran must not
        look as if it might have) and never later (after a crash, a call that started without
        a stored result is *in doubt* and a person decides whether it runs again). Its result
        is stored with ``add_message`` (a ``tool`` message with the call's id).
        """

    def add_usage(self, input_tokens: int, output_tokens: int, cost: float) -> None:
        """Add a model call's token usage to the session's totals."""

    async def record_approval(self, approval: Approval) -> None:
        """Audit a decision on a tool call on the session (and persist it)."""

    async def add_summary(self, summary: Summary) -> None:
        """Append a compaction summary to the history and persist it."""

    async def add_sub_session(self, sub_session: Session) -> None:
        """Append a finished sub-session (a delegated task) to the history and persist it."""


@runtime_checkable
class Runtime(Protocol):
    """Runs the turns of one session (server-built or attached by an embedder)."""

    async def run_stream(self, io: TurnIO) -> None:
        """Run one turn (plus queued follow-ups) until done; must stop promptly when cancelled."""

    async def steer(self, message: QueuedMessage) -> None:
        """Inject ``message`` into the running turn. Raises QueueFull when the queue is full."""

    async def follow_up(self, message: QueuedMessage) -> None:
        """Queue ``message`` for the end of the turn. Raises QueueFull when the queue is full."""

    async def resume(self, request: ResumeRequest) -> None:
        """Answer a pending tool confirmation."""

    async def resume_elicitation(
        self, action: str, content: Mapping[str, Any] | None, elicitation_id: str = ""
    ) -> None:
        """Answer a pending elicitation (the one with ``elicitation_id``, or the only one)."""

    def on_elicitation_request(self, sink: ElicitationSink | None) -> None:
        """Register (or clear with None) the sink for out-of-stream elicitation requests."""

    def current_agent(self) -> CurrentAgent: ...

    async def set_current_agent(self, name: str) -> None: ...

    def supports_model_switching(self) -> bool: ...

    async def set_agent_model(self, agent: str, ref: str) -> None:
        """Switch ``agent`` to model ``ref`` ("" restores its default)."""

    async def available_models(self) -> list[ModelChoice]: ...

    def queue_status(self) -> QueueStatus: ...

    async def aclose(self) -> None: ...


class RecallHandler(Protocol):
    """Recall the session: ``message`` is injected into the running turn, or starts a turn;
    ``sub_session`` (a finished background task's record) is added to the history first.
    Returns whether the session took it."""

    async def __call__(
        self, message: QueuedMessage, sub_session: Session | None = None
    ) -> bool: ...


# Optional capabilities: a runtime has one when it has the member. The helpers below read them
# (``supports_*`` also narrow the type), so callers never look members up by name themselves.


class SupportsRecall(Protocol):
    """Optional capability: the runtime calls back when a background job wants attention."""

    def set_recall_handler(self, handler: RecallHandler | None) -> None: ...


def mirrors_elicitation(runtime: object) -> bool:
    """Whether ``runtime`` delivers elicitations through the sink *and* on its run stream."""
    return bool(getattr(runtime, "mirrors_elicitation_on_run_stream", False))


def supports_recall(runtime: object) -> TypeIs[SupportsRecall]:
    return callable(getattr(runtime, "set_recall_handler", None))


class SupportsToolRerun(Protocol):
    """Optional capability: run a tool call again after a crash, when a person decided so."""

    async def rerun_tool(self, call: ToolCall, agent_name: str) -> ToolResult:
        """Run ``call`` with the tools of ``agent_name``; an unavailable or failing tool gives
        an error result."""


def supports_tool_rerun(runtime: object) -> TypeIs[SupportsToolRerun]:
    return callable(getattr(runtime, "rerun_tool", None))


class SupportsCompact(Protocol):
    """Optional capability: compact the session's history on demand (a summary item)."""

    async def compact(self, io: TurnIO, additional: str = "") -> None:
        """Summarise ``io.session``'s history and store the summary, reporting through ``io``
        (``session_compaction`` started and completed, ``session_summary``)."""


def supports_compact(runtime: object) -> TypeIs[SupportsCompact]:
    return callable(getattr(runtime, "compact", None))


class SupportsServe(Protocol):
    """Optional capability: the runtime has *services* (MCP server connections, background
    agent tasks) that must run as long as it is installed in a session."""

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the services until cancelled; report started once the runtime may be installed
        (a failure before that means the runtime cannot be used)."""


def supports_serve(runtime: object) -> TypeIs[SupportsServe]:
    return callable(getattr(runtime, "serve", None))


class SupportsBusy(Protocol):
    """Optional capability: the runtime may hold work between turns (background agent tasks)
    that keeps its session live."""

    @property
    def busy(self) -> bool:
        """Whether such work is running now."""


def is_busy(runtime: object) -> bool:
    """Whether ``runtime`` (or None) holds work between turns; one without ``busy`` never does."""
    return bool(getattr(runtime, "busy", False))


class TitleGenerator(Protocol):
    async def generate(self, user_messages: list[str]) -> str:
        """A one-line title (<= 50 characters) for a conversation starting with these messages."""


@attrs.frozen
class PricedTitle:
    """A title and what asking for it took (``cost`` None: the model's price is unknown)."""

    title: str
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = None


class SupportsPricedTitles(Protocol):
    """Optional capability of a title generator: say what the title cost (the session's
    totals count it, as docker-agent counts its title calls)."""

    async def generate_priced(self, user_messages: list[str]) -> PricedTitle: ...


def supports_priced_titles(generator: object) -> TypeIs[SupportsPricedTitles]:
    return callable(getattr(generator, "generate_priced", None))


@attrs.frozen
class BuiltRuntime:
    """A runtime and its title generator; ``safety_default`` is the agent file's default
    safety policy (given to a fresh session that has none)."""

    runtime: Runtime
    title_generator: TitleGenerator | None = None
    safety_default: str = ""


class RuntimeFactory(Protocol):
    """Builds server-owned runtimes from agent sources (agent files)."""

    async def build(self, source: str, agent_name: str, session: Session) -> BuiltRuntime:
        """Build a runtime for ``session`` from agent source ``source``.

        Raises AgentNotFound (unknown source or agent) or AgentSourceUnavailable.
        """
