"""The live session of an actor: its :class:`Session` value and the writes that change it.

Only this class replaces the value. Each write goes to the store first and then to the live
copy, so the copy never holds what the store refused; writes inside a turn are shielded (the
store keeps a write whose caller was cancelled, so the copy must take it too) and bounded (a
store that does not answer in time fails the write instead of holding the turn forever).
A deleted session is never written again (no resurrection).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import attrs
import trio

from greenroom.domain import (
    Approval,
    ErrorItem,
    Item,
    Message,
    Session,
    SubSession,
    Summary,
    add_cost,
    add_count,
    utcnow,
)
from greenroom.errors import GreenroomError, SessionGone, SessionNotFound, StoreError
from greenroom.persistence import (
    Lease,
    Store,
    ToolCallIntent,
    TurnEnd,
    TurnMark,
    TurnStart,
    TurnState,
    Writer,
)

from ._eventlog import EventLog
from ._runs import RunFacts, ended_record, started_record, webhook_delivery

log = logging.getLogger(__name__)

MAX_APPROVALS = 1000
"""Approval records kept per session; the oldest are dropped first."""


class Owner(Protocol):
    """What the live session reads of the actor that owns it."""

    @property
    def deleted(self) -> bool: ...

    @property
    def lost(self) -> bool: ...

    @property
    def log(self) -> EventLog | None: ...

    def agent_name(self) -> str: ...


class LiveSession:
    """The session value an actor serves and the writes that change it (module docstring).

    A history write may take ``write_grace`` seconds; the writes of a turn or an actor that is
    ending (its end record, the session's metadata) ``close_grace``.
    """

    __slots__ = ("_close_grace", "_owner", "_session", "_store", "_write_grace", "_writer", "id")

    def __init__(
        self,
        session: Session,
        store: Store,
        writer: Writer,
        owner: Owner,
        *,
        write_grace: float,
        close_grace: float,
    ) -> None:
        self._session = session
        self._store = store
        self._writer = writer
        self._owner = owner
        self._write_grace = write_grace
        self._close_grace = close_grace
        self.id = session.id

    @property
    def session(self) -> Session:
        return self._session

    @property
    def lease(self) -> Lease:
        """The lease of the session's log (its claim); SessionGone for a lost actor."""
        if self._owner.lost:
            raise SessionGone()
        log_ = self._owner.log
        if log_ is None or log_.lease is None:
            raise SessionNotFound(self.id)
        return log_.lease

    def _last_seq(self) -> int:
        log_ = self._owner.log
        return log_.last_seq if log_ is not None else 0

    def _require_live(self) -> None:
        if self._owner.deleted:
            raise SessionNotFound(self.id)

    # --- in memory only (the caller persists, or the change is not stored) -------------------

    def revise(self, **fields: Any) -> None:
        """Set ``fields`` on the live copy only (the caller persists them, or undoes them)."""
        self._session = attrs.evolve(self._session, **fields)

    def add_usage(self, input_tokens: int, output_tokens: int, cost: float) -> None:
        s = self._session
        self._session = attrs.evolve(
            s,
            input_tokens=add_count(s.input_tokens, input_tokens),
            output_tokens=add_count(s.output_tokens, output_tokens),
            cost=add_cost(s.cost, cost),
        )

    def forget_title(self, title: str) -> None:
        """The store refused ``title``: the session lives on without it (if it still has it)."""
        if self._session.title == title:
            self._session = attrs.evolve(self._session, title="")

    def replace_message(self, message_id: int, message: Message, *, or_append: bool) -> None:
        """``message`` takes the place of the stored message ``message_id`` in the live
        history; with ``or_append`` it comes last when that message was edited away (as the
        store does for a decided tool call's placeholder)."""
        stored = attrs.evolve(message, id=message_id)
        items = tuple(
            stored if isinstance(item, Message) and item.id == message_id else item
            for item in self._session.items
        )
        if or_append and stored not in items:
            items = (*items, message)
        self._session = attrs.evolve(self._session, items=items)

    def add_item(self, item: Item) -> None:
        """An item the store has already taken joins the live history."""
        self._session = self._session.with_item(item)

    # --- metadata --------------------------------------------------------------------------

    async def persist(self, *, shielded: bool = False) -> None:
        """Write the session's metadata; never for a deleted session (no resurrection)."""
        if self._owner.deleted:
            return
        if not shielded:
            await self._store.update_session(self._session)
            return
        with trio.move_on_after(self._close_grace, shield=True):
            try:
                await self._store.update_session(self._session)
            except GreenroomError:
                log.exception("persisting session %s failed", self.id)

    async def update(self, write: Callable[[], Awaitable[None]] | None, **fields: Any) -> None:
        """Set ``fields`` on the live session, then await ``write`` (None: write the session's
        metadata). If the store refuses it, the fields this call set are put back (those a
        child task changed meanwhile stay), so the live session never holds what the store
        refused; the error goes to the caller and the actor keeps serving."""
        before = {name: getattr(self._session, name) for name in fields}
        self._session = attrs.evolve(self._session, **fields)
        try:
            await (self.persist() if write is None else write())
        except GreenroomError:
            kept = {n: v for n, v in before.items() if getattr(self._session, n) == fields[n]}
            self._session = attrs.evolve(self._session, **kept)
            raise

    async def record_approval(self, approval: Approval) -> None:
        """Audit ``approval`` on the session (the newest MAX_APPROVALS are kept) and persist."""
        kept = (*self._session.approvals, approval)[-MAX_APPROVALS:]
        self._session = attrs.evolve(self._session, approvals=kept)
        await self.persist(shielded=True)

    # --- history -------------------------------------------------------------------------

    async def append_message(self, message: Message, turn_id: str = "") -> Message:
        """Store ``message`` and add it to the live history. Within a turn (``turn_id``) the
        turn's record learns that its streamed text so far is stored, and a tool result
        finishes its call's record, in the same transaction."""
        self._require_live()
        message_id = None
        with trio.move_on_after(self._write_grace, shield=True):  # module docstring
            if turn_id:
                mark = TurnMark(turn_id, self._last_seq())
                message_id = await self._writer.add_turn_message(self.id, message, mark)
            else:
                message_id = await self._store.add_message(self.id, message)
        if message_id is None:
            raise StoreError(f"the store did not confirm a message of session {self.id} in time")
        stored = attrs.evolve(message, id=message_id)
        self._session = self._session.with_item(stored)
        return stored

    async def update_message(self, message_id: int, message: Message) -> None:
        """Edit a stored message, then the live copy."""
        await self._store.update_message(self.id, message_id, message)
        self.replace_message(message_id, message, or_append=False)

    async def add_summary(self, summary: Summary) -> None:
        await self._store.add_summary(self.id, summary)
        self._session = self._session.with_item(summary)

    async def append_sub_session(self, sub_session: Session) -> None:
        """Add a finished sub-session to the history (shielded and bounded as a message)."""
        self._require_live()
        with trio.move_on_after(self._write_grace, shield=True) as scope:
            await self._store.add_sub_session(self.id, sub_session)
        if scope.cancelled_caught:
            raise StoreError(f"the store did not confirm a sub-session of session {self.id}")
        self._session = self._session.with_item(SubSession(sub_session))

    async def append_error(self, error: ErrorItem) -> None:
        self._require_live()
        with trio.move_on_after(self._write_grace, shield=True) as scope:
            await self._store.add_error(self.id, error)  # shielded and bounded as above
        if scope.cancelled_caught:
            raise StoreError(f"the store did not confirm an error of session {self.id} in time")
        self._session = self._session.with_item(error)

    # --- the turn's durable record -----------------------------------------------------------

    async def begin_turn(
        self,
        messages: tuple[Message, ...],
        turn_id: str,
        source: str,
        run: RunFacts | None = None,
    ) -> tuple[Message, ...]:
        """Store a turn's user messages together with its ``running`` record (one commit, the
        durability point before the model is called), and add them to the live history.
        ``run``: what the run record starts with (when asked for, model, webhook)."""
        self._require_live()
        start = TurnStart(
            turn_id,
            self.id,
            self._last_seq() + 1,
            utcnow(),
            source,
            self._owner.agent_name(),
            created_at=run.created_at if run is not None else None,
            model=run.model if run is not None else "",
            webhook=run.webhook if run is not None else "",
        )
        ids = None
        with trio.move_on_after(self._write_grace, shield=True):  # as above
            ids = await self._writer.begin_turn(self.lease, start, messages)
        if ids is None:
            raise StoreError(f"the store did not confirm a turn of session {self.id} in time")
        stored = tuple(attrs.evolve(m, id=i) for m, i in zip(messages, ids, strict=True))
        if run is not None:
            run.start = start
        for message in stored:
            self._session = self._session.with_item(message)
        return stored

    async def end_turn(
        self, turn_id: str, state: TurnState, reason: str = "", run: RunFacts | None = None
    ) -> None:
        """Record how the turn ended (shielded and bounded: a cancelled turn records it too),
        with its run record and, if the run asked for one, its webhook delivery (one commit).
        A lost actor records nothing: the session's next owner repairs the turn."""
        if self._owner.deleted or self._owner.lost:
            return
        end = TurnEnd(turn_id, self.id, state, self._last_seq(), reason)
        if run is not None and run.start is not None:
            now = utcnow()
            ended = ended_record(
                started_record(run.start, self.lease.epoch), state, reason, run, now
            )
            end = attrs.evolve(
                end,
                ended_at=now,
                first_token_at=ended.first_token_at,
                model=ended.model,
                input_tokens=ended.input_tokens,
                output_tokens=ended.output_tokens,
                cost=ended.cost,
                error=ended.error,
                error_code=ended.error_code,
                delivery=webhook_delivery(ended),
            )
        with trio.move_on_after(self._close_grace, shield=True):
            try:
                await self._writer.end_turn(self.lease, end)
            except GreenroomError:
                log.exception("recording the end of a turn of session %s failed", self.id)

    async def begin_tool_call(self, intent: ToolCallIntent) -> None:
        """The durability point before a tool runs: its intent is committed."""
        self._require_live()
        await self._writer.begin_tool_call(self.lease, intent)
