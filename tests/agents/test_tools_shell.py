"""The shell toolset with real subprocesses.

Killing is checked by pid: a command starts a grandchild that writes its pid to a file; after a
timeout or a cancelled call the grandchild must be gone (or a zombie waiting for its reaper).
Real processes need the real clock: every wait here is bounded by ``trio.fail_after``, and
the polls for a process to die are marked "real clock".
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import trio

from greenroom.agents import ToolContext, ToolsetConfig
from greenroom.agents.tools import build_tools

pytestmark = pytest.mark.slow


OPEN: list[Any] = []


@pytest.fixture(autouse=True)
def close_toolsets():
    yield
    while OPEN:
        OPEN.pop().close()


def shell_tools(root: Path, **options: Any) -> dict[str, Any]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "FROM_SERVER": "server",
        "SHELL": "/bin/sh",
    }
    ctx = ToolContext(working_dir=root, env=env)
    toolset = build_tools([ToolsetConfig("shell", options)], ctx)
    OPEN.append(toolset)
    return toolset.tools


async def run(tools: dict[str, Any], name: str, **args: Any):
    with trio.fail_after(20):
        return await tools[name].call(args)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


async def poll(check: Any) -> None:
    """Wait until ``check()`` (sync or async) is true, polling on the real clock."""
    with trio.fail_after(5):
        while True:
            result = check()
            if not isinstance(result, bool):
                result = await result
            if result:
                return
            await trio.sleep(0.05)  # real clock: another process is getting there


async def wait_dead(pid: int) -> None:
    await poll(lambda: not alive(pid))


def pid_in(path: Path) -> int:
    text = path.read_text() if path.exists() else ""
    return int(text) if text.strip() else 0


async def read_pid(path: Path) -> int:
    await poll(lambda: pid_in(path) > 0)
    return pid_in(path)


async def test_output_exit_status_and_working_directory(tmp_path: Path) -> None:
    tools = shell_tools(tmp_path)
    assert (await run(tools, "shell", cmd="echo hi; echo err >&2")).output == "hi\nerr"
    assert (await run(tools, "shell", cmd="pwd")).output == str(tmp_path)
    (tmp_path / "sub").mkdir()
    assert (await run(tools, "shell", cmd="pwd", cwd="sub")).output == str(tmp_path / "sub")
    failed = await run(tools, "shell", cmd="echo out; exit 3")
    assert (failed.output, failed.is_error) == (
        "Error executing command: exit status 3\nOutput: out",
        False,
    )
    assert (await run(tools, "shell", cmd="true")).output == "<no output>"
    empty = await run(tools, "shell", cmd="  ")
    assert (empty.output, empty.is_error) == ("Error: empty command", True)


async def test_output_is_capped(tmp_path: Path) -> None:
    result = await run(shell_tools(tmp_path), "shell", cmd="head -c 40000 /dev/zero | tr '\\0' a")
    assert result.output == "a" * 30000 + "\n\n[Output truncated: exceeded 30,000 character limit]"


async def test_env_overrides_the_server_environment(tmp_path: Path) -> None:
    tools = shell_tools(tmp_path, env={"FROM_SERVER": "toolset", "DERIVED": "${env.FROM_SERVER}-x"})
    assert (
        await run(tools, "shell", cmd='echo "$FROM_SERVER $DERIVED"')
    ).output == "toolset server-x"


async def test_timeout_kills_the_whole_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    tools = shell_tools(tmp_path)
    cmd = f"sh -c 'sleep 60 & echo $! > {pidfile}; wait' ; echo never"
    start = trio.current_time()
    result = await run(tools, "shell", cmd=f"echo started; {cmd}", timeout=1)
    assert trio.current_time() - start < 5
    assert result.output == "Command timed out after 1s\nOutput: started"
    await wait_dead(await read_pid(pidfile))


async def test_cancelled_call_kills_the_grandchild_and_returns_at_once(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    tools = shell_tools(tmp_path)
    cmd = f"sh -c 'sleep 60 & echo $! > {pidfile}; wait'"
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:

            async def call() -> None:
                await tools["shell"].call({"cmd": cmd, "timeout": 120})

            nursery.start_soon(call)
            pid = await read_pid(pidfile)
            cancelled_at = trio.current_time()
            scope.cancel()
    assert trio.current_time() - cancelled_at < 1
    await wait_dead(pid)


async def test_background_job_lifecycle(tmp_path: Path) -> None:
    tools = shell_tools(tmp_path)
    started = await run(tools, "run_background_job", cmd="echo ready; sleep 60")
    first = started.output.splitlines()[0]
    job_id = first.removeprefix("Background job started with ID: ")
    assert started.output.splitlines()[1:] == [
        "Command: echo ready; sleep 60",
        "Working directory: ",
    ]

    async def ready() -> bool:
        view = await run(tools, "view_background_job", job_id=job_id)
        return bool(view.output.endswith("--- Output ---\nready\n"))

    await poll(ready)
    view = (await run(tools, "view_background_job", job_id=job_id)).output
    assert view.startswith(f"Job ID: {job_id}\nCommand: echo ready; sleep 60\nStatus: running\n")
    assert view.endswith("\n--- Output ---\nready\n")
    listing = (await run(tools, "list_background_jobs")).output
    assert listing.startswith(
        f"Background Jobs:\n\nID: {job_id}\n  Command: echo ready; sleep 60\n"
    )
    stopped = await run(tools, "stop_background_job", job_id=job_id)
    assert stopped.output == f"Job {job_id} stopped successfully"
    again = await run(tools, "stop_background_job", job_id=job_id)
    assert (again.output, again.is_error) == (
        f"Job {job_id} is not running (current status: stopped)",
        True,
    )
    unknown = await run(tools, "view_background_job", job_id="job_0_9")
    assert (unknown.output, unknown.is_error) == ("Job not found: job_0_9", True)


async def test_finished_job_reports_exit_code_and_close_kills_running_jobs(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    toolset = build_tools(
        [ToolsetConfig("shell")],
        ToolContext(working_dir=tmp_path, env={"PATH": os.environ["PATH"]}),
    )
    tools = toolset.tools
    done = await run(tools, "run_background_job", cmd="exit 4")
    done_id = done.output.splitlines()[0].rsplit(" ", 1)[1]

    async def failed() -> bool:
        view = await run(tools, "view_background_job", job_id=done_id)
        return "Status: failed" in view.output

    await poll(failed)
    assert "Exit Code: 4\n" in (await run(tools, "view_background_job", job_id=done_id)).output
    await run(tools, "run_background_job", cmd=f"sh -c 'sleep 60 & echo $! > {pidfile}; wait'")
    pid = await read_pid(pidfile)
    toolset.close()
    await wait_dead(pid)


def test_annotations(tmp_path: Path) -> None:
    tools = shell_tools(tmp_path)
    assert [name for name, t in tools.items() if t.annotations.read_only] == [
        "list_background_jobs",
        "view_background_job",
    ]
