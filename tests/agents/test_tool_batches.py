"""A batch of tool calls in the runtime: read-only calls run concurrently (each a child task of
the turn), results are recorded in call order, a cancelled turn records every open call as
cancelled, and an unanswered confirmation is rejected after ``confirmation_timeout``.
All on the autojump clock with in-memory tools."""

from __future__ import annotations

from typing import Any

import trio

from greenroom.agents import AgentConfig, FunctionTool, ToolAnnotations, ToolContext, ToolResult
from greenroom.agents.providers import ToolSpec
from greenroom.agents.tools import build_tools

from .loop_support import FakeIO, FakeProvider, call, make_runtime, start, text, tool_step


class Probe:
    """Read-only ``slow`` tools that wait for a release; records how many ran at once."""

    def __init__(self) -> None:
        self.running = 0
        self.peak = 0
        self.release = trio.Event()

    async def slow(self, args: Any) -> ToolResult:
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            await self.release.wait()
        finally:
            self.running -= 1
        return ToolResult(f"done {args['n']}")

    def tools_for(self, agent: AgentConfig, context: ToolContext) -> Any:
        tools = build_tools(agent.toolsets, context)
        spec = ToolSpec("slow", "", {"type": "object", "properties": {"n": {"type": "integer"}}})
        tools.tools["slow"] = FunctionTool(spec, self.slow, ToolAnnotations(read_only=True))
        tools.tools["write"] = FunctionTool(ToolSpec("write"), self.slow)
        return tools


def tool_results(io: FakeIO) -> list[tuple[str, str]]:
    return [(m.message.tool_call_id, m.content) for m in io.messages() if m.role == "tool"]


async def test_read_only_calls_run_together_and_record_in_order(autojump_clock) -> None:
    probe = Probe()
    calls = [call("slow", {"n": i}, f"c{i}") for i in range(3)]
    runtime = make_runtime(FakeProvider(tool_step(*calls), text("ok")), tools_for=probe.tools_for)
    io = start(FakeIO(), "go")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(runtime.run_stream, io)
        await trio.testing.wait_all_tasks_blocked()
        assert probe.running == 3
        probe.release.set()
    assert probe.peak == 3
    assert tool_results(io) == [("c0", "done 0"), ("c1", "done 1"), ("c2", "done 2")]


async def test_cancelled_turn_records_every_open_call(autojump_clock) -> None:
    probe = Probe()
    calls = [call("slow", {"n": i}, f"c{i}") for i in range(2)]
    runtime = make_runtime(FakeProvider(tool_step(*calls)), tools_for=probe.tools_for)
    io = start(FakeIO(), "go")
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(runtime.run_stream, io)
            await trio.testing.wait_all_tasks_blocked()
            scope.cancel()
    assert probe.running == 0  # nothing left running after the turn
    cancelled = "The tool call was canceled by the user."
    assert tool_results(io) == [("c0", cancelled), ("c1", cancelled)]


async def test_unanswered_confirmation_is_rejected_after_the_timeout(autojump_clock) -> None:
    probe = Probe()
    probe.release.set()
    provider = FakeProvider(tool_step(call("write", {"n": 1}, "w")), text("ok"))
    runtime = make_runtime(provider, tools_for=probe.tools_for, confirmation_timeout=30)
    io = start(FakeIO(), "go")
    await runtime.run_stream(io)
    assert trio.current_time() >= 30
    assert probe.peak == 0
    assert tool_results(io) == [
        ("w", "The user rejected the tool call. Reason: no answer within 30 seconds")
    ]
    assert [(a.tool, a.decision) for a in io.approvals] == [("write", "timeout")]
