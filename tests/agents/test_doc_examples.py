"""The example agent files of docs/examples/ load cleanly and behave as docs/agents.md says."""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing

from greenroom.agents import AgentSources, LocalRuntimeFactory
from greenroom.agents._validate import check_files
from greenroom.domain import AgentChoice, AgentChoiceReasoning, Session, ToolCallEvent

from .loop_support import FakeIO, start

EXAMPLES = Path(__file__).parents[2] / "docs" / "examples"


def test_the_examples_validate_without_errors_or_warnings() -> None:
    reports = check_files([EXAMPLES])
    assert sorted(Path(r.path).name for r in reports) == ["scripted-demo.yaml", "slow-echo.yaml"]
    assert [(r.errors, r.warnings) for r in reports] == [((), ())] * 2


async def test_slow_echo_waits_between_tokens(autojump_clock: trio.testing.MockClock) -> None:
    factory = LocalRuntimeFactory(AgentSources.from_paths([EXAMPLES]), env={})
    built = await factory.build("slow-echo", "", Session.new())
    io = start(FakeIO(), "steer me now")
    began = trio.current_time()
    await built.runtime.run_stream(io)
    tokens = [e.content for e in io.of(AgentChoice)]
    assert tokens == ["Echo:", " steer", " me", " now"]
    assert trio.current_time() - began == 4 * 0.5  # virtual time: one delay per token


async def test_scripted_demo_plays_its_script() -> None:
    factory = LocalRuntimeFactory(AgentSources.from_paths([EXAMPLES]), env={})
    built = await factory.build("scripted-demo", "", Session.new())
    io = start(FakeIO(), "plan my week")
    with trio.fail_after(10):
        await built.runtime.run_stream(io)
    reasoning = "".join(e.content for e in io.of(AgentChoiceReasoning))
    assert reasoning == "The user wants a plan; let me write it down first."
    [call] = io.of(ToolCallEvent)
    assert call.tool_call.function.name == "think"
    assert io.messages()[-1].message.content.startswith("Here is the plan:")
