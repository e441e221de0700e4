"""Export shapes: the recovery export of one session and the batch export of many."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from ._history import visible_messages
from ._json import format_datetime, to_json
from ._types import Approval, ErrorItem, Item, Message, Permissions, Session, SubSession, utcnow


def all_errors(items: Iterable[Item]) -> Iterator[ErrorItem]:
    """Recorded errors in history order, sub-sessions included."""
    for item in items:
        if isinstance(item, ErrorItem):
            yield item
        elif isinstance(item, SubSession):
            yield from all_errors(item.session.items)


def _messages(session: Session) -> list[Any]:
    return [to_json(m, Message) for m in visible_messages(session.items)]


def recovery_export(session: Session) -> dict[str, Any]:
    """Everything needed to rebuild a session by hand; ``errors`` only when there are any."""
    data: dict[str, Any] = {
        "id": session.id,
        "title": session.title,
        "created_at": format_datetime(session.created_at),
        "messages": _messages(session),
        "input_tokens": session.input_tokens,
        "output_tokens": session.output_tokens,
        "working_dir": session.working_dir,
        "tools_approved": session.tools_approved,
        "permissions": (
            None if session.permissions is None else to_json(session.permissions, Permissions)
        ),
    }
    errors = [to_json(e, ErrorItem) for e in all_errors(session.items)]
    if errors:
        data["errors"] = errors
    if session.approvals:
        data["approvals"] = [to_json(a, Approval) for a in session.approvals]
    return data


def batch_export(sessions: Iterable[Session]) -> dict[str, Any]:
    exported = [
        {
            "id": s.id,
            "title": s.title,
            "created_at": format_datetime(s.created_at),
            "messages": _messages(s),
            "input_tokens": s.input_tokens,
            "output_tokens": s.output_tokens,
            "working_dir": s.working_dir,
            "tools_approved": s.tools_approved,
        }
        for s in sessions
    ]
    return {
        "export_format": "json",
        "timestamp": format_datetime(utcnow()),
        "sessions": exported,
        "session_count": len(exported),
    }
