"""The one contract every session store honours (the memory, SQLite and PostgreSQL stores pass
one suite, tests/test_store_contract.py)."""

from __future__ import annotations

from typing import Protocol

from greenroom.domain import (
    ErrorItem,
    Message,
    Permissions,
    Session,
    SessionPage,
    SessionQuery,
    SessionSummary,
    Summary,
)


class Store(Protocol):
    """Durable home of sessions. All methods are safe to call concurrently from trio tasks.

    Values in and out are frozen, so nothing a caller holds can change under it. Unknown ids
    raise :class:`~greenroom.errors.SessionNotFound`; a message id that is not in the named
    session raises :class:`~greenroom.errors.MessageNotFound` and changes nothing.
    """

    async def add_session(self, session: Session) -> Session:
        """Insert ``session`` with its history; returns it with store-assigned message ids.

        Sub-sessions in the history are stored as child sessions.

        Raises:
            SessionExists: the id (or a sub-session's) is taken; nothing is stored.
        """

    async def get_session(self, session_id: str) -> Session:
        """The stored session with its whole history."""

    async def list_sessions(self) -> list[SessionSummary]:
        """Root sessions (no parent), newest first, with visible-message counts."""

    async def search_sessions(self, query: SessionQuery) -> SessionPage:
        """One page of the root sessions matching ``query``, in its order (decision 0026):
        full-text words over titles and user/assistant messages, filters, keyset paging."""

    async def update_session(self, session: Session) -> None:
        """Upsert the metadata (title, tokens, permissions, ...); the stored history is kept."""

    async def delete_session(self, session_id: str) -> None:
        """Delete the session, its history and its sub-sessions."""

    async def add_message(self, session_id: str, message: Message) -> int:
        """Append ``message`` to the history; returns its new id. Durable once this returns."""

    async def update_message(self, session_id: str, message_id: int, message: Message) -> None:
        """Replace the stored message ``message_id`` of ``session_id``."""

    async def add_error(self, session_id: str, error: ErrorItem) -> None:
        """Append a recorded run failure to the history."""

    async def add_summary(self, session_id: str, summary: Summary) -> None:
        """Append a compaction summary to the history."""

    async def add_sub_session(self, parent_id: str, sub_session: Session) -> None:
        """Append ``sub_session`` (stored as a child session) to the parent's history."""

    async def update_title(self, session_id: str, title: str) -> None: ...

    async def update_permissions(
        self, session_id: str, permissions: Permissions | None
    ) -> None: ...

    async def update_tokens(
        self, session_id: str, input_tokens: int, output_tokens: int, cost: float
    ) -> None: ...

    async def set_starred(self, session_id: str, starred: bool) -> None: ...

    async def titles(self) -> list[str]:
        """Titles of every stored session (for fork numbering)."""

    async def count_sessions(self) -> int:
        """Number of stored root sessions (readiness probes)."""

    async def aclose(self) -> None:
        """Flush and release everything; idempotent."""
