"""Remote MCP servers: streamable HTTP and SSE, headers with ``${env.X}``, elicitation over
HTTP, an unreachable server, and OAuth (a server with its own authorization server on loopback;
the test plays the browser: it follows the authorization URL and hands the redirect back)."""

from __future__ import annotations

import os
import stat
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio

from greenroom.agents import ElicitationAnswer, OAuthFlows, Redirect, ToolContext
from greenroom.agents.mcp import McpServer, RemoteSpec, server_spec, token_path
from greenroom.agents.tools import EgressPolicy
from greenroom.domain import AuthorizationEvent
from greenroom.errors import InvalidRequest, OAuthFlowNotFound
from tests.mcp.http_servers import (
    AutoApprove,
    oauth_app,
    serving,
    sse_app,
    streamable_app,
    tools_server,
)
from tests.mcp.support import QUICK, FakeHost
from tests.slowness import slow

pytestmark = pytest.mark.slow
DEADLINE = slow(60)
REDIRECT = "http://127.0.0.1:9/callback"  # never visited: the test hands the redirect over


async def test_streamable_http_with_headers_from_the_environment() -> None:
    with trio.fail_after(DEADLINE):
        async with serving(streamable_app(tools_server())) as url:
            ctx = ToolContext(env={"BASE": url, "TOKEN": "s3cret"})
            options = {
                "remote": {
                    "url": "${env.BASE}/mcp",
                    "transport_type": "streamable-http",
                    "headers": {"X-Token": "Bearer ${env.TOKEN}"},
                }
            }
            spec = server_spec(options, ctx)
            assert spec == RemoteSpec(f"{url}/mcp", "streamable", {"X-Token": "Bearer s3cret"})
            assert spec.description == f"mcp(remote host={url[7:]} transport=streamable)"
            async with trio.open_nursery() as nursery:
                server = McpServer(spec, FakeHost(nursery), QUICK)
                assert await server.ensure_started() == ""
                assert server.instructions == "remote instructions"
                assert (await server.call("echo", {"text": "hi"})).output == "remote: hi"
                assert (await server.call("headers", {})).output == "x-token=Bearer s3cret"
                nursery.cancel_scope.cancel()


async def test_the_sse_transport() -> None:
    with trio.fail_after(DEADLINE):
        async with serving(sse_app(tools_server("legacy"))) as url:
            spec = RemoteSpec(f"{url}/sse", "sse")
            async with trio.open_nursery() as nursery:
                server = McpServer(spec, FakeHost(nursery), QUICK)
                assert await server.ensure_started() == ""
                assert (await server.call("echo", {"text": "old"})).output == "legacy: old"
                nursery.cancel_scope.cancel()


async def test_an_elicitation_over_http() -> None:
    with trio.fail_after(DEADLINE):
        async with (
            serving(streamable_app(tools_server())) as url,
            trio.open_nursery() as nursery,
        ):
            host = FakeHost(nursery, answer=ElicitationAnswer("accept", {"name": "Lin"}))
            server = McpServer(RemoteSpec(f"{url}/mcp"), host, QUICK)
            await server.ensure_started()
            assert (await server.call("ask", {})).output == "accept: Lin"
            nursery.cancel_scope.cancel()


async def test_an_unreachable_server_is_a_start_warning() -> None:
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            server = McpServer(RemoteSpec("http://127.0.0.1:9/mcp"), FakeHost(nursery), QUICK)
            warning = await server.ensure_started()
            assert warning.startswith(
                "mcp(remote host=127.0.0.1:9 transport=streamable) start failed"
            )
            nursery.cancel_scope.cancel()


async def test_a_loopback_server_is_refused_by_the_egress_policy() -> None:
    """Issue 23: remote MCP connects only where the policy allows, like fetch."""
    with trio.fail_after(DEADLINE):
        async with serving(streamable_app(tools_server())) as url:
            strict = attrs.evolve(QUICK, egress=EgressPolicy())
            async with trio.open_nursery() as nursery:
                server = McpServer(RemoteSpec(f"{url}/mcp"), FakeHost(nursery), strict)
                warning = await server.ensure_started()
                assert "refused by the egress policy" in warning, warning
                assert "127.0.0.1 is a loopback address" in warning
                nursery.cancel_scope.cancel()


def test_remote_options_are_checked() -> None:
    ctx = ToolContext()
    with pytest.raises(Exception, match="unsupported transport type: websocket"):
        server_spec({"remote": {"url": "http://x/mcp", "transport_type": "websocket"}}, ctx)
    with pytest.raises(Exception, match="http or https"):
        server_spec({"remote": {"url": "ftp://x/mcp"}}, ctx)
    with pytest.raises(Exception, match=r"exactly one of command, remote\.url or ref"):
        server_spec({"command": "x", "remote": {"url": "http://x"}}, ctx)
    assert server_spec({"remote": {"url": "http://x/mcp"}}, ctx).transport == "streamable"  # type: ignore[union-attr]


