"""Deterministic tests for code built on greenroom: an in-process server with scripted agents.

::

    from greenroom.testing import ScriptedAgent, Tool, open_greenroom

    AGENT = ScriptedAgent(
        turns=[
            [{"text": "Let me look."}, {"tool_call": {"name": "shell", "arguments": {}}}],
            "Done.",
        ],
        tools=[Tool("shell", confirm=True)],
    )

    async def test_rejecting_a_tool(autojump_clock):
        async with open_greenroom(AGENT) as gr:
            session = await gr.client.create_session(title="t")
            async with gr.client.events(session["id"], 0) as events:
                await gr.client.run(session["id"], "list the files")
                await events.next_of("tool_call_confirmation")
                await gr.client.reject(session["id"], "not now")
                seen = await events.until("stream_stopped")
            [response] = [e for e in seen if e.type == "tool_call_response"]
            assert response["response"].startswith("The user rejected the tool call.")

The pytest plugin :mod:`greenroom.testing.plugin` adds fixtures (``greenroom``, with
``greenroom_agent`` and ``greenroom_store`` to override). See docs/testing.md.
"""

from ._agents import (
    ScriptedAgent as ScriptedAgent,
    Tool as Tool,
    ToolCallContext as ToolCallContext,
    ToolHandler as ToolHandler,
)
from ._server import (
    DEFAULT_SOURCE as DEFAULT_SOURCE,
    Greenroom as Greenroom,
    StoreKind as StoreKind,
    open_greenroom as open_greenroom,
)

__all__ = [
    "DEFAULT_SOURCE",
    "Greenroom",
    "ScriptedAgent",
    "StoreKind",
    "Tool",
    "ToolCallContext",
    "ToolHandler",
    "open_greenroom",
]
