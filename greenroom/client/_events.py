"""A session's event log as an async iterator that survives dropped connections.

:class:`EventStream` follows ``GET /api/sessions/{id}/events`` from a task of its own: when
the connection drops (a stream that ends without ``session_exited``, a network error, or no
byte for :data:`SILENCE_LIMIT` seconds although the server pings every 15 s) it reconnects with
backoff and resumes after the last seq it delivered, so every event arrives once and in order.
A ``gap`` event says the resume point was no longer buffered, or the log was restarted (its
numbering starts again): take a snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

import anyio
import attrs
import httpx
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ._errors import ApiError
from ._sse import SSEParser

ConnectionState = Literal["connecting", "live", "reconnecting", "closed"]

BACKOFF_MIN = 0.2
BACKOFF_MAX = 5.0
SILENCE_LIMIT = 45.0  # three missed heartbeats
BUFFER = 256  # events read ahead of the consumer before the reader waits


@attrs.frozen
class Event:
    """One event: ``seq`` is its position in the session's log (0 for ``gap``)."""

    seq: int
    data: Mapping[str, Any]

    @property
    def type(self) -> str:
        return str(self.data.get("type", ""))

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)


class EventStream:
    """The events of one session after ``since`` (see the module docstring).

    Iterate it (``async for event in stream``) or use :meth:`next_of` / :meth:`until`. The
    iteration ends after ``session_exited``; it raises :class:`ApiError` when the server
    refuses the subscription (unknown session, bad token).

    Attributes:
        last_seq: the seq of the last event delivered (the resume point).
        state: ``connecting``, ``live``, ``reconnecting`` or ``closed``.
        reconnects: how many times the stream reconnected.
    """

    def __init__(
        self,
        http: httpx.AsyncClient,
        session_id: str,
        since: int | None,
        receive: MemoryObjectReceiveStream[Event],
        on_state: Callable[[ConnectionState], None] | None = None,
    ) -> None:
        self.session_id = session_id
        self.last_seq = since or 0
        self.state: ConnectionState = "connecting"
        self.reconnects = 0
        self._since_given = since is not None
        self._http = http
        self._receive = receive
        self._on_state = on_state
        self._error: ApiError | None = None

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> Event:
        try:
            return await self._receive.receive()
        except anyio.EndOfStream:
            if self._error is not None:
                raise self._error from None
            raise StopAsyncIteration from None

    async def next_of(self, *types: str) -> Event:
        """The next event of one of ``types`` (others are skipped)."""
        async for event in self:
            if event.type in types:
                return event
        raise anyio.EndOfStream(f"the event stream ended before any of {types}")

    async def until(self, *types: str) -> list[Event]:
        """Every event up to and including the first of one of ``types``."""
        seen: list[Event] = []
        async for event in self:
            seen.append(event)
            if event.type in types:
                return seen
        raise anyio.EndOfStream(f"the event stream ended before any of {types}: {seen}")

    def _set_state(self, state: ConnectionState) -> None:
        if state != self.state:
            self.state = state
            if self._on_state is not None:
                self._on_state(state)

    async def _run(self, send: MemoryObjectSendStream[Event]) -> None:
        async with send:
            failures = 0
            while True:
                try:
                    if await self._follow(send):
                        break
                except ApiError as exc:
                    if exc.status in (401, 403, 404):
                        self._error = exc
                        break
                except (httpx.HTTPError, anyio.BrokenResourceError, OSError):
                    pass
                if self.state == "live":
                    failures = 0
                failures += 1
                self.reconnects += 1
                self._set_state("reconnecting")
                await anyio.sleep(min(BACKOFF_MAX, BACKOFF_MIN * 2 ** (failures - 1)))
        self._set_state("closed")

    async def _follow(self, send: MemoryObjectSendStream[Event]) -> bool:
        """One connection; True when the log ended (session_exited), False when dropped."""
        since = self.last_seq if self._since_given or self.last_seq else None
        params = {"since": str(since)} if since is not None else {}
        path = f"/api/sessions/{self.session_id}/events"
        timeout = httpx.Timeout(30.0, read=None)  # silence is watched below
        async with self._http.stream("GET", path, params=params, timeout=timeout) as response:
            if response.status_code != 200:
                await response.aread()
                raise ApiError(response.status_code, _json(response))
            self._set_state("live")
            frames = SSEParser(response.aiter_lines())
            while True:
                frame = None
                with anyio.move_on_after(SILENCE_LIMIT):
                    try:
                        frame = await frames.__anext__()
                    except StopAsyncIteration:
                        return False
                if frame is None:
                    return False  # silence: the connection is dead
                if not isinstance(frame.data, dict):
                    continue  # a heartbeat or an empty frame: the connection is alive
                seq = frame.id or 0
                if seq and since is not None and seq <= since:
                    # The server only sends seqs after `since`, unless the session's log was
                    # restarted (its actor retired, or the server restarted) and counts from
                    # 1 again: say so as a gap, and follow the new numbering.
                    await send.send(Event(0, {"type": "gap"}))
                    since = None
                if seq:
                    self.last_seq = seq
                    self._since_given = True
                event = Event(seq, frame.data)
                await send.send(event)
                if event.type == "session_exited":
                    return True


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None
