"""Code mode in the runtime (decision 0032): ``code_mode_tools: true`` offers one
``run_tools_with_javascript`` tool whose script calls the agent's tools, each call through the
approval path of the model's own calls.

The scripts run in a real QuickJS child process, so these tests use the real clock: every wait
is bounded by ``trio.fail_after`` with a ``slow()`` deadline.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import trio

from greenroom.agents import LocalRuntime, ResumeRequest
from greenroom.agents._codemode import NAME
from greenroom.agents._js_sandbox import Limits
from greenroom.agents.tools import ToolContext
from greenroom.domain import (
    Event,
    HookBlocked,
    Message,
    ToolCallConfirmation,
    ToolCallEvent,
    ToolCallResponse,
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
from tests.agents.test_js_sandbox import children, gone
from tests.slowness import slow

DEADLINE = slow(60)
AGENT = """\
agents:
  root:
    model: openai/main
    code_mode_tools: true
    toolsets:
      - type: filesystem
      - type: shell
      - type: todo
permissions:
  deny: ["shell:cmd=rm*"]
"""
TWO_CALLS = """
const wrote = write_file({path: "notes.txt", content: "hello"});
const shown = shell({cmd: "cat notes.txt"});
console.log("wrote:", wrote);
console.error("almost done");
return {wrote, shown};
"""
DENIED_THEN_REJECTED = """
try { shell({cmd: "rm -f notes.txt"}) } catch (e) { console.log("denied:", e.message) }
write_file({path: "side.txt", content: "no"});
return "not reached";
"""


class AskingIO(FakeIO):
    """A FakeIO that hands each confirmation question to the test as it is asked."""

    def __init__(self) -> None:
        super().__init__()
        self.asked_send, self.asked = trio.open_memory_channel[ToolCallConfirmation](16)

    async def emit(self, event: Event) -> None:
        await super().emit(event)
        if isinstance(event, ToolCallConfirmation):
            self.asked_send.send_nowait(event)


def runtime(provider: FakeProvider, work: Path, **kwargs: Any) -> LocalRuntime:
    return make_runtime(provider, AGENT, tool_context=ToolContext(working_dir=work), **kwargs)


async def run_answering(
    rt: LocalRuntime, io: AskingIO, answers: dict[str, ResumeRequest]
) -> list[ToolCallConfirmation]:
    """Run a turn; answer each question by its tool's name. Returns the questions."""
    questions: list[ToolCallConfirmation] = []

    async def answer() -> None:
        async for asked in io.asked:
            questions.append(asked)
            await rt.resume(answers[asked.tool_call.function.name])

    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(answer)
            await rt.run_stream(io)
            nursery.cancel_scope.cancel()
    return questions


def results(io: FakeIO) -> dict[str, str]:
    return {e.tool_call_id: e.response for e in io.of(ToolCallResponse)}


def tool_messages(io: FakeIO) -> dict[str, str]:
    return {m.message.tool_call_id: m.message.content for m in io.messages() if m.role == "tool"}


async def test_the_tools_are_offered_as_functions_of_one_tool(tmp_path: Path) -> None:
    rt = runtime(FakeProvider(), tmp_path)
    tools = rt.tools_of()
    names = [spec.name for spec in tools.specs]
    assert names[0] == NAME
    assert names[1:] and all(tools.tools[n].category == "todo" for n in names[1:])  # kept out
    described = tools.tools[NAME].spec.description
    for wrapped in ("write_file", "read_file", "shell"):
        assert f"function {wrapped}(args: object): string" in described
    assert "function create_todo(" not in described
    assert '"cmd"' in described  # each function's JSON schema is in its doc comment


async def test_a_script_calls_two_tools_with_one_approval_each(tmp_path: Path) -> None:
    provider = FakeProvider(tool_step(call(NAME, {"script": TWO_CALLS}, "c1")), text("done"))
    rt = runtime(provider, tmp_path)
    io = AskingIO()
    start(io, "go")
    approve = ResumeRequest("approve")
    questions = await run_answering(rt, io, {"write_file": approve, "shell": approve})

    assert [q.tool_call.function.name for q in questions] == ["write_file", "shell"]
    inner = [q.tool_call.id for q in questions]
    assert all(i.startswith("js_") for i in inner) and len(set(inner)) == 2
    assert [(a.tool, a.decision, a.tool_call_id) for a in io.approvals] == [
        ("write_file", "approve", inner[0]),
        ("shell", "approve", inner[1]),
    ]
    assert (tmp_path / "notes.txt").read_text() == "hello"
    started = [(e.tool_call.function.name, e.tool_call.id) for e in io.of(ToolCallEvent)]
    assert started == [(NAME, "c1"), ("write_file", inner[0]), ("shell", inner[1])]

    body = json.loads(results(io)["c1"])
    value = json.loads(body["value"])
    assert value["wrote"] == "File written successfully: notes.txt (5 bytes)"
    assert "hello" in value["shown"]
    assert body["stdout"] == f"wrote: {value['wrote']}\n"
    assert body["stderr"] == "almost done\n"
    assert "tool_calls" not in body  # only when the script failed
    assert results(io)[inner[0]] == value["wrote"]  # the inner calls' events

    # The model sees the script's result only; only the script's call is a durable intent.
    assert list(tool_messages(io)) == ["c1"]
    assert [call_id for call_id, _ in io.intents] == ["c1"]
    last_prompt = provider.requests[-1].messages
    assert [m.tool_call_id for m in last_prompt if m.role == "tool"] == ["c1"]
    assert provider.requests[0].tools[0].name == NAME


