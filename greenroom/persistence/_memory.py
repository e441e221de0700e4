"""An in-memory session store: the reference implementation of the :class:`Store` contract,
and of the durable-log interfaces (:mod:`._memory_journal`) for as long as the process lives.

Values are frozen all the way down, so handing out a stored value is handing out a copy: no
caller can change what another caller or the store sees.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import attrs

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
    check_value,
    to_json,
    visible_messages,
)
from greenroom.errors import (
    InvalidRequest,
    MessageNotFound,
    SessionExists,
    SessionNotFound,
    StoreError,
    UnstorableValue,
)

from ._memory_journal import MemoryJournal
from ._memory_search import search
from ._process_log import MemoryProcessLog
from ._runs import MemoryRuns
from ._schedules import MemorySchedules

_METADATA_EXCLUDED = ("id", "items", "created_at", "parent_id")


def _storable(*values: object) -> None:
    """Refuse what SQLite could not encode (lone surrogates, integers beyond 64 bits), so both
    stores fail the same writes and nothing unservable is kept."""
    for value in values:
        try:
            check_value(to_json(value))
        except InvalidRequest as exc:
            raise UnstorableValue(f"a value cannot be stored: {exc.message}") from None


class MemoryStore(MemoryRuns, MemoryJournal, MemoryProcessLog, MemorySchedules):
    """Sessions in a dict; message ids from one counter, as a database would give them."""

    def __init__(self) -> None:
        super().__init__()
        self._sessions: dict[str, Session] = {}
        self._processes = {}
        self._schedules = {}
        self._outbox = {}
        self._claims = {}
        self._ids = itertools.count(1)
        self._seqs: dict[str, int] = {}  # insertion numbers (search pages, decision 0026)
        self._next_seq = itertools.count(1)
        self._closed = False

    def _get(self, session_id: str) -> Session:
        if self._closed:
            raise StoreError("store is closed")
        try:
            return self._sessions[session_id]
        except KeyError:
            raise SessionNotFound(session_id) from None

    def _require(self, session_id: str) -> None:
        self._get(session_id)

    def _insert(self, session: Session) -> Session:
        # Depth-first, as the SQLite store numbers them: every message gets the next id and
        # every sub-session becomes a session of its own (with its parent's id).
        items: list[Item] = []
        for item in session.items:
            if isinstance(item, Message):
                item = attrs.evolve(item, id=next(self._ids))
            elif isinstance(item, SubSession):
                sub = attrs.evolve(item.session, parent_id=session.id)
                item = SubSession(self._insert(sub))
            items.append(item)
        stored = attrs.evolve(session, items=tuple(items))
        self._sessions[stored.id] = stored
        self._seqs[stored.id] = next(self._next_seq)
        self._head(stored.id)
        return stored

    @property
    def store(self) -> MemoryStore:
        return self

    async def add_session(self, session: Session) -> Session:
        if not session.id:
            raise InvalidRequest("session id is empty", path="$.id")
        self._get_closed_check()
        _storable(session)
        # Check every id (sub-sessions too) before storing anything: all or nothing.
        seen: set[str] = set()
        for session_id in _session_ids(session):
            if session_id in self._sessions or session_id in seen:
                raise SessionExists(f"session already exists: {session_id}")
            seen.add(session_id)
        return self._insert(session)

    def _get_closed_check(self) -> None:
        if self._closed:
            raise StoreError("store is closed")

    async def get_session(self, session_id: str) -> Session:
        return self._resolve(self._get(session_id))

    def _resolve(self, session: Session) -> Session:
        # Sub-sessions live as sessions of their own; show their current history.
        if not any(isinstance(item, SubSession) for item in session.items):
            return session
        items = tuple(
            SubSession(self._resolve(self._sessions[item.session.id]))
            if isinstance(item, SubSession) and item.session.id in self._sessions
            else item
            for item in session.items
            if not isinstance(item, SubSession) or item.session.id in self._sessions
        )
        return attrs.evolve(session, items=items)

    async def list_sessions(self) -> list[SessionSummary]:
        self._get_closed_check()
        # Newest first; equal times: the one added last first (the dict keeps insertion order).
        order = {session_id: n for n, session_id in enumerate(self._sessions)}
        roots = [s for s in self._sessions.values() if not s.parent_id]
        roots.sort(key=lambda s: (s.created_at, order[s.id]), reverse=True)
        return [self._summary(s) for s in roots]

    def _summary(self, s: Session) -> SessionSummary:
        return SessionSummary(
            id=s.id,
            title=s.title,
            created_at=s.created_at,
            # Count the sub-sessions as they are now, not as they were when attached.
            num_messages=sum(1 for _ in visible_messages(self._resolve(s).items)),
            input_tokens=s.input_tokens,
            output_tokens=s.output_tokens,
            working_dir=s.working_dir,
            starred=s.starred,
            agent_file=s.agent_file,
            agent_name=s.agent_name,
        )

    async def search_sessions(self, query: SessionQuery) -> SessionPage:
        self._get_closed_check()
        return search(self._sessions.values(), self._seqs, query, self._summary)

    async def update_session(self, session: Session) -> None:
        self._get_closed_check()
        _storable(attrs.evolve(session, items=()))
        current = self._sessions.get(session.id)
        if current is None:
            await self.add_session(attrs.evolve(session, items=()))
            return
        fields = {
            f.name: getattr(session, f.name)
            for f in attrs.fields(Session)
            if f.name not in _METADATA_EXCLUDED
        }
        self._sessions[session.id] = attrs.evolve(current, **fields)

    async def delete_session(self, session_id: str) -> None:
        session = self._get(session_id)
        for item in session.items:
            if isinstance(item, SubSession) and item.session.id in self._sessions:
                await self.delete_session(item.session.id)
        del self._sessions[session_id]
        self._seqs.pop(session_id, None)
        self._forget(session_id)

    def _append(self, session_id: str, item: Item) -> None:
        session = self._get(session_id)
        self._sessions[session_id] = session.with_item(item)

    def _store_message(self, session_id: str, message: Message) -> int:
        self._get(session_id)
        _storable(message)
        message_id = next(self._ids)
        self._append(session_id, attrs.evolve(message, id=message_id))
        return message_id

    def _store_item(self, session_id: str, item: Message | ErrorItem) -> int:
        if isinstance(item, Message):
            return self._store_message(session_id, item)
        _storable(item)
        self._append(session_id, item)
        return 0

    def _replace_message(self, session_id: str, message_id: int, message: Message) -> None:
        session = self._get(session_id)
        _storable(message, message_id)
        for index, item in enumerate(session.items):
            if isinstance(item, Message) and item.id == message_id:
                items = list(session.items)
                items[index] = attrs.evolve(message, id=message_id)
                self._sessions[session_id] = attrs.evolve(session, items=tuple(items))
                return
        raise MessageNotFound(f"message {message_id} not found in session {session_id}")

    async def add_message(self, session_id: str, message: Message) -> int:
        return self._store_message(session_id, message)

    async def update_message(self, session_id: str, message_id: int, message: Message) -> None:
        self._replace_message(session_id, message_id, message)

    async def add_error(self, session_id: str, error: ErrorItem) -> None:
        _storable(error)
        self._append(session_id, error)

    async def add_summary(self, session_id: str, summary: Summary) -> None:
        _storable(summary)
        self._append(session_id, summary)

    async def add_sub_session(self, parent_id: str, sub_session: Session) -> None:
        self._get(parent_id)
        sub = attrs.evolve(sub_session, parent_id=parent_id)
        stored = await self.add_session(sub)
        self._append(parent_id, SubSession(stored))

    async def _evolve(self, session_id: str, **changes: object) -> None:
        _storable(*changes.values())
        self._sessions[session_id] = attrs.evolve(self._get(session_id), **changes)  # type: ignore[arg-type]

    async def update_title(self, session_id: str, title: str) -> None:
        await self._evolve(session_id, title=title)

    async def update_permissions(self, session_id: str, permissions: Permissions | None) -> None:
        await self._evolve(session_id, permissions=permissions)

    async def update_tokens(
        self, session_id: str, input_tokens: int, output_tokens: int, cost: float
    ) -> None:
        await self._evolve(
            session_id, input_tokens=input_tokens, output_tokens=output_tokens, cost=cost
        )

    async def set_starred(self, session_id: str, starred: bool) -> None:
        await self._evolve(session_id, starred=starred)

    async def titles(self) -> list[str]:
        self._get_closed_check()
        return [s.title for s in self._sessions.values()]

    async def count_sessions(self) -> int:
        self._get_closed_check()
        return sum(1 for s in self._sessions.values() if not s.parent_id)

    async def aclose(self) -> None:
        self._closed = True


def _session_ids(session: Session) -> Iterator[str]:
    yield session.id
    for item in session.items:
        if isinstance(item, SubSession):
            yield from _session_ids(item.session)


@asynccontextmanager
async def open_memory_store() -> AsyncIterator[MemoryStore]:
    store = MemoryStore()
    try:
        yield store
    finally:
        await store.aclose()
