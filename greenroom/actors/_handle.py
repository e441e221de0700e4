"""What callers hold: a session's typed API, and an embedder's streaming guard."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from greenroom.agents import QueuedMessage
from greenroom.persistence import ToolCallRecord

from . import _commands as c

if TYPE_CHECKING:
    from ._registry import Registry
    from ._session import SessionActor


class StreamGuard:
    """What an embedder holds around each turn it runs on its attached runtime.

    ``async with guard:`` waits until the session is idle and marks it busy; runs, message
    edits and other guards are refused or wait meanwhile. ``done`` is set when the session is
    deleted (the embedder should end its stream).
    """

    def __init__(self, registry: Registry, session_id: str, done: trio.Event) -> None:
        self._registry = registry
        self.session_id = session_id
        self.done = done
        self._holder: SessionActor | None = None

    async def acquire(self) -> None:
        ticket = c.GuardTicket()
        actor = await self._registry._actor(self.session_id)
        try:
            # Inside the try: a caller cancelled while its request waits in the mailbox must
            # not be granted the guard later (nobody would release it).
            await self._registry._call_actor(actor, c.AcquireGuard(ticket))
            await ticket.granted.wait()
        except BaseException:
            ticket.abandoned = True
            if ticket.granted.is_set():
                actor.release_guard()
            raise
        self._holder = actor

    def release(self) -> None:
        holder, self._holder = self._holder, None
        if holder is not None:
            holder.release_guard()

    async def __aenter__(self) -> StreamGuard:
        await self.acquire()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release()


class SessionHandle:
    """The typed API of one session, as the transports use it."""

    def __init__(self, registry: Registry, session_id: str) -> None:
        self._registry = registry
        self.session_id = session_id

    async def _call(self, request: Any) -> Any:
        return await self._registry.call(self.session_id, request)

    async def snapshot(self) -> c.SessionSnapshot:
        return await self._call(c.Snapshot())  # type: ignore[no-any-return]

    async def status(self) -> c.SessionStatus:
        return await self._call(c.Status())  # type: ignore[no-any-return]

    async def run(
        self,
        source: str,
        messages: tuple[Any, ...],
        *,
        agent_name: str = "",
        model: str = "",
        on_disconnect: c.DisconnectPolicy = "cancel",
    ) -> c.RunStream:
        request = c.RunTurn(source, agent_name, tuple(messages), model, on_disconnect)
        return await self._call(request)  # type: ignore[no-any-return]

    async def cancel_turn(self) -> bool:
        """Cancel the running turn; False when none was running (nothing changed)."""
        return await self._call(c.CancelTurn())  # type: ignore[no-any-return]

    async def steer(self, messages: tuple[QueuedMessage, ...]) -> None:
        await self._call(c.Steer(messages))

    async def follow_up(
        self, messages: tuple[QueuedMessage, ...], idempotency_key: str = ""
    ) -> c.FollowUpResult:
        return await self._call(c.FollowUp(messages, idempotency_key))  # type: ignore[no-any-return]

    async def resume(self, request: Any) -> None:
        await self._call(c.Resume(request))

    async def answer_elicitation(self, action: str, content: Any, elicitation_id: str = "") -> None:
        await self._call(c.AnswerElicitation(action, content, elicitation_id))

    async def add_message(self, message: Any) -> int:
        return await self._call(c.AddMessage(message))  # type: ignore[no-any-return]

    async def update_message(self, message_id: str, message: Any) -> None:
        await self._call(c.UpdateMessage(message_id, message))

    async def add_summary(self, summary: Any) -> None:
        await self._call(c.AddSummary(summary))

    async def set_title(self, title: str) -> None:
        await self._call(c.SetTitle(title))

    async def set_permissions(self, permissions: Any) -> None:
        await self._call(c.SetPermissions(permissions))

    async def set_tokens(self, input_tokens: int, output_tokens: int, cost: float | None) -> None:
        await self._call(c.SetTokens(input_tokens, output_tokens, cost))

    async def set_starred(self, starred: bool) -> None:
        await self._call(c.SetStarred(starred))

    async def set_safety_policy(self, policy: str) -> None:
        await self._call(c.SetSafetyPolicy(policy))

    async def toggle_tool_approval(self) -> None:
        await self._call(c.ToggleToolApproval())

    async def toggle_thinking(self) -> None:
        await self._call(c.ToggleThinking())

    async def queue_depth(self) -> c.QueueDepth:
        return await self._call(c.GetQueueDepth())  # type: ignore[no-any-return]

    async def models(self) -> tuple[str, str, list[Any]]:
        return await self._call(c.ListModels())  # type: ignore[no-any-return]

    async def set_model(self, agent: str, ref: str) -> None:
        await self._call(c.SetModel(agent, ref))

    async def register_follow_up_injector(self, injector: c.FollowUpInjector | None) -> None:
        await self._call(c.RegisterInjector(injector))

    async def recall(self, message: QueuedMessage) -> bool:
        return await self._call(c.Recall(message))  # type: ignore[no-any-return]

    async def pending_decisions(self) -> list[ToolCallRecord]:
        """The tool calls in doubt a person must decide before the session runs again."""
        return await self._call(c.GetPendingDecisions())  # type: ignore[no-any-return]

    async def decide(
        self, tool_call_id: str, action: str, result: str | None = None, decided_by: str = ""
    ) -> c.DecisionOutcome:
        """Decide a tool call in doubt; returns once the decision is stored (for ``rerun``:
        once the tool ran again, the session held busy meanwhile).

        Raises:
          ToolCallNotFound: no call in doubt has that id.
          InvalidRequest: an unknown action, or a result with an action other than done.
          SessionBusy: a rerun while the session runs something.
          RerunNotSupported: the session's runtime cannot run tools again.
        """
        pending: c.PendingDecision = await self._call(
            c.Decide(tool_call_id, action, result, decided_by)
        )
        return await pending.wait()
