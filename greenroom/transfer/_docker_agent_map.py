"""docker-agent's stored values to greenroom's session JSON (pure: no I/O).

docker-agent keeps a session as a ``sessions`` row (SQLite columns, booleans as 0/1 or
"true"/"false", times as RFC 3339 text, permissions and overrides as JSON text) and its history
as ``session_items`` rows whose ``message_json`` is a ``chat.Message``; older sessions keep the
whole history as one JSON array in ``sessions.messages``. These functions turn those values into
the JSON greenroom's strict converter reads as a :class:`~greenroom.domain.Session` (so every
limit greenroom enforces applies), and count what has no place in greenroom (decision 0029).
Values docker-agent itself could not read raise :class:`InvalidRequest` naming the column or
JSON path.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from typing import Any

from greenroom.domain import format_datetime, parse_datetime
from greenroom.errors import InvalidRequest

# chat.Message fields greenroom keeps, by the same JSON name.
_KEPT_TEXT = ("reasoning_content", "thinking_signature", "tool_call_id", "model")
# chat.Message fields with no place in greenroom's ChatMessage (counted, then dropped).
_DROPPED = ("thought_signature", "function_call", "tool_definitions", "cache_control")
_KNOWN = frozenset(
    {"role", "content", "multi_content", "tool_calls", "is_error", "usage", "cost", "created_at"}
) | frozenset(_KEPT_TEXT)
_USAGE = (
    "input_tokens",
    "output_tokens",
    "cached_input_tokens",
    "cached_write_tokens",
    "reasoning_tokens",
)


def _bad(path: str, what: str) -> InvalidRequest:
    return InvalidRequest(f"{path}: {what}", path=path)


def flag(value: object, default: bool, path: str) -> bool:
    """A boolean column: SQLite's 0/1, Go's ParseBool text, or NULL (the column's default)."""
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("1", "t", "true"):
            return True
        if text in ("0", "f", "false"):
            return False
    raise _bad(path, f"expected a boolean, got {value!r}")


def integer(value: object, path: str) -> int:
    """An integer column (NULL is 0, as the column's default)."""
    if value is None:
        return 0
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise _bad(path, f"expected an integer, got {value!r}")


def number(value: object, path: str) -> float:
    if value is None:
        return 0.0
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            pass
    raise _bad(path, f"expected a number, got {value!r}")


def text(value: object, path: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    raise _bad(path, f"expected text, got {value!r}")


def timestamp(value: object, path: str) -> str:
    """An RFC 3339 time, normalised to greenroom's form (UTC, ``Z``)."""
    try:
        return format_datetime(parse_datetime(value))
    except (TypeError, ValueError) as exc:
        raise _bad(path, f"not an RFC 3339 time ({exc})") from None


def json_text(value: object, empty: object, path: str) -> Any:
    """A column holding JSON text; NULL or "" is ``empty``."""
    if value is None or value == "":
        return empty
    if not isinstance(value, str):
        raise _bad(path, f"expected JSON text, got {value!r}")
    try:
        return json.loads(value)
    except ValueError as exc:
        raise _bad(path, f"not JSON ({exc})") from None


def permissions(value: object, path: str) -> dict[str, Any] | None:
    """``PermissionsConfig`` ({allow, ask, deny}, each optional) or None when unset."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _bad(path, f"expected an object, got {value!r}")
    out: dict[str, Any] = {}
    for key in ("allow", "ask", "deny"):
        patterns = value.get(key)
        if patterns is None:
            continue
        if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
            raise _bad(f"{path}.{key}", "expected an array of strings")
        out[key] = patterns
    return out


def string_map(value: object, path: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise _bad(path, "expected an object of strings")
    return dict(value)


def string_list(value: object, path: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _bad(path, "expected an array of strings")
    return list(value)


def session_json(row: Mapping[str, Any], items: list[dict[str, Any]], where: str) -> dict[str, Any]:
    """A ``sessions`` row and its converted items as greenroom's session JSON."""

    def at(column: str) -> str:
        return f"{where}.{column}"

    return {
        "id": text(row["id"], at("id")),
        "created_at": timestamp(row["created_at"], at("created_at")),
        "title": text(row["title"], at("title")),
        "messages": items,
        "tools_approved": flag(row["tools_approved"], False, at("tools_approved")),
        "input_tokens": integer(row["input_tokens"], at("input_tokens")),
        "output_tokens": integer(row["output_tokens"], at("output_tokens")),
        "cost": number(row["cost"], at("cost")),
        "working_dir": text(row["working_dir"], at("working_dir")),
        "permissions": permissions(
            json_text(row["permissions"], None, at("permissions")), at("permissions")
        ),
        "max_iterations": integer(row["max_iterations"], at("max_iterations")),
        "agent_model_overrides": string_map(
            json_text(row["agent_model_overrides"], {}, at("agent_model_overrides")),
            at("agent_model_overrides"),
        ),
        "custom_models_used": string_list(
            json_text(row["custom_models_used"], [], at("custom_models_used")),
            at("custom_models_used"),
        ),
        "starred": flag(row["starred"], False, at("starred")),
        "thinking": flag(row["thinking"], True, at("thinking")),
    }


def _part(part: object, path: str, dropped: Counter[str]) -> dict[str, Any] | None:
    if not isinstance(part, dict):
        raise _bad(path, "expected an object")
    kind = part.get("type") or ""
    if kind == "file":
        # A path or provider file id on the machine that ran docker-agent: the file itself is
        # not in the database. A note keeps the history honest about what was attached.
        dropped["file attachments (kept as a text note)"] += 1
        file = part.get("file")
        file = file if isinstance(file, dict) else {}
        name = str(file.get("path") or file.get("file_id") or "a file")
        return {"type": "text", "text": f"[attached file not imported: {name}]"}
    out: dict[str, Any] = {"type": text(kind, f"{path}.type")}
    if part.get("text"):
        out["text"] = text(part["text"], f"{path}.text")
    image = part.get("image_url")
    if isinstance(image, dict) and image.get("url"):
        out["image_url"] = {"url": text(image["url"], f"{path}.image_url.url")}
        if image.get("detail"):
            out["image_url"]["detail"] = text(image["detail"], f"{path}.image_url.detail")
    return out


def _tool_call(call: object, path: str) -> dict[str, Any]:
    if not isinstance(call, dict):
        raise _bad(path, "expected an object")
    function = call.get("function")
    function = function if isinstance(function, dict) else {}
    return {
        "id": text(call.get("id"), f"{path}.id"),
        "type": text(call.get("type"), f"{path}.type") or "function",
        "function": {
            "name": text(function.get("name"), f"{path}.function.name"),
            "arguments": text(function.get("arguments"), f"{path}.function.arguments"),
        },
    }


def chat_message(raw: object, path: str, dropped: Counter[str]) -> dict[str, Any]:
    """docker-agent's ``chat.Message`` JSON as greenroom's ChatMessage JSON."""
    if not isinstance(raw, dict):
        raise _bad(path, "expected a message object")
    out: dict[str, Any] = {
        "role": raw.get("role"),
        "content": text(raw.get("content"), f"{path}.content"),
    }
    parts = raw.get("multi_content") or []
    if not isinstance(parts, list):
        raise _bad(f"{path}.multi_content", "expected an array")
    converted = [_part(p, f"{path}.multi_content[{i}]", dropped) for i, p in enumerate(parts)]
    if converted:
        out["multi_content"] = [p for p in converted if p is not None]
    for key in _KEPT_TEXT:
        if raw.get(key):
            out[key] = text(raw[key], f"{path}.{key}")
    calls = raw.get("tool_calls") or []
    if not isinstance(calls, list):
        raise _bad(f"{path}.tool_calls", "expected an array")
    if calls:
        out["tool_calls"] = [_tool_call(c, f"{path}.tool_calls[{i}]") for i, c in enumerate(calls)]
    if raw.get("is_error"):
        out["is_error"] = flag(raw["is_error"], False, f"{path}.is_error")
    usage = raw.get("usage")
    if isinstance(usage, dict):
        out["usage"] = {k: integer(usage.get(k), f"{path}.usage.{k}") for k in _USAGE}
    if raw.get("cost"):
        out["cost"] = number(raw["cost"], f"{path}.cost")
    if raw.get("created_at"):
        try:
            out["created_at"] = timestamp(raw["created_at"], f"{path}.created_at")
        except InvalidRequest:
            dropped["message times that are not RFC 3339"] += 1
    for key, value in raw.items():
        if value in (None, "", [], {}, False, 0):
            continue
        if key in _DROPPED:
            dropped[f"message field {key}"] += 1
        elif key not in _KNOWN:
            dropped[f"unknown message field {key}"] += 1
    return out


def message_item(
    agent_name: object, implicit: object, message: object, path: str, dropped: Counter[str]
) -> dict[str, Any]:
    """One history message: greenroom's ``{"message": {...}}`` item."""
    body: dict[str, Any] = {"message": chat_message(message, f"{path}.message", dropped)}
    name = text(agent_name, f"{path}.agent_name")
    if name:
        body["agent_name"] = name
    if flag(implicit, False, f"{path}.implicit"):
        body["implicit"] = True
    return {"message": body}


def summary_item(summary: object, cost: object, path: str) -> dict[str, Any]:
    """A compaction summary: docker-agent's replaces everything before it, as greenroom's with
    ``first_kept_entry`` 0 does."""
    item: dict[str, Any] = {"summary": text(summary, path)}
    amount = number(cost, f"{path}.cost")
    if amount:
        item["cost"] = amount
    return item


def legacy_items(raw: object, path: str, dropped: Counter[str], depth: int) -> list[dict[str, Any]]:
    """The ``sessions.messages`` JSON array of older sessions (``session.Item`` values)."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise _bad(path, "expected an array of items")
    items: list[dict[str, Any]] = []
    for index, item in enumerate(raw):
        at = f"{path}[{index}]"
        if not isinstance(item, dict):
            raise _bad(at, "expected an item object")
        if isinstance(item.get("message"), dict):
            message = item["message"]
            items.append(
                message_item(
                    message.get("agentName"),
                    message.get("implicit"),
                    message.get("message"),
                    at,
                    dropped,
                )
            )
        elif isinstance(item.get("sub_session"), dict):
            items.append({"sub_session": legacy_session(item["sub_session"], at, dropped, depth)})
        elif item.get("summary"):
            items.append(summary_item(item["summary"], item.get("cost"), f"{at}.summary"))
        else:
            dropped["empty history items"] += 1
    return items


MAX_DEPTH = 32  # sub-sessions nested deeper than this are refused (a loop in the data)


def legacy_session(raw: Mapping[str, Any], path: str, dropped: Counter[str], depth: int) -> Any:
    """A ``session.Session`` JSON value (a legacy sub-session) as greenroom's session JSON."""
    if depth >= MAX_DEPTH:
        raise _bad(path, f"sub-sessions nested more than {MAX_DEPTH} deep")
    row = {
        "id": raw.get("id"),
        "created_at": raw.get("created_at"),
        "title": raw.get("title"),
        "tools_approved": raw.get("tools_approved"),
        "input_tokens": raw.get("input_tokens"),
        "output_tokens": raw.get("output_tokens"),
        "cost": raw.get("cost"),
        "working_dir": raw.get("working_dir"),
        "permissions": None,
        "max_iterations": raw.get("max_iterations"),
        "agent_model_overrides": None,
        "custom_models_used": None,
        "starred": raw.get("starred"),
        "thinking": raw.get("thinking"),
    }
    items = legacy_items(raw.get("messages"), f"{path}.messages", dropped, depth + 1)
    session = session_json(row, items, path)
    session["permissions"] = permissions(raw.get("permissions"), f"{path}.permissions")
    session["agent_model_overrides"] = string_map(
        raw.get("agent_model_overrides"), f"{path}.agent_model_overrides"
    )
    session["custom_models_used"] = string_list(
        raw.get("custom_models_used"), f"{path}.custom_models_used"
    )
    session["hide_tool_results"] = flag(raw.get("hide_tool_results"), False, path)
    return session
