"""Hooks (issue 20, item 7): docker-agent's ``hooks`` config, the JSON a hook gets on stdin and
what its stdout and exit code decide, the points of a session where they run, their timeout.

Hooks are real ``/bin/sh`` processes in ``tmp_path``; the real clock, every wait bounded.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import trio

from greenroom.agents import parse_agent_file
from greenroom.agents._config import HookCommand, HooksConfig
from greenroom.agents._hooks import Hooks, run_hook
from greenroom.agents._runtime import ResumeRequest
from greenroom.agents.providers import ToolSpec
from greenroom.agents.tools import (
    AgentTools,
    FunctionTool,
    ToolAnnotations,
    ToolContext,
    ToolResult,
    build_tools,
)
from greenroom.domain import (
    HookBlocked,
    Permissions,
    ToolCallConfirmation,
    ToolCallEvent,
    ToolCallResponse,
    Warning,
)
from greenroom.errors import AgentConfigError

from .loop_support import FakeIO, FakeProvider, call, make_runtime, start, text, tool_step

LIMIT = 20  # seconds (real clock)
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SHELL": "/bin/sh"}


def agent_yaml(hooks: str) -> str:
    body = "\n".join(f"      {line}" for line in hooks.strip().splitlines())
    return f"agents:\n  root:\n    model: openai/main\n    instruction: Go.\n    hooks:\n{body}\n"


# --- the config ------------------------------------------------------------------------------


def test_a_hooks_config_loads_as_docker_agent_writes_it() -> None:
    config = parse_agent_file(
        agent_yaml(
            """
pre_tool_use:
  - matcher: "shell|edit_file"
    hooks:
      - {type: command, command: ./check.sh, timeout: 5}
post_tool_use:
  - hooks: [{type: command, command: echo done}]
session_start: [{type: command, command: echo hi}]
session_end: [{type: command, command: echo bye}]
on_user_input: [{type: command, command: notify-send}]
"""
        ),
        "a.yaml",
    )
    hooks = config.agent().hooks
    assert hooks is not None and config.warnings == ()
    assert hooks.pre_tool_use[0].matcher == "shell|edit_file"
    assert hooks.pre_tool_use[0].hooks[0] == HookCommand("./check.sh", 5.0)
    assert hooks.post_tool_use[0].matcher == ""
    assert hooks.post_tool_use[0].hooks[0].timeout == 60.0  # upstream's default
    assert [h.command for h in hooks.session_end] == ["echo bye"]


@pytest.mark.parametrize(
    ("hooks", "where", "what"),
    [
        (
            "session_start: [{type: command}]",
            "6: agents.root.hooks.session_start[0].command",
            "command",
        ),
        (
            "session_end: [{type: prompt, command: x}]",
            "6: agents.root.hooks.session_end[0].type",
            "unsupported hook type",
        ),
        (
            "pre_tool_use:\n  - matcher: 'shell('\n    hooks: [{type: command, command: x}]",
            "7: agents.root.hooks.pre_tool_use[0].matcher",
            "regular expression",
        ),
        (
            "pre_tool_use:\n  - matcher: shell\n    hooks: []",
            "8: agents.root.hooks.pre_tool_use[0].hooks",
            "at least one hook",
        ),
        (
            "on_user_input: [{type: command, command: x, timeout: soon}]",
            "6: agents.root.hooks.on_user_input[0].timeout",
            "seconds",
        ),
        ("before_everything: []", "6: agents.root.hooks.before_everything", "unknown key"),
        ("session_start: {type: command}", "6: agents.root.hooks.session_start", "a list"),
    ],
)
def test_a_malformed_hook_is_an_error_with_file_and_line(hooks: str, where: str, what: str) -> None:
    with pytest.raises(AgentConfigError) as caught:
        parse_agent_file(agent_yaml(hooks), "a.yaml")
    problems = caught.value.problems
    assert any(p.startswith(f"a.yaml:{where}:") and what in p for p in problems), problems


# --- one hook ----------------------------------------------------------------------------------


async def run(command: str, payload: Mapping[str, Any], cwd: Path, seconds: float = 10.0) -> Any:
    hook = HookCommand(command, seconds)
    with trio.fail_after(LIMIT):
        return await run_hook(hook, json.dumps(payload).encode(), cwd=cwd, env=ENV, shell="/bin/sh")


async def test_a_hook_reads_its_input_on_stdin_in_the_working_directory(tmp_path: Path) -> None:
    ran = await run("cat > got.json; pwd > where.txt", {"tool_name": "shell"}, tmp_path)
    assert ran.exit_code == 0 and ran.failure == ""
    assert json.loads((tmp_path / "got.json").read_text()) == {"tool_name": "shell"}
    assert (tmp_path / "where.txt").read_text().strip() == str(tmp_path)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


async def test_a_hook_that_hangs_is_killed_with_its_children_at_its_timeout(
    tmp_path: Path,
) -> None:
    command = "sleep 300 & echo $! > child.pid; echo $$ > shell.pid; wait"
    started = trio.current_time()
    ran = await run(command, {}, tmp_path, seconds=1.0)
    assert trio.current_time() - started < LIMIT / 2
    assert "timed out after 1s and was killed" in ran.failure
    child = int((tmp_path / "child.pid").read_text())
    with trio.fail_after(LIMIT):
        while _alive(child):  # noqa: ASYNC110 (another process's state: polled)
            await trio.sleep(0.05)  # real clock: another process


# --- hooks in a turn ----------------------------------------------------------------------------


class Probe:
    """A read-only tool ``probe`` that records the arguments it was called with."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def handle(self, arguments: Mapping[str, Any]) -> ToolResult:
        self.calls.append(dict(arguments))
        return ToolResult(f"probed {arguments.get('what', '')}")

    def tools_for(self, agent: Any, ctx: ToolContext) -> AgentTools:
        tools = build_tools([], ctx)
        spec = ToolSpec(
            "probe",
            "Probe something",
            {"type": "object", "properties": {"what": {"type": "string"}}, "required": ["what"]},
        )
        tool = FunctionTool(spec, self.handle, ToolAnnotations(read_only=True))
        from greenroom.agents._config import ToolsetConfig
        from greenroom.agents.tools import Toolset

        tools.add(ToolsetConfig(type="probe"), Toolset([tool]))
        return tools


