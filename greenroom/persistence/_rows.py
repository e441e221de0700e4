"""The row converter: domain values to and from SQLite rows (JSON text for nested values)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from greenroom.domain import (
    Approval,
    ErrorItem,
    Item,
    Message,
    Permissions,
    Session,
    SessionSummary,
    SubSession,
    Summary,
    format_datetime,
    parse,
    parse_datetime,
    to_json,
)

SESSION_COLUMNS = (
    "id",
    "parent_id",
    "created_at",
    "title",
    "tools_approved",
    "safety_policy",
    "input_tokens",
    "output_tokens",
    "cost",
    "working_dir",
    "permissions",
    "max_iterations",
    "max_tool_result_tokens",
    "agent_model_overrides",
    "custom_models_used",
    "starred",
    "attributes",
    "approvals",
    "thinking",
    "hide_tool_results",
    "agent_file",
    "agent_name",
)


# One encoder for every row: json.dumps with these options would build a new one per call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def dumps(value: Any) -> str:
    return _ENCODER.encode(value)


def session_to_row(session: Session) -> tuple[Any, ...]:
    permissions = (
        None if session.permissions is None else dumps(to_json(session.permissions, Permissions))
    )
    return (
        session.id,
        session.parent_id or None,
        format_datetime(session.created_at),
        session.title,
        int(session.tools_approved),
        session.safety_policy,
        session.input_tokens,
        session.output_tokens,
        session.cost,
        session.working_dir,
        permissions,
        session.max_iterations,
        session.max_tool_result_tokens,
        dumps(dict(session.agent_model_overrides)),
        dumps(list(session.custom_models_used)),
        int(session.starred),
        dumps(dict(session.attributes)),
        dumps([to_json(a, Approval) for a in session.approvals]),
        int(session.thinking),
        int(session.hide_tool_results),
        session.agent_file,
        session.agent_name,
    )


def row_to_session(row: sqlite3.Row, items: tuple[Item, ...]) -> Session:
    permissions = row["permissions"]
    return Session(
        id=row["id"],
        parent_id=row["parent_id"] or "",
        created_at=parse_datetime(row["created_at"]),
        title=row["title"],
        items=items,
        tools_approved=bool(row["tools_approved"]),
        safety_policy=row["safety_policy"],
        input_tokens=row["input_tokens"],
        output_tokens=row["output_tokens"],
        cost=row["cost"],
        working_dir=row["working_dir"],
        permissions=None if permissions is None else parse(json.loads(permissions), Permissions),
        max_iterations=row["max_iterations"],
        max_tool_result_tokens=row["max_tool_result_tokens"],
        agent_model_overrides=json.loads(row["agent_model_overrides"]),
        custom_models_used=json.loads(row["custom_models_used"]),
        starred=bool(row["starred"]),
        attributes=json.loads(row["attributes"]),
        approvals=tuple(parse(a, Approval) for a in json.loads(row["approvals"])),
        thinking=bool(row["thinking"]),
        hide_tool_results=bool(row["hide_tool_results"]),
        agent_file=row["agent_file"],
        agent_name=row["agent_name"],
    )


def item_to_row(item: Item) -> tuple[str, str | None, str]:
    """(kind, role, body JSON) of a history item; a sub-session's body is empty."""
    match item:
        case Message():
            body = to_json(item, Message)
            body.pop("id", None)
            return "message", item.role, dumps(body)
        case SubSession():
            return "sub_session", None, "{}"
        case Summary():
            return "summary", None, dumps(to_json(item, Summary))
        case ErrorItem():
            return "error", None, dumps(to_json(item, ErrorItem))
    raise TypeError(f"not a history item: {item!r}")


def row_to_item(kind: str, body: str, row_id: int) -> Message | Summary | ErrorItem:
    data = json.loads(body)
    if kind == "message":
        message: Message = parse(data, Message)
        return Message(message.message, message.agent_name, message.implicit, row_id)
    if kind == "summary":
        return parse(data, Summary)
    if kind == "error":
        return parse(data, ErrorItem)
    raise ValueError(f"unknown item kind {kind!r}")


def summaries_newest_first(
    rows: Sequence[Sequence[Any]], counts: Mapping[str, int]
) -> list[SessionSummary]:
    """Session-list rows ``(order, id, title, created_at, input_tokens, output_tokens,
    working_dir, starred, agent_file, agent_name)`` as summaries, newest first. Sorted on the
    parsed time, not the text: RFC 3339 texts with and without fractional seconds do not sort
    in time order ("...:01Z" > "...:01.5Z"). Equal times: the row inserted last (``order``)
    first."""
    keyed = [(parse_datetime(r[3]), r) for r in rows]
    keyed.sort(key=lambda k: (k[0], k[1][0]), reverse=True)
    return [
        SessionSummary(
            id=r[1],
            title=r[2],
            created_at=created,
            num_messages=counts.get(r[1], 0),
            input_tokens=r[4],
            output_tokens=r[5],
            working_dir=r[6],
            starred=bool(r[7]),
            agent_file=r[8],
            agent_name=r[9],
        )
        for created, r in keyed
    ]
