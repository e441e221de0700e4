"""transfer_task and handoff in the agent loop (spec §4.1, §4.2): sub-sessions with their events
on the parent's stream, nesting, approval rules inherited, errors, cancellation, handoffs.

One scripted provider per model, so each agent's model calls come from its own script.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio
import trio.testing

from greenroom.agents import LocalRuntime, ResumeRequest, parse_agent_file
from greenroom.agents.providers import ModelConfig
from greenroom.domain import (
    AgentChoice,
    AgentInfo,
    AgentSwitching,
    Message,
    Permissions,
    Session,
    StreamStarted,
    SubSession,
    SubSessionCompleted,
    ToolCallConfirmation,
    ToolCallResponse,
)
from greenroom.errors import ModelError
from tests.agents.loop_support import FakeIO, FakeProvider, Step, call, start, text, tool_step

TEAM = """\
agents:
  root:
    model: openai/root
    instruction: You lead the team.
    sub_agents: [helper, writer]
    handoffs: [writer]
  helper:
    model: openai/helper
    description: Helps
    instruction: You help.
    sub_agents: [deep]
    toolsets:
      - type: script
        shell:
          touch_file:
            cmd: "true"
            description: Touch a file
  deep:
    model: openai/deep
    instruction: You go deep.
  writer:
    model: openai/writer
    description: Writes
    instruction: You write.