@attrs.define(eq=False)
class Browser(FakeHost):
    """A host whose user opens the authorization URL: the test follows it (the authorization
    server grants at once and redirects) and hands the redirect to the waiting flow."""

    flows: OAuthFlows = attrs.field(factory=OAuthFlows)
    deny: bool = False

    async def elicit(
        self,
        message: str,
        *,
        schema: Any = None,
        meta: Mapping[str, Any] | None = None,
        mode: str = "form",
        url: str = "",
    ) -> ElicitationAnswer:
        self.asked.append({"message": message, "mode": mode, "url": url, "meta": dict(meta or {})})
        if mode != "url":
            return ElicitationAnswer("decline")
        async with httpx.AsyncClient() as client:
            response = await client.get(url)
        assert response.status_code == 302, response.text
        location = urllib.parse.urlsplit(response.headers["location"])
        query = dict(urllib.parse.parse_qsl(location.query))
        redirect = (
            Redirect(error="access_denied", error_description="no")
            if self.deny
            else Redirect(code=query["code"])
        )
        self.flows.deliver(query["state"], redirect)
        return ElicitationAnswer("accept")


def oauth_settings(flows: OAuthFlows) -> Any:
    return attrs.evolve(QUICK, oauth=flows, oauth_redirect_uri=REDIRECT)


async def test_oauth_authorizes_through_the_user_and_keeps_the_token(tmp_path: Path) -> None:
    provider = AutoApprove()
    with trio.fail_after(DEADLINE):
        async with serving(oauth_app(provider)) as url, trio.open_nursery() as nursery:
            host = Browser(nursery)
            settings = oauth_settings(host.flows)
            server = McpServer(RemoteSpec(f"{url}/mcp"), host, settings, data_dir=tmp_path)
            assert await server.ensure_started() == ""
            assert (await server.call("echo", {"text": "in"})).output == "secured: in"
            (asked,) = host.asked
            assert asked["mode"] == "url" and asked["url"].startswith(f"{url}/authorize?")
            assert asked["meta"]["cagent/type"] == "oauth_flow"
            assert asked["meta"]["cagent/server_url"] == f"{url}/mcp"
            assert AuthorizationEvent("accept", f"{url}/mcp") in host.events
            assert host.flows.waiting == []
            tokens = token_path(tmp_path, f"{url}/mcp")
            assert stat.S_IMODE(os.stat(tokens).st_mode) == 0o600
            assert stat.S_IMODE(os.stat(tokens.parent).st_mode) == 0o700
            # A later runtime finds the stored token: no second authorization.
            again = McpServer(
                RemoteSpec(f"{url}/mcp"), Browser(nursery), settings, data_dir=tmp_path
            )
            assert await again.ensure_started() == ""
            assert provider.authorized == 1
            nursery.cancel_scope.cancel()


async def test_oauth_denied_or_unanswered_is_a_start_warning(tmp_path: Path) -> None:
    with trio.fail_after(DEADLINE):
        async with serving(oauth_app(AutoApprove())) as url, trio.open_nursery() as nursery:
            host = Browser(nursery, deny=True)
            server = McpServer(
                RemoteSpec(f"{url}/mcp"), host, oauth_settings(host.flows), data_dir=tmp_path
            )
            warning = await server.ensure_started()
            assert "authorization failed: access_denied: no" in warning
            declining = FakeHost(nursery, answer=ElicitationAnswer("decline"))
            flows = OAuthFlows()
            server = McpServer(
                RemoteSpec(f"{url}/mcp"), declining, oauth_settings(flows), data_dir=tmp_path
            )
            warning = await server.ensure_started()
            assert "the authorization request was declined" in warning
            assert flows.waiting == []
            nursery.cancel_scope.cancel()


def test_a_redirect_needs_a_waiting_flow_and_a_code_or_an_error() -> None:
    flows = OAuthFlows()
    with pytest.raises(OAuthFlowNotFound):
        flows.deliver("unknown", Redirect(code="c"))
    receive = flows.open("s1")
    with pytest.raises(InvalidRequest):
        flows.deliver("s1", Redirect())
    flows.deliver("s1", Redirect(code="c"))
    assert receive.receive_nowait() == Redirect(code="c")
    with pytest.raises(OAuthFlowNotFound):
        flows.deliver("s1", Redirect(code="again"))  # a flow takes one redirect
