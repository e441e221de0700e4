"""An MCP server over stdio, as one toolset sees it: start, list, call, elicit, list changes,
restarts, and every way a bad server can misbehave (each must leave the session usable).

The servers are subprocesses running ``stdio_server.py`` (the SDK's server side).
"""

from __future__ import annotations

import json
import os

import attrs
import pytest
import trio

from greenroom.agents import ElicitationAnswer
from greenroom.agents.mcp import McpServer, StdioSpec
from greenroom.domain import Warning
from tests.mcp.support import QUICK, FakeHost, alive, new_server, server_spec, until
from tests.slowness import slow

pytestmark = pytest.mark.slow
DEADLINE = slow(60)


async def test_tools_are_listed_with_their_hints_and_calls_answer() -> None:
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            host = FakeHost(nursery)
            server = new_server(host, "--instructions", "Use echo wisely.")
            assert await server.ensure_started() == ""
            tools, instructions = server.current()
            names = [t.spec.name for t in tools]
            assert names[:3] == ["echo", "add", "ask"]
            echo = tools[0]
            assert echo.annotations.read_only is True
            assert tools[1].annotations.read_only is False
            assert echo.spec.parameters["required"] == ["text"]
            assert instructions == "Use echo wisely."
            assert (await echo.call({"text": "hi"})).output == "echo: hi"
            assert (await tools[1].call({"a": 2, "b": 3})).output == "5"
            unknown = await server.call("nope", {})
            assert unknown.is_error
            nursery.cancel_scope.cancel()


async def test_a_name_prefixes_tool_names_but_the_server_gets_its_own_names() -> None:
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            server = new_server(FakeHost(nursery), prefix="srv")
            assert await server.ensure_started() == ""
            tools = {t.spec.name: t for t in server.current()[0]}
            assert "srv_echo" in tools and "echo" not in tools
            result = await tools["srv_echo"].call({"text": "prefixed"})
            assert (result.output, result.is_error) == ("echo: prefixed", False)
            nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (ElicitationAnswer("accept", {"name": "Ada"}), "accept: Ada"),
        (ElicitationAnswer("decline"), "decline: "),
    ],
)
async def test_an_elicitation_reaches_the_host_and_its_answer_the_server(
    answer: ElicitationAnswer, expected: str
) -> None:
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            host = FakeHost(nursery, answer=answer)
            server = new_server(host)
            await server.ensure_started()
            result = await server.call("ask", {})
            assert result.output == expected
            (asked,) = host.asked
            assert asked["message"] == "What is your name?"
            assert asked["schema"]["properties"]["name"]["type"] == "string"
            nursery.cancel_scope.cancel()


async def test_a_changed_tool_list_is_read_again() -> None:
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            server = new_server(FakeHost(nursery))
            await server.ensure_started()
            version = server.version
            assert "fresh" not in [t.spec.name for t in server.current()[0]]
            assert (await server.call("grow", {})).output == "grown"
            await until(lambda: server.version != version)
            assert "fresh" in [t.spec.name for t in server.current()[0]]
            assert (await server.call("fresh", {})).output == "fresh!"
            nursery.cancel_scope.cancel()


async def test_a_server_that_dies_is_reported_restarted_and_reaped() -> None:
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            host = FakeHost(nursery)
            server = new_server(host)
            await server.ensure_started()
            first = int((await server.call("pid", {})).output)
            died = await server.call("die", {})
            assert died.is_error and died.output.startswith("Error calling tool: failed to call")
            await until(lambda: server.state == "ready" and server.restarts == 1)
            second = int((await server.call("pid", {})).output)
            assert second != first
            assert not alive(first)
            (warning,) = host.events
            assert isinstance(warning, Warning)
            assert "stopped" in warning.message and "restarting in 0.05s" in warning.message
            assert (await server.call("echo", {"text": "again"})).output == "echo: again"
            nursery.cancel_scope.cancel()


async def test_restarts_are_bounded_then_the_next_start_tries_again() -> None:
    settings = attrs.evolve(QUICK, restart_backoff=(0.01,))
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            host = FakeHost(nursery)
            server = new_server(host, settings=settings)
            await server.ensure_started()
            await server.call("die", {})
            await until(lambda: server.state == "ready" and server.restarts == 1)
            await server.call("die", {})
            await until(lambda: server.state == "failed")
            assert "gave up after 1 restarts" in host.events[-1].message  # type: ignore[union-attr]
            assert await server.ensure_started() == ""  # the next turn starts it afresh
            assert (await server.call("echo", {"text": "back"})).output == "echo: back"
            nursery.cancel_scope.cancel()