"""


class Providers:
    """A FakeProvider per model name."""

    def __init__(self, **scripts: list[Step]) -> None:
        self.by_model = {name: FakeProvider(*steps) for name, steps in scripts.items()}

    def provider_for(self, model: ModelConfig) -> FakeProvider:
        return self.by_model[model.model]

    def __getitem__(self, name: str) -> FakeProvider:
        return self.by_model[name]


def team(providers: Providers, **options: Any) -> LocalRuntime:
    config = parse_agent_file(TEAM, "team.yaml")
    return LocalRuntime(config, provider_for=providers.provider_for, **options)


def transfer(agent: str, task: str = "Find the answer", expected: str = "One line") -> Step:
    return tool_step(
        call("transfer_task", {"agent": agent, "task": task, "expected_output": expected})
    )


def responses(io: FakeIO) -> dict[str, str]:
    return {e.tool_call_id: e.response for e in io.of(ToolCallResponse)}


def sub_sessions(session: Session) -> list[Session]:
    return [item.session for item in session.items if isinstance(item, SubSession)]


async def test_a_transfer_runs_the_sub_agent_in_a_sub_session(autojump_clock: Any) -> None:
    providers = Providers(
        root=[transfer("helper"), text("All done.")], helper=[text("The answer is 42.")]
    )
    runtime = team(providers)
    io = start(FakeIO(), "Please find out.")
    await runtime.run_stream(io)

    assert responses(io) == {"call-1": "The answer is 42."}
    (child,) = sub_sessions(io.session)
    assert child.title == "Transferred task"
    roles = [(i.role, i.content, i.implicit) for i in child.items if isinstance(i, Message)]
    assert roles[1:] == [
        ("user", "Please proceed.", True),
        ("assistant", "The answer is 42.", False),
    ]
    assert roles[0][0] == "system" and "<task>\nFind the answer\n</task>" in roles[0][1]
    # the sub-agent's model call: its own instruction plus the task; the task's history
    request = providers["helper"].requests[0]
    system = request.messages[0].content
    assert "You help." in system and "<expected_output>\nOne line\n</expected_output>" in system
    assert [m.content for m in request.messages[1:]] == ["Please proceed."]
    # events: the switch, the child's stream tagged with its own id, completion, the switch back
    switching = io.of(AgentSwitching)
    assert [(s.switching, s.from_agent, s.to_agent) for s in switching] == [
        (True, "root", "helper"),
        (False, "helper", "root"),
    ]
    started = [e.session_id for e in io.of(StreamStarted)]
    assert started == [io.session.id, child.id]
    assert AgentChoice("The answer is 42.", "helper", child.id) in io.events
    (completed,) = io.of(SubSessionCompleted)
    assert (completed.parent_session_id, completed.sub_session.id) == (io.session.id, child.id)
    infos = [i.agent_name for i in io.of(AgentInfo)]
    assert infos == ["root", "helper", "helper", "root"]
    assert runtime.current_agent().name == "root"
    assert io.messages()[-1].content == "All done."


async def test_transfers_nest(autojump_clock: Any) -> None:
    providers = Providers(
        root=[transfer("helper"), text("root done")],
        helper=[transfer("deep", "Dig"), text("helper says: deep found it")],
        deep=[text("deep found it")],
    )
    io = start(FakeIO(), "go")
    await team(providers).run_stream(io)
    assert responses(io)["call-1"] == "helper says: deep found it"
    (child,) = sub_sessions(io.session)
    (grandchild,) = sub_sessions(child)
    assert grandchild.items[-1].message.content == "deep found it"  # type: ignore[union-attr]
    assert [s.session_id for s in io.of(StreamStarted)] == [io.session.id, child.id, grandchild.id]


async def test_only_listed_sub_agents_take_a_task(autojump_clock: Any) -> None:
    providers = Providers(root=[transfer("deep"), text("ok")])
    io = start(FakeIO(), "go")
    await team(providers).run_stream(io)
    assert responses(io)["call-1"] == (
        "Agent root cannot transfer task to deep: target agent not in sub-agents list. "
        "Available agent IDs are: helper, writer"
    )
    assert sub_sessions(io.session) == []


async def test_a_failing_sub_agent_is_a_tool_error_and_no_sub_session(autojump_clock: Any) -> None:
    providers = Providers(
        root=[transfer("helper"), text("noted")],
        helper=[Step(error=ModelError("the model is down"))],
    )
    io = start(FakeIO(), "go")
    await team(providers).run_stream(io)
    assert responses(io)["call-1"] == "Error calling tool: the model is down"
    assert sub_sessions(io.session) == []
    assert runtime_agent_after(io) == "root"


def runtime_agent_after(io: FakeIO) -> str:
    return io.of(AgentInfo)[-1].agent_name


async def test_the_sub_session_follows_the_parents_rules_and_asks_through_it(
    autojump_clock: Any,
) -> None:
    touch = tool_step(call("touch_file", {}, "touch-1"))
    providers = Providers(
        root=[transfer("helper"), text("first done"), transfer("helper"), text("second done")],
        helper=[touch, text("touched"), touch, text("refused")],
    )
    runtime = team(providers)
    io = start(FakeIO(), "go")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(runtime.run_stream, io)
        await trio.testing.wait_all_tasks_blocked()
        (asked,) = io.of(ToolCallConfirmation)
        assert asked.session_id not in ("", io.session.id)  # asked by the sub-session
        await runtime.resume(ResumeRequest("approve"))
    # The parent's rules apply in the sub-session as they are at each call.
    io.set_session(attrs.evolve(io.session, permissions=Permissions(deny=("touch_file",))))
    io.add_user("again")
    await runtime.run_stream(io)
    child_responses = [e.response for e in io.of(ToolCallResponse) if e.tool_call_id == "touch-1"]
    assert child_responses == ["", "Tool 'touch_file' is denied by session permissions."]
    assert [a.decision for a in io.approvals] == ["approve"]  # audited on the parent
    assert len(io.of(ToolCallConfirmation)) == 1


async def test_cancelling_the_parent_turn_cancels_the_sub_session(autojump_clock: Any) -> None:
    hold = trio.Event()
    providers = Providers(
        root=[transfer("helper")],
        helper=[Step(deltas=[], response=None, hold=hold)],
    )
    runtime = team(providers)
    io = start(FakeIO(), "go")
    with trio.move_on_after(5) as scope:  # virtual seconds
        await runtime.run_stream(io)
    assert scope.cancelled_caught
    assert not hold.is_set()
    assert sub_sessions(io.session) == []
    assert io.messages()[-1].message.content == "The tool call was canceled by the user."
    assert runtime.current_agent().name == "root"


async def test_a_handoff_continues_the_conversation_with_the_other_agent(
    autojump_clock: Any,
) -> None:
    providers = Providers(
        root=[tool_step(call("handoff", {"agent": "writer"}))],
        writer=[text("Writer here."), text("Still the writer.")],
    )
    runtime = team(providers)
    io = start(FakeIO(), "write me a poem")
    await runtime.run_stream(io)
    assert responses(io)["call-1"].startswith("The conversation was handed off from root to writer")
    assert runtime.current_agent().name == "writer"
    writer_call = providers["writer"].requests[0]
    assert "You write." in writer_call.messages[0].content
    assert io.messages()[-1].content == "Writer here."
    io.add_user("and another")
    await runtime.run_stream(io)  # the next turn starts with the writer
    assert io.messages()[-1].content == "Still the writer."


async def test_a_handoff_to_an_agent_not_listed_is_refused(autojump_clock: Any) -> None:
    providers = Providers(root=[tool_step(call("handoff", {"agent": "helper"})), text("ok")])
    runtime = team(providers)
    io = start(FakeIO(), "go")
    await runtime.run_stream(io)
    assert responses(io)["call-1"] == (
        "Agent root cannot hand off to helper: target agent not in handoffs list. "
        "Available agent IDs are: writer"
    )
    assert runtime.current_agent().name == "root"


def test_delegation_tools_are_offered_only_to_agents_with_team_members() -> None:
    runtime = team(Providers())
    agents = parse_agent_file(TEAM, "team.yaml").agents
    assert {"transfer_task", "handoff"} <= set(runtime.tools_of(agents["root"]).tools)
    assert "handoff" not in runtime.tools_of(agents["helper"]).tools
    assert not {"transfer_task", "handoff"} & set(runtime.tools_of(agents["deep"]).tools)


@pytest.mark.parametrize("agent", ["root"])
def test_transfer_and_handoff_definitions(agent: str) -> None:
    runtime = team(Providers())
    tools = runtime.tools_of(parse_agent_file(TEAM, "team.yaml").agents[agent]).tools
    transfer_tool, handoff_tool = tools["transfer_task"], tools["handoff"]
    assert transfer_tool.spec.parameters["required"] == ["agent", "task", "expected_output"]
    assert transfer_tool.annotations.read_only and transfer_tool.category == "transfer"
    assert handoff_tool.annotations.title == "Handoff Conversation"