def hook_runtime(tmp_path: Path, provider: FakeProvider, probe: Probe, hooks: str) -> Any:
    return make_runtime(
        provider,
        agent_yaml(hooks),
        tools_for=probe.tools_for,
        tool_context=ToolContext(working_dir=tmp_path, env=ENV),
    )


async def turn(runtime: Any, io: FakeIO) -> FakeIO:
    with trio.fail_after(LIMIT):
        await runtime.run_stream(io)
    return io


DENY = (
    """echo '{"hook_specific_output":{"permission_decision":"deny","""
    """"permission_decision_reason":"no probing"}}'"""
)


async def test_pre_tool_use_deny_blocks_the_call(tmp_path: Path) -> None:
    probe = Probe()
    provider = FakeProvider(tool_step(call("probe", {"what": "x"})), text("ok"))
    runtime = hook_runtime(
        tmp_path,
        provider,
        probe,
        "pre_tool_use:\n  - matcher: probe\n"
        f"    hooks: [{{type: command, command: {json.dumps(DENY)}}}]",
    )
    io = await turn(runtime, start(FakeIO(), "go"))
    assert probe.calls == []
    blocked = io.of(HookBlocked)
    assert len(blocked) == 1 and blocked[0].message == "no probing"
    assert blocked[0].tool_call.function.name == "probe"
    assert io.of(ToolCallResponse)[0].response == "Tool call blocked by hook: no probing"
    assert io.of(ToolCallEvent) == []


async def test_exit_code_2_blocks_with_stderr_and_a_matcher_that_misses_does_not(
    tmp_path: Path,
) -> None:
    probe = Probe()
    provider = FakeProvider(tool_step(call("probe", {"what": "x"})), text("ok"))
    hooks = (
        "pre_tool_use:\n"
        "  - matcher: other\n    hooks: [{type: command, command: 'exit 2'}]\n"
        "  - matcher: 'pro.*'\n    hooks: [{type: command, command: 'echo stop it >&2; exit 2'}]"
    )
    io = await turn(hook_runtime(tmp_path, provider, probe, hooks), start(FakeIO(), "go"))
    assert probe.calls == []
    assert io.of(HookBlocked)[0].message == "stop it"
    # Only the matching hook ran: "probe" is not "other".
    provider = FakeProvider(tool_step(call("probe", {"what": "x"})), text("ok"))
    hooks = "pre_tool_use:\n  - matcher: pro\n    hooks: [{type: command, command: 'exit 2'}]"
    io = await turn(hook_runtime(tmp_path, provider, probe, hooks), start(FakeIO(), "go"))
    assert probe.calls == [{"what": "x"}]  # the matcher is anchored: "pro" is not "probe"


