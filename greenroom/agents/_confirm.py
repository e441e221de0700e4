"""Tool-call confirmations: the one pending question of a turn.

The turn waits on a one-slot channel registered before the question is emitted, so ``resume``
never blocks and only the first answer counts. Closing the runtime answers a pending question
with a rejection. What an answer grants lives on the session (its approvals and policy), not
here, so it survives the runtime.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from greenroom.errors import InvalidRequest, NoPendingRequest

from ._runtime import ResumeRequest

CLOSED = ResumeRequest("reject", reason="the runtime was closed")


def is_approval(answer: ResumeRequest) -> bool:
    return answer.type.startswith("approve")


def check_grant(request: ResumeRequest, asked: str) -> None:
    """Raise InvalidRequest unless an ``approve-tool`` names the asked tool (or none)."""
    name = request.tool_name
    if request.type != "approve-tool" or not name:
        return
    if any(c in name for c in "*?[]:"):
        raise InvalidRequest(
            f"approve-tool grants one tool by name, not a pattern: {name!r}", path="$.tool_name"
        )
    if asked and name.lower() != asked.lower():
        raise InvalidRequest(
            f"approve-tool names {name!r} but the asked tool is {asked!r}",
            path="$.tool_name",
        )


class Confirmations:
    def __init__(self) -> None:
        self._pending: trio.MemorySendChannel[ResumeRequest] | None = None
        self._tool = ""  # the asked tool's name
        self._lock = trio.Lock()  # one question at a time

    async def ask(self, announce: Callable[[], Awaitable[None]], tool: str = "") -> ResumeRequest:
        """Run ``announce`` (emit the confirmation event), then wait for the answer."""
        async with self._lock:
            send, recv = trio.open_memory_channel[ResumeRequest](1)
            self._pending = send
            self._tool = tool
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
        """Deliver ``request`` to the waiting turn. Raises NoPendingRequest when none waits,
        InvalidRequest for an ``approve-tool`` naming a pattern or another tool than the asked
        one (the question stays pending)."""
        if self._pending is None:
            raise NoPendingRequest("no tool call is waiting for confirmation")
        check_grant(request, self._tool)
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
