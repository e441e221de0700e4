"""What callers hold: a session's typed API, and an embedder's streaming guard."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import trio

from greenroom.agents import ModelChoice, QueuedMessage, ResumeRequest
from greenroom.domain import ChatMessage, Message, Permissions, Summary, utcnow
from greenroom.persistence import ToolCallRecord

from . import _commands as c
from ._context import GuardHost, SessionCaller
from ._results import (
    DecisionOutcome,
    DisconnectPolicy,
    FollowUpInjector,
    FollowUpResult,
    QueueDepth,
    RunStream,
    SessionSnapshot,
    SessionStatus,
)


class StreamGuard:
    """What an embedder holds around each turn it runs on its attached runtime.

    ``async with guard:`` waits until the session is idle and marks it busy; runs, message
    edits and other guards are refused or wait meanwhile. ``done`` is set when the session is
    deleted (the embedder should end its stream).
    """

    def __init__(self, host: GuardHost, session_id: str, done: trio.Event) -> None:
        self._host = host
        self.session_id = session_id
        self.done = done
        self._release: Callable[[], None] | None = None

    async def acquire(self) -> None:
        self._release = await self._host.acquire_guard(self.session_id)

    def release(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release()

    async def __aenter__(self) -> StreamGuard:
        await self.acquire()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release()


class SessionHandle:
    """The typed API of one session, as the transports use it.

    Every method sends one command to the session's actor (spawning it) and returns its
    answer. Each may raise SessionNotFound (no such session, or deleted), SessionGone (its
    actor stopped before answering) or NodeFenced (this cluster node lost its lease), besides
    the errors it names.
    """

    def __init__(self, caller: SessionCaller, session_id: str) -> None:
        self._caller = caller
        self.session_id = session_id

    async def snapshot(self) -> SessionSnapshot:
        return await self._caller.call(self.session_id, c.GetSnapshot())

    async def status(self) -> SessionStatus:
        """Raises SessionNotRunning when the session has no runtime and builds none."""
        return await self._caller.call(self.session_id, c.GetStatus())

    async def run(
        self,
        source: str,
        messages: tuple[ChatMessage, ...],
        *,
        agent_name: str = "",
        model: str = "",
        on_disconnect: DisconnectPolicy = "cancel",
        webhook: str = "",
    ) -> RunStream:
        """Start a turn (building the runtime from ``source`` first if there is none).

        Raises:
          SessionBusy: a turn runs, or an embedder holds the guard.
          NeedsDecision: tool calls of an interrupted turn are in doubt.
          AgentSwitchFailed: an agent-switch command of ``messages`` failed.
          ModelSwitchingNotSupported: ``model`` was given to a runtime that cannot switch.
        """
        request = c.RunTurn(
            source, agent_name, tuple(messages), model, on_disconnect, webhook, utcnow()
        )
        return await self._caller.call(self.session_id, request)

    async def cancel_turn(self) -> bool:
        """Cancel the running turn; False when none was running (nothing changed)."""
        return await self._caller.call(self.session_id, c.CancelTurn())

    async def steer(self, messages: tuple[QueuedMessage, ...]) -> None:
        await self._caller.call(self.session_id, c.Steer(messages))

    async def follow_up(
        self, messages: tuple[QueuedMessage, ...], idempotency_key: str = ""
    ) -> FollowUpResult:
        return await self._caller.call(self.session_id, c.FollowUp(messages, idempotency_key))

    async def resume(self, request: ResumeRequest) -> None:
        await self._caller.call(self.session_id, c.Resume(request))

    async def answer_elicitation(
        self, action: str, content: Mapping[str, Any] | None, elicitation_id: str = ""
    ) -> None:
        request = c.AnswerElicitation(action, content, elicitation_id)
        await self._caller.call(self.session_id, request)

    async def add_message(self, message: Message) -> int:
        """Raises SessionBusy while a turn runs."""
        return await self._caller.call(self.session_id, c.AddMessage(message))

    async def update_message(self, message_id: str, message: Message) -> None:
        """Raises SessionBusy while a turn runs, InvalidMessageId for a malformed id."""
        await self._caller.call(self.session_id, c.UpdateMessage(message_id, message))

    async def add_summary(self, summary: Summary) -> None:
        await self._caller.call(self.session_id, c.AddSummary(summary))

    async def set_title(self, title: str) -> None:
        await self._caller.call(self.session_id, c.SetTitle(title))

    async def set_permissions(self, permissions: Permissions | None) -> None:
        await self._caller.call(self.session_id, c.SetPermissions(permissions))

    async def set_tokens(self, input_tokens: int, output_tokens: int, cost: float | None) -> None:
        await self._caller.call(self.session_id, c.SetTokens(input_tokens, output_tokens, cost))

    async def set_starred(self, starred: bool) -> None:
        await self._caller.call(self.session_id, c.SetStarred(starred))

    async def set_safety_policy(self, policy: str) -> None:
        await self._caller.call(self.session_id, c.SetSafetyPolicy(policy))

    async def toggle_tool_approval(self, decided_by: str = "") -> None:
        await self._caller.call(self.session_id, c.ToggleToolApproval(decided_by))

    async def toggle_thinking(self) -> None:
        await self._caller.call(self.session_id, c.ToggleThinking())

    async def queue_depth(self) -> QueueDepth:
        return await self._caller.call(self.session_id, c.GetQueueDepth())

    async def models(self) -> tuple[str, str, list[ModelChoice]]:
        """The current agent, its model override and the models it may switch to."""
        return await self._caller.call(self.session_id, c.GetModels())

    async def set_model(self, agent: str, ref: str) -> None:
        await self._caller.call(self.session_id, c.SetModel(agent, ref))

    async def register_follow_up_injector(self, injector: FollowUpInjector | None) -> None:
        await self._caller.call(self.session_id, c.RegisterInjector(injector))

    async def compact(self, source: str = "", agent_name: str = "", instructions: str = "") -> None:
        """Start compacting the history (events on the session's event log)."""
        await self._caller.call(self.session_id, c.Compact(source, agent_name, instructions))

    async def recall(self, message: QueuedMessage) -> bool:
        return await self._caller.call(self.session_id, c.Recall(message))

    async def pending_decisions(self) -> list[ToolCallRecord]:
        """The tool calls in doubt a person must decide before the session runs again."""
        return await self._caller.call(self.session_id, c.GetPendingDecisions())

    async def decide(
        self, tool_call_id: str, action: str, result: str | None = None, decided_by: str = ""
    ) -> DecisionOutcome:
        """Decide a tool call in doubt; returns once the decision is stored (for ``rerun``:
        once the tool ran again, the session held busy meanwhile).

        Raises:
          ToolCallNotFound: no call in doubt has that id.
          InvalidRequest: an unknown action, or a result with an action other than done.
          SessionBusy: a rerun while the session runs something.
          RerunNotSupported: the session's runtime cannot run tools again.
        """
        request = c.Decide(tool_call_id, action, result, decided_by)
        pending = await self._caller.call(self.session_id, request)
        return await pending.wait()
