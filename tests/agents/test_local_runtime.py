"""The agent loop (LocalRuntime.run_stream) against a scripted provider and a recording TurnIO.

Rules: virtual time only (``autojump_clock``), ordering by ``wait_all_tasks_blocked``, no sleeps.
"""

from __future__ import annotations

import datetime as dt

import pytest
import trio
import trio.testing

from greenroom.agents import (
    INTERRUPTED_NOTE,
    TOOLSET_BUILDERS,
    AgentConfig,
    AgentTools,
    FunctionTool,
    LocalRuntime,
    QueuedMessage,
    ResumeRequest,
    Runtime,
    ToolContext,
    ToolResult,
    build_tools,
)
from greenroom.agents.providers import ToolSpec
from greenroom.domain import (
    MARKER,
    AgentChoice,
    AgentChoiceReasoning,
    AgentInfo,
    ErrorEvent,
    MaxIterationsReached,
    Permissions,
    Session,
    StreamStopped,
    TokenUsage,
    ToolCallConfirmation,
    ToolCallEvent,
    ToolCallResponse,
    UserMessage,
    Warning,
)
from greenroom.errors import ModelRateLimited, NoPendingRequest, QueueFull

from .loop_support import (
    FakeIO,
    FakeProvider,
    Step,
    add_tool_exchange,
    call,
    make_runtime,
    reasoning,
    roles,
    start,
    text,
    tool_step,
)

SHELL_SPEC = ToolSpec(name="shell", description="Run a command")


class ShellCalls:
    """A confirmation-needing tool that records its calls."""

    def __init__(self) -> None:
        self.calls: list[dict[str, object]] = []

    async def run(self, arguments) -> ToolResult:
        self.calls.append(dict(arguments))
        return ToolResult(f"ran {arguments.get('cmd')}")

    def tools_for(self, agent: AgentConfig, context: ToolContext) -> AgentTools:
        tools = build_tools(agent.toolsets, context)
        tools.tools["shell"] = FunctionTool(SHELL_SPEC, self.run)  # not read-only: asks
        return tools


def stopped(io: FakeIO) -> StreamStopped:
    stops = io.of(StreamStopped)
    assert len(stops) == 1
    return stops[0]


def test_local_runtime_satisfies_the_runtime_protocol() -> None:
    assert isinstance(make_runtime(FakeProvider()), Runtime)


async def test_text_answer_streams_deltas_and_stores_the_message() -> None:
    provider = FakeProvider(text("Hel", "lo!"))
    runtime = make_runtime(provider)
    io = start(FakeIO(), "hi")
    await runtime.run_stream(io)

    assert io.types() == [
        "stream_started",
        "agent_info",
        "agent_choice",
        "agent_choice",
        "token_usage",
        "stream_stopped",
    ]
    assert [e.content for e in io.of(AgentChoice)] == ["Hel", "lo!"]
    assert io.of(AgentInfo)[0] == AgentInfo(
        agent_name="root", model="openai/main", description="The main agent"
    )
    assert stopped(io).reason == "normal"
    answer = io.messages()[-1]
    assert (answer.role, answer.content, answer.agent_name) == ("assistant", "Hello!", "root")
    assert answer.message.model == "openai/main"
    assert answer.id > 0
    request = provider.requests[0]
    assert [m.role for m in request.messages] == ["system", "user"]
    system = request.messages[0].content
    assert system.startswith("You are the root agent.\n\n## Using the think tool")
    assert [t.name for t in request.tools] == ["think"]
    assert (io.session.input_tokens, io.session.output_tokens) == (10, 5)
    usage = io.of(TokenUsage)[0].usage
    assert (usage.input_tokens, usage.output_tokens, usage.context_length) == (10, 5, 15)


async def test_reasoning_deltas_become_reasoning_events_and_content() -> None:
    runtime = make_runtime(FakeProvider(reasoning("Let me see.", "42")))
    io = start(FakeIO(), "question")
    await runtime.run_stream(io)
    assert [e.content for e in io.of(AgentChoiceReasoning)] == ["Let me see."]
    answer = io.messages()[-1]
    assert (answer.content, answer.message.reasoning_content) == ("42", "Let me see.")


