"""``greenroom serve mcp``: the MCP SDK's own client against the real command, over stdio (a
child process) and over streamable HTTP (a server on 127.0.0.1:0 in the test's trio run).
The agents are scripted (no network)."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
import trio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from greenroom.domain import Message, Session
from greenroom.persistence import open_sqlite_store
from greenroom.serve import ServeConfig
from greenroom.serve._host import open_host
from greenroom.serve._mcp_server import AgentTools, serve_mcp_http, serve_tools_http
from greenroom.testing import ScriptedAgent
from tests.slowness import slow

pytestmark = pytest.mark.slow

ANSWERS = ScriptedAgent(turns=["The answer is 42."], loop=True, description="Answers questions")
SHELL = ScriptedAgent(
    turns=[
        [{"tool_call": {"name": "shell", "arguments": {"cmd": "echo ran-it"}}}],
        "Done with the shell.",
    ],
    toolsets=("shell",),
    loop=True,
    description="Runs commands",
)
BROKEN = ScriptedAgent(turns=[[{"error": "model_error"}]], description="Always fails")


@asynccontextmanager
async def stdio_session(
    *args: str, elicit: Any = None
) -> AsyncIterator[tuple[ClientSession, types.InitializeResult]]:
    """``greenroom serve mcp ARGS`` as a child process, and an initialized client session.
    Leaving the block closes stdin; the SDK's client ends the child."""
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "greenroom.cli", "serve", "mcp", *args]
    )
    with trio.fail_after(slow(60)):  # real clock: a child interpreter starts and loads greenroom
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write, elicitation_callback=elicit) as session,
        ):
            init = await session.initialize()
            yield session, init


async def only_session(db: Path) -> Session:
    """The one session the child stored (it closed the store when its stdin ended)."""
    async with open_sqlite_store(db) as opened:
        [summary] = await opened.store.list_sessions()
        return await opened.store.get_session(summary.id)


def messages(session: Session) -> list[Message]:
    return [item for item in session.items if isinstance(item, Message)]


