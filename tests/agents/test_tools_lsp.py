"""The ``lsp`` toolset against real language servers: python-lsp-server (``pylsp``, with its
pyflakes plugin) and a small misbehaving server (``lsp_fake_server.py``), both real processes
speaking the real protocol on stdio. So these tests run on the real clock; every wait is
bounded by a deadline scaled by ``slow()``."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from greenroom.agents import LocalRuntime, ToolContext
from greenroom.agents.tools import ToolResult, ToolsetError
from greenroom.agents.tools._base import McpSettings
from greenroom.agents.tools._lsp import lsp_spec, lsp_tools
from greenroom.agents.tools._lsp_server import LspServer, LspSpec
from greenroom.domain import Event, ToolCallResponse
from tests.agents.loop_support import (
    FakeIO,
    FakeProvider,
    call,
    make_runtime,
    start,
    text,
    tool_step,
)
from tests.mcp.support import FakeHost, alive
from tests.slowness import slow

pytestmark = pytest.mark.slow
DEADLINE = slow(60)  # real clock: pylsp is a real process (jedi and pyflakes load slowly)
FAKE = Path(__file__).with_name("lsp_fake_server.py")
PYLSP = (sys.executable, "-m", "pylsp")
SOURCE = (
    "import os\n"
    "\n"
    "\n"
    "def greet(name):\n"
    '    """Say hello."""\n'
    '    return "hi " + name\n'
    "\n"
    "\n"
    'greet("x")\n'
    "undefined_name\n"
)


def spec(workdir: Path, *argv: str, **kwargs: Any) -> LspSpec:
    command, *args = argv or PYLSP
    settings = {
        "start_timeout": slow(30),
        "call_timeout": slow(30),
        "diagnostics_wait": slow(30),  # real clock: returns as soon as pylsp publishes
        **kwargs,
    }
    return LspSpec(command, tuple(args), dict(os.environ), workdir, (".py",), **settings)


@asynccontextmanager
async def running(server_spec: LspSpec) -> AsyncIterator[tuple[LspServer, dict[str, Any]]]:
    """A server whose process lives in a nursery (the runtime's services), and its tools."""
    async with trio.open_nursery() as nursery:
        server = LspServer(server_spec, FakeHost(nursery))
        tools = {tool.spec.name: tool for tool in lsp_tools(server)}
        try:
            yield server, tools
        finally:
            server.close()
            nursery.cancel_scope.cancel()


async def use(tools: Mapping[str, Any], name: str, **arguments: Any) -> ToolResult:
    result: ToolResult = await tools[name].call(arguments)
    return result


async def test_diagnostics_come_from_pylsp_and_follow_the_file(tmp_path: Path) -> None:
    source = tmp_path / "bad.py"
    source.write_text(SOURCE)
    with trio.fail_after(DEADLINE):
        async with running(spec(tmp_path)) as (server, tools):
            found = await use(tools, "lsp_diagnostics", file="bad.py")
            assert not found.is_error, found.output
            lines = found.output.splitlines()
            assert lines[0] == "Diagnostics for bad.py:"
            assert "- [Error] Line 10, Col 1: undefined name 'undefined_name' (pyflakes)" in lines
            assert "- [Warning] Line 1, Col 1: 'os' imported but unused (pyflakes)" in lines
            # The file changes on disk: the next call sends the new text (didChange).
            source.write_text(SOURCE.replace("undefined_name\n", "greet(os.sep)\n"))
            again = await use(tools, "lsp_diagnostics", file=str(source))
            assert again.output == f"No diagnostics for {source}"
            assert server.documents[source.as_uri()].version == 2
            assert server.starts == 1


async def test_definition_hover_references_and_symbols(tmp_path: Path) -> None:
    (tmp_path / "mod.py").write_text(SOURCE)
    where = tmp_path / "mod.py"
    with trio.fail_after(DEADLINE):
        async with running(spec(tmp_path)) as (_, tools):
            info = await use(tools, "lsp_workspace")
            assert f"- Root: {tmp_path}" in info.output
            assert "- Server: pylsp" in info.output and "- Hover: Yes" in info.output
            definition = await use(tools, "lsp_definition", file="mod.py", line=9, character=1)
            assert definition.output == f"Found 1 location(s):\n- {where}:4:5"
            hover = await use(tools, "lsp_hover", file="mod.py", line=9, character=2)
            assert "greet(name)" in hover.output and "Say hello." in hover.output
            refs = await use(tools, "lsp_references", file="mod.py", line=4, character=5)
            assert refs.output.splitlines()[1:] == [f"- {where}:4:5", f"- {where}:9:1"]
            symbols = await use(tools, "lsp_document_symbols", file="mod.py")
            assert f"- Function greet ({where}:4)" in symbols.output.splitlines()
            nothing = await use(tools, "lsp_hover", file="mod.py", line=2, character=1)
            assert nothing.output == "No information available at this position"


async def test_rename_writes_the_files_and_resyncs_them(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text(SOURCE)
    with trio.fail_after(DEADLINE):
        async with running(spec(tmp_path)) as (server, tools):
            renamed = await use(
                tools, "lsp_rename", file="mod.py", line=4, character=5, new_name="hello"
            )
            assert renamed.output.startswith("Renamed to 'hello'\nModified 1 file(s):\n")
            assert source.read_text() == SOURCE.replace("greet", "hello")
            assert server.documents[source.as_uri()].text == source.read_text()


async def test_files_outside_the_working_directory_or_of_other_types_are_refused(
    tmp_path: Path,
) -> None:
    inside = tmp_path / "work"
    inside.mkdir()
    (tmp_path / "secret.py").write_text("TOKEN = 1\n")
    (inside / "notes.txt").write_text("hi\n")
    (inside / "link.py").symlink_to(tmp_path / "secret.py")
    # No process is started for refused arguments: the command does not even exist.
    async with running(spec(inside, "/nonexistent/lsp")) as (server, tools):
        for file in ("../secret.py", str(tmp_path / "secret.py"), "link.py"):
            refused = await use(tools, "lsp_hover", file=file, line=1, character=1)
            assert refused.is_error and "outside the working directory" in refused.output
        other = await use(tools, "lsp_diagnostics", file="notes.txt")
        assert other.is_error and "does not handle .txt files" in other.output
        bad = await use(tools, "lsp_hover", file="x.py", line=0, character=1)
        assert bad.is_error and bad.output == "line must be at least 1 (positions are 1-based)"
        assert server.starts == 0


async def test_a_server_that_cannot_start_is_an_error_result(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")
    with trio.fail_after(DEADLINE):
        async with running(spec(tmp_path, sys.executable, str(FAKE), "exit-at-start")) as (
            _,
            tools,
        ):
            failed = await use(tools, "lsp_hover", file="a.py", line=1, character=1)
        assert failed.is_error
        assert "failed to start" in failed.output
        assert "exit status 3" in failed.output and "no workspace here" in failed.output
        async with running(spec(tmp_path, "/nonexistent/lsp")) as (_, tools):
            missing = await use(tools, "lsp_workspace")
        assert missing.is_error and "could not start" in missing.output


async def test_a_crash_fails_the_call_promptly_and_the_next_call_restarts_it(
    tmp_path: Path,
) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")
    crashing = spec(tmp_path, sys.executable, str(FAKE), "crash-on-hover")
    with trio.fail_after(DEADLINE):
        async with running(crashing) as (server, tools):
            first_pid = None
            info = await use(tools, "lsp_workspace")
            assert "- Server: fake-crash-on-hover 0.1" in info.output
            first_pid = server.pid
            with trio.fail_after(slow(5)):  # real clock: promptly, not after a timeout
                crashed = await use(tools, "lsp_hover", file="a.py", line=1, character=1)
            assert crashed.is_error
            assert "stopped (exit status 7); stderr: boom" in crashed.output
            assert "The next lsp tool call starts it again" in crashed.output
            assert first_pid is not None and not alive(first_pid)
            again = await use(tools, "lsp_workspace")
            assert not again.is_error and server.starts == 2 and server.pid != first_pid


async def test_a_server_that_never_answers_initialize_is_an_error_result(tmp_path: Path) -> None:
    silent = spec(tmp_path, sys.executable, str(FAKE), "silent", start_timeout=slow(2))
    with trio.fail_after(DEADLINE):
        async with running(silent) as (server, tools):
            failed = await use(tools, "lsp_workspace")
            assert failed.is_error and f"within {slow(2):g} seconds" in failed.output
            pid = server.pid
    assert pid is not None and not alive(pid)


async def test_a_server_ignoring_shutdown_and_sigterm_is_killed_on_close(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")
    stubborn = spec(tmp_path, sys.executable, str(FAKE), "stubborn")
    with trio.fail_after(DEADLINE):
        async with running(stubborn) as (_, tools):
            said = await use(tools, "lsp_hover", file="a.py", line=1, character=1)
            pid = int(said.output.removeprefix("pid "))
            assert alive(pid)
    assert not alive(pid)


def test_the_options_are_checked(tmp_path: Path) -> None:
    ctx = ToolContext(working_dir=tmp_path, env={"HOME": "/h", "OPENAI_API_KEY": "sk", "X": "1"})
    with pytest.raises(ToolsetError, match="requires a command"):
        lsp_spec({}, ctx)
    with pytest.raises(ToolsetError, match="file_types must be a list"):
        lsp_spec({"command": "gopls", "file_types": ".go"}, ctx)
    with pytest.raises(ToolsetError, match="timeout must be"):
        lsp_spec({"command": "gopls", "timeout": 0}, ctx)
    made = lsp_spec(
        {"command": "gopls", "file_types": ["GO", ".mod"], "env": {"Y": "${env.X}"}}, ctx
    )
    assert made.file_types == (".go", ".mod")
    assert made.env["Y"] == "1" and made.env["HOME"] == "/h"
    assert "OPENAI_API_KEY" not in made.env  # tool processes never get the server's secrets


def test_the_tools_are_docker_agents(tmp_path: Path) -> None:
    tools = lsp_tools(LspServer(spec(tmp_path), None))
    assert [t.spec.name for t in tools] == [
        "lsp_workspace", "lsp_hover", "lsp_definition", "lsp_references",
        "lsp_document_symbols", "lsp_workspace_symbols", "lsp_diagnostics", "lsp_rename",
        "lsp_code_actions", "lsp_format", "lsp_call_hierarchy", "lsp_type_hierarchy",
        "lsp_implementations", "lsp_signature_help", "lsp_inlay_hints",
    ]  # fmt: skip
    writers = {t.spec.name for t in tools if not t.annotations.read_only}
    assert writers == {"lsp_rename", "lsp_format"}
    by_name = {t.spec.name: t.spec.parameters for t in tools}
    assert by_name["lsp_references"]["required"] == ["file", "line", "character"]
    assert "include_declaration" in by_name["lsp_references"]["properties"]
    assert by_name["lsp_rename"]["required"] == ["file", "line", "character", "new_name"]
    assert by_name["lsp_code_actions"]["required"] == ["file", "start_line"]
    assert by_name["lsp_inlay_hints"]["required"] == ["file"]
    assert "required" not in by_name["lsp_workspace"]
    assert {t.category for t in tools} == {"lsp"}


# --- in a runtime ----------------------------------------------------------------------------


def agent_yaml(*argv: str) -> str:
    command, *args = argv
    quoted = ", ".join(f'"{a}"' for a in args)
    return (
        "agents:\n"
        "  root:\n"
        "    model: openai/main\n"
        "    toolsets:\n"
        "      - type: lsp\n"
        f"        command: {command}\n"
        f"        args: [{quoted}]\n"
        "        file_types: [.py]\n"
    )


def responses(events: list[Event]) -> dict[str, str]:
    return {e.tool_call_id: e.response for e in events if isinstance(e, ToolCallResponse)}


@asynccontextmanager
async def served(
    provider: FakeProvider, yaml_text: str, workdir: Path
) -> AsyncIterator[LocalRuntime]:
    settings = McpSettings(start_timeout=slow(30), call_timeout=slow(30))
    runtime = make_runtime(
        provider, yaml_text, tool_context=ToolContext(working_dir=workdir, mcp=settings)
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.serve)
        yield runtime
        nursery.cancel_scope.cancel()
    await runtime.aclose()


async def test_in_a_runtime_the_server_lives_with_it_and_is_gone_after(tmp_path: Path) -> None:
    (tmp_path / "mod.py").write_text(SOURCE)
    where = tmp_path / "mod.py"
    provider = FakeProvider(
        tool_step(call("lsp_definition", {"file": "mod.py", "line": 9, "character": 1}, "c1")),
        tool_step(call("lsp_diagnostics", {"file": "mod.py"}, "c2")),
        text("ok"),
    )
    with trio.fail_after(DEADLINE):
        async with served(provider, agent_yaml(*PYLSP), tmp_path) as runtime:
            io = start(FakeIO(), "where is greet?")
            await runtime.run_stream(io)
            got = responses(io.events)
            assert got["c1"] == f"Found 1 location(s):\n- {where}:4:5"
            assert "undefined name 'undefined_name'" in got["c2"]
            offered = [tool.name for tool in provider.requests[0].tools]
            assert offered[0] == "lsp_workspace" and len(offered) == 15
            hover = runtime.tools_of().tools["lsp_hover"]
            pid = hover.backends[0].server.pid  # type: ignore[attr-defined]
            assert pid is not None and alive(pid)
    assert not alive(pid)


async def test_in_a_runtime_a_stubborn_server_is_killed_at_close(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")
    provider = FakeProvider(
        tool_step(call("lsp_hover", {"file": "a.py", "line": 1, "character": 1}, "c1")),
        text("ok"),
    )
    yaml_text = agent_yaml(sys.executable, str(FAKE), "stubborn")
    with trio.fail_after(DEADLINE):
        async with served(provider, yaml_text, tmp_path) as runtime:
            io = start(FakeIO(), "hover")
            await runtime.run_stream(io)
            pid = int(responses(io.events)["c1"].removeprefix("pid "))
            assert alive(pid)
    assert not alive(pid)


async def test_two_lsp_toolsets_share_one_set_of_tools_routed_by_file_type(
    tmp_path: Path,
) -> None:
    (tmp_path / "mod.py").write_text(SOURCE)
    (tmp_path / "a.fake").write_text("anything\n")
    provider = FakeProvider(
        tool_step(
            call("lsp_definition", {"file": "mod.py", "line": 9, "character": 1}, "c1"),
            call("lsp_hover", {"file": "a.fake", "line": 1, "character": 1}, "c2"),
            call("lsp_hover", {"file": "main.rs", "line": 1, "character": 1}, "c3"),
            call("lsp_workspace", {}, "c4"),
        ),
        text("ok"),
    )
    fake = agent_yaml(sys.executable, str(FAKE), "stubborn").split("      - type: lsp\n")[1]
    yaml_text = agent_yaml(*PYLSP) + "      - type: lsp\n" + fake.replace("[.py]", "[.fake]")
    with trio.fail_after(DEADLINE):
        async with served(provider, yaml_text, tmp_path) as runtime:
            io = start(FakeIO(), "go")
            await runtime.run_stream(io)
            got = responses(io.events)
            assert len(provider.requests[0].tools) == 15
            assert got["c1"] == f"Found 1 location(s):\n- {tmp_path / 'mod.py'}:4:5"
            fake_pid = int(got["c2"].removeprefix("pid "))
            assert got["c3"] == "no LSP server configured for file: main.rs"
            pylsp_part, fake_part = got["c4"].split("\n---\n")
            assert "- Server: pylsp" in pylsp_part and "- File types: .py" in pylsp_part
            assert "- Server: fake-stubborn 0.1" in fake_part
            backends = runtime.tools_of().tools["lsp_hover"].backends  # type: ignore[attr-defined]
            pylsp_pid = backends[0].server.pid
            assert alive(fake_pid) and alive(pylsp_pid)
    assert not alive(fake_pid) and not alive(pylsp_pid)


async def test_a_rename_that_reaches_outside_the_working_directory_writes_nothing(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.py").write_text("x = 1\n")
    (tmp_path / "outside.py").write_text("x = 1\n")
    evil = spec(work, sys.executable, str(FAKE), "evil-rename")
    with trio.fail_after(DEADLINE):
        async with running(evil) as (_, tools):
            refused = await use(tools, "lsp_rename", file="a.py", line=1, character=1, new_name="y")
    assert refused.is_error and "outside the working directory" in refused.output
    assert (work / "a.py").read_text() == "x = 1\n"
    assert (tmp_path / "outside.py").read_text() == "x = 1\n"
