"""The example tests of docs/testing.md, run as they are written there (a test below checks
that every Python block of that page is in this file, so the page cannot drift)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import trio

from greenroom.testing import Greenroom, ScriptedAgent, Tool, ToolCallContext, open_greenroom

# --- example: reject a tool call ---------------------------------------------------------------


async def list_files(ctx: ToolCallContext) -> str:
    await trio.lowlevel.checkpoint()
    return "a.txt b.txt"


FILES_AGENT = ScriptedAgent(
    turns=[
        [{"text": "Let me look."}, {"tool_call": {"name": "shell", "arguments": {"cmd": "ls"}}}],
        "All right, I will not look.",
    ],
    tools=[Tool("shell", list_files, confirm=True)],
)


async def test_rejecting_a_tool_call(autojump_clock: trio.abc.Clock) -> None:
    async with open_greenroom(FILES_AGENT) as gr:
        session = await gr.client.create_session(title="files")
        sid = session["id"]
        async with gr.client.events(sid, since=0) as events:
            await gr.client.run(sid, "what is in this folder?")
            ask = await events.next_of("tool_call_confirmation")
            assert ask["tool_call"]["function"]["name"] == "shell"
            await gr.client.reject(sid, "not now")
            rest = await events.until("stream_stopped")
    assert rest[0]["response"] == "The user rejected the tool call. Reason: not now"
    reply = "".join(event["content"] for event in rest if event.type == "agent_choice")
    assert reply == "All right, I will not look."


# --- example: answer the agent's question ------------------------------------------------------


async def ask_for_a_city(ctx: ToolCallContext) -> str:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    answer = await ctx.elicit("Which city?", schema)
    return answer.content["city"] if answer.action == "accept" and answer.content else "none"


async def test_answering_a_question(autojump_clock: trio.abc.Clock) -> None:
    agent = ScriptedAgent(
        turns=[[{"tool_call": {"name": "ask", "arguments": {}}}], "Lisbon it is."],
        tools=[Tool("ask", ask_for_a_city)],
    )
    async with open_greenroom(agent) as gr:
        sid = (await gr.client.create_session(title="trip"))["id"]
        async with gr.client.events(sid, since=0) as events:
            await gr.client.run(sid, "plan a trip")
            question = await events.next_of("elicitation_request")
            await gr.client.answer_elicitation(
                sid, "accept", {"city": "Lisbon"}, elicitation_id=question["elicitation_id"]
            )
            result = await events.next_of("tool_call_response")
    assert result["response"] == "Lisbon"


# --- example: slow models and reconnects cost no real time -------------------------------------


async def test_an_hour_long_turn_in_milliseconds(autojump_clock: trio.abc.Clock) -> None:
    agent = ScriptedAgent(turns=[[{"text": "one"}, {"delay": 3600}, {"text": " two"}]])
    async with open_greenroom(agent) as gr:
        sid = (await gr.client.create_session(title="slow"))["id"]
        async with gr.client.events(sid, since=0) as events:
            await gr.client.run(sid, "count")
            await events.next_of("agent_choice")
            gr.drop_connections()  # the client reconnects (with backoff) and resumes
            rest = await events.until("stream_stopped")
    assert [e["content"] for e in rest if e.type == "agent_choice"] == [" two"]
    assert trio.current_time() >= 3600  # virtual seconds


# --- example: the pytest plugin's fixtures -----------------------------------------------------


@pytest.fixture
def greenroom_agent() -> ScriptedAgent:
    return ScriptedAgent(turns=["Hi! How can I help?"], loop=True, title="Support")


async def test_with_the_plugin_fixture(
    autojump_clock: trio.abc.Clock, greenroom: Greenroom
) -> None:
    sid = (await greenroom.client.create_session())["id"]
    async with greenroom.client.events(sid, since=0) as events:
        await greenroom.client.run(sid, "hello")
        seen = await events.until("stream_stopped")
    assert "Hi! How can I help?" in "".join(e.get("content", "") for e in seen)
    assert (await greenroom.client.session(sid))["title"] == "Support"


# --- the page shows these blocks ---------------------------------------------------------------


def test_every_example_of_the_docs_is_here() -> None:
    page = Path(__file__).resolve().parents[2] / "docs" / "testing.md"
    source = Path(__file__).read_text()
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), re.DOTALL)
    assert blocks
    for block in blocks:
        for line in block.splitlines():
            if line.strip() and not line.startswith(("from ", "import ", "pytest_plugins")):
                assert line in source, f"docs/testing.md has a line this file lacks: {line!r}"
