"""``greenroom chat`` as a person uses it: the real program in a tmux terminal, against an
in-process greenroom with scripted agents (real clock; every wait bounded)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest
import trio

from greenroom.testing import Greenroom, ScriptedAgent, Tool, ToolCallContext, open_greenroom
from tests.chat.support import Tmux, chat_command, tmux_or_skip
from tests.slowness import slow

pytestmark = pytest.mark.slow
DEADLINE = slow(60)
ENV = {"TERM": "xterm-256color", "NO_COLOR": "1"}
END = r"^\[.* \| tokens \d+ in / \d+ out\]"  # the line a finished turn prints (not the toolbar)


@pytest.fixture
async def tmux() -> AsyncIterator[Tmux]:
    tmux_or_skip()
    terminal = Tmux()
    try:
        yield terminal
    finally:
        await terminal.close()


async def _files(ctx: ToolCallContext) -> str:
    await trio.lowlevel.checkpoint()
    return "a.txt b.txt"


AGENT = ScriptedAgent(
    turns=[
        [{"reasoning": "Let me see."}, {"text": ["Hello", " from", " the", " terminal."]}],
        [{"text": "I will look."}, {"tool_call": {"name": "shell", "arguments": {"cmd": "ls"}}}],
        "Two files.",
        [{"text": "counting:"}]
        + [{"text": f" {n}"} if n % 2 else {"delay": 0.2} for n in range(1, 41)],
        "after the drop",
    ],
    tools=[Tool("shell", _files, confirm=True)],
    title="Terminal talk",
)


async def start_chat(tmux: Tmux, gr: Greenroom) -> None:
    await tmux.start(*chat_command(gr.url), env=ENV)
    await tmux.wait_for(r"session: untitled")  # no sessions yet: a new one
    await tmux.wait_for(r"you>")


async def test_full_turn_approval_and_commands(tmux: Tmux) -> None:
    with trio.fail_after(DEADLINE):
        async with open_greenroom(AGENT) as gr:
            await start_chat(tmux, gr)
            await tmux.type("hi")
            screen = await tmux.wait_for(r"agent: Hello from the terminal\.")
            assert "thinking: Let me see." in screen
            await tmux.wait_for(END)
            await tmux.type("list the files")
            await tmux.wait_for(r"approve shell\? \[y\]es / \[n\]o")
            await tmux.type("y")
            screen = await tmux.wait_for(r"agent: Two files\.")
            assert "tool result: a.txt b.txt" in screen
            await tmux.wait_for(r"you>\s*$")
            await tmux.type("/sessions")
            await tmux.wait_for(r"1\. Terminal talk\s+\(6 messages, default\)")
            await tmux.type("/fork 2")
            await tmux.wait_for(r"session: Terminal talk \(fork 1\)")
            await tmux.type("/title Renamed")
            await tmux.wait_for(r"title: Renamed")
            [session] = [s for s in await gr.client.sessions() if s["title"] == "Renamed"]
            assert session["num_messages"] == 2  # the history before the second message
            await tmux.type("/quit")


async def test_ctrl_c_cancels_the_turn(tmux: Tmux) -> None:
    slow = ScriptedAgent(
        turns=[[{"text": f" {n}"} if n % 2 else {"delay": 0.3} for n in range(60)]]
    )
    with trio.fail_after(DEADLINE):
        async with open_greenroom(slow, agents={"other": AGENT}) as gr:
            await start_chat(tmux, gr)
            await tmux.type("count")
            await tmux.wait_for(r"agent:.* 5")
            await tmux.keys("C-c")
            await tmux.wait_for(r"\(turn cancelled\)")
            await tmux.wait_for(r"you>\s*$")
            [session] = await gr.client.sessions()
            snapshot = await gr.client.snapshot(session["id"])
            assert snapshot["streaming"] is False


async def test_reconnects_after_a_dropped_connection(tmux: Tmux) -> None:
    counting = ScriptedAgent(
        turns=[
            [{"text": "counting:"}]
            + [{"text": f" {n}"} if n % 2 else {"delay": 0.2} for n in range(1, 31)]
        ]
    )
    with trio.fail_after(DEADLINE):
        async with open_greenroom(counting) as gr:
            await start_chat(tmux, gr)
            await tmux.type("count")
            await tmux.wait_for(r"counting: 1 3")
            assert gr.drop_connections() >= 1
            await tmux.wait_for(r"\[connection: reconnecting…\]")
            await tmux.wait_for(r"\[connection: live\]")
            screen = await tmux.wait_for(END)
    expected = "counting:" + "".join(f" {n}" for n in range(1, 31, 2))
    streamed = "".join(
        line.removeprefix("agent: ") for line in screen.splitlines() if line.startswith("agent: ")
    )
    assert streamed == expected, screen  # every token once, in order, across the reconnect


async def test_without_a_url_it_starts_its_own_server(tmux: Tmux, tmp_path: object) -> None:
    env = {**ENV, "OPENAI_API_KEY": "", "ANTHROPIC_API_KEY": ""}  # the echo model
    db = f"{tmp_path}/chat.sqlite3"
    with trio.fail_after(DEADLINE):
        await tmux.start(*chat_command("", "--db", db), env=env)
        await tmux.wait_for(r"greenroom chat on http://127\.0\.0\.1:\d+")
        await tmux.wait_for(r"^you>", within=slow(30))
        await tmux.type("hello embedded server")
        await tmux.wait_for(r"agent: Echo: hello embedded server")
        await tmux.wait_for(END)
        await tmux.type("/model")  # the file says "auto": say what it runs (issue 22)
        await tmux.wait_for(r"the last turn ran echo/echo")
        await tmux.type("/quit")
        await tmux.wait_closed()  # the embedded server stopped and the program exited


async def test_dumb_terminal_gets_plain_lines(tmux: Tmux) -> None:
    with trio.fail_after(DEADLINE):
        async with open_greenroom(AGENT) as gr:
            await tmux.start(*chat_command(gr.url), env={"TERM": "dumb"})
            await tmux.wait_for(r"^you>")
            await tmux.type("hi")
            screen = await tmux.wait_for(r"agent: Hello from the terminal\.")
            # The plain status line after a turn ("[<title> | tokens 15 in / 7 out]", the title
            # as far as it is known by then) may be there; the toolbar may not.
            plain = re.sub(r"\[[^\]\n]* \| tokens [^\]\n]*\]", "", screen)
            assert "| tokens" not in plain


async def _ask_trip(ctx: ToolCallContext) -> str:
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string", "title": "City"},
            "nights": {"type": "integer", "title": "Nights"},
            "pets": {"type": "boolean", "title": "Pets"},
        },
        "required": ["city"],
    }
    answer = await ctx.elicit("Where to?", schema)
    return f"{answer.action}: {answer.content}"


async def test_elicitation_prompts(tmux: Tmux) -> None:
    agent = ScriptedAgent(
        turns=[[{"tool_call": {"name": "ask_trip", "arguments": {}}}], "Booked."],
        tools=[Tool("ask_trip", _ask_trip)],
    )
    with trio.fail_after(DEADLINE):
        async with open_greenroom(agent) as gr:
            await start_chat(tmux, gr)
            await tmux.type("plan a trip")
            await tmux.wait_for(r"the agent asks: Where to\?")
            await tmux.wait_for(r"^City>")  # capture-pane drops trailing spaces
            await tmux.type("Lisbon")
            await tmux.wait_for(r"^Nights \(optional\)>")
            await tmux.type("three")
            await tmux.wait_for(r"error: Nights: a whole number")
            await tmux.type("3")
            await tmux.wait_for(r"^Pets \[y/n\] \(optional\)>")
            await tmux.type("y")
            screen = await tmux.wait_for(r"agent: Booked\.")
    assert "tool result: accept: {'city': 'Lisbon', 'nights': 3, 'pets': True}" in screen
