"""The A2A tasks of ``greenroom serve a2a`` (decision 0035): each task is one turn of a
greenroom session, run through the registry like any other turn.

An A2A ``contextId`` *is* a session id: the first message of a context creates the session
(``Session.new`` with that id), and later messages of the context run turns on it, so a follow-up
continues the conversation (and survives a restart: the session is in the store). One task runs
per context at a time; another message for a busy context is refused (``-32000``) rather than
queued, since A2A has no follow-up queue. A task's turn runs in the server's nursery with
``on_disconnect="continue"``: a client that leaves a stream (or a ``message/send``) early does
not stop it, and ``tasks/get`` / ``tasks/resubscribe`` find it later.

Nobody answers tool approvals over A2A: a tool call that asks (``tool_call_confirmation``) is
rejected at once, recorded as any rejection is, and the model is told so (the session's
permission rules still decide first: an *allow* rule runs the tool, a *deny* rule refuses it).

The table keeps at most ``KEEP`` tasks (the oldest finished ones go first) and runs at most
``RUNNING`` at once. Only this module writes it, from synchronous methods.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping
from typing import Any

import attrs
import trio

from greenroom.actors import Registry, RunStream
from greenroom.agents import ResumeRequest
from greenroom.domain import ChatMessage, Session
from greenroom.errors import GreenroomError, SessionNotFound

from . import _a2a_wire as w

log = logging.getLogger("greenroom.a2a")

KEEP = 1000  # tasks kept for tasks/get
RUNNING = 64  # tasks running at once
CANCEL_WAIT = 10.0  # seconds tasks/cancel waits for the turn to end
REJECTED = "No one can approve tool calls over A2A: the call was rejected."


@attrs.define(eq=False)
class A2ATask:
    """One task: its state, its answer so far, and the A2A events it produced, in order."""

    id: str
    context_id: str
    message: Mapping[str, Any]
    state: str = "submitted"
    text: list[str] = attrs.Factory(list)
    error: str = ""
    cancel_requested: bool = False
    artifact_id: str = attrs.Factory(w.new_id)
    events: list[dict[str, Any]] = attrs.Factory(list)
    done: trio.Event = attrs.Factory(trio.Event)
    changed: trio.Event = attrs.Factory(trio.Event)

    @property
    def finished(self) -> bool:
        return self.state in w.TERMINAL

    def status(self) -> dict[str, Any]:
        message = None
        if self.state == "failed":
            message = w.agent_message(self.error or "the turn failed", self.context_id, self.id)
        return w.status(self.state, message)

    def snapshot(self, history_length: int | None = None) -> dict[str, Any]:
        """The ``Task`` object: status, history (the user's message) and the answer as one
        artifact."""
        history = [
            {**self.message, "kind": "message", "taskId": self.id, "contextId": self.context_id}
        ]
        if history_length is not None:
            history = history[len(history) - history_length :] if history_length > 0 else []
        task: dict[str, Any] = {
            "kind": "task",
            "id": self.id,
            "contextId": self.context_id,
            "status": self.status(),
            "history": history,
        }
        if self.text:
            task["artifacts"] = [
                {
                    "artifactId": self.artifact_id,
                    "name": "response",
                    "parts": w.text_parts("".join(self.text)),
                }
            ]
        return task

    def push(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        self.changed.set()
        self.changed = trio.Event()

    def to_state(self, state: str) -> None:
        self.state = state
        final = state in w.TERMINAL
        self.push(w.status_update(self.id, self.context_id, self.status(), final))
        if final:
            self.done.set()

    def add_text(self, delta: str) -> None:
        first = not self.text
        self.text.append(delta)
        self.push(
            w.artifact_update(
                self.id, self.context_id, self.artifact_id, delta, append=not first, last=False
            )
        )

    def finish(self, state: str) -> None:
        if self.text:  # the artifact is complete
            self.push(
                w.artifact_update(
                    self.id, self.context_id, self.artifact_id, "", append=True, last=True
                )
            )
        self.to_state(state)

    async def follow(self, start: int) -> AsyncIterator[dict[str, Any]]:
        """The events from index ``start`` on, as they come, until the task finished."""
        index = start
        while True:
            changed = self.changed
            while index < len(self.events):
                yield self.events[index]
                index += 1
            if self.finished:
                return
            await changed.wait()


class A2AAgent:
    """The agent served: starts, finds and cancels tasks; their turns run in ``nursery``."""

    def __init__(
        self,
        registry: Registry,
        nursery: trio.Nursery,
        source: str,
        agent_name: str = "",
        working_dir: str = "",
    ) -> None:
        self.registry = registry
        self.nursery = nursery
        self.source = source
        self.agent_name = agent_name
        self.working_dir = working_dir
        self.tasks: OrderedDict[str, A2ATask] = OrderedDict()
        self.running: dict[str, str] = {}  # context id -> its running task's id

    def find(self, task_id: str) -> A2ATask:
        task = self.tasks.get(task_id)
        if task is None:
            raise w.RpcError(w.TASK_NOT_FOUND, f"Task not found: {task_id}")
        return task

    def start(self, incoming: w.Incoming) -> A2ATask:
        """A new task for ``incoming``, its turn started (synchronous: no other task can take
        the context between the check and the start)."""
        if incoming.task_id:
            known = self.find(incoming.task_id)
            if known.finished:
                raise w.params_error(
                    f"task {known.id} is {known.state}: a finished task takes no more messages "
                    "(send without taskId, in its contextId, to continue the conversation)"
                )
            raise self._busy(known)
        context = incoming.context_id or w.new_id()
        running = self.running.get(context)
        if running is not None:
            raise self._busy(self.tasks[running])
        if len(self.running) >= RUNNING:
            raise w.RpcError(w.CONTEXT_BUSY, f"{RUNNING} tasks are running: try again later")
        task = A2ATask(w.new_id(), context, incoming.message)
        self._keep(task)
        self.running[context] = task.id
        task.push(task.snapshot())
        self.nursery.start_soon(self._run, task, incoming.text)
        return task

    async def cancel(self, task_id: str) -> A2ATask:
        task = self.find(task_id)
        if task.finished:
            raise w.RpcError(w.TASK_NOT_CANCELABLE, f"Task cannot be canceled: it is {task.state}")
        task.cancel_requested = True
        await self._cancel_turn(task)
        with trio.move_on_after(CANCEL_WAIT):
            await task.done.wait()
        return task

    def _busy(self, task: A2ATask) -> w.RpcError:
        return w.RpcError(
            w.CONTEXT_BUSY,
            f"context {task.context_id} is busy with task {task.id}: wait for it to finish, "
            "or cancel it (tasks/cancel)",
            {"taskId": task.id, "contextId": task.context_id},
        )

    def _keep(self, task: A2ATask) -> None:
        self.tasks[task.id] = task
        if len(self.tasks) > KEEP:
            for old in [t for t in self.tasks.values() if t.finished][: len(self.tasks) - KEEP]:
                del self.tasks[old.id]

    async def _cancel_turn(self, task: A2ATask) -> None:
        try:
            await self.registry.session(task.context_id).cancel_turn()
        except GreenroomError as exc:
            log.info("a2a: cancelling task %s: %s", task.id, exc)

    async def _run(self, task: A2ATask, text: str) -> None:
        try:
            await self._turn(task, text)
        except GreenroomError as exc:
            task.error = f"{exc.code}: {exc.message}"
        except Exception as exc:  # a defect: the task fails, the server goes on
            log.exception("a2a: task %s failed", task.id)
            task.error = f"internal_error: {type(exc).__name__}"
        finally:
            del self.running[task.context_id]
            if task.cancel_requested:
                state = "canceled"
            else:
                state = "failed" if task.error else "completed"
            task.finish(state)

    async def _turn(self, task: A2ATask, text: str) -> None:
        stream = await self._open(task.context_id, text)
        try:
            task.to_state("working")
            if task.cancel_requested:  # asked while the turn was starting
                await self._cancel_turn(task)
            async for entry in stream:
                self._seen(task, entry.type, entry.json())
        finally:
            stream.close()

    def _seen(self, task: A2ATask, kind: str, body: Any) -> None:
        if not isinstance(body, dict):
            return
        ours = body.get("session_id", "") in ("", task.context_id)
        if kind == "agent_choice" and ours and body.get("content"):
            task.add_text(str(body["content"]))
        elif kind == "error" and ours:
            task.error = str(body.get("error") or "the turn failed")
        elif kind == "tool_call_confirmation":
            self.nursery.start_soon(self._reject, task)

    async def _reject(self, task: A2ATask) -> None:
        try:
            await self.registry.session(task.context_id).resume(
                ResumeRequest("reject", reason=REJECTED, decided_by="a2a")
            )
        except GreenroomError as exc:  # the question went away meanwhile
            log.info("a2a: rejecting a tool call of task %s: %s", task.id, exc)

    async def _open(self, session_id: str, text: str) -> RunStream:
        try:
            await self.registry.get(session_id)
        except SessionNotFound:
            await self.registry.create(
                Session.new(session_id=session_id, working_dir=self.working_dir)
            )
        return await self.registry.session(session_id).run(
            self.source,
            (ChatMessage("user", text),),
            agent_name=self.agent_name,
            on_disconnect="continue",
        )