async def test_tool_call_runs_the_think_tool_then_calls_the_model_again() -> None:
    think = call("think", {"thought": "plan first"}, "c1")
    provider = FakeProvider(tool_step(think, say="Thinking."), text("Done."))
    runtime = make_runtime(provider)
    io = start(FakeIO(), "do it")
    await runtime.run_stream(io)

    assert io.types() == [
        "stream_started",
        "agent_info",
        "agent_choice",
        "token_usage",
        "tool_call",
        "tool_call_response",
        "agent_choice",
        "token_usage",
        "stream_stopped",
    ]
    event = io.of(ToolCallEvent)[0]
    assert event.tool_call == think
    assert event.tool_definition["name"] == "think"
    response = io.of(ToolCallResponse)[0]
    assert (response.tool_call_id, response.response) == ("c1", "Thoughts:\nplan first")
    assert roles(io.messages()) == ["user", "assistant", "tool", "assistant"]
    tool_message = io.messages()[2].message
    assert (tool_message.tool_call_id, tool_message.is_error) == ("c1", False)
    second = provider.requests[1].messages
    assert roles(second) == ["system", "user", "assistant", "tool"]
    assert second[2].tool_calls == (think,)
    assert second[3].content == "Thoughts:\nplan first"
    assert (io.session.input_tokens, io.session.output_tokens) == (30, 8)


async def test_unknown_tool_and_bad_arguments_give_error_results() -> None:
    provider = FakeProvider(
        tool_step(call("nope", {}, "c1"), call("think", "{not json", "c2")), text("ok")
    )
    io = start(FakeIO(), "go")
    await make_runtime(provider).run_stream(io)
    results = [m.message for m in io.messages() if m.role == "tool"]
    assert [(r.tool_call_id, r.is_error) for r in results] == [("c1", True), ("c2", True)]
    assert "not available" in results[0].content
    assert results[1].content.startswith("Error calling tool: invalid arguments:")


async def _run_to_limit(
    provider: FakeProvider, yaml_text: str, io: FakeIO, answer: ResumeRequest
) -> None:
    runtime = make_runtime(provider, yaml_text)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(runtime.run_stream, io)
        await trio.testing.wait_all_tasks_blocked()
        assert io.of(MaxIterationsReached), "the turn waits at the limit"
        assert not io.of(StreamStopped)
        await runtime.resume(answer)


async def test_max_iterations_waits_and_a_rejection_stops_the_turn_with_a_note() -> None:
    looping = [tool_step(call("think", {"thought": str(i)}, f"c{i}")) for i in range(5)]
    provider = FakeProvider(*looping)
    yaml_text = "agents:\n  root:\n    model: openai/m\n    max_iterations: 2\n    toolsets:\n"
    yaml_text += "      - type: think\n"
    io = start(FakeIO(), "loop")
    await _run_to_limit(provider, yaml_text, io, ResumeRequest("reject"))
    assert len(provider.requests) == 2
    assert io.of(MaxIterationsReached) == [MaxIterationsReached(2, session_id=io.session.id)]
    note = "Execution stopped after reaching the configured max_iterations limit (2)."
    assert io.messages()[-1].message.content == note
    assert stopped(io).reason == "normal"

    # The session's limit wins over the agent's.
    provider = FakeProvider(*looping)
    io = start(FakeIO(Session.new(max_iterations=3)), "loop")
    await _run_to_limit(provider, yaml_text, io, ResumeRequest("reject"))
    assert len(provider.requests) == 3
    assert io.of(MaxIterationsReached)[0].max_iterations == 3


async def test_max_iterations_approval_grants_ten_more_model_calls() -> None:
    looping = [tool_step(call("think", {"thought": str(i)}, f"c{i}")) for i in range(7)]
    provider = FakeProvider(*looping, text("finally"))
    yaml_text = "agents:\n  root:\n    model: openai/m\n    max_iterations: 2\n    toolsets:\n"
    yaml_text += "      - type: think\n"
    io = start(FakeIO(), "loop")
    await _run_to_limit(provider, yaml_text, io, ResumeRequest("approve"))
    assert len(provider.requests) == 8  # 2, then up to 10 more: the model stopped at 8
    assert len(io.of(MaxIterationsReached)) == 1
    assert io.messages()[-1].message.content == "finally"
    assert stopped(io).reason == "normal"


