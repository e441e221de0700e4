"""GreenroomClient: the greenroom HTTP API from Python, on trio or asyncio (through anyio).

Commands are plain REST calls. Turns are started *detached* (``on_disconnect=continue``): the
call returns once the server accepted the turn, the turn runs on its own, and its events are
read from the session's event log with :meth:`GreenroomClient.events`, which resumes after
dropped connections. :meth:`cancel` stops a running turn.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote

import anyio
import httpx

from ._errors import ApiError, Unreachable
from ._events import BUFFER, ConnectionState, Event, EventStream

Message = Mapping[str, Any]


def _q(value: str) -> str:
    return quote(value, safe="")


class GreenroomClient:
    """A client of one greenroom server.

    Args:
        base_url: e.g. ``http://127.0.0.1:8080``.
        token: the server's ``--auth-token``, if it has one.
        timeout: seconds for each request (event streams wait as long as they need).

    Use it as an async context manager (or call :meth:`aclose`). Every method raises
    :class:`ApiError` for an error status and :class:`Unreachable` when there is no server.
    """

    def __init__(self, base_url: str, *, token: str = "", timeout: float = 30.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.base_url = base_url.rstrip("/")
        self._http = httpx.AsyncClient(base_url=self.base_url, headers=headers, timeout=timeout)

    async def __aenter__(self) -> GreenroomClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        try:
            response = await self._http.request(
                method,
                path,
                json=body,
                params=params,
                headers=headers,
            )
        except httpx.TransportError as exc:
            raise Unreachable(f"{self.base_url}: {str(exc) or type(exc).__name__}") from exc
        try:
            data = response.json() if response.content else None
        except ValueError:
            data = None
        if response.status_code >= 400:
            raise ApiError(response.status_code, data)
        return data

    # --- server and agents -------------------------------------------------------------------

    async def health(self) -> dict[str, Any]:
        return await self._call("GET", "/health")  # type: ignore[no-any-return]

    async def agents(self) -> list[dict[str, Any]]:
        """The agent sources: ``name``, ``description``, ``multi``, ``commands``."""
        return await self._call("GET", "/api/agents")  # type: ignore[no-any-return]

    async def agent_config(self, source: str) -> dict[str, Any]:
        return await self._call("GET", f"/api/agents/{_q(source)}")  # type: ignore[no-any-return]

    # --- sessions ----------------------------------------------------------------------------

    async def sessions(self) -> list[dict[str, Any]]:
        """Root sessions, newest first: ``id``, ``title``, ``created_at``, ``num_messages``..."""
        return await self._call("GET", "/api/sessions")  # type: ignore[no-any-return]

    async def search_sessions(self, q: str = "", **params: str | int | bool) -> dict[str, Any]:
        """One page of root sessions (decision 0026): ``{"sessions": [...], "next_cursor"}``.
        ``params``: ``agent``, ``starred``, ``since``, ``until``, ``order``, ``limit``,
        ``cursor`` (the previous page's ``next_cursor``)."""
        query = {"q": q} | {
            k: ("true" if v else "false") if isinstance(v, bool) else str(v)
            for k, v in params.items()
        }
        return await self._call("GET", "/api/sessions", params=query)  # type: ignore[no-any-return]

    async def create_session(self, *, title: str = "", **template: Any) -> dict[str, Any]:
        """Create a session; ``template`` takes the other session fields (``permissions``,
        ``working_dir``, ``max_iterations``, ...). Returns the new session."""
        body = {"title": title, **template} if title else dict(template)
        return await self._call("POST", "/api/sessions", body)  # type: ignore[no-any-return]

    async def session(self, session_id: str) -> dict[str, Any]:
        return await self._call("GET", f"/api/sessions/{_q(session_id)}")  # type: ignore[no-any-return]

    async def snapshot(self, session_id: str) -> dict[str, Any]:
        """The session with ``streaming``, ``agent`` and ``last_event_seq`` (resume point)."""
        path = f"/api/sessions/{_q(session_id)}/snapshot"
        return await self._call("GET", path)  # type: ignore[no-any-return]

    async def delete_session(self, session_id: str) -> None:
        await self._call("DELETE", f"/api/sessions/{_q(session_id)}")

    async def fork(self, session_id: str, user_message_index: int) -> dict[str, Any]:
        """A new session with the history before the Nth (0-based) user message."""
        path = f"/api/sessions/{_q(session_id)}/fork"
        body = {"message_index": user_message_index}
        return await self._call("POST", path, body)  # type: ignore[no-any-return]

    async def set_title(self, session_id: str, title: str) -> None:
        await self._call("PATCH", f"/api/sessions/{_q(session_id)}/title", {"title": title})

    async def set_starred(self, session_id: str, starred: bool) -> None:
        path = f"/api/sessions/{_q(session_id)}/starred"
        await self._call("PATCH", path, {"starred": starred})

    async def models(self, session_id: str) -> dict[str, Any]:
        """The current agent's model picker (needs a runtime: after the first turn)."""
        return await self._call("GET", f"/api/sessions/{_q(session_id)}/models")  # type: ignore[no-any-return]

    # --- turns -------------------------------------------------------------------------------

    async def run(
        self,
        session_id: str,
        message: str | Sequence[Message],
        *,
        agent: str = "default",
        agent_name: str = "",
        model: str = "",
    ) -> None:
        """Start a turn and return once the server accepted it; the turn runs on its own.

        ``message`` is the user's text, or a list of ``{"role", "content"}`` messages.
        ``agent`` is the agent source, ``agent_name`` an agent of it, ``model`` a model
        override for the current agent. Watch the turn with :meth:`events`.

        Raises:
            ApiError: ``session_busy`` (409) when a turn is running, 404 for an unknown
                session or agent, ...
        """
        messages = [{"role": "user", "content": message}] if isinstance(message, str) else message
        body: dict[str, Any] = {"messages": list(messages)}
        if model:
            body["model"] = model
        path = f"/api/sessions/{_q(session_id)}/agent/{_q(agent)}"
        if agent_name:
            path += f"/{_q(agent_name)}"
        params = {"on_disconnect": "continue"}
        try:
            async with self._http.stream("POST", path, json=body, params=params) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise ApiError(response.status_code, _json(response))
                # Accepted: leaving now closes this stream and the turn runs on, detached.
        except httpx.TransportError as exc:
            raise Unreachable(f"{self.base_url}: {str(exc) or type(exc).__name__}") from exc

    async def cancel(self, session_id: str) -> bool:
        """Cancel the running turn; False when none was running."""
        result = await self._call("POST", f"/api/sessions/{_q(session_id)}/cancel")
        return bool(result and result.get("cancelled"))

    async def steer(self, session_id: str, text: str) -> None:
        """Send ``text`` into the running turn (taken before its next model call)."""
        body = {"messages": [{"role": "user", "content": text}]}
        await self._call("POST", f"/api/sessions/{_q(session_id)}/steer", body)

    async def follow_up(self, session_id: str, text: str, *, idempotency_key: str = "") -> str:
        """Queue ``text`` for the end of the turn; returns ``queued_streaming``,
        ``queued_idle`` or ``duplicate``."""
        body = {"messages": [{"role": "user", "content": text}]}
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        path = f"/api/sessions/{_q(session_id)}/followup"
        result = await self._call("POST", path, body, headers=headers)
        return str(result["status"])

    async def resume(
        self,
        session_id: str,
        confirmation: str,
        *,
        reason: str = "",
        tool_name: str = "",
        expires_in: int | None = None,
    ) -> None:
        """Answer a ``tool_call_confirmation``: ``approve``, ``approve-tool`` (with
        ``tool_name``; ``expires_in`` seconds makes the grant end), ``approve-session``,
        ``approve-balanced``, ``approve-autonomous`` or ``reject`` (with a ``reason``)."""
        body: dict[str, Any] = {"confirmation": confirmation}
        if reason:
            body["reason"] = reason
        if tool_name:
            body["tool_name"] = tool_name
        if expires_in is not None:
            body["expires_in"] = expires_in
        await self._call("POST", f"/api/sessions/{_q(session_id)}/resume", body)

    async def approve(self, session_id: str) -> None:
        await self.resume(session_id, "approve")

    async def reject(self, session_id: str, reason: str = "") -> None:
        await self.resume(session_id, "reject", reason=reason)

    async def answer_elicitation(
        self,
        session_id: str,
        action: str,
        content: Mapping[str, Any] | None = None,
        *,
        elicitation_id: str = "",
    ) -> None:
        """Answer an ``elicitation_request``: ``accept`` (with ``content``), ``decline`` or
        ``cancel``."""
        body: dict[str, Any] = {"action": action, "content": dict(content or {})}
        if elicitation_id:
            body["elicitation_id"] = elicitation_id
        await self._call("POST", f"/api/sessions/{_q(session_id)}/elicitation", body)

    # --- after a crash: tool calls in doubt --------------------------------------------------

    async def in_doubt(self, session_id: str) -> list[dict[str, Any]]:
        """The tool calls a crash left in doubt (each with ``tool_call_id``, ``name``,
        ``arguments``, ``started_at``); empty when the session may run."""
        result = await self._call("GET", f"/api/sessions/{_q(session_id)}/recovery/decisions")
        return list(result.get("in_doubt") or [])

    async def decide(
        self, session_id: str, tool_call_id: str, action: str, *, result: str | None = None
    ) -> dict[str, Any]:
        """Decide a call in doubt: ``skip`` (it did not happen), ``rerun`` (run it again now;
        answers once it ran) or ``done`` (it happened; ``result`` if known)."""
        body: dict[str, Any] = {"tool_call_id": tool_call_id, "action": action}
        if result is not None:
            body["result"] = result
        path = f"/api/sessions/{_q(session_id)}/recovery/decisions"
        return await self._call("POST", path, body)  # type: ignore[no-any-return]

    # --- events ------------------------------------------------------------------------------

    @asynccontextmanager
    async def events(
        self,
        session_id: str,
        since: int | None = None,
        *,
        on_state: Callable[[ConnectionState], None] | None = None,
    ) -> AsyncIterator[EventStream]:
        """Follow the session's event log after ``since`` (None: everything still buffered),
        reconnecting as needed, while the block runs::

            snapshot = await client.snapshot(session_id)
            async with client.events(session_id, snapshot["last_event_seq"]) as events:
                await client.run(session_id, "hello")
                async for event in events:
                    ...
        """
        send, receive = anyio.create_memory_object_stream[Event](BUFFER)
        stream = EventStream(self._http, session_id, since, receive, on_state)
        async with receive, anyio.create_task_group() as tasks:
            tasks.start_soon(stream._run, send)
            try:
                yield stream
            finally:
                tasks.cancel_scope.cancel()


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None
