"""Agent-switch slash commands (spec §7 items 54-62), called directly and through a run.

Messages are frozen, so ``apply_agent_switch_commands`` returns the rewritten batch instead of
editing it in place; on failure it raises and returns nothing, so nothing can be half-rewritten.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest
import trio
import trio.testing

from greenroom.actors import Registry, apply_agent_switch_commands
from greenroom.agents import Command
from greenroom.domain import ChatMessage, Message, Session
from greenroom.errors import AgentNotFound, AgentSwitchFailed
from greenroom.persistence import MemoryStore
from tests.fakes import FakeFactory, FakeRuntime, drain, user

PLAN = Command(agent="planner")


class SwitchRecordingRuntime(FakeRuntime):
    """Keeps the exceptions its ``set_current_agent`` raised, to check they are the cause."""

    def __init__(
        self,
        agents: Mapping[str, Mapping[str, Command]],
        current: str,
        fail_switch_to: set[str] | None,
    ) -> None:
        super().__init__(agents=agents, current=current, fail_switch_to=fail_switch_to)
        self.switch_errors: list[Exception] = []

    async def set_current_agent(self, name: str) -> None:
        try:
            await super().set_current_agent(name)
        except Exception as exc:
            self.switch_errors.append(exc)
            raise


def runtime(
    agents: Mapping[str, Mapping[str, Command]],
    *,
    current: str = "root",
    fail_switch_to: set[str] | None = None,
) -> SwitchRecordingRuntime:
    return SwitchRecordingRuntime(agents, current, fail_switch_to)


def texts(messages: tuple[ChatMessage, ...]) -> list[str]:
    return [m.content for m in messages]


# upstream: TestApplyAgentSwitchCommands_SwitchesAndStripsPrefix
async def test_switches_and_strips_prefix(autojump_clock: trio.testing.MockClock) -> None:
    rt = runtime({"root": {"plan": PLAN}, "planner": {}})
    batch = (user("/plan explain X"),)
    out = await apply_agent_switch_commands(rt, batch)
    assert rt.set_agent_calls == ["planner"]
    assert rt.current == "planner"
    assert texts(out) == ["explain X"]
    assert texts(batch) == ["/plan explain X"]  # the caller's batch is not edited


# upstream: TestApplyAgentSwitchCommands_SkipsSetWhenAlreadyOnTarget
async def test_skips_set_when_already_on_target(autojump_clock: trio.testing.MockClock) -> None:
    rt = runtime({"planner": {"plan": PLAN}}, current="planner")
    out = await apply_agent_switch_commands(rt, (user("/plan another step"),))
    assert rt.set_agent_calls == []
    assert rt.current == "planner"
    assert texts(out) == ["another step"]


# upstream: TestApplyAgentSwitchCommands_LeavesInstructionCommandsAlone
async def test_leaves_instruction_commands_alone(autojump_clock: trio.testing.MockClock) -> None:
    rt = runtime({"root": {"help": Command(instruction="Give me help on ${args}")}})
    out = await apply_agent_switch_commands(rt, (user("/help me"),))
    assert rt.set_agent_calls == []  # instruction-expansion commands do not switch agents
    assert rt.current == "root"
    assert texts(out) == ["/help me"]  # and are kept verbatim


# upstream: TestApplyAgentSwitchCommands_PassesThroughUnknownCommands
async def test_passes_through_unknown_commands(autojump_clock: trio.testing.MockClock) -> None:
    rt = runtime({"root": {"plan": PLAN}, "planner": {}})
    out = await apply_agent_switch_commands(rt, (user("/random-command with args"),))
    assert rt.set_agent_calls == []
    assert rt.current == "root"
    assert texts(out) == ["/random-command with args"]


# upstream: TestApplyAgentSwitchCommands_IgnoresNonUserRoles
async def test_ignores_non_user_roles(autojump_clock: trio.testing.MockClock) -> None:
    rt = runtime({"root": {"plan": PLAN}, "planner": {}})
    out = await apply_agent_switch_commands(
        rt, (ChatMessage("assistant", "/plan should not switch"),)
    )
    assert rt.set_agent_calls == []
    assert rt.current == "root"
    assert texts(out) == ["/plan should not switch"]


# upstream: TestApplyAgentSwitchCommands_PropagatesSetCurrentAgentError
async def test_propagates_set_current_agent_error(autojump_clock: trio.testing.MockClock) -> None:
    rt = runtime({"root": {"plan": PLAN}, "planner": {}}, fail_switch_to={"planner"})
    batch = (user("/plan explain X"),)
    with pytest.raises(AgentSwitchFailed) as caught:
        await apply_agent_switch_commands(rt, batch)
    assert isinstance(caught.value.__cause__, AgentNotFound)
    assert caught.value.__cause__ is rt.switch_errors[0]  # the runtime's own error
    assert rt.current == "root"
    # Go checks the slice it passed is untouched; ours is frozen and no rewritten batch exists.
    assert texts(batch) == ["/plan explain X"]


# upstream: TestApplyAgentSwitchCommands_ResolvesUsingPreSwitchAgent
async def test_resolves_using_pre_switch_agent(autojump_clock: trio.testing.MockClock) -> None:
    rt = runtime({"root": {"plan": PLAN}, "planner": {}})
    out = await apply_agent_switch_commands(rt, (user("/plan explain X"),))
    assert rt.set_agent_calls == ["planner"]
    assert rt.current == "planner"
    assert texts(out) == ["explain X"]  # no prefix leaks into history


# upstream: TestApplyAgentSwitchCommands_MultiBatchLookupUsesPreBatchAgent
async def test_multi_batch_lookup_uses_pre_batch_agent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    rt = runtime({"root": {"plan": PLAN, "build": Command(agent="root")}, "planner": {}})
    out = await apply_agent_switch_commands(rt, (user("/plan step one"), user("/build step two")))
    assert texts(out) == ["step one", "step two"]  # /build resolved against root's table
    assert rt.current == "root"
    assert rt.set_agent_calls == ["planner", "root"]


# upstream: TestApplyAgentSwitchCommands_RollsBackOnBatchFailure
async def test_rolls_back_on_batch_failure(autojump_clock: trio.testing.MockClock) -> None:
    table = {"plan": PLAN, "bad": Command(agent="nonexistent")}
    rt = runtime({"root": table, "planner": table}, fail_switch_to={"nonexistent"})
    with pytest.raises(AgentSwitchFailed) as caught:
        await apply_agent_switch_commands(rt, (user("/plan step one"), user("/bad step two")))
    assert caught.value.__cause__ is rt.switch_errors[0]
    assert rt.current == "root"  # restored to the pre-batch agent
    assert rt.set_agent_calls == ["planner", "nonexistent", "root"]


# upstream: TestApplyAgentSwitchCommands_PropagatesSetCurrentAgentError (RunSession refuses)
async def test_failed_switch_refuses_the_turn(
    autojump_clock: trio.testing.MockClock,
    registry: Registry,
    store: MemoryStore,
    factory: FakeFactory,
) -> None:
    rt = runtime({"root": {"plan": PLAN}, "planner": {}}, fail_switch_to={"planner"})
    factory.runtime = rt
    session = await registry.create(Session.new(title="t"))
    handle = registry.session(session.id)
    with pytest.raises(AgentSwitchFailed):
        await handle.run("agent", (user("/plan explain X"),))
    assert rt.turns == 0
    assert rt.current == "root"
    snapshot = await handle.snapshot()
    assert not snapshot.streaming
    assert snapshot.session.items == ()
    assert (await store.get_session(session.id)).items == ()

    # The session is idle: a plain message runs at once, on the original agent.
    with trio.fail_after(5):
        await drain(await handle.run("agent", (user("hello"),)))
    assert rt.turns == 1
    stored = (await store.get_session(session.id)).items
    assert [m.content for m in stored if isinstance(m, Message)] == ["hello"]


# upstream: TestApplyAgentSwitchCommands_SwitchesAndStripsPrefix (through a run)
async def test_run_stores_message_without_prefix_on_new_agent(
    autojump_clock: trio.testing.MockClock,
    registry: Registry,
    store: MemoryStore,
    factory: FakeFactory,
) -> None:
    rt = runtime({"root": {"plan": PLAN}, "planner": {}})
    factory.runtime = rt
    session = await registry.create(Session.new(title="t"))
    with trio.fail_after(5):
        await drain(await registry.session(session.id).run("agent", (user("/plan explain X"),)))
    assert rt.current == "planner"
    assert rt.turns == 1
    stored = (await store.get_session(session.id)).items
    assert [m.content for m in stored if isinstance(m, Message)] == ["explain X"]
