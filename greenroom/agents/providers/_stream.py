"""Assembling one streamed answer: text, reasoning, tool calls split across chunks, usage.

Vendor modules translate their stream events into calls on :class:`StreamAssembly`; it forwards
text and reasoning to the caller's ``on_delta`` as they come and builds the final
:class:`ModelResponse`. It knows nothing about HTTP or any SDK.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator, Iterator
from typing import TypeVar

import attrs
import trio

from greenroom.domain import FunctionCall, ToolCall, Usage
from greenroom.errors import ModelStreamMalformed, ModelTimeout

from ._base import Delta, ModelResponse, OnDelta, ReasoningDelta, TextDelta

T = TypeVar("T")


@attrs.define
class _PendingCall:
    id: str
    name: str
    arguments: list[str] = attrs.Factory(list)


class StreamAssembly:
    """The state of one streamed model answer.

    ``emitted`` turns true once anything reached ``on_delta``: from then on a failed call must
    not be retried, or the client would see the same tokens twice.
    """

    def __init__(self, on_delta: OnDelta) -> None:
        self._on_delta = on_delta
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._calls: list[_PendingCall] = []
        self._by_key: dict[int, _PendingCall] = {}
        self.emitted = False
        self.usage = Usage()
        self.stop_reason = ""
        self.model = ""
        self.signature = ""

    async def text(self, fragment: str) -> None:
        if fragment:
            self._text.append(fragment)
            self.emitted = True
            await self._on_delta(TextDelta(fragment))

    async def reasoning(self, fragment: str) -> None:
        if fragment:
            self._reasoning.append(fragment)
            self.emitted = True
            await self._on_delta(ReasoningDelta(fragment))

    async def forward(self, delta: Delta | None) -> None:
        if isinstance(delta, TextDelta):
            await self.text(delta.text)
        elif isinstance(delta, ReasoningDelta):
            await self.reasoning(delta.text)

    def tool_fragment(
        self, key: int, *, call_id: str | None = None, name: str | None = None, arguments: str = ""
    ) -> None:
        """Add one fragment of the tool call at stream position ``key``.

        The first fragment of a call carries its id and name, later ones only more arguments.
        A fragment with a new id at a used position starts a new call: some OpenAI-compatible
        servers send every call at index 0.
        """
        pending = self._by_key.get(key)
        if pending is None or (call_id and pending.id and call_id != pending.id):
            pending = _PendingCall(id=call_id or "", name=name or "")
            self._by_key[key] = pending
            self._calls.append(pending)
        else:
            pending.id = pending.id or call_id or ""
            pending.name = pending.name or name or ""
        if arguments:
            pending.arguments.append(arguments)

    def response(self, *, default_stop: str = "stop") -> ModelResponse:
        """The whole answer; raises ModelStreamMalformed for a tool call that never got a name."""
        calls = []
        for n, pending in enumerate(self._calls):
            if not pending.name:
                raise ModelStreamMalformed(f"the model streamed a tool call #{n} without a name")
            arguments = "".join(pending.arguments) or "{}"
            call_id = pending.id or f"call_{n}"
            calls.append(ToolCall(id=call_id, function=FunctionCall(pending.name, arguments)))
        return ModelResponse(
            content="".join(self._text),
            reasoning="".join(self._reasoning),
            tool_calls=tuple(calls),
            usage=self.usage,
            stop_reason=self.stop_reason or default_stop,
            model=self.model,
            thinking_signature=self.signature,
        )


@contextlib.contextmanager
def idle_limit(idle: float | None, ref: str) -> Iterator[None]:
    """Turn a wait of more than ``idle`` seconds (None: no limit) into ModelTimeout."""
    with trio.move_on_after(math.inf if idle is None else idle) as scope:
        yield
    if scope.cancelled_caught:
        raise ModelTimeout(f"{ref}: no data from the model for {idle:g}s")


class IdleClock:
    """The deadline of :func:`idle_watch`: ``pause`` while the caller is busy with what arrived
    (a slow client is not a silent model), ``restart`` before waiting for more."""

    def __init__(self, scope: trio.CancelScope, idle: float | None) -> None:
        self._scope = scope
        self._idle = math.inf if idle is None else idle

    def pause(self) -> None:
        self._scope.deadline = math.inf

    def restart(self) -> None:
        self._scope.deadline = trio.current_time() + self._idle


@contextlib.contextmanager
def idle_watch(idle: float | None, ref: str) -> Iterator[IdleClock]:
    """One cancel scope for a whole stream whose deadline moves (cheaper per read than a
    :func:`idle_limit` each); raises ModelTimeout when the model was silent for ``idle``."""
    with trio.CancelScope() as scope:
        clock = IdleClock(scope, idle)
        clock.restart()
        yield clock
    if scope.cancelled_caught:
        raise ModelTimeout(f"{ref}: no data from the model for {idle:g}s")


async def next_within(events: AsyncIterator[T], idle: float | None, ref: str) -> T | None:
    """The next stream event, or None at the end of the stream.

    Raises:
        ModelTimeout: nothing arrived for ``idle`` seconds.
    """
    with idle_limit(idle, ref):
        try:
            return await anext(events)
        except StopAsyncIteration:
            return None
    raise AssertionError("unreachable: idle_limit raises when it cancels")
