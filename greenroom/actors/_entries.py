"""One entry of a session's event log: its seq, its type and its JSON, encoded once."""

from __future__ import annotations

import json
import time
from typing import Any

import attrs

from greenroom.domain import Event, Gap, encode_json, event_from_json, event_to_json, event_type
from greenroom.persistence import StoredEvent

_second: list[Any] = [-1, ""]  # (whole second, its RFC 3339 text): formatted once a second


def _timestamp() -> str:
    """Now as RFC 3339 UTC with microseconds (``2026-12-01T15:04:05.123456Z``), cheaply."""
    now = time.time()
    whole = int(now)
    if whole != _second[0]:
        _second[0], _second[1] = whole, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
    return f"{_second[1]}.{int((now - whole) * 1_000_000):06d}Z"


@attrs.frozen
class LogEntry:
    """One delivered event: ``seq`` is 0 for control events that are not in the log (gap).

    ``data`` is the event's JSON, encoded once; ``event`` is parsed from it on demand for an
    entry replayed from the store.
    """

    seq: int
    type: str
    data: bytes
    parsed: Event | None = attrs.field(default=None, repr=False)

    @classmethod
    def of(cls, seq: int, event: Event) -> LogEntry:
        body = event_to_json(event)
        body.setdefault("timestamp", _timestamp())  # as docker-agent's events carry one
        return cls(seq, event_type(event), encode_json(body), event)

    @classmethod
    def stored(cls, event: StoredEvent) -> LogEntry:
        return cls(event.seq, event.type, event.body)

    @property
    def event(self) -> Event:
        return self.parsed if self.parsed is not None else event_from_json(self.json())

    def json(self) -> Any:
        return json.loads(self.data)


GAP = LogEntry.of(0, Gap())
