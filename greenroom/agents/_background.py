"""Background agent tasks: a sub-agent working on a task while the session goes on (spec §4.3).

A task is a service of the runtime (a child of the session actor, not of the turn that started
it): it outlives that turn, and stops when the runtime stops or ``stop_background_agent`` says
so. It runs in a sub-session whose tool calls never ask (as upstream: they are all pre-approved;
the session's deny rules still hold), and whose elicitations reach ``/events`` subscribers.
When it ends (completed or failed) the session is *recalled*: its record becomes a
``sub_session`` item and a message reporting the result is injected into the running turn or
starts a new turn, so the result shows up on ``/events`` without a client asking.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs
import trio

from greenroom.observe import span

from ._config import AgentConfig
from ._delegation import ChildIO, child_session, last_answer, team_prompt
from ._frame import AgentSlot, Frame
from ._runtime import QueuedMessage, RecallHandler
from .tools._base import ServicesUnavailable, ToolResult, error

log = logging.getLogger(__name__)

MAX_RUNNING = 20
MAX_STORED = 100
RECALL_BUDGET = 30.0
"""Seconds a finished task may take to hand its result to the session."""


@attrs.define(eq=False)
class BackgroundTask:
    id: str
    agent: str
    task: str
    started: float
    status: str = "running"  # running, completed, failed, stopped
    ended: float | None = None
    result: str = ""
    error: str = ""
    io: ChildIO | None = None
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)

    def runtime(self) -> str:
        end = self.ended if self.ended is not None else trio.current_time()
        return f"{round(end - self.started)}s"


RunFrame = Callable[[Frame], Awaitable[str]]
StartService = Callable[[Callable[[], Awaitable[None]]], None]


class BackgroundAgents:
    """The background tasks of one runtime."""

    def __init__(
        self,
        agents: Mapping[str, AgentConfig],
        run: RunFrame,
        start_service: StartService,
        recall: Callable[[], RecallHandler | None],
    ) -> None:
        self._agents = agents
        self._run = run
        self._start_service = start_service
        self._recall = recall
        self.tasks: dict[str, BackgroundTask] = {}

    @property
    def running(self) -> int:
        return sum(1 for task in self.tasks.values() if task.status == "running")

    async def start(self, frame: Frame, args: Mapping[str, Any]) -> ToolResult:
        await trio.lowlevel.checkpoint()
        agent_name = str(args.get("agent") or "").strip()
        task_text = str(args.get("task") or "").strip()
        expected = str(args.get("expected_output") or "")
        if not agent_name:
            return error("agent name must not be empty")
        if not task_text:
            return error("task must not be empty")
        subs = frame.agent.sub_agents
        if agent_name not in subs or agent_name not in self._agents:
            if not subs:
                return error(
                    f'agent "{agent_name}" is not in the sub-agents list. '
                    "This agent has no sub-agents configured."
                )
            return error(
                f'agent "{agent_name}" is not in the sub-agents list. Available: {", ".join(subs)}'
            )
        if self.running >= MAX_RUNNING:
            return error(
                f"maximum concurrent background agent tasks ({MAX_RUNNING}) reached; stop or "
                "wait for existing tasks to complete"
            )
        if len(self.tasks) >= MAX_STORED:
            self.tasks = {k: t for k, t in self.tasks.items() if t.status == "running"}
            if len(self.tasks) >= MAX_STORED:
                return error(
                    f"maximum total background agent tasks ({MAX_STORED}) reached; view and "
                    "discard old tasks first"
                )
        agent = self._agents[agent_name]
        session = child_session(
            frame.io.session, agent, task_text, expected, "Background agent task"
        )
        child = ChildIO(frame.io, session, forward=False, pre_approved=True)
        task = BackgroundTask(
            f"agent_task_{uuid.uuid4()}", agent_name, task_text, trio.current_time(), io=child
        )
        nested = Frame(
            child,
            AgentSlot(agent),
            depth=frame.depth + 1,
            root=False,
            task_prompt=team_prompt(task_text, expected),
            background=True,
        )
        try:
            self._start_service(lambda: self._work(task, nested))
        except ServicesUnavailable:
            return error("background agents need a running session (the runtime runs no services)")
        self.tasks[task.id] = task
        return ToolResult(
            f"Background agent task started with ID: {task.id}\nAgent: {agent_name}\n"
            f"Task: {task_text}"
        )

    async def _work(self, task: BackgroundTask, frame: Frame) -> None:
        child = task.io
        assert child is not None
        # Under the tool call that started it: a service is spawned from that call's task.
        traced = span(f"background_agent {task.agent}", {"greenroom.task.id": task.id})
        try:
            with task.scope, traced:
                await self._run(frame)
        except Exception:  # the loop reports its own failures; this is a bug
            log.exception("background task %s crashed", task.id)
            child.error = child.error or "the background task crashed"
        except BaseException:
            task.status, task.ended = "stopped", trio.current_time()  # the runtime stops
            raise
        task.ended = trio.current_time()
        if task.scope.cancelled_caught or task.status == "stopped":
            task.status = "stopped"  # stop_background_agent: the model knows already
            return
        if child.error:
            task.status, task.error = "failed", child.error
        else:
            task.status, task.result = "completed", last_answer(child.record)
        await self._report(task, child)

    async def _report(self, task: BackgroundTask, child: ChildIO) -> None:
        recall = self._recall()
        if recall is None:
            return
        if task.status == "completed":
            body = task.result or "<no output>"
        else:
            body = f"<task failed>\nError: {task.error}"
        text = (
            f"Background agent task {task.id} (agent {task.agent}) finished with status "
            f"{task.status}.\n\n{body}"
        )
        with trio.move_on_after(RECALL_BUDGET):
            try:
                await recall(QueuedMessage(text), child.record)
            except Exception:
                log.exception("recalling the session after background task %s failed", task.id)

    def list(self) -> ToolResult:
        lines = ["Background Agent Tasks:\n\n"]
        if not self.tasks:
            lines.append("No background agent tasks found.\n")
        for task in self.tasks.values():
            lines.append(
                f"ID: {task.id}\n  Agent:   {task.agent}\n  Status:  {task.status}\n"
                f"  Runtime: {task.runtime()}\n\n"
            )
        return ToolResult("".join(lines))

    def view(self, task_id: str) -> ToolResult:
        task = self.tasks.get(task_id)
        if task is None:
            return error(f"task not found: {task_id}")
        head = (
            f"Task ID: {task.id}\nAgent:   {task.agent}\nStatus:  {task.status}\n"
            f"Runtime: {task.runtime()}\n\n--- Output ---\n"
        )
        if task.status == "completed":
            body = task.result or "<no output>"
        elif task.status == "failed":
            body = f"<task failed>\nError: {task.error}"
        elif task.status == "stopped":
            body = "<task was stopped>"
        else:
            text = "".join(task.io.output) if task.io is not None else ""
            body = f"{text}\n\n[still running...]" if text else "<no output yet — still running>"
        return ToolResult(head + body)

    def stop(self, task_id: str) -> ToolResult:
        task = self.tasks.get(task_id)
        if task is None:
            return error(f"task not found: {task_id}")
        if task.status != "running":
            return error(f"task {task_id} is not running (status: {task.status})")
        task.status = "stopped"
        task.scope.cancel(reason="stop_background_agent")
        return ToolResult(f"Background agent task {task_id} stopped.")