async def test_a_server_that_fails_to_start_gives_a_warning_with_its_stderr(tmp_path) -> None:
    record = tmp_path / "record.jsonl"
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            server = new_server(FakeHost(nursery), "--exit-at-start", "2", "--record", str(record))
            warning = await server.ensure_started()
            assert warning.startswith(f"{server.description} start failed: ")
            assert "cannot start: configured to fail" in warning
            assert server.state == "failed"
            assert await server.ensure_started() != ""  # tried again: it fails again
            assert len(record.read_text().splitlines()) == 2
            nursery.cancel_scope.cancel()


async def test_a_command_that_does_not_exist_is_a_start_warning() -> None:
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            spec = StdioSpec("/nonexistent/mcp-server", (), dict(os.environ))
            server = McpServer(spec, FakeHost(nursery), QUICK)
            warning = await server.ensure_started()
            assert warning == (
                "mcp(stdio cmd=/nonexistent/mcp-server) start failed: cannot start "
                "/nonexistent/mcp-server: No such file or directory"
            )
            nursery.cancel_scope.cancel()


async def test_a_hanging_call_times_out_and_the_server_keeps_serving() -> None:
    settings = attrs.evolve(QUICK, call_timeout=0.5)
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            server = new_server(FakeHost(nursery), settings=settings)
            await server.ensure_started()
            hung = await server.call("hang", {})
            assert hung.is_error
            assert hung.output.endswith("did not answer within 0.5 seconds")
            assert (await server.call("echo", {"text": "still"})).output == "echo: still"
            nursery.cancel_scope.cancel()


async def test_a_server_that_never_initializes_is_left_behind_and_killed_at_stop(
    tmp_path,
) -> None:
    record = tmp_path / "record.jsonl"
    settings = attrs.evolve(QUICK, start_timeout=slow(1.0))  # the server never answers
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            server = new_server(
                FakeHost(nursery), "--hang-at-start", "--record", str(record), settings=settings
            )
            warning = await server.ensure_started()
            assert "start failed" in warning
            await until(record.exists)
            pid = int(json.loads(record.read_text())["pid"])
            nursery.cancel_scope.cancel()
        assert not alive(pid)


async def test_malformed_messages_are_dropped_and_the_call_answers() -> None:
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            server = new_server(FakeHost(nursery))
            await server.ensure_started()
            result = await server.call("garbage", {})
            assert (result.output, result.is_error) == ("after garbage", False)
            assert server.malformed >= 2  # not JSON; a method that is not a string
            assert (await server.call("echo", {"text": "fine"})).output == "echo: fine"
            nursery.cancel_scope.cancel()


async def test_a_flood_of_bad_lines_is_dropped_and_the_call_answers() -> None:
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            server = new_server(FakeHost(nursery))
            await server.ensure_started()
            result = await server.call("flood", {"n": 20_000})
            assert (result.output, result.is_error) == ("flooded 20000", False)
            assert (await server.call("echo", {"text": "calm"})).output == "echo: calm"
            # The SDK hands each message to the handler on its own; the count may trail.
            await until(lambda: server.malformed >= 20_000)
            assert server.malformed == 20_000
            nursery.cancel_scope.cancel()


async def test_an_endless_line_ends_the_connection_and_the_server_comes_back() -> None:
    settings = attrs.evolve(QUICK, max_line=256 * 1024)
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            host = FakeHost(nursery)
            server = new_server(host, settings=settings)
            await server.ensure_started()
            pid = int((await server.call("pid", {})).output)
            result = await server.call("huge_line", {})
            assert result.is_error
            await until(lambda: server.state == "ready" and server.restarts == 1)
            await until(lambda: not alive(pid))
            assert (await server.call("echo", {"text": "ok"})).output == "echo: ok"
            nursery.cancel_scope.cancel()


async def test_a_stderr_flood_does_not_block_the_server() -> None:
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            server = new_server(FakeHost(nursery))
            await server.ensure_started()
            assert (await server.call("shout", {})).output == "shouted"
            assert (await server.call("echo", {"text": "calm"})).output == "echo: calm"
            nursery.cancel_scope.cancel()


async def test_stopping_kills_the_servers_process_group() -> None:
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            server = new_server(FakeHost(nursery))
            await server.ensure_started()
            pid = int((await server.call("pid", {})).output)
            child = int((await server.call("spawn_child", {})).output)
            assert alive(child)
            nursery.cancel_scope.cancel()
        assert server.state == "stopped"
        assert not alive(pid)
        await until(lambda: not alive(child))


async def test_working_directory_and_environment_reach_the_server(tmp_path) -> None:
    record = tmp_path / "record.jsonl"
    env = {**os.environ, "GREENROOM_TEST_VALUE": "from-env"}
    spec = server_spec("--record", str(record), cwd=tmp_path, env=env)
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            server = McpServer(spec, FakeHost(nursery), QUICK)
            assert await server.ensure_started() == ""
            seen = json.loads(record.read_text())
            assert seen["env"]["GREENROOM_TEST_VALUE"] == "from-env"
            assert os.readlink(f"/proc/{seen['pid']}/cwd") == str(tmp_path)
            nursery.cancel_scope.cancel()
