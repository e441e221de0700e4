"""Background agent tasks (spec §4.3): started by a tool, run as services of the runtime (they
outlive the turn), listed, viewed and stopped; a finished task recalls the session with its
result and its record; its elicitations go to the session's sink."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio
import trio.testing

from greenroom.agents import LocalRuntime, QueuedMessage, parse_agent_file
from greenroom.domain import (
    ElicitationRequest,
    Event,
    Message,
    Permissions,
    Session,
    ToolCallResponse,
)
from tests.agents.loop_support import FakeIO, Step, call, start, text, tool_step
from tests.agents.test_delegation import Providers

TEAM = """\
agents:
  root:
    model: openai/root
    instruction: You lead.
    sub_agents: [worker]
    toolsets:
      - type: background_agents
  worker:
    model: openai/worker
    instruction: You work in the background.
    toolsets:
      - type: user_prompt
      - type: script
        shell:
          touch_file:
            cmd: "true"
            description: Touch a file
"""


@attrs.define
class Recalls:
    """The session's recall handler, as the actor registers it."""

    calls: list[tuple[QueuedMessage, Session | None]] = attrs.field(factory=list)
    done: trio.Event = attrs.field(factory=trio.Event)

    async def __call__(self, message: QueuedMessage, sub_session: Session | None = None) -> bool:
        await trio.lowlevel.checkpoint()
        self.calls.append((message, sub_session))
        self.done.set()
        return True


def team(providers: Providers) -> tuple[LocalRuntime, Recalls]:
    runtime = LocalRuntime(parse_agent_file(TEAM, "team.yaml"), provider_for=providers.provider_for)
    recalls = Recalls()
    runtime.set_recall_handler(recalls)
    return runtime, recalls


def run_task(task: str = "Count the files", call_id: str = "bg-1") -> Step:
    return tool_step(call("run_background_agent", {"agent": "worker", "task": task}, call_id))


def approved(*users: str) -> FakeIO:
    return start(FakeIO(Session.new(tools_approved=True)), *users)


def tool_results(session: Session) -> list[str]:
    return [i.content for i in session.items if isinstance(i, Message) and i.role == "tool"]


def responses(io: FakeIO) -> dict[str, str]:
    return {e.tool_call_id: e.response for e in io.of(ToolCallResponse)}


async def test_a_task_outlives_the_turn_and_recalls_the_session_with_its_result(
    autojump_clock: Any,
) -> None:
    release = trio.Event()
    answer = text("There are 3 files.")
    answer.hold = release
    providers = Providers(root=[run_task(), text("Started it.")], worker=[answer])
    runtime, recalls = team(providers)
    io = approved("count in the background")
    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.serve)
        await runtime.run_stream(io)  # the turn ends; the task keeps running
        started = responses(io)["bg-1"]
        assert started.startswith("Background agent task started with ID: agent_task_")
        assert started.endswith("\nAgent: worker\nTask: Count the files")
        assert (runtime.background.running, recalls.calls) == (1, [])
        release.set()
        await recalls.done.wait()
        assert runtime.background.running == 0
        nursery.cancel_scope.cancel()
    ((message, record),) = recalls.calls
    task_id = started.split("ID: ")[1].split("\n")[0]
    assert message.content == (
        f"Background agent task {task_id} (agent worker) finished with status completed.\n\n"
        "There are 3 files."
    )
    assert record is not None and record.title == "Background agent task"