async def test_pre_tool_use_updates_the_input_and_post_tool_use_adds_context(
    tmp_path: Path,
) -> None:
    probe = Probe()
    provider = FakeProvider(tool_step(call("probe", {"what": "x"})), text("ok"))
    modify = (
        """cat > pre.json; echo '{"hook_specific_output":{"permission_decision":"allow","""
        """"updated_input":{"what":"changed"}},"system_message":"modified it"}'"""
    )
    hooks = (
        "pre_tool_use:\n  - matcher: '*'\n"
        f"    hooks: [{{type: command, command: {json.dumps(modify)}}}]\n"
        "post_tool_use:\n  - hooks: [{type: command, command: 'cat > post.json; echo checked'}]"
    )
    io = await turn(hook_runtime(tmp_path, provider, probe, hooks), start(FakeIO(), "go"))
    assert probe.calls == [{"what": "changed"}]
    assert [w.message for w in io.of(Warning)] == ["modified it"]
    pre = json.loads((tmp_path / "pre.json").read_text())
    assert pre["hook_event_name"] == "pre_tool_use" and pre["tool_name"] == "probe"
    assert pre["tool_input"] == {"what": "x"} and pre["tool_use_id"] == "call-1"
    assert pre["cwd"] == str(tmp_path) and pre["session_id"] == io.session.id
    post = json.loads((tmp_path / "post.json").read_text())
    assert post["hook_event_name"] == "post_tool_use"
    assert post["tool_response"] == "probed changed"
    assert io.of(ToolCallResponse)[0].response == "probed changed\n\nchecked"
    assert io.of(ToolCallEvent)[0].tool_call.function.arguments == '{"what": "changed"}'


async def test_pre_tool_use_ask_makes_an_allowed_call_ask(tmp_path: Path) -> None:
    probe = Probe()
    provider = FakeProvider(tool_step(call("probe", {"what": "x"})), text("ok"))
    ask = """echo '{"hook_specific_output":{"permission_decision":"ask"}}'"""
    hooks = (
        f"pre_tool_use:\n  - hooks: [{{type: command, command: {json.dumps(ask)}}}]\n"
        "on_user_input: [{type: command, command: 'echo asked >> input.log'}]"
    )
    runtime = hook_runtime(tmp_path, provider, probe, hooks)
    io = start(FakeIO(), "go")
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(runtime.run_stream, io)
            while not io.of(ToolCallConfirmation):  # noqa: ASYNC110 (hooks are processes)
                await trio.sleep(0.01)  # real clock: the hook is a process
            assert probe.calls == []
            await runtime.resume(ResumeRequest("approve"))
    assert probe.calls == [{"what": "x"}]
    # Asked once for the confirmation, once when the turn ended.
    assert (tmp_path / "input.log").read_text().split() == ["asked", "asked"]


async def test_a_hanging_hook_is_killed_and_reported_and_the_call_goes_on(
    tmp_path: Path,
) -> None:
    probe = Probe()
    provider = FakeProvider(tool_step(call("probe", {"what": "x"})), text("ok"))
    hooks = "pre_tool_use:\n  - hooks: [{type: command, command: 'sleep 300', timeout: 1}]"
    io = await turn(hook_runtime(tmp_path, provider, probe, hooks), start(FakeIO(), "go"))
    assert probe.calls == [{"what": "x"}]
    warnings = [w.message for w in io.of(Warning)]
    assert warnings == ["hook 'sleep 300' timed out after 1s and was killed"]


