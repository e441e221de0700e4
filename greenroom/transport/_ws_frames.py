"""The WebSocket API's frames: event frames built around entries' JSON, and the checks on a
client frame's fields (``_ws.py`` serves the connection)."""

from __future__ import annotations

import json
from typing import Any

from greenroom.actors import LogEntry
from greenroom.domain import check_value
from greenroom.errors import GreenroomError, InvalidRequest


def event_frame(session_id: str, entry: LogEntry, *, run: str | None = None) -> str:
    """An event frame around the entry's JSON, which was encoded once for every consumer."""
    head = f'{{"session_id":{json.dumps(session_id)},'
    if run is not None:
        head += f'"run":{run},'
    return f'{head}"seq":{entry.seq},"event":{entry.data.decode()}}}'


def events_frame(session_id: str, entries: list[LogEntry], *, run: str | None = None) -> str:
    """One frame holding ``entries`` (a ``batch`` run or subscription), each as in
    :func:`event_frame` without the session and run, which the frame carries once."""
    head = f'{{"session_id":{json.dumps(session_id)},'
    if run is not None:
        head += f'"run":{run},'
    events = ",".join(f'{{"seq":{e.seq},"event":{e.data.decode()}}}' for e in entries)
    return f'{head}"events":[{events}]}}'


def batch_option(frame: dict[str, Any]) -> bool:
    value = frame.get("batch", False)
    if not isinstance(value, bool):
        raise InvalidRequest("$.batch: expected boolean", path="$.batch")
    return value


def param(frame: dict[str, Any], key: str) -> str:
    """A path parameter: a string, or an integer (message ids are numbers in replies)."""
    value = frame.get(key)
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return text_field(frame, key)


def reply_id(value: Any) -> Any:
    """A frame's id as it can be echoed back: a storable string or number, else None."""
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        try:
            check_value(value)
        except GreenroomError:
            return None
        return value
    return None


def scalar_text(value: Any) -> str:
    """A query parameter sent as a JSON value: ``true`` and ``5`` mean what "true" and "5" do."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else json.dumps(value)


def text_field(frame: dict[str, Any], key: str) -> str:
    value = frame.get(key)
    if not isinstance(value, str) or not value:
        raise InvalidRequest(f"$.{key}: expected a non-empty string", path=f"$.{key}")
    return value
