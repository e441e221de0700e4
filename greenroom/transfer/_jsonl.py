"""greenroom's session export: JSON lines, one session per line.

A line is ``{"format": "greenroom.session", "version": 1, "session": SESSION}`` where SESSION is
the stored session as greenroom's JSON converter writes it (every field of ``Session``, the
history under ``messages`` with sub-sessions nested whole, times in RFC 3339 UTC). Only root
sessions are lines; their sub-sessions travel inside them. Reading is strict: an unknown
format, a newer version or an unknown field is refused, naming the line and the JSON path.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import IO, Any

from greenroom.domain import Session, encode_json, to_json

from ._docker_agent_db import Loaded

FORMAT = "greenroom.session"
VERSION = 1


def session_line(session: Session) -> bytes:
    """One line of the export (with its newline), UTF-8."""
    line = {"format": FORMAT, "version": VERSION, "session": to_json(session, Session)}
    return encode_json(line) + b"\n"


def read_lines(stream: IO[bytes], name: str, limit: int) -> Iterator[list[Loaded]]:
    """The file's sessions, ``limit`` lines at a time (blank lines skipped)."""
    page: list[Loaded] = []
    for number, raw in enumerate(stream, start=1):
        if not raw.strip():
            continue
        page.append(_line(raw, f"{name}:{number}"))
        if len(page) >= limit:
            yield page
            page = []
    if page:
        yield page


def _line(raw: bytes, where: str) -> Loaded:
    try:
        value: Any = json.loads(raw)
    except ValueError as exc:
        return Loaded("", where, None, f"not JSON ({exc})")
    if not isinstance(value, dict) or value.get("format") != FORMAT:
        return Loaded("", where, None, f'not a greenroom export line (no "format": "{FORMAT}")')
    version = value.get("version")
    if version != VERSION:
        return Loaded(
            "", where, None, f"export version {version!r}: this greenroom reads version {VERSION}"
        )
    session = value.get("session")
    if not isinstance(session, dict):
        return Loaded("", where, None, "$.session: expected an object")
    extra = sorted(set(value) - {"format", "version", "session"})
    if extra:
        return Loaded("", where, None, f"unknown field(s): {', '.join(extra)}")
    session_id = session.get("id")
    return Loaded(session_id if isinstance(session_id, str) else "", where, session)
