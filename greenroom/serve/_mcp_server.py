"""``greenroom serve mcp``: the agents as tools of an MCP server, over stdio or streamable HTTP
(decision 0031). One tool per agent, ``{"message": ...}`` in, the turn's final answer out; each
call is one turn in a new session of the registry.

Built on the MCP SDK's low-level server (anyio, so it runs in greenroom's trio loop); it is
imported only by this command.
"""

from __future__ import annotations

import logging
import signal
import socket
import sys
from collections.abc import AsyncIterator
from functools import partial
from typing import Any, cast

import hypercorn.trio
import mcp_types as types
import trio
from hypercorn.config import Config
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from greenroom import __version__
from greenroom.agents import ResumeRequest
from greenroom.domain import ToolCallConfirmation
from greenroom.errors import ConfigError, GreenroomError

from ._config import ServeConfig
from ._host import AgentHost, ExposedAgent, open_host, turn_error_text

log = logging.getLogger("greenroom.modes")

INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "message": {"type": "string", "description": "the message to send to the agent"}
    },
    "required": ["message"],
    "additionalProperties": False,
}
OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"response": {"type": "string", "description": "the agent's final answer"}},
    "required": ["response"],
}
APPROVE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approve": {"type": "boolean", "title": "Run this tool call", "default": False}},
    "required": ["approve"],
}


def agent_tool(agent: ExposedAgent) -> types.Tool:
    description = agent.description or f"Run the {agent.agent_name} agent"
    return types.Tool(
        name=agent.name,
        title=description,
        description=description,
        input_schema=INPUT_SCHEMA,
        output_schema=OUTPUT_SCHEMA,
    )


def message_of(name: str, arguments: dict[str, Any] | None) -> str:
    """The tool call's ``message``.

    Raises:
        MCPError: INVALID_PARAMS, saying what the call must carry.
    """
    message = (arguments or {}).get("message")
    if not isinstance(message, str) or not message.strip():
        raise MCPError(
            INVALID_PARAMS,
            f"{name}: arguments.message must be a non-empty string (the message to the agent)",
        )
    return message


class AgentTools:
    """The MCP handlers over one :class:`AgentHost`."""

    def __init__(self, host: AgentHost, *, tools_approved: bool = False, only: str = "") -> None:
        """``only``: expose just the agent of that name.

        Raises:
            ConfigError: no agent is called ``only``.
        """
        self.host = host
        self.tools_approved = tools_approved  # docker-agent's serve mcp approves every call
        agents = host.agents()
        if only:
            chosen = [a for a in agents if only in (a.name, a.agent_name)]
            if not chosen:
                names = ", ".join(a.name for a in agents)
                raise ConfigError(f"--agent {only}: no such agent (the agents are {names})")
            agents = chosen
        self.agents = {agent.name: agent for agent in agents}

    def server(self) -> Server[Any]:
        return Server(
            "greenroom",
            version=__version__,
            instructions="Each tool runs one greenroom agent on a message and returns its answer.",
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
        )

    async def list_tools(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[agent_tool(a) for a in self.agents.values()])

    async def call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        agent = self.agents.get(params.name)
        if agent is None:
            names = ", ".join(self.agents) or "none"
            raise MCPError(
                INVALID_PARAMS, f"unknown tool {params.name!r}: the agents here are {names}"
            )
        text = message_of(params.name, params.arguments)

        async def decide(event: ToolCallConfirmation) -> ResumeRequest:
            return await self._decide(ctx, event)

        try:
            session_id = await self.host.new_session(
                title=f"MCP tool call: {agent.name}",
                tools_approved=self.tools_approved,
            )
        except GreenroomError as exc:
            return _error(turn_error_text(exc))
        try:
            outcome = await self.host.run_turn(session_id, agent, text, decide=decide)
        except GreenroomError as exc:
            log.warning("tool %s failed: %s", agent.name, exc)
            return _error(turn_error_text(exc))
        finally:
            await self.host.forget(session_id)
        if outcome.errors and not outcome.answer:
            return _error("the agent's turn failed: " + "; ".join(outcome.errors))
        answer = outcome.answer or "No response from agent"
        return types.CallToolResult(
            content=[types.TextContent(text=answer)], structured_content={"response": answer}
        )

    async def _decide(self, ctx: Any, event: ToolCallConfirmation) -> ResumeRequest:
        """Ask the MCP client's user (an elicitation), or refuse when it cannot ask."""
        tool = event.tool_call.function.name
        can_ask = ctx.session.check_client_capability(
            types.ClientCapabilities(elicitation=types.ElicitationCapability())
        )
        if not can_ask:
            return ResumeRequest(
                "reject",
                reason="nobody can approve it here: the MCP client cannot answer questions "
                "(elicitation); allow the tool in the agent's permissions, or serve with "
                "--tools-approved",
                decided_by="mcp",
            )
        question = f"The agent wants to run {tool} with {event.tool_call.function.arguments}"
        answer = await ctx.session.elicit_form(
            question, APPROVE_SCHEMA, related_request_id=ctx.request_id
        )
        approved = answer.action == "accept" and bool((answer.content or {}).get("approve"))
        if approved:
            return ResumeRequest("approve", decided_by="mcp")
        return ResumeRequest(
            "reject", reason=f"the user answered {answer.action}", decided_by="mcp"
        )


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


