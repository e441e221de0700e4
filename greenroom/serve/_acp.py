"""``greenroom serve acp``: one agent served to an editor over the Agent Client Protocol on stdio
(decision 0031): ``initialize``, ``session/new``, ``session/prompt`` streaming
``session/update`` notifications (message and thought chunks, tool calls and their results),
``session/cancel``, and ``session/request_permission`` asked of the editor for each tool call
that needs approval. JSON-RPC by hand (``_jsonrpc``): the ACP Python SDK runs on asyncio.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import attrs
import trio

from greenroom import __version__
from greenroom.agents import ResumeRequest
from greenroom.domain import (
    AgentChoice,
    AgentChoiceReasoning,
    ErrorEvent,
    Event,
    ToolCall,
    ToolCallConfirmation,
    ToolCallEvent,
    ToolCallResponse,
)
from greenroom.errors import ConfigError, GreenroomError

from ._config import ServeConfig
from ._host import AgentHost, ExposedAgent, log, open_host, turn_error_text
from ._jsonrpc import INVALID_PARAMS, INVALID_REQUEST, Connection, Params, RpcError

PROTOCOL_VERSION = 1
ALLOW, ALLOW_ALWAYS, REJECT = "allow", "allow-always", "reject"
PERMISSION_OPTIONS = [
    {"optionId": ALLOW, "name": "Allow this action", "kind": "allow_once"},
    {"optionId": ALLOW_ALWAYS, "name": "Allow this tool for the session", "kind": "allow_always"},
    {"optionId": REJECT, "name": "Skip this action", "kind": "reject_once"},
]
_KINDS = {"shell": "execute", "think": "think", "fetch": "fetch", "transfer_task": "switch_mode"}
_PREFIXES = (
    (("read_", "list_", "get_", "directory_tree"), "read"),
    (("edit_", "write_", "create_", "update_"), "edit"),
    (("delete_", "remove_"), "delete"),
    (("search_", "find_", "grep"), "search"),
)


@attrs.define(eq=False)
class AcpSession:
    session_id: str
    running: bool = False  # a prompt runs
    cancelled: bool = False  # session/cancel came for it
    cancel_sent: bool = False  # and its turn was told to stop
    asking: trio.CancelScope | None = None  # a permission request waiting for the editor
    announced: set[str] = attrs.Factory(set)  # tool call ids the editor was told of


class AcpAgent:
    """The ACP methods over one :class:`AgentHost` and one of its agents."""

    def __init__(self, host: AgentHost, agent: ExposedAgent) -> None:
        self.host = host
        self.agent = agent
        self.sessions: dict[str, AcpSession] = {}
        self.conn: Connection | None = None

    def connect(self, receive: trio.abc.ReceiveStream, send: trio.abc.SendStream) -> Connection:
        requests = {
            "initialize": self.initialize,
            "authenticate": self.authenticate,
            "session/new": self.new_session,
            "session/prompt": self.prompt,
            "session/set_mode": self.set_mode,
        }
        self.conn = Connection(receive, send, requests, {"session/cancel": self.cancel})
        return self.conn

    async def initialize(self, params: Params) -> dict[str, Any]:
        version = params.get("protocolVersion")
        if not isinstance(version, int):
            raise _invalid("protocolVersion must be an integer (this agent speaks 1)")
        await trio.lowlevel.checkpoint()
        return {
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": False,
                "promptCapabilities": {"image": False, "audio": False, "embeddedContext": True},
                "mcpCapabilities": {"http": False, "sse": False},
            },
            "agentInfo": {"name": "greenroom", "title": "greenroom", "version": __version__},
            "authMethods": [],
        }

    async def authenticate(self, params: Params) -> dict[str, Any]:
        await trio.lowlevel.checkpoint()
        return {}

    async def set_mode(self, params: Params) -> dict[str, Any]:
        await trio.lowlevel.checkpoint()
        return {}  # one mode: the agent's own

    async def new_session(self, params: Params) -> dict[str, Any]:
        cwd = params.get("cwd")
        if not isinstance(cwd, str) or not os.path.isabs(cwd):
            raise _invalid("cwd must be an absolute path (the session's working directory)")
        if not await trio.to_thread.run_sync(Path(cwd).is_dir):
            raise _invalid(f"cwd {cwd!r} is not a directory")
        session_id = await self.host.new_session(title="ACP session", working_dir=cwd)
        self.sessions[session_id] = AcpSession(session_id)
        return {"sessionId": session_id}

    async def cancel(self, params: Params) -> None:
        """Stop the running prompt: its turn is cancelled (the session keeps what it said),
        a permission question waiting is withdrawn, and the prompt answers ``cancelled`` once
        the turn has ended, so the session takes the next prompt at once."""
        await trio.lowlevel.checkpoint()
        session = self.sessions.get(str(params.get("sessionId")))
        if session is None or not session.running:
            return
        session.cancelled = True
        if session.asking is not None:
            session.asking.cancel(reason="session/cancel")
        await self._stop_turn(session)

    async def _stop_turn(self, session: AcpSession) -> None:
        try:
            session.cancel_sent = await self.host.registry.session(session.session_id).cancel_turn()
        except GreenroomError as exc:
            log.warning("cancelling the turn of %s failed: %s", session.session_id, exc)

    async def prompt(self, params: Params) -> dict[str, Any]:
        session = self._session(params)
        text = prompt_text(params.get("prompt"))
        if session.running:
            raise RpcError(
                INVALID_REQUEST,
                "a prompt of this session is running: wait for its answer, or session/cancel it",
            )
        session.running, session.cancelled, session.cancel_sent = True, False, False
        try:
            await self.host.run_turn(
                session.session_id,
                self.agent,
                text,
                decide=lambda event: self._ask(session, event),
                on_event=lambda event: self._update(session, event),
            )
        except GreenroomError as exc:
            raise RpcError(INVALID_REQUEST, turn_error_text(exc)) from exc
        finally:
            session.running = False
        return {"stopReason": "cancelled" if session.cancelled else "end_turn"}

    def _session(self, params: Params) -> AcpSession:
        session = self.sessions.get(str(params.get("sessionId")))
        if session is None:
            raise _invalid(
                f"unknown sessionId {params.get('sessionId')!r}: open one with session/new"
            )
        return session

    async def _update(self, session: AcpSession, event: Event) -> None:
        """Tell the editor: a tool call once (``tool_call``, pending when it asks first), then
        its progress and result (``tool_call_update``); every other event as it maps."""
        if session.cancelled and not session.cancel_sent:  # cancelled before the turn began
            await self._stop_turn(session)
        update = session_update(event)
        if isinstance(event, ToolCallConfirmation | ToolCallEvent):
            call_id = event.tool_call.id
            status = "pending" if isinstance(event, ToolCallConfirmation) else "in_progress"
            if call_id in session.announced:
                update = {"sessionUpdate": "tool_call_update", "toolCallId": call_id}
            else:
                session.announced.add(call_id)
                update = {
                    "sessionUpdate": "tool_call",
                    **tool_call_fields(event.tool_call, event.tool_definition),
                }
            update["status"] = status
        if update is not None and self.conn is not None:
            params = {"sessionId": session.session_id, "update": update}
            await self.conn.notify("session/update", params)

    async def _ask(self, session: AcpSession, event: ToolCallConfirmation) -> ResumeRequest:
        """``session/request_permission``: the editor's user allows or skips the call."""
        assert self.conn is not None
        call = event.tool_call
        tool = tool_call_fields(call, event.tool_definition)
        tool["status"] = "pending"
        params = {"sessionId": session.session_id, "toolCall": tool, "options": PERMISSION_OPTIONS}
        answer: Any = None
        with trio.CancelScope() as scope:
            session.asking = scope
            try:
                answer = await self.conn.request("session/request_permission", params)
            except RpcError as exc:
                return ResumeRequest(
                    "reject", reason=f"the editor did not answer: {exc}", decided_by="acp"
                )
            finally:
                session.asking = None
        if scope.cancelled_caught:
            return ResumeRequest("reject", reason="the prompt was cancelled", decided_by="acp")
        outcome = answer.get("outcome") if isinstance(answer, dict) else None
        chosen = outcome.get("optionId") if isinstance(outcome, dict) else None
        if chosen == ALLOW:
            return ResumeRequest("approve", decided_by="acp")
        if chosen == ALLOW_ALWAYS:
            return ResumeRequest("approve-tool", tool_name=call.function.name, decided_by="acp")
        return ResumeRequest("reject", reason="the user skipped it", decided_by="acp")


