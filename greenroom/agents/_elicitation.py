"""Elicitations: a tool asks the user for input and waits for the answer.

Each request gets a unique id and a one-slot answer channel, registered *before* the request is
delivered, so an answer that arrives at once is not lost. Delivery goes to the registered sink
(the session's event log) and, when a turn is streaming, also onto its run stream. With neither,
or when the sink says nobody is listening (no open run stream, no ``/events`` subscriber),
nobody can answer: the request is declined at once instead of waiting forever. A request still
pending when a turn starts is shown on that turn's stream too (:meth:`Elicitations.pending_events`).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs
import trio

from greenroom.domain import ElicitationRequest, Event
from greenroom.errors import NoPendingRequest

from ._runtime import ElicitationSink


@attrs.frozen
class ElicitationAnswer:
    action: str
    content: Mapping[str, Any] | None = None


DECLINED = ElicitationAnswer("decline")


class Elicitations:
    """The pending elicitations of one runtime and the sink that announces them."""

    def __init__(self) -> None:
        self._sink: ElicitationSink | None = None
        self._pending: dict[str, trio.MemorySendChannel[ElicitationAnswer]] = {}
        self._events: dict[str, ElicitationRequest] = {}

    def set_sink(self, sink: ElicitationSink | None) -> None:
        self._sink = sink

    @property
    def pending(self) -> list[str]:
        return list(self._pending)

    def pending_events(self) -> list[ElicitationRequest]:
        """The requests still waiting for an answer (to show on a turn that starts now)."""
        return [self._events[i] for i in self._pending if i in self._events]

    async def request(
        self,
        message: str,
        *,
        session_id: str = "",
        schema: Any = None,
        mode: str = "form",
        url: str = "",
        meta: Any = None,
        emit: Callable[[Event], Awaitable[None]] | None = None,
    ) -> ElicitationAnswer:
        """Ask the user; returns their answer (``decline`` when nobody can answer)."""
        sink = self._sink
        if sink is None and emit is None:
            return DECLINED
        elicitation_id = str(uuid.uuid4())
        # One slot: answer() never blocks, and the first answer is the only one taken.
        send, recv = trio.open_memory_channel[ElicitationAnswer](1)
        self._pending[elicitation_id] = send
        event = ElicitationRequest(
            message=message,
            elicitation_id=elicitation_id,
            mode=mode,
            schema=schema,
            url=url,
            session_id=session_id,
            meta=meta,
        )
        self._events[elicitation_id] = event
        try:
            heard = sink(event) if sink is not None else None
            if heard is False:
                return DECLINED  # nobody listens: nobody could ever answer
            if emit is not None:
                await emit(event)
            async with recv:
                try:
                    return await recv.receive()
                except trio.EndOfChannel:
                    return DECLINED
        finally:
            self._pending.pop(elicitation_id, None)
            self._events.pop(elicitation_id, None)
            send.close()

    def answer(
        self, action: str, content: Mapping[str, Any] | None, elicitation_id: str = ""
    ) -> None:
        """Deliver an answer to request ``elicitation_id`` (or to the only pending one).

        Raises:
            NoPendingRequest: no such request, none pending, or several and no id given.
        """
        if elicitation_id:
            send = self._pending.pop(elicitation_id, None)
        elif len(self._pending) == 1:
            send = self._pending.pop(next(iter(self._pending)))
        elif self._pending:
            raise NoPendingRequest("several elicitation requests are pending; give elicitation_id")
        else:
            send = None
        if send is None:
            raise NoPendingRequest("no elicitation request in progress")
        try:
            send.send_nowait(ElicitationAnswer(action, content))
        except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
            raise NoPendingRequest("no elicitation request in progress") from None

    def close(self) -> None:
        """Decline every pending request (their waiters see the channel end)."""
        for send in self._pending.values():
            send.close()
        self._pending.clear()
