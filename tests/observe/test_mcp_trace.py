"""A call to a remote MCP server carries the turn's trace: the ``traceparent`` header of the
HTTP request that carries ``tools/call`` (streamable HTTP and SSE), under greenroom's ``mcp
tools/call`` span. The servers are the SDK's, on 127.0.0.1 (tests/mcp/http_servers.py)."""

from __future__ import annotations

import pytest
import trio
from mcp.server.mcpserver import Context, MCPServer
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from greenroom.agents.mcp import McpServer, RemoteSpec
from greenroom.observe import span
from tests.mcp.http_servers import serving, sse_app, streamable_app
from tests.mcp.support import QUICK, FakeHost
from tests.observe.support import ancestors, header_ids, one, span_id, trace_id
from tests.slowness import slow

pytestmark = pytest.mark.slow


def traced_server() -> MCPServer:
    server: MCPServer = MCPServer("traced", log_level="ERROR")

    @server.tool(description="The traceparent header of the request that carried this call")
    def traceparent(ctx: Context) -> str:
        return (ctx.headers or {}).get("traceparent", "")

    return server


@pytest.mark.parametrize("transport", ["streamable", "sse"])
async def test_an_mcp_call_carries_the_trace(spans: InMemorySpanExporter, transport: str) -> None:
    app = streamable_app if transport == "streamable" else sse_app
    path = "/mcp" if transport == "streamable" else "/sse"
    with trio.fail_after(slow(60)):
        async with serving(app(traced_server())) as url, trio.open_nursery() as nursery:
            server = McpServer(RemoteSpec(url + path, transport), FakeHost(nursery), QUICK)
            assert await server.ensure_started() == ""
            with span("execute_tool traceparent"):
                header = (await server.call("traceparent", {})).output
            nursery.cancel_scope.cancel()
    done = spans.get_finished_spans()
    tool = one(done, "execute_tool traceparent")
    call = one(done, "mcp tools/call traceparent")
    assert call.attributes is not None
    assert call.attributes["greenroom.mcp.server"] == server.description
    assert header, "the MCP server saw no traceparent"
    sent_trace, sent_parent = header_ids(header)
    assert sent_trace == trace_id(tool)
    # The header names a span of the call: greenroom's, or the MCP SDK's client span inside it.
    by_id = {span_id(s): s for s in done}
    sender = by_id[sent_parent]
    assert sender is call or ancestors(done, sender)[0] == call.name