def prompt_text(blocks: Any) -> str:
    """The user message of a ``session/prompt``: its text blocks and embedded text resources,
    with a line naming each linked or binary resource.

    Raises:
        RpcError: INVALID_PARAMS when ``prompt`` is not a list of content blocks.
    """
    if not isinstance(blocks, list) or not all(isinstance(b, dict) for b in blocks):
        raise _invalid("prompt must be a list of content blocks")
    parts: list[str] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            parts.append(str(block.get("text", "")))
        elif kind == "resource":
            resource = block.get("resource") or {}
            uri = resource.get("uri", "")
            if "text" in resource:
                parts.append(
                    f"\n\n--- Resource: {uri} ---\n{resource['text']}\n--- End Resource ---\n"
                )
            else:
                parts.append(f"\n[Binary resource: {uri}]\n")
        elif kind == "resource_link":
            parts.append(f"\n[Referenced file: {block.get('name', '')} ({block.get('uri', '')})]\n")
        else:
            parts.append(f"[{kind} content is not supported]")
    text = "".join(parts)
    if not text.strip():
        raise _invalid("prompt has no text: give at least one text content block")
    return text


def session_update(event: Event) -> dict[str, Any] | None:
    """The ``session/update`` an event becomes (None: the editor is not told)."""
    if isinstance(event, AgentChoice):
        return {"sessionUpdate": "agent_message_chunk", "content": _text(event.content)}
    if isinstance(event, AgentChoiceReasoning):
        return {"sessionUpdate": "agent_thought_chunk", "content": _text(event.content)}
    if isinstance(event, ToolCallResponse):
        return {
            "sessionUpdate": "tool_call_update",
            "toolCallId": event.tool_call_id,
            "status": "completed",
            "content": [{"type": "content", "content": _text(event.response)}],
            "rawOutput": {"content": event.response},
        }
    if isinstance(event, ErrorEvent):
        return {
            "sessionUpdate": "agent_message_chunk",
            "content": _text(f"\n\nError: {event.error}\n"),
        }
    return None


