"""The PostgreSQL dialect of group commit (:mod:`._group_commit`): the writer connection (and
reconnection), its transaction and savepoints, the fence and COPY of event rows, the NOTIFY,
and the error translation.

Each batch's fences require the owner ``me()`` gives when the batch begins: (node id,
incarnation). Every awaited job runs in its own savepoint (PostgreSQL aborts the whole
transaction on a failed statement, so ``atomic`` changes nothing here); consecutive event rows go
behind one fence UPDATE and one COPY, and each batch ends with one NOTIFY on ``gr_ev`` per 7,000
bytes of ``session_id:last_seq``. A lost connection fails its batch (DatabaseUnavailable, the
batch's sessions reported failed) and the next batch reconnects.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import psycopg.errors

from greenroom.errors import DatabaseUnavailable, OwnerUnavailable, UnstorableValue

from . import _pg_fence as fence
from ._group_commit import translate_driver_error
from ._pg_open import connect, describe
from ._records import EventRow

Conn = psycopg.Connection[Any]


def translate(dsn: str, exc: Exception) -> Exception:
    """A psycopg or encoding error as greenroom's error tree has it."""
    if isinstance(exc, UnicodeEncodeError):
        return UnstorableValue(f"a text value cannot be stored in PostgreSQL: {exc.reason}")
    if isinstance(exc, psycopg.errors.LockNotAvailable):
        return OwnerUnavailable(f"a session's row stayed locked by another node: {exc}")
    if isinstance(exc, psycopg.DataError):  # out of range, NUL in text, ...
        return UnstorableValue(f"a value cannot be stored in PostgreSQL: {exc}")
    if isinstance(exc, psycopg.OperationalError):
        return DatabaseUnavailable(f"the {describe(dsn)} is unavailable: {exc}")
    where = f"the {describe(dsn)}"
    return translate_driver_error(exc, where, psycopg.IntegrityError, psycopg.Error)


class PgBackend:
    """The :class:`~._group_commit.CommitBackend` of one node's writer connection."""

    errors: tuple[type[Exception], ...] = (psycopg.Error,)
    # A lost connection or a lock held elsewhere fails the batch as itself (503, retry).
    kept: tuple[type[Exception], ...] = (DatabaseUnavailable, OwnerUnavailable)

    def __init__(
        self,
        dsn: str,
        conn: Conn | None,
        node_id: str,
        me: Callable[[], tuple[str, int]],
        lease_ttl: float | None = None,
    ) -> None:
        self.dsn = dsn
        self.node_id = node_id
        self.lease_ttl = lease_ttl
        self._conn = conn
        self._me = me
        self._owner = me()  # the batch's owner, taken as it begins
        self.where = f"the {describe(dsn)}"
        self.closed_message = f"the store on the {describe(dsn)} is closed"
        self.thread_name = f"greenroom-pg-writer {node_id}"

    def _connection(self) -> Conn:
        if self._conn is None or self._conn.closed or self._conn.broken:
            if self._conn is not None:
                self._conn.close()
            self._conn = None
            self._conn = connect(self.dsn, "writer", self.node_id, self.lease_ttl)
        return self._conn

    @contextmanager
    def transaction(self) -> Iterator[Conn]:
        self._owner = self._me()
        conn = self._connection()
        with conn.transaction():
            yield conn

    @contextmanager
    def savepoint(self, conn: Conn, atomic: bool) -> Iterator[None]:
        with conn.transaction():
            yield

    def check_transaction(self, conn: Conn, exc: Exception) -> None:
        # Otherwise undone to its savepoint (a lock or statement timeout included).
        if conn.broken:
            raise exc  # the connection is gone: the whole batch with it

    def flush_events(
        self, conn: Conn, rows: list[EventRow], failed: dict[str, str]
    ) -> dict[str, int]:
        return fence.flush_events(conn, rows, failed, *self._owner)

    def before_commit(self, conn: Conn, heads: dict[str, int]) -> None:
        fence.notify(conn, self._owner[0], heads)

    def translate(self, exc: Exception) -> Exception:
        return translate(self.dsn, exc)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
