"""``GET /api/sessions`` with search parameters (decision 0026): full-text ``q``, filters,
``limit`` and an opaque keyset ``cursor``; the WebSocket's ``list`` op takes the same keys.

Without any of these parameters the list is exactly docker-agent's (a bare array of every root
session, newest first). With one or more of them the answer is one page:
``{"sessions": [...], "next_cursor": "…" | null}``.

A cursor is base64url (no padding) of a JSON array ``[order, score, created_us, seq,
horizon]``: the sort key of the page's last session and the walk's horizon. It is checked as
strictly as any input (shape, types, ranges, and that its order is the request's): a tampered
one is a 400 naming ``cursor``.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import math
import re
from collections.abc import Mapping
from typing import Any

import attrs

from greenroom.domain import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    MAX_NAME,
    MAX_QUERY,
    PageKey,
    SessionOrder,
    SessionQuery,
    parse_datetime,
    query_words,
)
from greenroom.errors import InvalidRequest

from . import _params as q
from ._context import Context, Encoded, Reply, Request
from ._listing import summaries_json
from ._session_endpoints import list_sessions

MAX_CURSOR = 512
_INT64 = 2**63
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICROSECOND = dt.timedelta(microseconds=1)
_ORDERS: tuple[SessionOrder, ...] = ("relevance", "recent")


@attrs.frozen
class Cursor:
    """A decoded cursor, with where it came from (``query.cursor``, ``$.cursor``)."""

    order: SessionOrder
    key: PageKey
    where: str


def encode_cursor(order: SessionOrder, key: PageKey) -> str:
    raw = json.dumps([order, key.score, key.created_us, key.seq, key.horizon])
    return base64.urlsafe_b64encode(raw.encode()).rstrip(b"=").decode()


def _bad_cursor(where: str, why: str) -> InvalidRequest:
    return InvalidRequest(f"{where}: not a cursor this server gave ({why})", path=where)


def _int(value: object) -> bool:
    return type(value) is int and -_INT64 <= value < _INT64


def parse_cursor(value: str, where: str) -> Cursor:
    if not value or len(value) > MAX_CURSOR:
        raise _bad_cursor(where, f"1 to {MAX_CURSOR} characters")
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
        decoded = json.loads(raw.decode())
    except (binascii.Error, ValueError):
        raise _bad_cursor(where, "not base64url of JSON") from None
    if not isinstance(decoded, list) or len(decoded) != 5:
        raise _bad_cursor(where, "not a sort key")
    order, score, created, seq, horizon = decoded
    if order not in _ORDERS or not all(_int(v) for v in (created, seq, horizon)):
        raise _bad_cursor(where, "not a sort key")
    if order == "recent" and score is not None:
        raise _bad_cursor(where, "a score in the recent order")
    if order == "relevance" and not (type(score) in (int, float) and math.isfinite(score)):
        raise _bad_cursor(where, "no finite score in the relevance order")
    score = None if score is None else float(score)
    return Cursor(order, PageKey(score, created, seq, horizon), where)


def parse_text(value: str, where: str) -> str:
    if len(value) > MAX_QUERY:
        raise InvalidRequest(f"{where}: at most {MAX_QUERY} characters", path=where)
    return value


def parse_limit(value: str, where: str) -> int:
    if not value.isascii() or not value.isdigit() or not 1 <= int(value) <= MAX_LIMIT:
        raise InvalidRequest(f"{where}: expected an integer 1 to {MAX_LIMIT}", path=where)
    return int(value)


_RFC3339 = re.compile(
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})$"
)


def parse_time_us(value: str, where: str) -> int:
    """An RFC 3339 timestamp (with its offset) in microseconds since the epoch."""
    try:
        if not _RFC3339.match(value):
            raise ValueError(value)
        when = parse_datetime(value.upper())
    except ValueError:
        raise InvalidRequest(
            f"{where}: expected an RFC 3339 timestamp with an offset "
            "(2025-01-31T12:00:00Z), got {value!r}",
            path=where,
        ) from None
    return (when - _EPOCH) // _MICROSECOND


TEXT = q.Param(
    "q",
    {"type": "string", "maxLength": MAX_QUERY},
    parse_text,
    "Full-text words: a session matches when its title, or one of its user or assistant "
    "messages, has a word starting with each of them (zebra finds zebracorns; case and "
    "diacritics ignored, no stemming); the best match first",
)
AGENT = q.Param(
    "agent",
    {"type": "string", "minLength": 1, "maxLength": MAX_NAME},
    q.parse_name,
    "Only sessions whose agent file or agent name is this",
)
STARRED = q.Param(
    "starred",
    {"type": "string", "enum": list(q.BOOLEANS)},
    q.parse_bool,
    "Only starred (true) or unstarred (false) sessions",
)
CREATED_SINCE = q.Param(
    "since",
    {"type": "string", "format": "date-time"},
    parse_time_us,
    "Only sessions created at or after this RFC 3339 time (SQLite: millisecond precision)",
)
CREATED_UNTIL = q.Param(
    "until",
    {"type": "string", "format": "date-time"},
    parse_time_us,
    "Only sessions created before this RFC 3339 time",
)
ORDER = q.Param(
    "order",
    {"type": "string", "enum": list(_ORDERS)},
    q.choice(*_ORDERS),
    "relevance (the default; the best match first, then newest) or recent (newest first); "
    "without q the order is recent",
)
LIMIT = q.Param(
    "limit",
    {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT},
    parse_limit,
    f"Sessions per page: {DEFAULT_LIMIT} by default, at most {MAX_LIMIT}",
)
CURSOR = q.Param(
    "cursor",
    {"type": "string", "minLength": 1, "maxLength": MAX_CURSOR},
    parse_cursor,
    "The next_cursor of the previous page (opaque)",
)
SEARCH_PARAMS = (TEXT, AGENT, STARRED, CREATED_SINCE, CREATED_UNTIL, ORDER, LIMIT, CURSOR)


def session_query(query: Mapping[str, Any]) -> tuple[SessionQuery, SessionOrder]:
    """The store's query from the parsed parameters, and the order the page is in."""
    words = query_words(query.get("q", ""))
    order: SessionOrder = "relevance" if words and query.get("order") != "recent" else "recent"
    cursor: Cursor | None = query.get("cursor")
    if cursor is not None and cursor.order != order:
        raise _bad_cursor(cursor.where, f"a cursor of the {cursor.order} order")
    found = SessionQuery(
        words=words,
        agent=query.get("agent"),
        starred=query.get("starred"),
        since_us=query.get("since"),
        until_us=query.get("until"),
        order=order,
        limit=query.get("limit", DEFAULT_LIMIT),
        after=None if cursor is None else cursor.key,
    )
    return found, order


async def list_or_search_sessions(ctx: Context, req: Request) -> Reply:
    if not req.query:  # docker-agent's list, unchanged
        return await list_sessions(ctx, req)
    store_query, order = session_query(req.query)
    page = await ctx.registry.search_sessions(store_query)
    following = None if page.next is None else encode_cursor(order, page.next)
    sessions = summaries_json(page.sessions).data
    tail = json.dumps(following).encode()
    return Reply(Encoded(b'{"sessions":' + sessions + b',"next_cursor":' + tail + b"}"))
