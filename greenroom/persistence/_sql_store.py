"""The Store contract once for both SQL stores (a template): each store gives its dialect's
SQL module (:class:`SessionSql`: :mod:`._sqlite_sql`, :mod:`._pg_sql`), its group-commit
writer, ``_read`` (a function of a read connection, in a worker thread) and ``_guarded`` (a
write that another node's ownership of the session refuses; on one node, a plain write)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Generic, Protocol, TypeVar

from greenroom.domain import (
    ErrorItem,
    Item,
    Message,
    Permissions,
    Session,
    SessionPage,
    SessionQuery,
    SessionSummary,
    SubSession,
    Summary,
    to_json,
)
from greenroom.errors import InvalidRequest, MessageNotFound

from . import _rows
from ._group_commit import GroupCommitWriter

T = TypeVar("T")
C = TypeVar("C")
Cx = TypeVar("Cx", contravariant=True)  # the connection, in the protocol
ItemRow = tuple[str, str | None, str]  # (kind, role, body JSON): serialised by the caller


class SessionSql(Protocol[Cx]):
    """What a dialect's SQL module offers the template (all run on the writer thread, but the
    loads, lists, titles and counts, which run on a read connection)."""

    def insert_session(self, conn: Cx, session: Session, /) -> Session:
        """SessionExists if the id (or a sub-session's) is taken."""

    def load_session(self, conn: Cx, session_id: str, /) -> Session: ...

    def list_sessions(self, conn: Cx, /) -> list[SessionSummary]: ...

    def search_sessions(self, conn: Cx, query: SessionQuery, /) -> SessionPage: ...

    def upsert_session(self, conn: Cx, row: tuple[Any, ...], /) -> None: ...

    def delete_tree(self, conn: Cx, session_id: str, /) -> object: ...

    def append_row(self, conn: Cx, session_id: str, row: ItemRow, /) -> int: ...

    def append_item(self, conn: Cx, session_id: str, item: Item, /) -> int: ...

    def require_session(self, conn: Cx, session_id: str, /) -> None: ...

    def update_message(
        self, conn: Cx, session_id: str, message_id: int, role: str | None, body: str, /
    ) -> bool: ...

    def set_fields(self, conn: Cx, session_id: str, fields: Mapping[str, Any], /) -> None: ...

    def titles(self, conn: Cx, /) -> list[str]: ...

    def count_sessions(self, conn: Cx, /) -> int: ...


class SqlStore(Generic[C]):
    """The :class:`~greenroom.persistence.Store` methods over the hooks below."""

    group_commit: GroupCommitWriter[C]
    _sql: SessionSql[C]

    async def _read(self, fn: Callable[[C], T], *, transaction: bool = False) -> T:
        raise NotImplementedError

    async def _guarded(self, session_id: str, fn: Callable[[C], T], *, atomic: bool = False) -> T:
        raise NotImplementedError

    # --- for tools, benchmarks and tests --------------------------------------------------

    async def run_read(self, fn: Callable[[C], T]) -> T:
        """``fn`` on a read connection in a worker thread: what the Store contract does not
        say (a connection's settings, say). Writes go through ``group_commit.write``."""
        return await self._read(fn)

    @property
    def batches(self) -> int:
        """Transactions the writer committed (or failed) since the store opened."""
        return self.group_commit.statistics().batches

    # --- the Store contract ---------------------------------------------------------------

    async def add_session(self, session: Session) -> Session:
        if not session.id:
            raise InvalidRequest("session id is empty", path="$.id")
        return await self.group_commit.write(lambda conn: self._sql.insert_session(conn, session))

    async def get_session(self, session_id: str) -> Session:
        return await self._read(lambda conn: self._sql.load_session(conn, session_id))

    async def list_sessions(self) -> list[SessionSummary]:
        return await self._read(self._sql.list_sessions)

    async def search_sessions(self, query: SessionQuery) -> SessionPage:
        return await self._read(lambda conn: self._sql.search_sessions(conn, query))

    async def update_session(self, session: Session) -> None:
        row = _rows.session_to_row(session)
        await self._guarded(
            session.id, lambda conn: self._sql.upsert_session(conn, row), atomic=True
        )

    async def delete_session(self, session_id: str) -> None:
        await self._guarded(session_id, lambda conn: self._sql.delete_tree(conn, session_id))

    async def _append(self, session_id: str, item: Message | Summary | ErrorItem) -> int:
        row = _rows.item_to_row(item)  # serialised here, so the writer thread only runs SQL
        return await self._guarded(
            session_id, lambda conn: self._sql.append_row(conn, session_id, row), atomic=True
        )

    async def add_message(self, session_id: str, message: Message) -> int:
        return await self._append(session_id, message)

    async def update_message(self, session_id: str, message_id: int, message: Message) -> None:
        _, role, body = _rows.item_to_row(message)

        def update(conn: C) -> None:
            if not self._sql.update_message(conn, session_id, message_id, role, body):
                self._sql.require_session(conn, session_id)
                raise MessageNotFound(f"message {message_id} not found in session {session_id}")

        await self._guarded(session_id, update, atomic=True)

    async def add_error(self, session_id: str, error: ErrorItem) -> None:
        await self._append(session_id, error)

    async def add_summary(self, session_id: str, summary: Summary) -> None:
        await self._append(session_id, summary)

    async def add_sub_session(self, parent_id: str, sub_session: Session) -> None:
        item = SubSession(sub_session)
        await self._guarded(parent_id, lambda conn: self._sql.append_item(conn, parent_id, item))

    async def _set(self, session_id: str, fields: Mapping[str, Any]) -> None:
        """Named columns to new values: one UPDATE of the session's row, SessionNotFound when
        there is none."""
        await self._guarded(
            session_id, lambda conn: self._sql.set_fields(conn, session_id, fields), atomic=True
        )

    async def update_title(self, session_id: str, title: str) -> None:
        await self._set(session_id, {"title": title})

    async def update_permissions(self, session_id: str, permissions: Permissions | None) -> None:
        text = None if permissions is None else _rows.dumps(to_json(permissions, Permissions))
        await self._set(session_id, {"permissions": text})

    async def update_tokens(
        self, session_id: str, input_tokens: int, output_tokens: int, cost: float
    ) -> None:
        fields = {"input_tokens": input_tokens, "output_tokens": output_tokens, "cost": cost}
        await self._set(session_id, fields)

    async def set_starred(self, session_id: str, starred: bool) -> None:
        await self._set(session_id, {"starred": int(starred)})

    async def titles(self) -> list[str]:
        return await self._read(self._sql.titles)

    async def count_sessions(self) -> int:
        return await self._read(self._sql.count_sessions)

    async def aclose(self) -> None:
        self.group_commit.shutdown()
        await self.group_commit.stopped()
