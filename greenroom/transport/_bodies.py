"""Request bodies of the API, as frozen attrs classes parsed by the strict JSON converter.

The same classes serve REST bodies and WebSocket frames (whose fields sit at the top level).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

import attrs

from greenroom.agents import ConfirmationKind
from greenroom.domain import (
    MAX_NAME,
    Amount,
    CostAmount,
    Count,
    Length,
    Message,
    MessagePart,
    Name,
    NonBlank,
    PathText,
    Permissions,
    PlainName,
    Range,
    Role,
    Title,
    TokenCount,
    Usage,
)
from greenroom.errors import InvalidRequest

SafetyPolicy = Literal[
    "", "strict", "balanced", "restricted", "autonomous", "unsafe", "safer", "safe-auto"
]
"""Accepted safety policies; the last three are legacy names (unsafe → autonomous, safer and
safe-auto → balanced)."""

Confirmation = Literal[
    "approve",
    "approve-balanced",
    "approve-autonomous",
    "approve-tool",
    "reject",
    "approve-session",
    "approve-safe",
    "approve-safer",
]
"""Tool-call confirmations; the last three are legacy names (approve-session → autonomous,
approve-safe and approve-safer → balanced)."""

_CONFIRMATION_KINDS: dict[str, ConfirmationKind] = {
    "approve": "approve",
    "approve-balanced": "approve-balanced",
    "approve-autonomous": "approve-autonomous",
    "approve-tool": "approve-tool",
    "reject": "reject",
    "approve-session": "approve-autonomous",
    "approve-safe": "approve-balanced",
    "approve-safer": "approve-balanced",
}


def normalize_confirmation(value: str) -> ConfirmationKind:
    """The confirmation a client sent, a legacy name mapped to its current one."""
    kind = _CONFIRMATION_KINDS.get(value)
    if kind is None:
        modern = ", ".join(dict.fromkeys(_CONFIRMATION_KINDS.values()))
        raise InvalidRequest(
            f"$.confirmation: expected one of {modern}, got {value!r}", path="$.confirmation"
        )
    return kind


ExpiresIn = Annotated[float, Range(0.001, 365 * 24 * 3600.0)]
"""Seconds an approve-tool / approve-session grant lasts (at most a year)."""

MAX_BATCH = 1000  # session ids in one batch request
MAX_QUEUED = 64  # messages in one steer or follow-up request


@attrs.frozen
class APIMessage:
    """A message a client sends to start or steer a turn."""

    role: Role = "user"
    content: str = ""
    multi_content: tuple[MessagePart, ...] = ()


@attrs.frozen
class SessionTemplate:
    """``POST /api/sessions``: the honoured fields of a Session. Over REST any other key is
    ignored (docker-agent's client posts a whole marshalled session: id, messages, tokens...);
    a fresh id, ``created_at`` and history are generated."""

    title: Title = ""
    tools_approved: bool = False
    safety_policy: SafetyPolicy = ""
    working_dir: PathText = ""
    permissions: Permissions | None = None
    max_iterations: Count = 0
    max_tool_result_tokens: Count = 0
    max_consecutive_tool_calls: Count = 0
    max_old_tool_call_tokens: Count = 0
    attributes: dict[str, str] = attrs.field(factory=dict)
    agent_model_overrides: dict[str, str] = attrs.field(factory=dict)
    custom_models_used: tuple[str, ...] = ()
    thinking: bool = True
    hide_tool_results: bool = False


@attrs.frozen
class RunBody:
    messages: tuple[APIMessage, ...] = ()
    model: Name = ""
    # Where greenroom POSTs the run's signed summary when it ends (issue 25): under an
    # operator's --webhook-allow prefix, else 400 naming $.webhook.
    webhook: Annotated[str, Length(2048)] = ""


@attrs.frozen
class QueueBody:
    """Steer and follow-up: at least one message. ``framing`` is accepted for client
    compatibility; greenroom's runtimes treat every steer message the same way."""

    messages: Annotated[tuple[APIMessage, ...], Length(MAX_QUEUED, 1)]
    framing: Literal["", "plain", "instruction", "replacement"] = ""


@attrs.frozen
class ForkBody:
    """One of the two names is required (a null counts as absent)."""

    message_index: Count | None = None
    user_message_index: Count | None = None  # docker-agent's name for the same field

    json_schema_extra: ClassVar[dict[str, Any]] = {
        "anyOf": [
            {"required": [name], "properties": {name: {"type": "integer"}}}
            for name in ("message_index", "user_message_index")
        ]
    }


@attrs.frozen
class ResumeBody:
    """``expires_in`` (seconds) turns ``approve-tool`` / ``approve-session`` into a grant that
    ends then (greenroom's extension); without it they last as upstream."""

    confirmation: Confirmation
    reason: str = ""
    tool_name: Name = ""
    expires_in: ExpiresIn | None = None


@attrs.frozen
class ElicitationBody:
    action: Literal["accept", "decline", "cancel"]
    content: dict[str, Any] | None = None
    elicitation_id: Name = ""


@attrs.frozen
class PermissionsBody:
    permissions: Permissions | None = None


@attrs.frozen
class TitleBody:
    title: Title


@attrs.frozen
class TokensBody:
    input_tokens: TokenCount  # at most 2^53 - 1: turns add to it without overflowing
    output_tokens: TokenCount
    cost: CostAmount | None = None


@attrs.frozen
class StarredBody:
    starred: bool


@attrs.frozen
class SafetyPolicyBody:
    safety_policy: SafetyPolicy


@attrs.frozen
class MessageBody:
    message: Message


@attrs.frozen
class SummaryBody:
    summary: NonBlank
    first_kept_entry: Count = 0
    tokens: Count = 0  # legacy name of first_kept_entry
    cost: Amount = 0.0
    model: PlainName = ""
    usage: Usage | None = None


MAX_COMPACT_INSTRUCTIONS = 4096


@attrs.frozen
class CompactBody:
    """``POST .../compact``: optional extra instructions for the summary; ``agent`` (an agent
    file) and ``agent_name`` build the session's runtime when it has none yet."""

    instructions: Annotated[str, Length(MAX_COMPACT_INSTRUCTIONS)] = ""
    agent: Name = ""
    agent_name: Name = ""


@attrs.frozen
class BatchBody:
    session_ids: Annotated[tuple[Name, ...], Length(MAX_BATCH, 1)]
    format: Literal["", "json"] = ""


@attrs.frozen
class DecisionBody:
    """A person's decision about a tool call left in doubt by a crash."""

    tool_call_id: Annotated[str, Length(MAX_NAME, 1)]
    action: Literal["rerun", "done", "skip"]
    result: str | None = None  # for done: what the tool returned, when the person knows
    decided_by: PlainName = ""  # who decides (default: the transport and the client's address)

    json_schema_extra: ClassVar[dict[str, Any]] = {
        "anyOf": [  # a result only comes with "done"
            {"properties": {"action": {"const": "done"}}},
            {"properties": {"result": {"type": "null"}}},
        ]
    }