async def test_a_model_that_stops_at_the_limit_does_not_report_it() -> None:
    provider = FakeProvider(tool_step(call("think", {"thought": "x"})), text("done"))
    yaml_text = "agents:\n  root:\n    model: openai/m\n    max_iterations: 2\n    toolsets:\n"
    yaml_text += "      - type: think\n"
    io = start(FakeIO(), "go")
    await make_runtime(provider, yaml_text).run_stream(io)
    assert io.of(MaxIterationsReached) == []


async def test_steer_is_taken_between_iterations(autojump_clock) -> None:
    release = trio.Event()
    first = tool_step(call("think", {"thought": "x"}, "c1"))
    first.hold = release
    provider = FakeProvider(first, text("steered"))
    runtime = make_runtime(provider)
    io = start(FakeIO(), "start")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(runtime.run_stream, io)
        await trio.testing.wait_all_tasks_blocked()
        await runtime.steer(QueuedMessage("actually, do this"))
        assert runtime.queue_status().steer_depth == 1
        release.set()
    assert runtime.queue_status().steer_depth == 0
    assert roles(io.messages()) == ["user", "assistant", "tool", "user", "assistant"]
    assert io.messages()[3].content == "actually, do this"
    picked = io.of(UserMessage)
    assert picked == [UserMessage("actually, do this", io.session.id, session_position=3)]
    assert io.types().index("user_message") > io.types().index("tool_call_response")
    assert provider.requests[1].messages[-1].content == "actually, do this"


async def test_steer_during_the_final_answer_gets_its_own_model_call(autojump_clock) -> None:
    release = trio.Event()
    first = text("first answer")
    first.hold = release
    provider = FakeProvider(first, text("second answer"))
    runtime = make_runtime(provider)
    io = start(FakeIO(), "q")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(runtime.run_stream, io)
        await trio.testing.wait_all_tasks_blocked()
        await runtime.steer(QueuedMessage("one more thing"))
        release.set()
    assert [m.content for m in io.messages()] == [
        "q",
        "first answer",
        "one more thing",
        "second answer",
    ]
    assert len(io.of(StreamStopped)) == 1


async def test_follow_ups_are_taken_one_per_turn_at_the_end() -> None:
    provider = FakeProvider(text("A1"), text("A2"), text("A3"))
    runtime = make_runtime(provider)
    await runtime.follow_up(QueuedMessage("second"))
    await runtime.follow_up(QueuedMessage("third"))
    assert runtime.queue_status().followup_depth == 2
    io = start(FakeIO(), "first")
    await runtime.run_stream(io)
    assert [m.content for m in io.messages()] == ["first", "A1", "second", "A2", "third", "A3"]
    assert [e.message for e in io.of(UserMessage)] == ["second", "third"]
    assert io.types().count("stream_started") == 1
    assert io.types().count("stream_stopped") == 1
    assert runtime.queue_status().followup_depth == 0


async def test_full_queues_refuse_with_queue_full() -> None:
    runtime = make_runtime(FakeProvider(), steer_capacity=2, followup_capacity=1)
    await runtime.steer(QueuedMessage("1"))
    await runtime.steer(QueuedMessage("2"))
    with pytest.raises(QueueFull) as info:
        await runtime.steer(QueuedMessage("3"))
    assert (info.value.status, info.value.retry_after) == (429, 1)
    await runtime.follow_up(QueuedMessage("a"))
    with pytest.raises(QueueFull):
        await runtime.follow_up(QueuedMessage("b"))
    status = runtime.queue_status()
    assert (status.steer_depth, status.steer_capacity) == (2, 2)
    assert (status.followup_depth, status.followup_capacity) == (1, 1)


async def test_model_error_ends_the_turn_with_an_error_and_the_next_turn_works() -> None:
    provider = FakeProvider(Step(error=ModelRateLimited("slow down")), text("recovered"))
    runtime = make_runtime(provider)
    io = start(FakeIO(), "first")
    await runtime.run_stream(io)
    errors = io.of(ErrorEvent)
    assert errors == [ErrorEvent("slow down", "rate_limited", io.session.id, "root")]
    assert [(e.message, e.code, e.agent_name) for e in io.errors] == [
        ("slow down", "rate_limited", "root")
    ]
    assert stopped(io).reason == "error"
    assert io.types()[-2:] == ["error", "stream_stopped"]

    io2 = start(FakeIO(io.session), "again")
    await runtime.run_stream(io2)
    assert stopped(io2).reason == "normal"
    assert io2.messages()[-1].content == "recovered"


