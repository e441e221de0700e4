"""``greenroom chat`` reads while it streams (issue 22): the real program in tmux against an
in-process greenroom with scripted agents (real clock; every wait bounded)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from greenroom.testing import ScriptedAgent, Tool, ToolCallContext, open_greenroom
from tests.chat.support import Tmux, chat_command, tmux_or_skip
from tests.in_doubt_support import deploy_agent, session_in_doubt

pytestmark = pytest.mark.slow
DEADLINE = 60
ENV = {"TERM": "xterm-256color", "NO_COLOR": "1"}
END = r"^\[.* \| tokens \d+ in / \d+ out\]"  # the line a finished turn prints


@pytest.fixture
async def tmux() -> AsyncIterator[Tmux]:
    tmux_or_skip()
    terminal = Tmux()
    try:
        yield terminal
    finally:
        await terminal.close()


STEERED = ScriptedAgent(
    turns=[
        [{"text": "working"}, {"delay": 2.0}],  # time to type while it streams
        "took the steer",
        "did the follow-up",
    ],
    loop=True,
)


async def test_typing_steers_and_followup_queues_mid_turn(tmux: Tmux) -> None:
    with trio.fail_after(DEADLINE):
        async with open_greenroom(STEERED) as gr:
            await tmux.start(*chat_command(gr.url), env=ENV)
            await tmux.wait_for(r"^you>")
            await tmux.type("/steer too early")  # nothing runs: said so, nothing sent
            await tmux.wait_for(r"no turn is running")
            await tmux.type("start")
            await tmux.wait_for(r"agent: working")
            await tmux.wait_for(r"^steer>")  # the input line is open while the turn runs
            await tmux.type("go left")
            await tmux.wait_for(r"steering the running turn: go left")
            await tmux.type("/followup then summarise")
            await tmux.wait_for(r"queued \(queued_streaming\)")
            await tmux.wait_for(r"did the follow-up")
            screen = await tmux.wait_for(r"^you>\s*$")
            assert "agent: took the steer" in screen
            [session] = await gr.client.sessions()
            got = await gr.client.session(session["id"])
    users = [m["message"]["content"] for m in got["messages"] if m["message"]["role"] == "user"]
    assert users == ["start", "go left", "then summarise"]


LONG = ScriptedAgent(turns=[[{"text": f" {n}"} if n % 2 else {"delay": 0.3} for n in range(80)]])


async def test_cancel_command_mid_turn(tmux: Tmux) -> None:
    with trio.fail_after(DEADLINE):
        async with open_greenroom(LONG) as gr:
            await tmux.start(*chat_command(gr.url), env=ENV)
            await tmux.wait_for(r"^you>")
            await tmux.type("count")
            await tmux.wait_for(r"^steer>")
            await tmux.wait_for(r" 5")
            await tmux.type("/cancel")
            await tmux.wait_for(r"\(turn cancelled\)")
            await tmux.wait_for(r"^you>\s*$")
            [session] = await gr.client.sessions()
            assert (await gr.client.snapshot(session["id"]))["streaming"] is False


async def _ran(ctx: ToolCallContext) -> str:
    await trio.lowlevel.checkpoint()
    return f"wrote {len(ctx.arguments['lines'])} lines"


BIG_ARGS = {"path": "notes.txt", "lines": [f"line number {n}" for n in range(40)]}
WRITER = ScriptedAgent(
    turns=[[{"tool_call": {"name": "write_file", "arguments": BIG_ARGS}}], "Written."],
    tools=[Tool("write_file", _ran, confirm=True)],
)


async def test_approval_shows_the_arguments_and_the_rule_before_asking(tmux: Tmux) -> None:
    with trio.fail_after(DEADLINE):
        async with open_greenroom(WRITER) as gr:
            await tmux.start(*chat_command(gr.url), env=ENV)
            await tmux.wait_for(r"^you>")
            await tmux.type("write my notes")
            screen = await tmux.wait_for(r"^approve write_file\? \[y\]es")
            ask = screen[screen.index("wants to run write_file") :]
            assert '"path": "notes.txt"' in ask  # pretty, before the question
            assert "line number 3" in ask and "line number 39" not in ask  # truncated
            assert "more characters: [v]iew all" in ask
            assert "it asks because of: no rule allows write_file" in ask
            assert ask.index('"path"') < ask.index("approve write_file? [y]es")
            await tmux.type("v")
            await tmux.wait_for(r'"line number 39"')
            await tmux.type("y")
            await tmux.wait_for(r"agent: Written\.")
            await tmux.wait_for(r"tool result: wrote 40 lines")


async def test_help_at_the_session_prompt_creates_nothing(tmux: Tmux) -> None:
    with trio.fail_after(DEADLINE):
        async with open_greenroom(STEERED) as gr:
            await gr.client.create_session(title="Kept")
            await tmux.start(*chat_command(gr.url), env=ENV)
            await tmux.wait_for(r"session number, or Enter for a new one:")
            await tmux.type("/help")
            await tmux.wait_for(r"^commands:")
            await tmux.wait_for(r"session number, or Enter for a new one:(?![\s\S]*commands:)")
            assert len(await gr.client.sessions()) == 1  # /help made no session
            await tmux.type("1")
            await tmux.wait_for(r"session: Kept")
            assert len(await gr.client.sessions()) == 1


async def test_a_server_without_a_default_agent(tmux: Tmux) -> None:
    other = ScriptedAgent(turns=["from the only agent"], loop=True, welcome_message="Hi there!")
    with trio.fail_after(DEADLINE):
        async with open_greenroom(agents={"solo": other}) as gr:
            await tmux.start(*chat_command(gr.url), env=ENV)
            await tmux.wait_for(r"agent: solo \(this server has no 'default'")
            await tmux.wait_for(r"^you>")
            await tmux.type("hello")
            await tmux.wait_for(r"agent: from the only agent")
            [session] = await gr.client.sessions()
            assert session["agent_file"] == "solo"


async def test_a_call_in_doubt_is_decided_at_the_prompt(tmux: Tmux, tmp_path: Path) -> None:
    db = tmp_path / "gr.sqlite3"
    with trio.fail_after(DEADLINE):
        sid = await session_in_doubt(db)
        async with open_greenroom(deploy_agent(), store="sqlite", db_path=db) as gr:
            await tmux.start(*chat_command(gr.url, "--session", sid), env=ENV)
            screen = await tmux.wait_for(r"^\[s\]kip \(it did not run\) / \[r\]erun / \[d\]one")
            assert "the server stopped while deploy ran" in screen
            assert '"version": "1.2.3"' in screen
            await tmux.type("maybe")
            await tmux.wait_for(r"answer s, r or d")
            await tmux.type("d")
            await tmux.wait_for(r"deploy: done")
            assert await gr.client.in_doubt(sid) == []
            await tmux.type("carry on")
            await tmux.wait_for(r"agent: Deployed\.")
