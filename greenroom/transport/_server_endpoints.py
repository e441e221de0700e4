"""The operations about the server rather than one session: liveness and readiness probes, the
agent files it serves, and the MCP OAuth redirects it hands to the flows waiting for them.

Each handler takes the :class:`Context` and a parsed :class:`Request` and returns a
:class:`Reply`.
"""

from __future__ import annotations

from typing import Any

import trio

from greenroom import __version__
from greenroom.agents import Redirect
from greenroom.errors import InvalidRequest, WaitTimedOut

from ._context import Context, Reply, Request

CLUSTER_PING = 1.0  # seconds the database has to answer a readiness probe's ping


async def health(ctx: Context, req: Request) -> Reply:
    await trio.lowlevel.checkpoint()
    return Reply({"status": "ok", "version": __version__})


async def ready(ctx: Context, req: Request) -> Reply:
    state = await ctx.registry.readiness(CLUSTER_PING)
    draining = ctx.draining.is_set()
    ok = state.store_connected and not ctx.shutting_down.is_set() and not draining
    body: dict[str, Any] = {
        "ready": ok,
        "active_sessions": state.active_sessions,
        "store_connected": state.store_connected,
    }
    if state.node_id:  # a cluster node: which one, and whether it holds its lease
        body |= {"node_id": state.node_id, "fenced": state.fenced}
    if draining:  # load balancers send new clients elsewhere while running turns finish
        body["draining"] = True
    return Reply(body, 200 if ok else 503)


async def ping(ctx: Context, req: Request) -> Reply:
    await trio.lowlevel.checkpoint()
    return Reply({"status": "ok"})


async def api_ready(ctx: Context, req: Request) -> Reply:
    timeout = req.query.get("timeout", 30.0)
    with trio.move_on_after(timeout):
        await ctx.registry.ready.wait()
        return Reply({"status": "ready"})
    raise WaitTimedOut("no sessions registered within timeout")


async def list_agents(ctx: Context, req: Request) -> Reply:
    await trio.lowlevel.checkpoint()
    return Reply(ctx.agents.list_agents())


async def get_agent(ctx: Context, req: Request) -> Reply:
    await trio.lowlevel.checkpoint()
    return Reply(ctx.agents.agent_config(req.params["agent_id"]))


async def agent_tool_count(ctx: Context, req: Request) -> Reply:
    count = await ctx.agents.tool_count(req.params["agent_id"], req.params["agent_name"])
    return Reply({"available_tools": count})


async def mcp_oauth_callback(ctx: Context, req: Request) -> Reply:
    """Hand an OAuth redirect (``state`` and ``code``, or ``error``) to the flow waiting for it."""
    state = req.query.get("state", "")
    if not state:
        raise InvalidRequest("query.state: is required", path="query.state")
    redirect = Redirect(
        code=req.query.get("code", ""),
        error=req.query.get("error", ""),
        error_description=req.query.get("error_description", ""),
    )
    ctx.oauth.deliver(state, redirect)
    return Reply(None)


async def mcp_oauth_landing(ctx: Context, req: Request) -> Reply:
    """The browser's landing after authorizing (the default redirect URI): the same as
    :func:`mcp_oauth_callback`, for a browser that comes back here directly."""
    await mcp_oauth_callback(ctx, req)
    return Reply({"message": "authorization received; you can close this page"})