async def test_model_error_mid_stream_keeps_the_streamed_text() -> None:
    failing = Step(deltas=text("partial ").deltas, error=ModelRateLimited())
    io = start(FakeIO(), "q")
    await make_runtime(FakeProvider(failing)).run_stream(io)
    assert io.messages()[-1].content == f"partial \n\n{INTERRUPTED_NOTE}"
    assert stopped(io).reason == "error"


async def test_unexpected_exception_is_reported_as_internal_error() -> None:
    io = start(FakeIO(), "q")
    await make_runtime(FakeProvider(Step(error=KeyError("boom")))).run_stream(io)
    assert io.of(ErrorEvent)[0].code == "internal_error"
    assert stopped(io).reason == "error"


async def test_cancel_mid_stream_keeps_a_partial_message(autojump_clock) -> None:
    hung = Step(deltas=text("Once upon", " a time").deltas, hold=trio.Event())
    provider = FakeProvider(hung, text("fresh"))
    runtime = make_runtime(provider)
    io = start(FakeIO(), "tell a story")
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(runtime.run_stream, io)
            await trio.testing.wait_all_tasks_blocked()
            scope.cancel()
    partial = io.messages()[-1]
    assert partial.role == "assistant"
    assert partial.content == f"Once upon a time\n\n{INTERRUPTED_NOTE}"
    assert stopped(io).reason == "canceled"

    io2 = start(FakeIO(io.session), "again")
    await runtime.run_stream(io2)
    assert io2.messages()[-1].content == "fresh"
    # The interrupted answer is part of what the model sees next.
    assert provider.requests[1].messages[-2].content.startswith("Once upon a time")


async def test_cancel_before_any_text_stores_nothing(autojump_clock) -> None:
    io = start(FakeIO(), "q")
    runtime = make_runtime(FakeProvider(Step(hold=trio.Event())))
    with trio.move_on_after(1):
        await runtime.run_stream(io)
    assert roles(io.messages()) == ["user"]
    assert stopped(io).reason == "canceled"


def shell_runtime(provider: FakeProvider, shell: ShellCalls, **kwargs) -> LocalRuntime:
    return make_runtime(provider, tools_for=shell.tools_for, **kwargs)


async def run_until_confirmation(
    runtime: LocalRuntime, io: FakeIO, nursery: trio.Nursery
) -> ToolCallConfirmation:
    nursery.start_soon(runtime.run_stream, io)
    await trio.testing.wait_all_tasks_blocked()
    confirmations = io.of(ToolCallConfirmation)
    assert len(confirmations) == 1
    return confirmations[0]


async def test_confirmation_approved_runs_the_tool(autojump_clock) -> None:
    shell = ShellCalls()
    ls = call("shell", {"cmd": "ls"}, "c1")
    runtime = shell_runtime(FakeProvider(tool_step(ls), text("listed")), shell)
    io = start(FakeIO(), "list files")
    async with trio.open_nursery() as nursery:
        confirmation = await run_until_confirmation(runtime, io, nursery)
        assert confirmation.tool_call == ls
        assert confirmation.tool_definition["name"] == "shell"
        assert shell.calls == []
        await runtime.resume(ResumeRequest("approve"))
    assert shell.calls == [{"cmd": "ls"}]
    assert io.of(ToolCallResponse)[0].response == "ran ls"
    with pytest.raises(NoPendingRequest):
        await runtime.resume(ResumeRequest("approve"))


async def test_confirmation_rejected_skips_the_tool(autojump_clock) -> None:
    shell = ShellCalls()
    runtime = shell_runtime(
        FakeProvider(tool_step(call("shell", {"cmd": "rm -rf /"})), text("ok, not doing it")),
        shell,
    )
    io = start(FakeIO(), "clean up")
    async with trio.open_nursery() as nursery:
        await run_until_confirmation(runtime, io, nursery)
        await runtime.resume(ResumeRequest("reject", reason="too dangerous"))
    assert shell.calls == []
    result = next(m.message for m in io.messages() if m.role == "tool")
    assert result.is_error
    assert "rejected" in result.content
    assert "too dangerous" in result.content


