"""MCP toolsets in the agent loop: a LocalRuntime served in a nursery (its services), an agent
file with an ``mcp`` toolset running the test server, a scripted model."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from greenroom.agents import LocalRuntime, ToolContext
from greenroom.domain import (
    ElicitationRequest,
    Event,
    McpInitFinished,
    McpInitStarted,
    Session,
    ToolCallEvent,
    ToolCallResponse,
    ToolsetInfo,
    Warning,
)
from tests.agents.loop_support import (
    FakeIO,
    FakeProvider,
    call,
    make_runtime,
    start,
    text,
    tool_step,
)
from tests.mcp.support import QUICK, SERVER, until
from tests.slowness import slow

pytestmark = pytest.mark.slow
DEADLINE = slow(60)


def agent_yaml(*args: str, extra: str = "") -> str:
    arguments = ", ".join(f'"{a}"' for a in (str(SERVER), *args))
    return (
        "agents:\n"
        "  root:\n"
        "    model: openai/main\n"
        "    instruction: You are root.\n"
        "    toolsets:\n"
        "      - type: mcp\n"
        f"        command: {sys.executable}\n"
        f"        args: [{arguments}]\n"
        f"{extra}"
    )


@asynccontextmanager
async def served(
    provider: FakeProvider, yaml_text: str, tmp_path: Path
) -> AsyncIterator[LocalRuntime]:
    runtime = make_runtime(
        provider, yaml_text, tool_context=ToolContext(working_dir=tmp_path, mcp=QUICK)
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.serve)
        yield runtime
        nursery.cancel_scope.cancel()
    await runtime.aclose()


def approved(*users: str) -> FakeIO:
    """A session whose tool calls need no confirmation (``tools_approved``)."""
    return start(FakeIO(Session.new(tools_approved=True)), *users)


def responses(events: list[Event]) -> dict[str, str]:
    return {e.tool_call_id: e.response for e in events if isinstance(e, ToolCallResponse)}


async def test_the_servers_tools_reach_the_model_and_run(tmp_path: Path) -> None:
    provider = FakeProvider(tool_step(call("echo", {"text": "hi"})), text("done"))
    with trio.fail_after(DEADLINE):
        async with served(provider, agent_yaml("--instructions", "Prefer echo."), tmp_path) as rt:
            io = start(FakeIO(), "say hi")
            await rt.run_stream(io)
    assert responses(io.events) == {"call-1": "echo: hi"}
    kinds = io.types()
    assert kinds.index("mcp_init_started") < kinds.index("mcp_init_finished")
    assert kinds.index("mcp_init_finished") < kinds.index("agent_choice")
    first = provider.requests[0]
    assert "echo" in [t.name for t in first.tools]
    assert "Prefer echo." in first.messages[0].content
    (used,) = io.of(ToolCallEvent)
    assert used.tool_definition["annotations"] == {"readOnlyHint": True}


async def test_allow_list_sees_prefixed_names(tmp_path: Path) -> None:
    extra = "        name: files\n        tools: [files_echo, files_add]\n"
    provider = FakeProvider(tool_step(call("files_echo", {"text": "x"})), text("x"))
    with trio.fail_after(DEADLINE):
        async with served(provider, agent_yaml(extra=extra), tmp_path) as rt:
            io = start(FakeIO(), "add")
            await rt.run_stream(io)
    assert [t.name for t in provider.requests[0].tools] == ["files_echo", "files_add"]
    assert responses(io.events) == {"call-1": "echo: x"}


async def test_a_server_that_cannot_start_is_a_warning_and_the_turn_goes_on(
    tmp_path: Path,
) -> None:
    provider = FakeProvider(text("no tools, still here"))
    with trio.fail_after(DEADLINE):
        async with served(provider, agent_yaml("--exit-at-start", "1"), tmp_path) as rt:
            io = start(FakeIO(), "hello")
            await rt.run_stream(io)
    warnings = [w.message for w in io.of(Warning)]
    assert any("start failed" in w and "configured to fail" in w for w in warnings), warnings
    assert io.messages()[-1].content == "no tools, still here"
    assert provider.requests[0].tools == ()


async def test_a_changed_tool_list_is_taken_at_the_next_turn(tmp_path: Path) -> None:
    provider = FakeProvider(tool_step(call("grow", {})), text("grew"), text("second"))
    with trio.fail_after(DEADLINE):
        async with served(provider, agent_yaml(), tmp_path) as rt:
            io = approved("grow")
            await rt.run_stream(io)
            assert "fresh" not in [t.name for t in provider.requests[1].tools]
            server = rt.tools_of().entries[0].built.live
            assert server is not None
            await until(lambda: "fresh" in [t.spec.name for t in server.current()[0]])
            io.add_user("again")
            await rt.run_stream(io)
    assert "fresh" in [t.name for t in provider.requests[2].tools]
    (info,) = io.of(ToolsetInfo)
    assert info.available_tools == len(provider.requests[2].tools)


async def test_an_elicitation_reaches_the_stream_and_the_answer_the_server(
    tmp_path: Path,
) -> None:
    provider = FakeProvider(tool_step(call("ask", {})), text("thanks"))
    logged: list[Event] = []

    def sink(event: Event) -> bool:
        logged.append(event)
        return True

    with trio.fail_after(DEADLINE):
        async with served(provider, agent_yaml(), tmp_path) as rt:
            rt.on_elicitation_request(sink)
            io = approved("ask me")
            async with trio.open_nursery() as nursery:
                nursery.start_soon(rt.run_stream, io)
                await until(lambda: bool(io.of(ElicitationRequest)))
                (asked,) = io.of(ElicitationRequest)
                await rt.resume_elicitation("accept", {"name": "Grace"}, asked.elicitation_id)
    assert logged == [asked]
    assert asked.message == "What is your name?"
    assert responses(io.events) == {"call-1": "accept: Grace"}


async def test_an_elicitation_nobody_listens_to_is_declined_at_once(tmp_path: Path) -> None:
    provider = FakeProvider(tool_step(call("ask", {})), text("ok"))
    with trio.fail_after(DEADLINE):
        async with served(provider, agent_yaml(), tmp_path) as rt:
            rt.on_elicitation_request(lambda event: False)
            io = approved("ask me")
            await rt.run_stream(io)
    assert responses(io.events) == {"call-1": "decline: "}
    assert not io.of(ElicitationRequest)


async def test_servers_start_when_served_and_stop_with_it(tmp_path: Path) -> None:
    provider = FakeProvider(tool_step(call("pid", {})), text("ok"))
    with trio.fail_after(DEADLINE):
        async with served(provider, agent_yaml(), tmp_path) as rt:
            server = rt.tools_of().entries[0].built.live
            assert server is not None and server.state == "ready"  # type: ignore[attr-defined]
            io = start(FakeIO(), "pid?")
            await rt.run_stream(io)
            pid = int(responses(io.events)["call-1"])
            assert McpInitStarted(agent_name="root") in io.events
            assert McpInitFinished(agent_name="root") in io.events
    from tests.mcp.support import alive

    assert not alive(pid)
