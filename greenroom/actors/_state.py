"""The records a session actor keeps its state in (plain data; only ``_session.py`` writes
them): the runtime and how it came, the title task, the lifecycle, the stream state."""

from __future__ import annotations

import attrs
import trio

from greenroom.agents import Runtime, TitleGenerator

from ._commands import Call, Turn
from ._results import GuardTicket, StreamState


@attrs.define(eq=False)
class RuntimeSlot:
    """The runtime and how it came: built by the factory (from ``source``), or attached."""

    runtime: Runtime | None = None
    source: str = ""  # the agent source and agent the runtime was built from
    agent: str = ""
    title_generator: TitleGenerator | None = None
    # Building a runtime (and starting its MCP servers) runs in a child task, so the mailbox
    # keeps serving; calls that need the runtime wait in ``parked`` until it is installed.
    building: bool = False
    parked: list[Call] = attrs.Factory(list)
    scope: trio.CancelScope | None = None  # the build task, then the runtime's services
    attached_done: trio.Event | None = None  # set on delete: the attach context ended


@attrs.define(eq=False)
class TitleSlot:
    scope: trio.CancelScope | None = None  # the title task, while it runs
    requested: bool = False  # a title was asked of a model (asked once per actor)


@attrs.define(eq=False)
class Lifecycle:
    deleted: bool = False
    stopping: bool = False
    lost: bool = False  # lose(): the registry forgot this actor; its late events are dropped
    last_active: float = 0.0


@attrs.define(eq=False)
class StreamSlot:
    state: StreamState = StreamState.IDLE
    turn: Turn | None = None
    # A list, not a deque: it is nearly always empty, and an empty deque costs ~700 bytes.
    guard_queue: list[GuardTicket] = attrs.Factory(list)
    guard_free: trio.Event = attrs.Factory(trio.Event)
    turn_ended: trio.Event = attrs.Factory(trio.Event)
    mailbox_peak: int = 0