async def test_resume_without_a_pending_confirmation_is_refused() -> None:
    with pytest.raises(NoPendingRequest):
        await make_runtime(FakeProvider()).resume(ResumeRequest("approve"))


async def test_approve_tool_remembers_the_tool_for_later_calls(autojump_clock) -> None:
    shell = ShellCalls()
    provider = FakeProvider(
        tool_step(call("shell", {"cmd": "a"}, "c1")),
        tool_step(call("shell", {"cmd": "b"}, "c2")),
        text("done"),
    )
    runtime = shell_runtime(provider, shell)
    io = start(FakeIO(), "go")
    async with trio.open_nursery() as nursery:
        await run_until_confirmation(runtime, io, nursery)
        await runtime.resume(ResumeRequest("approve-tool", tool_name="shell"))
    assert [c["cmd"] for c in shell.calls] == ["a", "b"]
    assert len(io.of(ToolCallConfirmation)) == 1


@pytest.mark.parametrize(
    ("session", "file_rules"),
    [
        (Session.new(permissions=Permissions(deny=["sh*"])), ""),
        (Session.new(tools_approved=True, permissions=Permissions(deny=["shell"])), ""),
        (Session.new(), "permissions:\n  deny: [shell]\n"),
        # The session's rules are checked before the file's.
        (Session.new(permissions=Permissions(deny=["shell"])), "permissions:\n  allow: [shell]\n"),
    ],
)
async def test_denied_tools_are_refused_without_asking(session, file_rules) -> None:
    shell = ShellCalls()
    yaml_text = "agents:\n  root: {model: openai/m}\n" + file_rules
    provider = FakeProvider(tool_step(call("shell", {"cmd": "x"})), text("fine"))
    io = start(FakeIO(session), "go")
    await shell_runtime(provider, shell, yaml_text=yaml_text).run_stream(io)
    assert shell.calls == []
    assert io.of(ToolCallConfirmation) == []
    result = next(m.message for m in io.messages() if m.role == "tool")
    assert result.is_error
    assert "denied" in result.content


@pytest.mark.parametrize(
    ("session", "file_rules"),
    [
        (Session.new(permissions=Permissions(allow=["shell"])), ""),
        (Session.new(tools_approved=True), ""),
        (Session.new(safety_policy="autonomous"), ""),
        (Session.new(), "permissions:\n  allow: ['sh?ll']\n"),
    ],
)
async def test_allowed_tools_run_without_asking(session, file_rules) -> None:
    shell = ShellCalls()
    yaml_text = "agents:\n  root: {model: openai/m}\n" + file_rules
    provider = FakeProvider(tool_step(call("shell", {"cmd": "x"})), text("fine"))
    io = start(FakeIO(session), "go")
    await shell_runtime(provider, shell, yaml_text=yaml_text).run_stream(io)
    assert shell.calls == [{"cmd": "x"}]
    assert io.of(ToolCallConfirmation) == []


async def test_ask_rule_asks_even_for_a_tool_that_needs_no_confirmation(autojump_clock) -> None:
    provider = FakeProvider(tool_step(call("think", {"thought": "t"})), text("ok"))
    runtime = make_runtime(provider)
    io = start(FakeIO(Session.new(permissions=Permissions(ask=["think"]))), "go")
    async with trio.open_nursery() as nursery:
        await run_until_confirmation(runtime, io, nursery)
        await runtime.resume(ResumeRequest("approve"))
    assert io.of(ToolCallResponse)[0].response == "Thoughts:\nt"


async def test_cancel_while_waiting_for_confirmation_closes_the_open_call(autojump_clock) -> None:
    shell = ShellCalls()
    runtime = shell_runtime(FakeProvider(tool_step(call("shell", {"cmd": "x"}, "c9"))), shell)
    io = start(FakeIO(), "go")
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            await run_until_confirmation(runtime, io, nursery)
            scope.cancel()
    result = io.messages()[-1].message
    assert (result.role, result.tool_call_id, result.is_error) == ("tool", "c9", True)
    assert result.content == "The tool call was canceled by the user."
    assert stopped(io).reason == "canceled"
    with pytest.raises(NoPendingRequest):
        await runtime.resume(ResumeRequest("approve"))


