"""Request bodies of the API, as frozen attrs classes parsed by the strict JSON converter.

The same classes serve REST bodies and WebSocket frames (whose fields sit at the top level).
"""

from __future__ import annotations

from typing import Any, Literal

import attrs

from greenroom.domain import Message, MessagePart, Permissions, Role, Usage


@attrs.frozen
class APIMessage:
    """A message a client sends to start or steer a turn."""

    role: Role = "user"
    content: str = ""
    multi_content: tuple[MessagePart, ...] = ()


@attrs.frozen
class SessionTemplate:
    """``POST /api/sessions``: the honoured fields of a Session; the others are accepted (a
    client may post a whole session back) and ignored."""

    title: str = ""
    tools_approved: bool = False
    safety_policy: str = ""
    working_dir: str = ""
    permissions: Permissions | None = None
    max_iterations: int = 0
    max_tool_result_tokens: int = 0
    max_consecutive_tool_calls: int = 0
    max_old_tool_call_tokens: int = 0
    attributes: dict[str, str] = attrs.field(factory=dict)
    agent_model_overrides: dict[str, str] = attrs.field(factory=dict)
    custom_models_used: tuple[str, ...] = ()
    # Accepted and ignored: a fresh id, created_at, history and counters are generated.
    id: Any = None
    messages: Any = None
    created_at: Any = None
    input_tokens: Any = None
    output_tokens: Any = None
    cost: Any = None
    starred: Any = None
    hide_tool_results: Any = None
    origin: Any = None
    attached_files: Any = None


@attrs.frozen
class RunBody:
    messages: tuple[APIMessage, ...] = ()
    model: str = ""


@attrs.frozen
class QueueBody:
    """Steer and follow-up: at least one message. ``framing`` is accepted for client
    compatibility; greenroom's runtimes treat every steer message the same way."""

    messages: tuple[APIMessage, ...] = ()
    framing: str = ""


@attrs.frozen
class ForkBody:
    message_index: int | None = None
    user_message_index: int | None = None  # docker-agent's name for the same field


@attrs.frozen
class ResumeBody:
    confirmation: str
    reason: str = ""
    tool_name: str = ""


@attrs.frozen
class ElicitationBody:
    action: Literal["accept", "decline", "cancel"]
    content: dict[str, Any] | None = None
    elicitation_id: str = ""


@attrs.frozen
class PermissionsBody:
    permissions: Permissions | None = None


@attrs.frozen
class TitleBody:
    title: str


@attrs.frozen
class TokensBody:
    input_tokens: int
    output_tokens: int
    cost: float | None = None


@attrs.frozen
class StarredBody:
    starred: bool


@attrs.frozen
class SafetyPolicyBody:
    safety_policy: str


@attrs.frozen
class MessageBody:
    message: Message | None = None


@attrs.frozen
class SummaryBody:
    summary: str = ""
    first_kept_entry: int = 0
    tokens: int = 0  # legacy name of first_kept_entry
    cost: float = 0.0
    model: str = ""
    usage: Usage | None = None


@attrs.frozen
class BatchBody:
    session_ids: tuple[str, ...] = ()
    format: str = ""