async def test_a_denied_call_throws_and_a_rejected_one_fails_the_script(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("keep me")
    script = {"script": DENIED_THEN_REJECTED}
    provider = FakeProvider(tool_step(call(NAME, script, "c2")), text("done"))
    rt = runtime(provider, tmp_path)
    io = AskingIO()
    start(io, "go")
    reject = ResumeRequest("reject", reason="not today")
    questions = await run_answering(rt, io, {"write_file": reject})

    assert [q.tool_call.function.name for q in questions] == ["write_file"]  # deny never asks
    assert (tmp_path / "notes.txt").read_text() == "keep me"  # the denied rm never ran
    assert not (tmp_path / "side.txt").exists()  # the rejected write never ran
    (message,) = [m for m in io.messages() if m.role == "tool"]
    assert message.message.is_error
    body = json.loads(message.message.content)
    error, *stack = body["value"].splitlines()
    assert error == "Error: The user rejected the tool call. Reason: not today"
    assert stack[-2].strip() == "at <anonymous> (<input>:3:1)"  # the script's own line 3
    denial = body["tool_calls"][0]["error"]
    assert body["stdout"] == f"denied: {denial}\n"
    assert "denied" in denial
    assert body["tool_calls"] == [
        {"name": "shell", "arguments": {"cmd": "rm -f notes.txt"}, "error": denial},
        {
            "name": "write_file",
            "arguments": {"path": "side.txt", "content": "no"},
            "error": "The user rejected the tool call. Reason: not today",
        },
    ]
    assert [(a.tool, a.decision) for a in io.approvals] == [("write_file", "reject")]


async def test_a_script_that_loops_forever_ends_the_call_not_the_turn(tmp_path: Path) -> None:
    script = {"script": "while (true) {}"}
    provider = FakeProvider(tool_step(call(NAME, script, "c3")), text("done"))
    rt = runtime(provider, tmp_path, code_mode_limits=Limits(cpu_seconds=1))
    io = AskingIO()
    start(io, "go")
    await run_answering(rt, io, {})
    body = json.loads(tool_messages(io)["c3"])
    assert body["value"] == "the script ran out of time (1 s of CPU)"
    assert io.messages()[-1].message.content == "done"


async def test_a_cancelled_turn_kills_the_script_and_the_next_turn_runs(tmp_path: Path) -> None:
    script = {"script": 'write_file({path: "x.txt", content: "x"}); return "no"'}
    provider = FakeProvider(tool_step(call(NAME, script, "c4")))
    rt = runtime(provider, tmp_path)
    io = AskingIO()
    start(io, "go")
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(rt.run_stream, io)
            await io.asked.receive()  # the script waits for this answer
            (child,) = children("_js_worker.py")
            exited = os.pidfd_open(child)
            nursery.cancel_scope.cancel()
        await gone(exited)
    assert not (tmp_path / "x.txt").exists()

    provider.add(text("hello again"))
    io.add_user("again")
    with trio.fail_after(DEADLINE):
        await rt.run_stream(io)
    last: Message = io.messages()[-1]
    assert last.message.content == "hello again"


async def test_a_rerun_after_a_crash_is_a_tool_error(tmp_path: Path) -> None:
    """The script's call is the in-doubt unit; running it again needs a turn (decision 0032)."""
    rt = runtime(FakeProvider(), tmp_path)
    script = 'write_file({path: "y.txt", content: "y"}); return "ran"'
    result = await rt.rerun_tool(call(NAME, {"script": script}, "c5"), "root")
    assert result.is_error
    assert result.output == f"{NAME} can only run inside an agent's turn"
    assert not (tmp_path / "y.txt").exists()


async def test_a_pre_tool_use_hook_blocks_a_call_of_the_script(tmp_path: Path) -> None:
    hooked = AGENT.replace(
        "    toolsets:\n",
        "    hooks:\n      pre_tool_use:\n        - matcher: write_file\n"
        "          hooks: [{type: command, command: 'echo stop it >&2; exit 2'}]\n"
        "    toolsets:\n",
        1,
    )
    script = """
      try { write_file({path: "h.txt", content: "h"}) } catch (e) { return "caught " + e.message }
      return "written";
    """
    provider = FakeProvider(tool_step(call(NAME, {"script": script}, "c6")), text("done"))
    rt = make_runtime(provider, hooked, tool_context=ToolContext(working_dir=tmp_path))
    io = AskingIO()
    start(io, "go")
    questions = await run_answering(rt, io, {})
    assert questions == []
    body = json.loads(tool_messages(io)["c6"])
    assert body["value"] == "caught Tool call blocked by hook: stop it"
    assert not (tmp_path / "h.txt").exists()
    assert [e.tool_call.function.name for e in io.of(HookBlocked)] == ["write_file"]