async def serve_mcp_stdio(
    cfg: ServeConfig, *, tools_approved: bool = False, only: str = ""
) -> None:
    """Serve MCP over this process's stdin and stdout until stdin ends."""
    async with open_host(cfg) as host:
        server = AgentTools(host, tools_approved=tools_approved, only=only).server()
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())


async def serve_mcp_http(
    cfg: ServeConfig,
    *,
    tools_approved: bool = False,
    only: str = "",
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve MCP over streamable HTTP at ``/mcp`` until cancelled; reports the endpoint URL.

    Raises:
        ConfigError: ``--host``/``--port`` cannot be bound.
    """
    # The receiver first: a signal from the moment the address is printed stops the server.
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_stop_on_signal, signals, nursery.cancel_scope)
            serving = partial(_serve_host_http, cfg, tools_approved=tools_approved, only=only)
            task_status.started(await nursery.start(serving))


async def _serve_host_http(
    cfg: ServeConfig,
    *,
    tools_approved: bool,
    only: str,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    async with open_host(cfg) as host:
        tools = AgentTools(host, tools_approved=tools_approved, only=only)
        await serve_tools_http(tools, cfg.host, cfg.port, task_status=task_status)


async def _stop_on_signal(signals: AsyncIterator[int], scope: trio.CancelScope) -> None:
    """SIGINT or SIGTERM: stop serving (running turns are cancelled, sessions persist)."""
    async for _ in signals:
        log.info("stopping")
        scope.cancel(reason="signal")
        return


async def serve_tools_http(
    tools: AgentTools,
    host: str,
    port: int,
    *,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``tools`` over streamable HTTP on ``host:port`` until cancelled."""
    app = tools.server().streamable_http_app(host=host)
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc} (choose another --port, "
            "or 0 for any)"
        ) from None
    bound = sock.getsockname()[1]
    config = Config()
    config.bind = [f"fd://{sock.detach()}"]  # hypercorn owns (and closes) it from here
    config.accesslog = None
    config.graceful_timeout = 1.0
    url = f"http://{f'[{host}]' if ':' in host else host}:{bound}/mcp"
    async with trio.open_nursery() as nursery:
        await nursery.start(
            lambda task_status: hypercorn.trio.serve(
                cast(Any, app), config, task_status=task_status
            )
        )
        print(f"greenroom MCP server listening on {url}", file=sys.stderr, flush=True)
        task_status.started(url)
