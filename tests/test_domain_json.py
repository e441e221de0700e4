"""The strict JSON converter: round trips, no coercion, readable error paths."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from greenroom.domain import (
    AgentChoice,
    ChatMessage,
    ErrorItem,
    FunctionCall,
    Message,
    MessagePart,
    Permissions,
    RawEvent,
    Session,
    SessionExited,
    SubSession,
    Summary,
    ToolCall,
    ToolCallEvent,
    Usage,
    event_from_json,
    event_to_json,
    parse,
    to_json,
)
from greenroom.errors import InvalidRequest


def full_session() -> Session:
    tool_call = ToolCall("call-1", FunctionCall("think", '{"thought": "hm"}'))
    return Session.new(
        title="T",
        items=(
            Message(ChatMessage("user", "hi", multi_content=(MessagePart("text", "hi"),)), "root"),
            Message(ChatMessage("assistant", "", tool_calls=(tool_call,), usage=Usage(1, 2))),
            Message(ChatMessage("tool", "ok", tool_call_id="call-1")),
            SubSession(Session.new(items=(Message.user("inner"),))),
            Summary("so far", first_kept_entry=2),
            ErrorItem("boom", code="model_error"),
        ),
        permissions=Permissions(allow=["read_*"], deny=["rm"]),
        agent_model_overrides={"root": "openai/gpt-4o"},
        attributes={"k": "v"},
        custom_models_used=["openai/gpt-4o"],
    )


def test_session_round_trip() -> None:
    session = full_session()
    data = to_json(session, Session)
    assert data["messages"][0] == {
        "message": {
            "agent_name": "root",
            "message": {
                "role": "user",
                "content": "hi",
                "multi_content": [{"type": "text", "text": "hi"}],
            },
        }
    }
    assert data["messages"][4] == {"summary": "so far", "first_kept_entry": 2}
    assert data["messages"][5] == {"error": {"message": "boom", "code": "model_error"}}
    assert data["created_at"].endswith("Z")
    assert "parent_id" not in data
    assert parse(data, Session) == session


def with_path(data: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    target: Any = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return data


@pytest.mark.parametrize(
    ("path", "value", "error_path", "words"),
    [
        (("title",), 1, "$.title", "expected string, got int"),
        (("starred",), "false", "$.starred", "expected boolean"),
        (("input_tokens",), 1.9, "$.input_tokens", "expected integer"),
        (("input_tokens",), True, "$.input_tokens", "expected integer"),
        (("cost",), "1", "$.cost", "expected number"),
        (
            ("messages", 0, "message", "message", "role"),
            "robot",
            "$.messages[0].message.message.role",
            "expected one of",
        ),
        (
            ("messages", 1, "message", "message", "tool_calls", 0, "id"),
            7,
            "$.messages[1].message.message.tool_calls[0].id",
            "expected string",
        ),
        (("created_at",), "2026-01-01T00:00:00", "$.created_at", "no UTC offset"),
        (("permissions", "allow"), "read", "$.permissions.allow", ""),
        (("messages", 3, "sub_session", "title"), None, "$.messages[3].sub_session.title", "null"),
    ],
)
def test_bad_input_names_the_path(
    path: tuple[Any, ...], value: Any, error_path: str, words: str
) -> None:
    data = with_path(to_json(full_session(), Session), path, value)
    with pytest.raises(InvalidRequest) as info:
        parse(data, Session)
    assert info.value.path == error_path
    assert words in info.value.message
    assert info.value.message.startswith(error_path)


def test_unknown_keys_and_missing_fields_are_rejected() -> None:
    data = to_json(full_session(), Session)
    data["surprise"] = 1
    with pytest.raises(InvalidRequest, match="unknown field"):
        parse(data, Session)
    with pytest.raises(InvalidRequest, match=r"\$\.message: required field missing"):
        parse({"agent_name": "x"}, Message)


def test_item_needs_exactly_one_kind() -> None:
    data = to_json(full_session(), Session)
    data["messages"] = [{"message": data["messages"][0]["message"], "error": {"message": "x"}}]
    with pytest.raises(InvalidRequest, match=r"\$\.messages\[0\]: an item needs exactly one"):
        parse(data, Session)


def test_events_are_tagged_and_unknown_ones_pass_through() -> None:
    event = ToolCallEvent(ToolCall("c", FunctionCall("think", "{}")), {"name": "think"}, "root")
    data = event_to_json(event)
    assert data["type"] == "tool_call"
    assert event_from_json(data) == event
    assert event_to_json(AgentChoice("hel")) == {"type": "agent_choice", "content": "hel"}
    assert event_to_json(SessionExited()) == {"type": "session_exited", "reason": "session ended"}
    odd = {"type": "plan_updated", "session_id": "s", "content": {"x": [1, 2]}}
    assert event_from_json(odd) == RawEvent("plan_updated", odd)
    assert event_to_json(event_from_json(odd)) == odd
    # A known type in a shape this version cannot read is kept verbatim too.
    newer = {"type": "agent_choice", "content": "x", "timestamp": "2026-01-01T00:00:00Z"}
    assert event_to_json(event_from_json(newer)) == newer


@pytest.mark.parametrize("bad", [[], "agent_choice", {"content": "x"}, {"type": 3}])
def test_event_envelope_errors(bad: Any) -> None:
    with pytest.raises(InvalidRequest):
        event_from_json(bad)


def test_datetimes_keep_their_instant() -> None:
    parsed: dt.datetime = parse("2026-03-01T12:00:00+02:00", dt.datetime)
    assert to_json(parsed) == "2026-03-01T10:00:00Z"


# --- encode_json's msgspec path (decision 0037): the same bytes as json for flat objects ---


def _json_bytes(data: object) -> bytes:
    import json

    try:
        return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return json.dumps(data, separators=(",", ":")).encode()


def test_encode_json_writes_json_s_bytes_for_flat_objects_of_every_character() -> None:
    from greenroom.domain import encode_json

    text = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000)
    for body in (
        {"type": "agent_choice", "content": text, "agent_name": "root"},
        {"a": '\x00\x1f"\\\n\t\u2028é😀', "n": None, "t": True, "f": False},
        {"big": 2**70, "neg": -(2**63) - 1, "zero": 0},
        {"lone": "\ud800x"},  # UTF-8 cannot carry it: escaped, as before
        {},
    ):
        assert encode_json(body) == _json_bytes(body)


def test_encode_json_keeps_json_for_floats_and_nested_values() -> None:
    from greenroom.domain import encode_json

    for body in (
        {"cost": 1e16},
        {"cost": 5e-05},
        {"cost": float("nan")},
        {"usage": {"input_tokens": 3}},
        {"items": [1, "x"]},
        [1, 2],
        {1: "int key"},
    ):
        assert encode_json(body) == _json_bytes(body)
