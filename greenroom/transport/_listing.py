"""The session list's JSON, encoded in one pass: ``GET /api/sessions`` answers with every root
session, and at 10,000 sessions unstructuring each summary (cattrs) and encoding the result
(:mod:`json`) were most of the request's time (docs/benchmarks.md, "Listing")."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable
from typing import Any

from greenroom.domain import SessionSummary, to_json

from ._context import Encoded

_encoders: list[Callable[[Any], bytes]] = []  # msgspec's, imported on first use (light start)


def summaries_json(summaries: Iterable[SessionSummary]) -> Encoded:
    """The summaries as the JSON array :func:`to_json` and ``_json.dumps`` would give, byte for
    byte: objects with the fields in declaration order, ``created_at`` in UTC with a ``Z``.
    msgspec writes strings, integers, booleans and UTC datetimes exactly as they do."""
    rows: list[dict[str, Any]] = [
        {
            "id": s.id,
            "title": s.title,
            "created_at": _utc(s.created_at),
            "num_messages": s.num_messages,
            "input_tokens": s.input_tokens,
            "output_tokens": s.output_tokens,
            "working_dir": s.working_dir,
            "starred": s.starred,
            "agent_file": s.agent_file,
            "agent_name": s.agent_name,
        }
        for s in summaries
    ]
    if not _encoders:
        import msgspec

        _encoders.append(msgspec.json.Encoder().encode)
    try:
        return Encoded(_encoders[0](rows))
    except (UnicodeEncodeError, TypeError, OverflowError):  # a lone surrogate, say
        values = [to_json(SessionSummary(**r), SessionSummary) for r in rows]
        try:
            return Encoded(json.dumps(values, separators=(",", ":"), ensure_ascii=False).encode())
        except UnicodeEncodeError:  # UTF-8 cannot carry it: escaped, as event bodies are
            return Encoded(json.dumps(values, separators=(",", ":")).encode())


def _utc(value: dt.datetime) -> dt.datetime:
    """msgspec writes the offset it finds; the API's times are in UTC (``Z``)."""
    if value.tzinfo is dt.UTC or value.utcoffset() == _ZERO:
        return value
    return value.astimezone(dt.UTC)


_ZERO = dt.timedelta(0)
