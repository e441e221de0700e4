"""The commit bus of the PostgreSQL store: other nodes' commits, heard with LISTEN.

One thread owns one connection that listens on ``gr_ev`` (the writers' NOTIFY, one per
batch: a first line naming the node, then ``session_id:last_seq`` lines). It hands each
notification to trio with ``TrioToken.run_sync_soon``; ``updates()`` yields (session_id, seq)
of other nodes' commits from a bounded buffer that drops the oldest when full (a consumer also
polls from its cursors, so a dropped or missed notification only delays). A dropped
connection is reopened with back-off; notifications sent meanwhile are missed, for the same
reason harmless.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import trio

from ._pg_fence import parse_notify
from ._pg_open import connect

log = logging.getLogger(__name__)

BUFFER = 10_000  # (session, seq) pairs held for a slow consumer; older ones are dropped
_POLL = 0.2  # how often the thread looks up from its connection to see whether to stop
_BACKOFF = (0.05, 2.0)  # first and longest wait before reconnecting


class PgBus:
    def __init__(self, dsn: str, node_id: str) -> None:
        self.dsn = dsn
        self.node_id = node_id
        self.dropped = 0  # updates dropped because the buffer was full
        self.connects = 0  # LISTEN connections opened (reconnects = connects - 1)
        self._buffer: collections.deque[tuple[str, int]] = collections.deque(maxlen=BUFFER)
        self._arrived = trio.Event()
        self._stop = threading.Event()
        self._listening = trio.Event()
        self._token = trio.lowlevel.current_trio_token()
        self._done = trio.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"greenroom-pg-listen {node_id}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    async def listening(self) -> None:
        """Wait until the first LISTEN is in place (tests, and a node's start-up)."""
        await self._listening.wait()

    async def aclose(self) -> None:
        self._stop.set()
        with trio.CancelScope(shield=True):  # the thread looks up within _POLL seconds
            await self._done.wait()

    # --- CommitBus -----------------------------------------------------------------------

    def updates(self) -> AsyncIterator[tuple[str, int]]:
        # An iterator object, not an async generator: nothing to finalise when dropped.
        return self

    def __aiter__(self) -> PgBus:
        return self

    async def __anext__(self) -> tuple[str, int]:
        while not self._buffer:
            await self._arrived.wait()
            self._arrived = trio.Event()
        await trio.lowlevel.checkpoint()
        return self._buffer.popleft()

    # --- the trio side of the thread -----------------------------------------------------

    def _push(self, pairs: list[tuple[str, int]]) -> None:
        overflow = len(self._buffer) + len(pairs) - BUFFER
        if overflow > 0:
            self.dropped += overflow
        self._buffer.extend(pairs)
        self._arrived.set()

    # --- the listener thread -------------------------------------------------------------

    def _run(self) -> None:
        backoff = _BACKOFF[0]
        try:
            while not self._stop.is_set():
                try:
                    self._listen()
                    backoff = _BACKOFF[0]
                except psycopg.Error as exc:
                    log.warning("LISTEN connection lost (%s); reconnecting in %.2fs", exc, backoff)
                    if self._stop.wait(backoff):  # real time: back off before reconnecting
                        break
                    backoff = min(backoff * 2, _BACKOFF[1])
        finally:
            self._token.run_sync_soon(self._done.set)

    def _listen(self) -> None:
        conn: psycopg.Connection[Any] = connect(self.dsn, "listen", self.node_id)
        with conn:
            conn.execute("LISTEN gr_ev")
            self.connects += 1
            self._token.run_sync_soon(self._listening.set)
            while not self._stop.is_set():
                for note in conn.notifies(timeout=_POLL):
                    node, found = parse_notify(note.payload)
                    if node != self.node_id and found:
                        self._token.run_sync_soon(self._push, found)