async def test_list_view_and_stop(autojump_clock: Any) -> None:
    hold = trio.Event()
    providers = Providers(
        root=[
            run_task(),
            tool_step(call("list_background_agents", {}, "list-1")),
            text("listed"),
        ],
        worker=[Step(deltas=[], response=None, hold=hold)],
    )
    runtime, recalls = team(providers)
    io = approved("go")
    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.serve)
        await runtime.run_stream(io)
        task_id = responses(io)["bg-1"].split("ID: ")[1].split("\n")[0]
        listing = responses(io)["list-1"]
        assert listing.startswith("Background Agent Tasks:\n\n")
        assert f"ID: {task_id}\n  Agent:   worker\n  Status:  running\n" in listing
        view = runtime.background.view(task_id).output
        assert view.endswith("--- Output ---\n<no output yet — still running>")
        assert (
            runtime.background.stop(task_id).output == f"Background agent task {task_id} stopped."
        )
        await trio.testing.wait_all_tasks_blocked()
        stopped = runtime.background.stop(task_id)
        assert stopped.is_error and stopped.output.endswith("is not running (status: stopped)")
        assert runtime.background.view(task_id).output.endswith("<task was stopped>")
        assert (
            runtime.background.view("agent_task_nope").output == "task not found: agent_task_nope"
        )
        nursery.cancel_scope.cancel()
    assert recalls.calls == []  # a stopped task is not reported


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"agent": "", "task": "x"}, "agent name must not be empty"),
        ({"agent": "worker", "task": " "}, "task must not be empty"),
        (
            {"agent": "root", "task": "x"},
            'agent "root" is not in the sub-agents list. Available: worker',
        ),
    ],
)
async def test_bad_requests_are_tool_errors(
    arguments: dict[str, str], error: str, autojump_clock: Any
) -> None:
    providers = Providers(root=[tool_step(call("run_background_agent", arguments)), text("ok")])
    runtime, _ = team(providers)
    io = approved("go")
    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.serve)
        await runtime.run_stream(io)
        nursery.cancel_scope.cancel()
    assert responses(io)["call-1"] == error


async def test_a_background_elicitation_goes_to_the_sessions_sink(autojump_clock: Any) -> None:
    providers = Providers(
        root=[run_task(), text("started")],
        worker=[
            tool_step(call("user_prompt", {"message": "Which folder?"}, "ask-1")),
            text("Counted the folder."),
        ],
    )
    runtime, recalls = team(providers)
    seen: list[Event] = []

    def sink(event: Event) -> bool:
        seen.append(event)
        return True  # an /events subscriber listens

    runtime.on_elicitation_request(sink)
    io = approved("go")
    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.serve)
        await runtime.run_stream(io)
        await trio.testing.wait_all_tasks_blocked()
        (asked,) = [e for e in seen if isinstance(e, ElicitationRequest)]
        assert asked.message == "Which folder?"
        await runtime.resume_elicitation("accept", {"folder": "docs"}, asked.elicitation_id)
        await recalls.done.wait()
        nursery.cancel_scope.cancel()
    ((message, record),) = recalls.calls
    assert message.content.endswith("Counted the folder.")
    assert record is not None
    assert tool_results(record) == ['{"action": "accept", "content": {"folder": "docs"}}']


async def test_background_calls_never_ask_but_the_sessions_rules_hold(
    autojump_clock: Any,
) -> None:
    touch = tool_step(call("touch_file", {}, "touch-1"))
    providers = Providers(
        root=[run_task(), text("started"), run_task(call_id="bg-2"), text("again")],
        worker=[touch, text("touched"), touch, text("refused")],
    )
    runtime, recalls = team(providers)
    io = approved("go")
    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.serve)
        await runtime.run_stream(io)  # not approved in the session: pre-approved in the task
        await recalls.done.wait()
        recalls.done = trio.Event()
        io.set_session(attrs.evolve(io.session, permissions=Permissions(ask=("touch_file",))))
        io.add_user("again")
        await runtime.run_stream(io)
        await recalls.done.wait()
        nursery.cancel_scope.cancel()
    first, second = (record for _, record in recalls.calls)
    assert first is not None and second is not None
    assert tool_results(first) == ["(no output)"]
    assert tool_results(second) == [
        "The tool call needs the user's confirmation, which a background agent cannot ask for."
    ]


async def test_stopping_the_runtime_stops_its_tasks(autojump_clock: Any) -> None:
    providers = Providers(
        root=[run_task(), text("started")],
        worker=[Step(deltas=[], response=None, hold=trio.Event())],
    )
    runtime, recalls = team(providers)
    io = approved("go")
    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.serve)
        await runtime.run_stream(io)
        assert runtime.background.running == 1
        nursery.cancel_scope.cancel()
    (task,) = runtime.background.tasks.values()
    assert (task.status, runtime.background.running) == ("stopped", 0)
    assert recalls.calls == []
