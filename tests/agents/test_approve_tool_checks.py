"""``approve-tool`` names exactly the tool that asked (issue 23, item 11): a pattern such as
``"*"`` became a blanket allow rule, and naming another tool still ran the asked one. Both are
now refused (400) and the question stays pending for a proper answer."""

from __future__ import annotations

import pytest
import trio

from greenroom.agents import ResumeRequest
from greenroom.errors import InvalidRequest
from tests.agents.loop_support import FakeIO, FakeProvider, call, start, text, tool_step
from tests.agents.test_local_runtime import ShellCalls, run_until_confirmation, shell_runtime


@pytest.mark.parametrize(
    ("tool_name", "why"),
    [("*", "pattern"), ("sh*", "pattern"), ("shell:cmd=*", "pattern"), ("write_file", "asked")],
)
async def test_approve_tool_must_name_the_asked_tool(autojump_clock, tool_name, why) -> None:
    shell = ShellCalls()
    provider = FakeProvider(tool_step(call("shell", {"cmd": "rm x"}, "c1")), text("ok"))
    runtime = shell_runtime(provider, shell)
    io = start(FakeIO(), "go")
    async with trio.open_nursery() as nursery:
        await run_until_confirmation(runtime, io, nursery)
        with pytest.raises(InvalidRequest, match=why):
            await runtime.resume(ResumeRequest("approve-tool", tool_name=tool_name))
        assert shell.calls == []  # still waiting: nothing ran
        await runtime.resume(ResumeRequest("reject"))
    assert shell.calls == []


async def test_approve_tool_with_the_asked_name_or_none_runs_it(autojump_clock) -> None:
    for name in ("SHELL", ""):
        shell = ShellCalls()
        provider = FakeProvider(tool_step(call("shell", {"cmd": "ls"}, "c1")), text("ok"))
        runtime = shell_runtime(provider, shell)
        io = start(FakeIO(), "go")
        async with trio.open_nursery() as nursery:
            await run_until_confirmation(runtime, io, nursery)
            await runtime.resume(ResumeRequest("approve-tool", tool_name=name))
        assert [c["cmd"] for c in shell.calls] == ["ls"]
