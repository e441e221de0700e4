"""Logs: the human format or one JSON object per line (``greenroom serve --log-format json``),
with the session, turn and trace a line belongs to where they are known.

The actor sets the session id for its task (and so for every task it starts), the turn task
the turn id (:func:`log_context`); trio copies the context into each new task, so a line
logged deep in a tool call still says whose it is. The trace id comes from the current
OpenTelemetry span, only when ``opentelemetry`` was already imported by someone (traces on):
it is never imported here.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import json
import logging
import sys
from collections.abc import Iterator
from typing import Any, Literal

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# Loggers that say a line per HTTP request the server makes (each model call): debug only.
CHATTY = ("httpx", "httpx2", "httpcore", "httpcore2")

SESSION_ID: contextvars.ContextVar[str] = contextvars.ContextVar("greenroom_session", default="")
TURN_ID: contextvars.ContextVar[str] = contextvars.ContextVar("greenroom_turn", default="")


@contextlib.contextmanager
def log_context(session_id: str | None = None, turn_id: str | None = None) -> Iterator[None]:
    """Lines logged inside (and in tasks started inside) carry these ids."""
    tokens: list[tuple[contextvars.ContextVar[str], contextvars.Token[str]]] = []
    if session_id is not None:
        tokens.append((SESSION_ID, SESSION_ID.set(session_id)))
    if turn_id is not None:
        tokens.append((TURN_ID, TURN_ID.set(turn_id)))
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            with contextlib.suppress(ValueError):  # reset in another context: let it be
                var.reset(token)


def tag_logs(session_id: str | None = None, turn_id: str | None = None) -> None:
    """Lines this task (and the tasks it starts from now on) logs carry these ids: for a task
    of its own (an actor, a turn), whose context ends with it."""
    if session_id is not None:
        SESSION_ID.set(session_id)
    if turn_id is not None:
        TURN_ID.set(turn_id)


def current_trace() -> tuple[str, str]:
    """The current OpenTelemetry span's trace and span ids (hex), or empty strings.

    Only looked at when ``opentelemetry.trace`` is loaded already: logging never imports it.
    """
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return "", ""
    try:
        context = trace.get_current_span().get_span_context()
    except Exception:  # an API older or newer than we know: no ids rather than no line
        return "", ""
    if not getattr(context, "is_valid", False):
        return "", ""
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, message, logger, node, and the session, turn
    and trace ids where known; ``exception`` holds a traceback."""

    def __init__(self, node: str = "") -> None:
        super().__init__()
        self.node = node

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "message": record.getMessage(),
            "logger": record.name,
        }
        if self.node:
            out["node"] = self.node
        session_id, turn_id = SESSION_ID.get(), TURN_ID.get()
        if session_id:
            out["session_id"] = session_id
        if turn_id:
            out["turn_id"] = turn_id
        trace_id, span_id = current_trace()
        if trace_id:
            out["trace_id"], out["span_id"] = trace_id, span_id
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exception"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, ensure_ascii=False, default=str)


def configure_logging(level: str = "info", fmt: LogFormat = "text", node: str = "") -> None:
    """The process's logging for ``greenroom serve``: ``fmt`` lines on stderr at ``level``;
    the HTTP clients' per-request lines only at debug. As ``logging.basicConfig``, a root
    logger that has handlers already (an embedding program, pytest) keeps them and its level."""
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler()
        if fmt == "json":
            handler.setFormatter(JsonFormatter(node))
        else:
            handler.setFormatter(logging.Formatter(TEXT_FORMAT))
        root.addHandler(handler)
        root.setLevel(level.upper())
    quiet = logging.DEBUG if level.lower() == "debug" else logging.WARNING
    for name in CHATTY:
        logging.getLogger(name).setLevel(quiet)


__all__ = [
    "LOG_FORMATS",
    "SESSION_ID",
    "TURN_ID",
    "JsonFormatter",
    "LogFormat",
    "configure_logging",
    "current_trace",
    "log_context",
    "tag_logs",
]
