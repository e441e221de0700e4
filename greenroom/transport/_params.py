"""Query and header parameters: each defined once, with the schema OpenAPI shows and the
parser the server applies, so the two accept exactly the same texts.

A parser gets the raw text and where it came from (``query.wait``, ``header.Last-Event-ID``,
``$.since`` in a WebSocket frame) and returns the typed value or raises InvalidRequest naming
that place. Unknown query parameters are ignored, as docker-agent's server ignores them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import attrs

from greenroom.domain import MAX_NAME
from greenroom.errors import InvalidMessageId, InvalidRequest

MAX_WAIT = 300.0  # seconds; longer durations are capped (docker-agent caps at 5 minutes)

_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = r"[0-9]{1,9}(?:\.[0-9]{1,9})?(?:ns|us|µs|ms|s|m|h)"
DURATION_PATTERN = rf"^(?:0|(?:{_PART}){{1,4}})$"
_DURATION = re.compile(DURATION_PATTERN)
_DURATION_PART = re.compile(r"([0-9.]+)(ns|us|µs|ms|s|m|h)")
BOOLEANS = {
    **dict.fromkeys(("1", "t", "T", "TRUE", "true", "True"), True),
    **dict.fromkeys(("0", "f", "F", "FALSE", "false", "False"), False),
}  # Go's strconv.ParseBool
SEQ_PATTERN = r"^[0-9]{1,18}$"


def parse_duration(value: str, where: str) -> float:
    """Go duration syntax (``0``, ``500ms``, ``2s``, ``1m30s``) in seconds, capped at 5 minutes."""
    if not _DURATION.match(value):
        raise InvalidRequest(
            f"{where}: invalid duration {value!r} (use e.g. 500ms, 2s, 1m30s)", path=where
        )
    total = sum(float(n) * _UNIT[unit] for n, unit in _DURATION_PART.findall(value))
    return min(total, MAX_WAIT)


def parse_bool(value: str, where: str) -> bool:
    try:
        return BOOLEANS[value]
    except KeyError:
        message = f"{where}: expected true or false, got {value!r}"
        raise InvalidRequest(message, path=where) from None


def parse_seq(value: str, where: str) -> int:
    """An event sequence number to resume after: a decimal integer of at most 18 digits."""
    if not re.match(SEQ_PATTERN, value):
        raise InvalidRequest(
            f"{where}: expected an event sequence number (digits), got {value!r}", path=where
        )
    return int(value)


def parse_message_id(value: str, where: str) -> str:
    if not re.match(SEQ_PATTERN, value):
        raise InvalidMessageId(f"{where}: invalid message ID {value!r} (digits)", path=where)
    return value


def parse_name(value: str, where: str) -> str:
    if not value or len(value) > MAX_NAME:
        raise InvalidRequest(f"{where}: expected 1 to {MAX_NAME} characters", path=where)
    return value


def choice(*allowed: str) -> Callable[[str, str], str]:
    def parse(value: str, where: str) -> str:
        if value not in allowed:
            raise InvalidRequest(
                f"{where}: expected one of {', '.join(allowed)}, got {value!r}", path=where
            )
        return value

    return parse


@attrs.frozen
class Param:
    """A query or header parameter: its name as sent, its schema and its parser."""

    name: str
    schema: dict[str, Any]
    parse: Callable[[str, str], Any]
    description: str = ""
    required: bool = False  # the handler refuses a request without it (400)


TIMEOUT = Param(
    "timeout",
    {"type": "string", "pattern": DURATION_PATTERN},
    parse_duration,
    "Go duration (500ms, 2s, 1m30s); capped at 5m",
)
WAIT_DURATION = Param(
    "wait",
    {"type": "string", "pattern": DURATION_PATTERN},
    parse_duration,
    "How long to wait for a runtime (Go duration)",
)
WAIT_FLAG = Param(
    "wait",
    {"type": "string", "enum": list(BOOLEANS)},
    parse_bool,
    "Wait until the session's actor has stopped (Go boolean: true, false, 1, 0, ...)",
)
ON_DISCONNECT = Param(
    "on_disconnect",
    {"type": "string", "enum": ["cancel", "continue"]},
    choice("cancel", "continue"),
    "What a client disconnect does to the turn",
)
RUN_WAIT = Param(
    "wait",
    {"type": "string", "enum": list(BOOLEANS)},
    parse_bool,
    "Answer once the run ended: its record and final assistant message as JSON, no stream "
    "(also when Accept names application/json and not text/event-stream)",
)
MAX_RUNS = 1000


LIMIT_PATTERN = r"^(?:[1-9][0-9]{0,2}|1000)$"  # 1 to MAX_RUNS


def parse_limit(value: str, where: str) -> int:
    if not re.fullmatch(LIMIT_PATTERN, value):
        raise InvalidRequest(f"{where}: expected a number from 1 to {MAX_RUNS}", path=where)
    return int(value)


def parse_accept(value: str, where: str) -> str:
    return value[:1024]  # only read for the media types it names


RUNS_LIMIT = Param(
    "limit",
    {"type": "string", "pattern": LIMIT_PATTERN},
    parse_limit,
    f"How many of the newest runs (1 to {MAX_RUNS}; default 50)",
)
ACCEPT = Param(
    "Accept",
    {"type": "string"},
    parse_accept,
    "application/json (without text/event-stream): answer as with wait=true",
)
SINCE = Param(
    "since",
    {"type": "string", "pattern": SEQ_PATTERN},
    parse_seq,
    "Replay the events after this sequence number",
)
LAST_EVENT_ID = Param(
    "Last-Event-ID",
    {"type": "string", "pattern": SEQ_PATTERN},
    parse_seq,
    "SSE resume point (used when since is absent)",
)
IDEMPOTENCY_KEY = Param(
    "Idempotency-Key",
    {"type": "string", "minLength": 1, "maxLength": MAX_NAME},
    parse_name,
    "A repeated key makes the request a no-op reporting duplicate",
)

MAX_OAUTH_TEXT = 4096  # an OAuth state, code or error text


def parse_oauth_text(value: str, where: str) -> str:
    if not value or len(value) > MAX_OAUTH_TEXT:
        raise InvalidRequest(f"{where}: expected 1 to {MAX_OAUTH_TEXT} characters", path=where)
    return value


def _oauth_param(name: str, description: str, *, required: bool = False) -> Param:
    schema = {"type": "string", "minLength": 1, "maxLength": MAX_OAUTH_TEXT}
    return Param(name, schema, parse_oauth_text, description, required)


OAUTH_STATE = _oauth_param("state", "The state of the waiting flow", required=True)
OAUTH_CODE = _oauth_param("code", "The authorization code (or give error)")
OAUTH_ERROR = _oauth_param("error", "The authorization server's error code (or give code)")
OAUTH_ERROR_DESCRIPTION = _oauth_param("error_description", "The error's description")
OAUTH_REDIRECT = (OAUTH_STATE, OAUTH_CODE, OAUTH_ERROR, OAUTH_ERROR_DESCRIPTION)

MESSAGE_ID = Param(
    "message_id",
    {"type": "string", "pattern": SEQ_PATTERN},
    parse_message_id,
    "A stored message id",
)
PATH_NAME = {"type": "string", "minLength": 1, "maxLength": MAX_NAME}


def path_param(name: str) -> Param:
    """The rule of a path parameter: message ids are digits, every other one is a name."""
    return MESSAGE_ID if name == "message_id" else Param(name, PATH_NAME, parse_name)