def tool_call_fields(call: ToolCall, definition: Any) -> dict[str, Any]:
    name = call.function.name
    annotations = definition.get("annotations", {}) if isinstance(definition, dict) else {}
    try:
        raw = json.loads(call.function.arguments or "{}")
    except ValueError:
        raw = {"raw": call.function.arguments}
    return {
        "toolCallId": call.id,
        "title": annotations.get("title") or name,
        "kind": tool_kind(name, bool(annotations.get("readOnlyHint"))),
        "rawInput": raw,
    }


def tool_kind(name: str, read_only: bool) -> str:
    if name in _KINDS:
        return _KINDS[name]
    if read_only:
        return "read"
    for prefixes, kind in _PREFIXES:
        if name.startswith(prefixes):
            return kind
    return "other"


def _text(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}


def _invalid(message: str) -> RpcError:
    return RpcError(INVALID_PARAMS, message)


def _stdio() -> tuple[trio.lowlevel.FdStream, trio.lowlevel.FdStream]:
    """Private copies of stdin and stdout for the protocol; fd 1 then points at stderr, so a
    stray print (a library's, a tool's) cannot break a message."""
    receive = trio.lowlevel.FdStream(os.dup(0))
    send = trio.lowlevel.FdStream(os.dup(1))
    os.dup2(2, 1)
    return receive, send


async def serve_acp_stdio(cfg: ServeConfig, *, agent_name: str = "") -> None:
    """Serve ACP on this process's stdin and stdout until stdin ends."""
    async with open_host(cfg) as host:
        agent = choose_agent(host, agent_name)
        receive, send = _stdio()
        async with receive, send:
            await AcpAgent(host, agent).connect(receive, send).serve()


def choose_agent(host: AgentHost, agent_name: str) -> ExposedAgent:
    """The agent ``--agent`` names, else the file's default agent.

    Raises:
        ConfigError: no agent of that name.
    """
    sources = host.sources.keys()
    if len(sources) != 1:
        raise ConfigError(
            f"serve acp serves one agent file; {', '.join(host.cfg.agent_paths)} holds "
            f"{len(sources)} ({', '.join(sources)}): name one of them"
        )
    [source] = sources
    file = host.sources.get(source)
    name = agent_name or file.default_agent.name
    for agent in host.agents():
        if agent.agent_name == name:
            return agent
    names = ", ".join(file.agents)
    raise ConfigError(f"--agent {name}: no such agent in {source} (its agents are {names})")
