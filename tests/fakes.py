"""Test doubles shared by the actor and transport tests, built like the upstream fakes.

``FakeRuntime`` records what it is asked and, per turn, emits scripted events and then (when
``release`` is set up) waits for the test to release it; ``FakeFactory`` hands out runtimes;
``GatedTitles`` lets a test decide when a title arrives.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import attrs
import trio

from greenroom.actors import LogEntry, Subscription
from greenroom.agents import (
    BuiltRuntime,
    Command,
    CurrentAgent,
    ElicitationSink,
    ModelChoice,
    QueuedMessage,
    QueueStatus,
    RecallHandler,
    ResumeRequest,
    Runtime,
    TurnIO,
)
from greenroom.domain import (
    AgentChoice,
    ChatMessage,
    Event,
    Message,
    Session,
    SessionCompaction,
    StreamStarted,
    StreamStopped,
    Summary,
)
from greenroom.errors import AgentNotFound, QueueFull
from tests.slowness import slow


class FakeRuntime:
    """A Runtime that records calls. Each turn emits ``script`` then, if ``hold`` is True,
    waits until ``release()`` (or cancellation). Tracks concurrent streams."""

    def __init__(
        self,
        *,
        script: list[Event] | None = None,
        hold: bool = False,
        agents: Mapping[str, Mapping[str, Command]] | None = None,
        current: str = "root",
        model_switching: bool = False,
        queue_capacity: int = 8,
        fail_switch_to: set[str] | None = None,
        reply: str = "",
    ) -> None:
        self.script = list(script or [])
        self.hold = hold
        self._release = trio.Event()
        self.agents = {k: dict(v) for k, v in (agents or {"root": {}}).items()}
        self.current = current
        self.model_switching = model_switching
        self.queue_capacity = queue_capacity
        self.fail_switch_to = fail_switch_to or set()
        self.reply = reply
        self.streams = 0
        self.max_concurrent = 0
        self.turns = 0
        self.turn_started = trio.Event()
        self.steered: list[QueuedMessage] = []
        self.followed: list[QueuedMessage] = []
        self.resumed: list[ResumeRequest] = []
        self.elicitation_answers: list[tuple[str, Any, str]] = []
        self.sinks: list[ElicitationSink | None] = []
        self.set_agent_calls: list[str] = []
        self.model_calls: list[tuple[str, str]] = []
        self.recall: RecallHandler | None = None
        self.closed = False
        self.sessions_seen: list[Session] = []
        self.ios: list[TurnIO] = []  # each turn's TurnIO, for events a test sends late
        self.compactions: list[str] = []  # the instructions of each compaction

    def release(self) -> None:
        self._release.set()

    def rearm(self) -> None:
        self._release = trio.Event()
        self.turn_started = trio.Event()

    async def run_stream(self, io: TurnIO) -> None:
        self.streams += 1
        self.max_concurrent = max(self.max_concurrent, self.streams)
        self.turns += 1
        self.sessions_seen.append(io.session)
        self.ios.append(io)
        self.turn_started.set()
        try:
            for event in self.script:
                await io.emit(event)
            if self.reply:
                await io.emit(AgentChoice(self.reply, self.current, io.session.id))
                await io.add_message(Message.assistant(self.reply, agent_name=self.current))
            if self.hold:
                await self._release.wait()
        finally:
            self.streams -= 1

    async def compact(self, io: TurnIO, additional: str = "") -> None:
        """Stores a summary naming how many items it covers (no model)."""
        self.compactions.append(additional)
        await io.emit(SessionCompaction("started", io.session.id, self.current))
        await io.add_summary(Summary(f"{len(io.session.items)} items"))
        await io.emit(SessionCompaction("completed", io.session.id, self.current))

    async def steer(self, message: QueuedMessage) -> None:
        if len(self.steered) >= self.queue_capacity:
            raise QueueFull("steer queue full")
        self.steered.append(message)
        await trio.lowlevel.checkpoint()

    async def follow_up(self, message: QueuedMessage) -> None:
        if len(self.followed) >= self.queue_capacity:
            raise QueueFull("follow-up queue full")
        self.followed.append(message)
        await trio.lowlevel.checkpoint()

    async def resume(self, request: ResumeRequest) -> None:
        self.resumed.append(request)
        await trio.lowlevel.checkpoint()

    async def resume_elicitation(
        self, action: str, content: Mapping[str, Any] | None, elicitation_id: str = ""
    ) -> None:
        self.elicitation_answers.append((action, content, elicitation_id))
        await trio.lowlevel.checkpoint()

    def on_elicitation_request(self, sink: ElicitationSink | None) -> None:
        self.sinks.append(sink)

    def emit_elicitation(self, event: Event) -> None:
        """What a background job does: deliver through the registered sink, if any."""
        sink = self.sinks[-1] if self.sinks else None
        if sink is not None:
            sink(event)

    def current_agent(self) -> CurrentAgent:
        return CurrentAgent(self.current, "", self.agents.get(self.current, {}))

    async def set_current_agent(self, name: str) -> None:
        self.set_agent_calls.append(name)
        await trio.lowlevel.checkpoint()
        if name in self.fail_switch_to or name not in self.agents:
            raise AgentNotFound(f"agent not found: {name}")
        self.current = name

    def supports_model_switching(self) -> bool:
        return self.model_switching

    async def set_agent_model(self, agent: str, ref: str) -> None:
        self.model_calls.append((agent, ref))
        await trio.lowlevel.checkpoint()

    async def available_models(self) -> list[ModelChoice]:
        await trio.lowlevel.checkpoint()
        return [ModelChoice("default", "openai/gpt-4o", "openai", "gpt-4o", True, True)]

    def queue_status(self) -> QueueStatus:
        cap = self.queue_capacity
        return QueueStatus(len(self.steered), cap, len(self.followed), cap)

    async def aclose(self) -> None:
        self.closed = True
        await trio.lowlevel.checkpoint()


class RecallingRuntime(FakeRuntime):
    """A runtime with the optional recall capability."""

    def set_recall_handler(self, handler: RecallHandler | None) -> None:
        self.recall = handler


class MirroringRuntime(FakeRuntime):
    """Declares that elicitations reach the sink and, as a copy, its run stream."""

    mirrors_elicitation_on_run_stream = True

    def set_recall_handler(self, handler: RecallHandler | None) -> None:
        self.recall = handler


class GatedTitles:
    """A title generator that answers ``title`` once the test calls ``release()``."""

    def __init__(self, title: str = "Delayed title", *, gated: bool = True) -> None:
        self.title = title
        self.started = trio.Event()
        self._release = trio.Event()
        if not gated:
            self._release.set()
        self.calls: list[list[str]] = []

    def release(self) -> None:
        self._release.set()

    async def generate(self, user_messages: list[str]) -> str:
        self.calls.append(list(user_messages))
        self.started.set()
        await self._release.wait()
        return self.title


@attrs.define
class FakeFactory:
    """Builds ``runtime`` (or one per session from ``make``) for any known source."""

    runtime: Runtime | None = None
    titles: Any = None
    sources: tuple[str, ...] = ("agent",)
    builds: list[tuple[str, str, str]] = attrs.field(factory=list)
    made: dict[str, Runtime] = attrs.field(factory=dict)

    async def build(self, source: str, agent_name: str, session: Session) -> BuiltRuntime:
        await trio.lowlevel.checkpoint()
        if source not in self.sources:
            raise AgentNotFound(f"agent source not found: {source}")
        self.builds.append((source, agent_name, session.id))
        runtime = self.runtime if self.runtime is not None else FakeRuntime()
        self.made[session.id] = runtime
        return BuiltRuntime(runtime, self.titles)


def user(text: str) -> ChatMessage:
    return ChatMessage("user", text)


async def collect(sub: Subscription, *, limit: int = 10_000) -> tuple[list[LogEntry], bool]:
    """Entries of ``sub`` until it ends (True) or is quiet for a virtual second (False)."""
    entries: list[LogEntry] = []
    with trio.fail_after(slow(60)):
        for _ in range(limit):
            with trio.move_on_after(slow(1)):
                try:
                    entries.append(await sub.__anext__())
                except StopAsyncIteration:
                    return entries, True
                continue
            return entries, False
    raise AssertionError(f"more than {limit} entries")


async def drain(stream: Any) -> list[Any]:
    """Every entry of a run stream until it closes."""
    return [entry async for entry in stream]


STARTED = StreamStarted()
STOPPED = StreamStopped()


RFC3339_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


def without_timestamp(data: Any) -> Any:
    """An event's JSON without its ``timestamp``, after checking it carries a valid one (every
    event does, as docker-agent's do)."""
    if isinstance(data, dict) and "type" in data:
        data = dict(data)
        stamp = data.pop("timestamp", None)
        assert isinstance(stamp, str) and RFC3339_UTC.fullmatch(stamp), data
    return data


def event_json(entry: LogEntry) -> Any:
    """``entry``'s event JSON without its (checked) timestamp."""
    return without_timestamp(entry.json())