async def test_aclose_rejects_a_waiting_confirmation(autojump_clock) -> None:
    shell = ShellCalls()
    provider = FakeProvider(tool_step(call("shell", {"cmd": "x"})), text("closed"))
    runtime = shell_runtime(provider, shell)
    io = start(FakeIO(), "go")
    async with trio.open_nursery() as nursery:
        await run_until_confirmation(runtime, io, nursery)
        await runtime.aclose()
    assert shell.calls == []
    assert "rejected" in next(m for m in io.messages() if m.role == "tool").content
    with pytest.raises(RuntimeError, match="closed"):
        await runtime.run_stream(FakeIO())


async def test_tool_results_are_capped_on_the_copies_sent_to_the_model() -> None:
    big = "HEAD" + "x" * 10_000 + "TAIL"
    provider = FakeProvider(text("ok"))
    io = FakeIO(Session.new(max_tool_result_tokens=50))
    io.add_user("run it")
    await add_tool_exchange(io, call("think", {"thought": "t"}, "c1"), big)
    io.add_user("and?")
    await make_runtime(provider).run_stream(io)
    sent = next(m for m in provider.requests[0].messages if m.role == "tool").content
    assert len(sent.encode()) <= 200
    assert sent.startswith("HEAD")
    assert sent.endswith("TAIL")
    assert MARKER in sent
    assert next(m for m in io.messages() if m.role == "tool").content == big


async def test_agent_limit_caps_tool_results_when_the_session_sets_none() -> None:
    provider = FakeProvider(text("ok"))
    yaml_text = "agents:\n  root:\n    model: openai/m\n    max_tool_result_tokens: 10\n"
    io = FakeIO()
    await add_tool_exchange(io, call("think", {"thought": "t"}, "c1"), "y" * 1000)
    io.add_user("next")
    await make_runtime(provider, yaml_text).run_stream(io)
    sent = next(m for m in provider.requests[0].messages if m.role == "tool").content
    assert 0 < len(sent.encode()) <= 40


async def test_add_date_puts_today_in_the_system_prompt() -> None:
    provider = FakeProvider(text("ok"))
    yaml_text = "agents:\n  root:\n    model: openai/m\n    instruction: Hi.\n    add_date: true\n"
    runtime = make_runtime(provider, yaml_text, today=lambda: dt.date(2026, 11, 30))
    await runtime.run_stream(start(FakeIO(), "q"))
    assert provider.requests[0].messages[0].content == "Hi.\n\nToday's date: 2026-11-30"


async def test_unavailable_toolsets_are_reported_as_a_warning() -> None:
    provider = FakeProvider(text("ok"))
    yaml_text = (
        "agents:\n  root:\n    model: openai/m\n    toolsets:\n      - type: lsp\n"
        "        command: pylsp\n      - type: shell\n        env: [not, a, mapping]\n"
    )
    io = start(FakeIO(), "q")
    shell_only = {"shell": TOOLSET_BUILDERS["shell"]}  # every known type has a builder now

    def tools_for(agent: AgentConfig, context: ToolContext) -> AgentTools:
        return build_tools(agent.toolsets, context, builders=shell_only)

    await make_runtime(provider, yaml_text, tools_for=tools_for).run_stream(io)
    assert io.of(Warning)[0].message == (
        "Some toolsets failed to initialize for agent 'root'.\n\nDetails:\n\n"
        "- toolset lsp is not supported by greenroom yet\n"
        "- toolset shell failed: env must be a mapping of strings"
    )
    assert provider.requests[0].tools == ()


async def test_auto_model_without_a_resolution_is_an_error_event() -> None:
    io = start(FakeIO(), "q")
    runtime = make_runtime(FakeProvider(), "agents:\n  root: {model: auto}\n")
    await runtime.run_stream(io)
    assert io.of(ErrorEvent)[0].code == "invalid_request"
    assert stopped(io).reason == "error"