def text_of(result: types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def test_stdio_lists_one_tool_per_agent_and_a_call_runs_a_turn(tmp_path: Path) -> None:
    answers = ANSWERS.write(tmp_path, "answers")
    db = tmp_path / "mcp.sqlite3"
    async with stdio_session(str(answers), "--db", str(db)) as (session, init):
        assert init.server_info.name == "greenroom"
        tools = (await session.list_tools()).tools
        assert [t.name for t in tools] == ["root"]
        assert tools[0].description == "Answers questions"
        assert tools[0].input_schema["required"] == ["message"]
        result = await session.call_tool("root", {"message": "what is it?"})
        assert not result.is_error
        assert text_of(result) == "The answer is 42."
        assert result.structured_content == {"response": "The answer is 42."}
    stored = await only_session(db)
    texts = [(m.role, m.content) for m in messages(stored)]
    assert ("user", "what is it?") in texts
    assert ("assistant", "The answer is 42.") in texts


async def test_stdio_bad_calls_are_json_rpc_errors_that_say_what_to_do(tmp_path: Path) -> None:
    answers = ANSWERS.write(tmp_path, "answers")
    async with stdio_session(str(answers)) as (session, _):
        with pytest.raises(MCPError) as unknown:
            await session.call_tool("nobody", {"message": "hi"})
        assert unknown.value.code == types.INVALID_PARAMS
        assert "the agents here are root" in unknown.value.message
        with pytest.raises(MCPError) as empty:
            await session.call_tool("root", {"message": "  "})
        assert empty.value.code == types.INVALID_PARAMS
        assert "arguments.message" in empty.value.message
        # The server is still serving after both.
        assert text_of(await session.call_tool("root", {"message": "hi"})) == "The answer is 42."


async def test_a_failing_turn_is_a_tool_error_result(tmp_path: Path) -> None:
    broken = BROKEN.write(tmp_path, "broken")
    async with stdio_session(str(broken)) as (session, _):
        result = await session.call_tool("root", {"message": "hi"})
    assert result.is_error
    assert "the agent's turn failed" in text_of(result)


async def test_a_tool_that_asks_is_refused_when_the_client_cannot_answer(tmp_path: Path) -> None:
    shell = SHELL.write(tmp_path, "shell")
    db = tmp_path / "mcp.sqlite3"
    async with stdio_session(str(shell), "--db", str(db)) as (session, _):
        result = await session.call_tool("root", {"message": "run it"})
    assert text_of(result) == "Done with the shell."
    stored = await only_session(db)
    [tool_result] = [m for m in messages(stored) if m.role == "tool"]
    assert "ran-it" not in tool_result.content
    assert "elicitation" in tool_result.content  # the reason tells how to allow it
    assert [a.decision for a in stored.approvals] == ["reject"]


async def test_a_tool_that_asks_runs_once_the_client_approves(tmp_path: Path) -> None:
    shell = SHELL.write(tmp_path, "shell")
    db = tmp_path / "mcp.sqlite3"
    asked: list[str] = []

    async def approve(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": True})

    async with stdio_session(str(shell), "--db", str(db), elicit=approve) as (session, _):
        result = await session.call_tool("root", {"message": "run it"})
    assert text_of(result) == "Done with the shell."
    assert len(asked) == 1
    assert "shell" in asked[0]
    stored = await only_session(db)
    [tool_result] = [m for m in messages(stored) if m.role == "tool"]
    assert "ran-it" in tool_result.content
    assert [(a.decision, a.decided_by) for a in stored.approvals] == [("approve", "mcp")]


async def test_streamable_http_serves_the_same_tools(tmp_path: Path) -> None:
    answers = ANSWERS.write(tmp_path, "answers")
    shell = SHELL.write(tmp_path, "shell")
    cfg = ServeConfig(agent_paths=(str(answers), str(shell)), port=0, db=":memory:", titles=False)
    async with trio.open_nursery() as nursery:
        url = await nursery.start(partial(serve_mcp_http, cfg, tools_approved=True))
        with trio.fail_after(slow(30)):  # real clock: HTTP on loopback, SQLite-free turns
            async with (
                streamable_http_client(url) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                names = sorted(t.name for t in (await session.list_tools()).tools)
                # Both files call their agent root: each is named by its file.
                assert names == ["answers.root", "shell.root"]
                answered = await session.call_tool("answers.root", {"message": "?"})
                assert text_of(answered) == "The answer is 42."
                ran = await session.call_tool("shell.root", {"message": "run it"})
                assert text_of(ran) == "Done with the shell."  # --tools-approved: no question
        nursery.cancel_scope.cancel()


async def test_a_call_the_client_abandons_cancels_its_turn(tmp_path: Path) -> None:
    agent = ScriptedAgent(turns=[[{"text": "Working"}, {"delay": 600}, {"text": " never"}]])
    paths = (str(agent.write(tmp_path, "slow")), str(ANSWERS.write(tmp_path, "answers")))
    cfg = ServeConfig(agent_paths=paths, port=0, db=":memory:", titles=False)
    committed = trio.Event()
    async with open_host(cfg) as host, trio.open_nursery() as nursery:
        host.registry.observe_commits(lambda seqs: committed.set())
        url = await nursery.start(partial(serve_tools_http, AgentTools(host), "127.0.0.1", 0))
        with trio.fail_after(slow(30)):  # real clock: HTTP on loopback
            async with (
                streamable_http_client(url) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                # The client gives up on the call (the SDK sends notifications/cancelled).
                with pytest.raises(MCPError):
                    await session.call_tool(
                        "slow.root", {"message": "go"}, read_timeout_seconds=slow(2)
                    )
                assert committed.is_set()  # the turn had started
                await host.registry.wait_turns_over()  # the server cancelled the turn
            async with (  # and serves the next client
                streamable_http_client(url) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                again = await session.call_tool("answers.root", {"message": "again"})
                assert text_of(again) == "The answer is 42."
        # In memory nobody could read a call's session again: none is kept.
        assert await host.registry.list_sessions() == []
        nursery.cancel_scope.cancel()


async def test_the_http_command_stops_on_sigint(tmp_path: Path) -> None:
    answers = ANSWERS.write(tmp_path, "answers")
    command = [sys.executable, "-m", "greenroom.cli", "serve", "mcp", str(answers)]
    process = await trio.lowlevel.open_process(
        [*command, "--http", "--port", "0"], stderr=subprocess.PIPE
    )
    try:
        assert process.stderr is not None
        seen = b""
        with trio.fail_after(slow(60)):  # real clock: a child interpreter starts and binds
            while b"listening on http://127.0.0.1:" not in seen:
                chunk = await process.stderr.receive_some(4096)
                assert chunk, f"the server ended: {seen.decode(errors='replace')}"
                seen += chunk
            process.send_signal(signal.SIGINT)
            async with process.stderr:
                while await process.stderr.receive_some(4096):
                    pass  # drained, so the child never blocks writing its last lines
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()
