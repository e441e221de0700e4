"""The runtime event union, tagged on ``"type"`` on the wire.

Only the events greenroom produces or inspects get a class. Anything else a runtime emits is a
:class:`RawEvent` and passes through untouched, so a newer runtime's events reach clients as-is.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, TypeAlias

import attrs

from ._types import Session, ToolCall


@attrs.frozen
class UserMessage:
    message: str
    session_id: str = ""
    session_position: int = -1


@attrs.frozen
class StreamStarted:
    """A run's stream starts. ``run_id`` (a greenroom addition, issue 25): the id of the run
    (``GET /api/sessions/{id}/runs/{run_id}``) on the first ``stream_started`` of a run."""

    session_id: str = ""
    agent_name: str = ""
    run_id: str = ""


@attrs.frozen
class StreamStopped:
    session_id: str = ""
    agent_name: str = ""
    reason: str = "normal"


@attrs.frozen
class AgentChoice:
    content: str
    agent_name: str = ""
    session_id: str = ""


@attrs.frozen
class AgentChoiceReasoning:
    content: str
    agent_name: str = ""
    session_id: str = ""


@attrs.frozen
class ToolCallEvent:
    tool_call: ToolCall
    tool_definition: Any = None
    agent_name: str = ""
    session_id: str = ""


@attrs.frozen
class ToolCallConfirmation:
    tool_call: ToolCall
    tool_definition: Any = None
    agent_name: str = ""
    session_id: str = ""
    # greenroom addition: the permission rule or safety policy that asks, for the person
    permission_rule: str = ""


@attrs.frozen
class ToolCallResponse:
    tool_call_id: str
    response: str
    tool_definition: Any = None
    agent_name: str = ""
    session_id: str = ""


@attrs.frozen
class HookBlocked:
    """A ``pre_tool_use`` hook blocked a tool call (docker-agent's ``hook_blocked``)."""

    tool_call: ToolCall
    tool_definition: Any = None
    message: str = ""
    agent_name: str = ""
    session_id: str = ""


@attrs.frozen
class ElicitationRequest:
    message: str
    elicitation_id: str = ""
    mode: str = ""
    schema: Any = None
    url: str = ""
    session_id: str = ""
    meta: Any = None


@attrs.frozen
class MessageUsage:
    """One model call's usage, its cost (None: the model's price is unknown) and model.

    docker-agent's ``MessageUsage``: on the wire ``cost`` and ``model`` are ``Cost`` and
    ``Model`` (its Go fields have no JSON tags)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cached_write_tokens: int = 0
    reasoning_tokens: int = 0
    cost: float | None = None
    model: str = ""


@attrs.frozen
class TokenUsageInfo:
    """The session's tokens and own cost (None: nothing priced so far and this call has no
    price), how full the context is (``context_length`` of ``context_limit``, 0: unknown), and
    the call that was just made (``last_message``)."""

    input_tokens: int = 0
    output_tokens: int = 0
    context_length: int = 0
    context_limit: int = 0
    cost: float | None = 0.0
    last_message: MessageUsage | None = None


@attrs.frozen
class TokenUsage:
    usage: TokenUsageInfo
    session_id: str = ""
    agent_name: str = ""


@attrs.frozen
class SessionCompaction:
    """Compaction of the session's history ``started`` or ``completed`` (docker-agent's)."""

    status: str
    session_id: str = ""
    agent_name: str = ""


@attrs.frozen
class SessionSummaryEvent:
    """The summary a compaction stored (docker-agent's ``session_summary``)."""

    summary: str
    session_id: str = ""
    agent_name: str = ""


@attrs.frozen
class SessionTitle:
    session_id: str
    title: str


@attrs.frozen
class ErrorEvent:
    error: str
    code: str = ""
    session_id: str = ""
    agent_name: str = ""


@attrs.frozen
class Warning:
    message: str
    agent_name: str = ""


@attrs.frozen
class MaxIterationsReached:
    max_iterations: int
    session_id: str = ""


@attrs.frozen
class AgentInfo:
    agent_name: str
    model: str = ""
    description: str = ""
    welcome_message: str = ""


@attrs.frozen
class AgentSwitching:
    """A delegation starts (``switching``) or ends: ``from_agent`` hands over to ``to_agent``."""

    switching: bool
    from_agent: str = ""
    to_agent: str = ""
    agent_name: str = ""


@attrs.frozen
class SubSessionCompleted:
    """A ``transfer_task`` sub-session finished; ``sub_session`` is its whole conversation."""

    parent_session_id: str
    sub_session: Session
    agent_name: str = ""


@attrs.frozen
class ToolsetInfo:
    """How many tools the agent has now; ``loading`` while toolsets are still starting."""

    available_tools: int
    loading: bool = False
    agent_name: str = ""


@attrs.frozen
class McpInitStarted:
    """The agent's MCP servers are being started (the next model call waits for them)."""

    agent_name: str = ""


@attrs.frozen
class McpInitFinished:
    agent_name: str = ""


@attrs.frozen
class AuthorizationEvent:
    """An MCP server's OAuth authorization finished (``confirmation``: ``accept``)."""

    confirmation: str
    server_url: str = ""


@attrs.frozen
class Gap:
    """Control event: the resume point was evicted from the log; re-snapshot. Has no seq."""


@attrs.frozen
class SessionExited:
    """Terminal, sequenced event of a session's event log."""

    reason: str = "session ended"


@attrs.frozen
class TurnInterrupted:
    """A turn that was running when the server stopped without ending it (crash recovery)."""

    turn_id: str
    reason: str = "server_restart"
    session_id: str = ""
    in_doubt: int = 0  # tool calls of the turn whose outcome is unknown


@attrs.frozen
class ToolCallInDoubt:
    """A tool call that started but recorded no result before the server stopped: it may or
    may not have run. A person decides (rerun, done or skip) before the session runs again."""

    tool_call: ToolCall
    started_at: dt.datetime | None = None
    agent_name: str = ""
    session_id: str = ""


@attrs.frozen
class ToolCallDecided:
    """A person's decision about a tool call that was in doubt."""

    tool_call_id: str
    action: str  # rerun | done | skip
    result: str = ""
    decided_by: str = ""
    session_id: str = ""


@attrs.frozen
class RawEvent:
    """An event greenroom has no class for: ``data`` is the whole JSON object, ``type`` included."""

    type: str
    data: Any


Event: TypeAlias = (
    UserMessage
    | StreamStarted
    | StreamStopped
    | AgentChoice
    | AgentChoiceReasoning
    | ToolCallEvent
    | ToolCallConfirmation
    | ToolCallResponse
    | ElicitationRequest
    | TokenUsage
    | SessionTitle
    | SessionCompaction
    | SessionSummaryEvent
    | ErrorEvent
    | Warning
    | MaxIterationsReached
    | AgentInfo
    | AgentSwitching
    | SubSessionCompleted
    | ToolsetInfo
    | McpInitStarted
    | McpInitFinished
    | AuthorizationEvent
    | Gap
    | SessionExited
    | TurnInterrupted
    | ToolCallInDoubt
    | ToolCallDecided
    | HookBlocked
    | RawEvent
)

EVENT_TAGS: dict[type[Any], str] = {
    UserMessage: "user_message",
    StreamStarted: "stream_started",
    StreamStopped: "stream_stopped",
    AgentChoice: "agent_choice",
    AgentChoiceReasoning: "agent_choice_reasoning",
    ToolCallEvent: "tool_call",
    ToolCallConfirmation: "tool_call_confirmation",
    ToolCallResponse: "tool_call_response",
    ElicitationRequest: "elicitation_request",
    TokenUsage: "token_usage",
    SessionTitle: "session_title",
    SessionCompaction: "session_compaction",
    SessionSummaryEvent: "session_summary",
    ErrorEvent: "error",
    Warning: "warning",
    MaxIterationsReached: "max_iterations_reached",
    AgentInfo: "agent_info",
    AgentSwitching: "agent_switching",
    SubSessionCompleted: "sub_session_completed",
    ToolsetInfo: "toolset_info",
    McpInitStarted: "mcp_init_started",
    McpInitFinished: "mcp_init_finished",
    AuthorizationEvent: "authorization_event",
    Gap: "gap",
    SessionExited: "session_exited",
    TurnInterrupted: "turn_interrupted",
    ToolCallInDoubt: "tool_call_in_doubt",
    ToolCallDecided: "tool_call_decided",
    HookBlocked: "hook_blocked",
}
DELTA_TYPES = frozenset({"agent_choice", "agent_choice_reasoning"})
"""Token deltas: most of a log's volume, and the only events retention removes."""
TAGGED_EVENTS: dict[str, type[Any]] = {tag: cls for cls, tag in EVENT_TAGS.items()}


def event_type(event: Event) -> str:
    """The wire ``type`` of ``event``."""
    if isinstance(event, RawEvent):
        return event.type
    return EVENT_TAGS[type(event)]
