"""Frozen value types of a session and its history.

Every type is deeply immutable: sequences are tuples and mappings are read-only proxies, so a
value can be shared between the store, an actor and a client without anyone seeing another's
change. Wire and storage formats live in converters at the edges (``_json.py``), not here.
"""

from __future__ import annotations

import datetime as dt
import types
import uuid
from collections.abc import Iterable, Mapping
from typing import Literal, TypeAlias

import attrs

from ._limits import Amount, Count, Name, PathText, Title

Role: TypeAlias = Literal["system", "user", "assistant", "tool"]
ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def new_id() -> str:
    """A fresh session id (UUID v4 text)."""
    return str(uuid.uuid4())


def frozen_map(value: Mapping[str, str] | None = None) -> Mapping[str, str]:
    """A read-only copy of ``value`` (the attrs converter for mapping fields)."""
    return types.MappingProxyType(dict(value or {}))


def _tuple(value: Iterable[str] | None) -> tuple[str, ...]:
    return tuple(value or ())


@attrs.frozen
class Usage:
    input_tokens: Count = 0
    output_tokens: Count = 0
    cached_input_tokens: Count = 0
    cached_write_tokens: Count = 0
    reasoning_tokens: Count = 0


@attrs.frozen
class FunctionCall:
    name: str
    arguments: str = ""


@attrs.frozen
class ToolCall:
    id: str
    function: FunctionCall
    type: str = "function"


@attrs.frozen
class ImageURL:
    url: str
    detail: str = ""


@attrs.frozen
class MessagePart:
    type: str
    text: str = ""
    image_url: ImageURL | None = None


@attrs.frozen
class ChatMessage:
    """What a model sees: one message of the conversation (docker-agent's ``chat.Message``)."""

    role: Role
    content: str = ""
    multi_content: tuple[MessagePart, ...] = ()
    reasoning_content: str = ""
    thinking_signature: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str = ""
    is_error: bool = False
    usage: Usage | None = None
    model: str = ""
    created_at: dt.datetime | None = None
    cost: float | None = None
    """USD the model call that wrote this (assistant) message cost; None: unknown."""


@attrs.frozen
class Message:
    """A history item holding one chat message, attributed to the agent that wrote it.

    ``id`` is the store's message id (0 until stored); clients use it to update the message.
    """

    message: ChatMessage
    agent_name: Name = ""
    implicit: bool = False
    id: Count = 0

    @property
    def role(self) -> str:
        return self.message.role

    @property
    def content(self) -> str:
        return self.message.content

    @classmethod
    def user(cls, content: str, *, agent_name: str = "") -> Message:
        return cls(ChatMessage(role="user", content=content, created_at=utcnow()), agent_name)

    @classmethod
    def assistant(
        cls, content: str, *, agent_name: str = "", usage: Usage | None = None
    ) -> Message:
        chat = ChatMessage(role="assistant", content=content, usage=usage, created_at=utcnow())
        return cls(chat, agent_name)


@attrs.frozen
class Summary:
    """A compaction summary: the prompt replaces the history before it with ``summary``."""

    summary: str
    first_kept_entry: Count = 0
    cost: Amount = 0.0
    model: Name = ""
    usage: Usage | None = None


@attrs.frozen
class ErrorItem:
    """A recorded run failure (``code``: model_error, rate_limited, context_exceeded, ...)."""

    message: str
    code: str = ""
    agent_name: str = ""
    created_at: dt.datetime | None = None


@attrs.frozen
class SubSession:
    """A delegated task's whole conversation, nested in its parent's history."""

    session: Session


Item: TypeAlias = Message | SubSession | Summary | ErrorItem


@attrs.frozen
class Permissions:
    """Tool-name patterns; session rules are checked before the agent file's."""

    allow: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    ask: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    deny: tuple[str, ...] = attrs.field(default=(), converter=_tuple)


@attrs.frozen
class Approval:
    """One decision on a tool call that asked the user (audited on the session).

    ``decision`` is the resume verb (``approve``, ``approve-tool``, ``approve-session``,
    ``approve-balanced``, ``approve-autonomous``, ``reject``) or ``timeout`` when nobody
    answered within the confirmation timeout. An ``approve-tool`` grant covers ``grant`` (a
    tool name); it and an ``approve-session`` grant stop covering calls at ``expires_at``.
    """

    tool: str
    decision: str
    decided_at: dt.datetime
    arguments_digest: str = ""
    tool_call_id: str = ""
    decided_by: str = ""
    expires_at: dt.datetime | None = None
    grant: str = ""
    reason: str = ""


@attrs.frozen
class Session:
    """One conversation with an agent team, as stored and as served."""

    id: str
    created_at: dt.datetime
    title: Title = ""
    items: tuple[Item, ...] = ()
    tools_approved: bool = False
    safety_policy: str = ""
    input_tokens: Count = 0
    output_tokens: Count = 0
    cost: Amount = 0.0
    working_dir: PathText = ""
    permissions: Permissions | None = None
    max_iterations: Count = 0
    max_tool_result_tokens: Count = 0
    agent_model_overrides: Mapping[str, str] = attrs.field(factory=frozen_map, converter=frozen_map)
    custom_models_used: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    starred: bool = False
    thinking: bool = True  # the model may reason (docker-agent's default)
    hide_tool_results: bool = False  # a display preference clients keep on the session
    parent_id: str = ""
    attributes: Mapping[str, str] = attrs.field(factory=frozen_map, converter=frozen_map)
    approvals: tuple[Approval, ...] = ()
    # The agent the session runs (decision 0019): its agent file (source) and the agent in it,
    # stored at the first run and on every agent switch; "" before the first run.
    agent_file: str = ""
    agent_name: str = ""

    @classmethod
    def new(cls, *, session_id: str | None = None, **fields: object) -> Session:
        """A fresh session with a new id and ``created_at`` of now."""
        return cls(id=session_id or new_id(), created_at=utcnow(), **fields)  # type: ignore[arg-type]

    def with_item(self, item: Item) -> Session:
        return attrs.evolve(self, items=(*self.items, item))


@attrs.frozen
class SessionSummary:
    """A row of the session list (root sessions only)."""

    id: str
    title: str
    created_at: dt.datetime
    num_messages: int
    input_tokens: int
    output_tokens: int
    working_dir: str = ""
    starred: bool = False  # greenroom addition: lets a client show stars in its list
    agent_file: str = ""  # greenroom addition: the session's agent (decision 0019)
    agent_name: str = ""
