"""Delegation between the agents of a team: ``transfer_task`` and ``handoff`` (spec §4.1, §4.2).

``transfer_task`` runs the task in a *sub-session*: a new session with the team-member prompt
and an implicit ``Please proceed.``, run by the same agent loop as a nested frame inside the
parent's tool call (so cancelling the parent's turn cancels it). Its events go to the parent's
stream tagged with the sub-session's own id; it asks for confirmations through the parent's
questions and sees the parent's approval rules, grants and policy as they are at each call. When
it finishes, it becomes a ``sub_session`` item of the parent and its last answer is the tool
result. Nesting works the same way, up to :data:`MAX_DEPTH`.

``handoff`` switches the agent of the running frame: the conversation goes on with the other
agent, its tools and its instructions.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs
import trio

from greenroom.domain import (
    AgentChoice,
    AgentInfo,
    AgentSwitching,
    Approval,
    ChatMessage,
    ErrorEvent,
    ErrorItem,
    Event,
    Message,
    Session,
    SubSession,
    SubSessionCompleted,
    Summary,
    ToolCall,
    add_cost,
    add_count,
    utcnow,
)

from ._config import AgentConfig
from ._frame import AgentSlot, Frame, FrameTool
from ._models import ModelTable
from ._runtime import TurnIO
from .providers._base import ToolSpec
from .tools._base import ToolAnnotations, ToolResult, error, schema, string

MAX_DEPTH = 10
"""Sub-sessions nested at most (upstream's limit for referenced agents)."""
OUTPUT_LIMIT = 10 * 1024 * 1024
"""Characters of a background task's streamed text that are kept."""

TRANSFER_SPEC = ToolSpec(
    "transfer_task",
    "Use this function to transfer a task to the selected team member. You must provide a "
    "clear and concise description of the task the member should achieve AND the expected "
    "output.",
    schema(
        {
            "agent": string("The name of the agent to transfer the task to."),
            "task": string(
                "A clear and concise description of the task the member should achieve."
            ),
            "expected_output": string("The expected output from the member (optional)."),
        },
        ("agent", "task", "expected_output"),
    ),
)
HANDOFF_SPEC = ToolSpec(
    "handoff",
    "Use this function to hand off the conversation to the selected agent.",
    schema({"agent": string("The name of the agent to hand off the conversation to.")}, ("agent",)),
)


def team_prompt(task: str, expected_output: str) -> str:
    text = (
        "You are a member of a team of agents. Your goal is to complete the following task:"
        f"\n\n<task>\n{task}\n</task>"
    )
    if expected_output.strip():
        text += f"\n\n<expected_output>\n{expected_output}\n</expected_output>"
    return text


def last_answer(session: Session) -> str:
    """The content of the session's last assistant message ("" when it has none)."""
    for item in reversed(session.items):
        if isinstance(item, Message) and item.role == "assistant" and item.content:
            return item.content
    return ""


class ChildIO:
    """The :class:`TurnIO` of a sub-session: its history kept here (stored with the parent when
    it finishes), its events forwarded to the parent's stream (``forward``) or only read for
    their text (a background task), its approvals audited on the parent."""

    def __init__(
        self,
        parent: TurnIO,
        session: Session,
        *,
        forward: bool = True,
        pre_approved: bool = False,
    ) -> None:
        self._parent = parent
        self._session = session
        self._forward = forward
        self._pre_approved = pre_approved
        self._next_id = 1
        self.error = ""
        self.output: list[str] = []
        self._output_size = 0

    @property
    def session(self) -> Session:
        """The sub-session, under the parent's approval state as it is now."""
        parent = self._parent.session
        approved = self._pre_approved or parent.tools_approved
        return attrs.evolve(
            self._session,
            permissions=parent.permissions,
            safety_policy=parent.safety_policy,
            tools_approved=approved,
            approvals=parent.approvals,
        )

    @property
    def parent(self) -> TurnIO:
        """The IO of the frame that delegated (budgets count the whole team's spend)."""
        return self._parent

    @property
    def record(self) -> Session:
        """The sub-session as it will be stored (its own approval settings)."""
        return self._session

    async def emit(self, event: Event) -> None:
        if isinstance(event, ErrorEvent):
            self.error = event.error
        if isinstance(event, AgentChoice) and self._output_size < OUTPUT_LIMIT:
            text = event.content[: OUTPUT_LIMIT - self._output_size]
            self.output.append(text)
            self._output_size += len(text)
        if self._forward:
            await self._parent.emit(event)

    async def add_message(self, message: Message) -> Message:
        stored = attrs.evolve(message, id=self._next_id)
        self._next_id += 1
        self._session = self._session.with_item(stored)
        return stored

    async def add_error(self, error: ErrorItem) -> None:
        self._session = self._session.with_item(error)

    def add_usage(self, input_tokens: int, output_tokens: int, cost: float) -> None:
        s = self._session
        self._session = attrs.evolve(
            s,
            input_tokens=add_count(s.input_tokens, input_tokens),
            output_tokens=add_count(s.output_tokens, output_tokens),
            cost=add_cost(s.cost, cost),
        )

    async def record_approval(self, approval: Approval) -> None:
        await self._parent.record_approval(approval)

    async def begin_tool_call(self, call: ToolCall, agent_name: str) -> None:
        """Not a durability point of its own: a sub-session is stored when it finishes, and
        the parent's call that runs it (``transfer_task``) has its intent committed already;
        after a crash that call is in doubt as a whole."""
        await trio.lowlevel.checkpoint()

    async def add_sub_session(self, sub_session: Session) -> None:
        self._session = self._session.with_item(SubSession(sub_session))

    async def add_summary(self, summary: Summary) -> None:
        self._session = self._session.with_item(summary)


def child_session(
    parent: Session, agent: AgentConfig, task: str, expected_output: str, title: str
) -> Session:
    """A sub-session for ``agent`` to do ``task``: the team-member prompt, then an implicit
    ``Please proceed.``."""
    now = utcnow()
    system = ChatMessage(role="system", content=team_prompt(task, expected_output), created_at=now)
    proceed = ChatMessage(role="user", content="Please proceed.", created_at=now)
    return Session.new(
        title=title,
        working_dir=parent.working_dir,
        permissions=parent.permissions,
        safety_policy=parent.safety_policy,
        tools_approved=parent.tools_approved,
        max_iterations=agent.max_iterations,
        items=(Message(system, agent_name=agent.name), Message(proceed, implicit=True)),
    )


def _not_listed(current: str, target: str, what: str, listed: tuple[str, ...]) -> str:
    verb, kind = what.split(":")
    available = (
        f"Available agent IDs are: {', '.join(listed)}"
        if listed
        else "No agents are configured in this list."
    )
    return f"Agent {current} cannot {verb} {target}: target agent not in {kind} list. {available}"


RunFrame = Callable[[Frame], Awaitable[str]]


class Delegation:
    """The ``transfer_task`` and ``handoff`` tools of one runtime."""

    def __init__(
        self, agents: Mapping[str, AgentConfig], models: ModelTable, run: RunFrame
    ) -> None:
        self._agents = agents
        self._models = models
        self._run = run

    def tools_for(self, agent: AgentConfig) -> list[FrameTool]:
        """The implicit delegation tools of ``agent`` (upstream adds them after its toolsets)."""
        tools = []
        if agent.sub_agents:
            annotations = ToolAnnotations(title="Transfer Task", read_only=True)
            tools.append(FrameTool(TRANSFER_SPEC, self.transfer, annotations, "transfer"))
        if agent.handoffs:
            annotations = ToolAnnotations(title="Handoff Conversation", read_only=True)
            tools.append(FrameTool(HANDOFF_SPEC, self.handoff, annotations, "handoff"))
        return tools

    def _info(self, agent: AgentConfig) -> AgentInfo:
        return AgentInfo(
            agent_name=agent.name,
            model=self._models.model_of(agent).ref,
            description=agent.description,
        )

    async def transfer(self, frame: Frame, args: Mapping[str, Any]) -> ToolResult:
        current = frame.agent
        target_name = str(args.get("agent", ""))
        if target_name not in current.sub_agents or target_name not in self._agents:
            listed = current.sub_agents
            return error(
                _not_listed(current.name, target_name, "transfer task to:sub-agents", listed)
            )
        if frame.depth >= MAX_DEPTH:
            return error(f"transfer_task: sub-sessions are nested at most {MAX_DEPTH} deep")
        target = self._agents[target_name]
        io = frame.io
        task, expected = str(args.get("task", "")), str(args.get("expected_output", ""))
        session = child_session(io.session, target, task, expected, "Transferred task")
        child = ChildIO(io, session)
        nested = Frame(
            child,
            AgentSlot(target),
            depth=frame.depth + 1,
            root=False,
            task_prompt=team_prompt(task, expected),
        )
        await io.emit(AgentSwitching(True, current.name, target.name, agent_name=current.name))
        frame.slot.agent = target  # the session's status shows who works now
        try:
            await io.emit(self._info(target))
            await self._run(nested)
        except BaseException:
            frame.slot.agent = current
            raise
        frame.slot.agent = current
        if child.error:
            result = error(f"Error calling tool: {child.error}")
        else:
            record = child.record
            await io.add_sub_session(record)
            await io.emit(SubSessionCompleted(io.session.id, record, agent_name=target.name))
            result = ToolResult(last_answer(record))
        await io.emit(AgentSwitching(False, target.name, current.name, agent_name=current.name))
        await io.emit(self._info(current))
        return result

    async def handoff(self, frame: Frame, args: Mapping[str, Any]) -> ToolResult:
        current = frame.agent
        target_name = str(args.get("agent", ""))
        if target_name not in current.handoffs or target_name not in self._agents:
            return error(
                _not_listed(current.name, target_name, "hand off to:handoffs", current.handoffs)
            )
        target = self._agents[target_name]
        frame.slot.agent = target
        await frame.io.emit(
            AgentSwitching(True, current.name, target.name, agent_name=current.name)
        )
        await frame.io.emit(self._info(target))
        return ToolResult(
            f"The conversation was handed off from {current.name} to {target.name}. "
            f"You are {target.name} now: carry on with the conversation, and use only the tools "
            "and handoffs your own instructions give you."
        )