async def test_session_start_context_joins_the_prompt_and_session_end_runs_at_close(
    tmp_path: Path,
) -> None:
    probe = Probe()
    provider = FakeProvider(text("one"), text("two"))
    hooks = (
        "session_start: [{type: command, command: 'cat > start.json; echo The repo is tidy.'}]\n"
        "session_end: [{type: command, command: 'cat > end.json'}]"
    )
    runtime = hook_runtime(tmp_path, provider, probe, hooks)
    io = start(FakeIO(), "hi")
    await turn(runtime, io)
    io.add_user("again")
    await turn(runtime, io)
    assert all(r.messages[0].content.endswith("The repo is tidy.") for r in provider.requests)
    started = json.loads((tmp_path / "start.json").read_text())
    assert started["hook_event_name"] == "session_start" and started["source"] == "startup"
    assert not (tmp_path / "end.json").exists()
    with trio.fail_after(LIMIT):
        await runtime.aclose()
    ended = json.loads((tmp_path / "end.json").read_text())
    assert ended == {
        "session_id": io.session.id,
        "cwd": str(tmp_path),
        "hook_event_name": "session_end",
        "reason": "other",
    }


async def test_hooks_of_one_event_run_concurrently_and_each_command_once(
    tmp_path: Path,
) -> None:
    config = HooksConfig(
        session_start=(
            HookCommand("sleep 1; echo a >> log"),
            HookCommand("sleep 1; echo b >> log"),
            HookCommand("sleep 1; echo a >> log"),
        )
    )
    hooks = Hooks(config, tmp_path, ENV)
    started = trio.current_time()
    with trio.fail_after(LIMIT):
        outcome = await hooks.run("session_start", {"session_id": "s"})
    assert outcome.allowed
    assert sorted((tmp_path / "log").read_text().split()) == ["a", "b"]
    assert trio.current_time() - started < 1.9  # together, not one after the other


# --- hooks under the tools' rules (issue 23): deny rules, secrets, process lifetime ----------


@pytest.mark.parametrize(
    "command",
    [
        "rm -f victim",
        "\\rm -f victim",
        "'rm' -f victim",
        "true && rm -f victim",
        "env rm -f victim",
    ],
)
async def test_a_deny_rule_about_a_command_stops_a_hook_running_it(
    tmp_path: Path, command: str
) -> None:
    (tmp_path / "victim").write_text("keep me")
    config = HooksConfig(session_start=(HookCommand(command, LIMIT),))
    file_rules = Permissions(deny=("shell:cmd=rm *",))
    hooks = Hooks(config, tmp_path, ENV, file_permissions=file_rules)
    with trio.fail_after(LIMIT):
        outcome = await hooks.run("session_start", {"session_id": "s"})
    assert (tmp_path / "victim").exists()
    assert outcome.failures and "not run" in outcome.failures[0]
    # the session's own deny rules hold too, and a harmless hook still runs
    session_rules = Permissions(deny=("shell:cmd=touch *",))
    config = HooksConfig(session_start=(HookCommand("touch made; echo ok > ran", LIMIT),))
    with trio.fail_after(LIMIT):
        await Hooks(config, tmp_path, ENV).run("session_start", {}, permissions=session_rules)
    assert not (tmp_path / "ran").exists()
    config = HooksConfig(session_start=(HookCommand("echo ok > ran", LIMIT),))
    with trio.fail_after(LIMIT):
        await Hooks(config, tmp_path, ENV).run("session_start", {}, permissions=session_rules)
    assert (tmp_path / "ran").read_text() == "ok\n"


async def test_a_hook_group_is_recorded_and_its_environment_has_no_secrets(
    tmp_path: Path,
) -> None:
    started: list[tuple[int, str]] = []
    ended: list[int] = []

    class Ledger:
        async def started(self, pgid: int, start_ticks: int, label: str) -> None:
            started.append((pgid, label))

        async def ended(self, pgid: int) -> None:
            ended.append(pgid)

    from greenroom.agents.tools._environment import scrubbed

    env = scrubbed({**ENV, "GREENROOM_AUTH_TOKEN": "t0k", "OPENAI_API_KEY": "sk-x"})
    config = HooksConfig(session_start=(HookCommand("env > seen", LIMIT),))
    with trio.fail_after(LIMIT):
        await Hooks(config, tmp_path, env, processes=Ledger()).run("session_start", {})
    seen = (tmp_path / "seen").read_text()
    assert "t0k" not in seen and "sk-x" not in seen and "PATH=" in seen
    assert [label for _, label in started] == ["hook env > seen"]
