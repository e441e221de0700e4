"""Tool-call confirmations: the one pending question of a turn.

The turn waits on a one-slot channel registered before the question is emitted, so ``resume``
never blocks and only the first answer counts. Closing the runtime answers a pending question
with a rejection. What an answer grants lives on the session (its approvals and policy), not
here, so it survives the runtime.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from greenroom.errors import NoPendingRequest

from ._runtime import ResumeRequest

CLOSED = ResumeRequest("reject", reason="the runtime was closed")


def is_approval(answer: ResumeRequest) -> bool:
    return answer.type.startswith("approve")


class Confirmations:
    def __init__(self) -> None:
        self._pending: trio.MemorySendChannel[ResumeRequest] | None = None
        self._lock = trio.Lock()  # one question at a time

    async def ask(self, announce: Callable[[], Awaitable[None]]) -> ResumeRequest:
        """Run ``announce`` (emit the confirmation event), then wait for the answer."""
        async with self._lock:
            send, recv = trio.open_memory_channel[ResumeRequest](1)
            self._pending = send
            try:
                await announce()
                async with recv:
                    try:
                        return await recv.receive()
                    except trio.EndOfChannel:
                        return CLOSED
            finally:
                if self._pending is send:
                    self._pending = None
                send.close()

    def answer(self, request: ResumeRequest) -> None:
        """Deliver ``request`` to the waiting turn. Raises NoPendingRequest when none waits."""
        send, self._pending = self._pending, None
        if send is None:
            raise NoPendingRequest("no tool call is waiting for confirmation")
        try:
            send.send_nowait(request)
        except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
            raise NoPendingRequest("no tool call is waiting for confirmation") from None

    def close(self) -> None:
        """Reject the pending question, if any."""
        if self._pending is not None:
            self._pending.close()
            self._pending = None
