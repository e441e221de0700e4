"""Test doubles for the agent loop: a scripted provider and a TurnIO that records everything."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, TypeVar

import attrs
import trio

from greenroom.agents import LocalRuntime, parse_agent_file
from greenroom.agents.providers import (
    Delta,
    ModelConfig,
    ModelRequest,
    ModelResponse,
    OnDelta,
    ReasoningDelta,
    TextDelta,
)
from greenroom.domain import (
    Approval,
    ChatMessage,
    ErrorItem,
    Event,
    FunctionCall,
    Message,
    Session,
    SubSession,
    Summary,
    ToolCall,
    Usage,
    event_type,
)

E = TypeVar("E")


@attrs.define
class Step:
    """One scripted model call: stream ``deltas``, maybe wait for ``hold``, then answer."""

    deltas: list[Delta] = attrs.field(factory=list)
    response: ModelResponse | None = None
    error: Exception | None = None
    hold: trio.Event | None = None


def text(*chunks: str, usage: Usage | None = None) -> Step:
    return Step(
        deltas=[TextDelta(c) for c in chunks],
        response=ModelResponse(content="".join(chunks), usage=usage or Usage(10, 5)),
    )


def call(name: str, arguments: dict[str, Any] | str, call_id: str = "call-1") -> ToolCall:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ToolCall(id=call_id, function=FunctionCall(name=name, arguments=args))


def tool_step(*calls: ToolCall, say: str = "") -> Step:
    deltas: list[Delta] = [TextDelta(say)] if say else []
    return Step(
        deltas=deltas,
        response=ModelResponse(
            content=say, tool_calls=tuple(calls), usage=Usage(20, 3), stop_reason="tool_calls"
        ),
    )


def reasoning(thought: str, answer: str) -> Step:
    return Step(
        deltas=[ReasoningDelta(thought), TextDelta(answer)],
        response=ModelResponse(content=answer, reasoning=thought, usage=Usage(7, 9)),
    )


class FakeProvider:
    """Replays ``steps`` in order and records every request (and the model it was made for)."""

    def __init__(self, *steps: Step) -> None:
        self.steps = list(steps)
        self.requests: list[ModelRequest] = []
        self.made_for: list[ModelConfig] = []

    def add(self, *steps: Step) -> None:
        self.steps.extend(steps)

    async def complete(self, request: ModelRequest, on_delta: OnDelta) -> ModelResponse:
        self.requests.append(request)
        if not self.steps:
            raise AssertionError("the provider was called more often than scripted")
        step = self.steps.pop(0)
        for delta in step.deltas:
            await on_delta(delta)
        if step.hold is not None:
            await step.hold.wait()
        if step.error is not None:
            raise step.error
        await trio.lowlevel.checkpoint()
        assert step.response is not None
        return step.response

    def provider_for(self, model: ModelConfig) -> FakeProvider:
        self.made_for.append(model)
        return self


class FakeIO:
    """A TurnIO that keeps the session, the events and the errors it is given."""

    def __init__(self, session: Session | None = None) -> None:
        self._session = session or Session.new()
        self.events: list[Event] = []
        self.errors: list[ErrorItem] = []
        self.approvals: list[Approval] = []
        self.intents: list[tuple[str, int]] = []  # (tool call id, events emitted before it)
        self._next_id = 1

    @property
    def session(self) -> Session:
        return self._session

    async def emit(self, event: Event) -> None:
        await trio.lowlevel.checkpoint()
        self.events.append(event)

    async def add_message(self, message: Message) -> Message:
        await trio.lowlevel.checkpoint()
        stored = attrs.evolve(message, id=self._next_id)
        self._next_id += 1
        self._session = self._session.with_item(stored)
        return stored

    async def add_error(self, error: ErrorItem) -> None:
        await trio.lowlevel.checkpoint()
        self.errors.append(error)
        self._session = self._session.with_item(error)

    async def begin_tool_call(self, call: ToolCall, agent_name: str) -> None:
        await trio.lowlevel.checkpoint()
        self.intents.append((call.id, len(self.events)))

    def add_usage(self, input_tokens: int, output_tokens: int, cost: float) -> None:
        s = self._session
        self._session = attrs.evolve(
            s,
            input_tokens=s.input_tokens + input_tokens,
            output_tokens=s.output_tokens + output_tokens,
            cost=s.cost + cost,
        )

    async def record_approval(self, approval: Approval) -> None:
        await trio.lowlevel.checkpoint()
        self.approvals.append(approval)
        self._session = attrs.evolve(self._session, approvals=(*self._session.approvals, approval))

    async def add_sub_session(self, sub_session: Session) -> None:
        await trio.lowlevel.checkpoint()
        self._session = self._session.with_item(SubSession(sub_session))

    async def add_summary(self, summary: Summary) -> None:
        await trio.lowlevel.checkpoint()
        self._session = self._session.with_item(summary)

    def set_session(self, session: Session) -> None:
        """What an actor does on a resume that changes the session (policy, rules)."""
        self._session = session

    def add_user(self, content: str) -> None:
        self._session = self._session.with_item(Message.user(content))

    def types(self) -> list[str]:
        return [event_type(e) for e in self.events]

    def of(self, cls: type[E]) -> list[E]:
        return [e for e in self.events if isinstance(e, cls)]

    def messages(self) -> list[Message]:
        return [i for i in self._session.items if isinstance(i, Message)]


AGENT_YAML = """\
version: "2"
agents:
  root:
    model: openai/main
    description: The main agent
    instruction: You are the root agent.
    toolsets:
      - type: think
    commands:
      plan: {description: Plan it, agent: planner}
      hello: Say hello
  planner:
    model: alt
    description: Plans things
    instruction: You plan.
models:
  alt:
    provider: openai
    model: alternative
    title_model: openai/titles
"""


async def add_tool_exchange(io: FakeIO, tool_call: ToolCall, result: str) -> None:
    """Store an assistant message calling ``tool_call`` and the tool's ``result``."""
    assistant = ChatMessage(role="assistant", tool_calls=(tool_call,))
    await io.add_message(Message(assistant, agent_name="root"))
    tool = ChatMessage(role="tool", content=result, tool_call_id=tool_call.id)
    await io.add_message(Message(tool, agent_name="root"))


def make_runtime(
    provider: FakeProvider, yaml_text: str = AGENT_YAML, **kwargs: Any
) -> LocalRuntime:
    config = parse_agent_file(yaml_text, "agent.yaml")
    return LocalRuntime(config, provider_for=provider.provider_for, **kwargs)


def start(io: FakeIO, *users: str) -> FakeIO:
    for content in users:
        io.add_user(content)
    return io


def roles(messages: Sequence[Any]) -> list[str]:
    return [m.role for m in messages]
