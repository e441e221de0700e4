"""Code mode over an MCP server's tools (decision 0032): the tools appear once the server has
started, and the code-mode tool wraps them then (its description lists them, a script calls
them). A LocalRuntime served in a nursery, the stdio test server, a scripted model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from greenroom.agents._codemode import NAME
from tests.agents.loop_support import FakeProvider, call, text, tool_step
from tests.mcp.test_mcp_runtime import DEADLINE, agent_yaml, approved, responses, served

pytestmark = pytest.mark.slow

SCRIPT = """
const said = echo({text: "hi"});
const sum = add({a: 2, b: 3});
return said + " / " + sum;
"""


async def test_a_script_calls_the_servers_tools(tmp_path: Path) -> None:
    yaml_text = agent_yaml().replace(
        "    toolsets:\n", "    code_mode_tools: true\n    toolsets:\n", 1
    )
    provider = FakeProvider(tool_step(call(NAME, {"script": SCRIPT}, "c1")), text("done"))
    with trio.fail_after(DEADLINE):
        async with served(provider, yaml_text, tmp_path) as rt:
            io = approved("use the server")
            await rt.run_stream(io)
    offered = provider.requests[0].tools
    assert [t.name for t in offered] == [NAME]
    assert "function echo(args: object): string" in offered[0].description
    assert "function add(args: object): string" in offered[0].description
    body = json.loads(responses(io.events)["c1"])
    assert body["value"] == "echo: hi / 5"
