"""No tool process outlives the server (issue 23): ``kill -9`` of a real ``greenroom serve``
during a tool call, then restart on the same file.

- The watchdog: the server alone dies; its watchdog kills the tool's process group at once.
- The records: the server and its watchdog both die (as when a whole cgroup is killed); the
  tool's group keeps running, and the restarted server kills it before it lists the call as in
  doubt, and says so in its start-up summary.

Either way no process of the tool's group is left within 10 seconds. Real clock (separate
processes); every wait is bounded.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
from pathlib import Path

import pytest
import trio

from greenroom.agents.tools._watchdog import MARKER
from tests.crash_support import (
    Server,
    ServerFiles,
    SlowModel,
    client,
    fake_model,
    servers,
    side_effect_lines,
    start_server,
    user,
)
from tests.slowness import slow

pytestmark = pytest.mark.slow
GONE_WITHIN = 10.0


def processes() -> list[tuple[int, int, int]]:
    """(pid, ppid, pgid) of every process on the machine (zombies left out)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != b"Z":
            found.append((int(entry), int(fields[1]), int(fields[2])))
    return found


def cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def children(server: Server) -> tuple[set[int], int | None]:
    """The server's tool process groups and its watchdog's pid."""
    groups, watchdog = set(), None
    for pid, ppid, pgid in processes():
        if ppid != server.pid or pgid != pid:
            continue
        if MARKER.encode() in cmdline(pid):
            watchdog = pid
        else:
            groups.add(pgid)
    return groups, watchdog


def members(groups: set[int]) -> list[int]:
    return [pid for pid, _, pgid in processes() if pgid in groups]


async def until_gone(groups: set[int]) -> None:
    for _ in range(int(GONE_WITHIN / 0.05)):
        if not members(groups):
            break
        await trio.sleep(0.05)  # real clock: other processes
    assert members(groups) == [], f"tool processes left: {members(groups)}"


async def until_recorded(files: ServerFiles, groups: set[int]) -> None:
    """Wait until the store holds a record of each group (spawn records a group right after
    starting it: a crash in between leaves only the watchdog to end it)."""
    with trio.fail_after(slow(30)):
        while True:
            with contextlib.closing(sqlite3.connect(files.db)) as db:
                recorded = {pgid for (pgid,) in db.execute("SELECT pgid FROM tool_processes")}
            if groups <= recorded:
                return
            await trio.sleep(0.05)  # real clock: another process writes it


async def crash_during_a_tool_call(files: ServerFiles, started: list[Server]) -> Server:
    """Start a server, a turn whose tool waits on the hold file; returns once the tool runs."""
    server = await start_server(files)
    started.append(server)
    async with client(server) as http:
        response = await http.post("/api/sessions", json={"safety_policy": "autonomous"})
        session_id = response.json()["id"]
        path = f"/api/sessions/{session_id}/agent/crash?on_disconnect=continue"
        async with http.stream("POST", path, json=user("go")) as response:
            assert response.status_code == 200
        with trio.fail_after(30):
            for _ in range(600):
                if side_effect_lines(files.side_effects):
                    break
                await trio.sleep(0.05)  # real clock: until the tool has started
    return server


@pytest.fixture
def cleanup():
    left: set[int] = set()
    yield left
    for pgid in left:  # whatever a failed test left behind
        with contextlib.suppress(OSError):
            os.killpg(pgid, signal.SIGKILL)


async def test_the_watchdog_kills_the_tool_group_when_the_server_dies(
    tmp_path: Path, cleanup: set[int]
) -> None:
    model = SlowModel(tokens=2, delay=0.0, tool_sleep=0.0)
    async with fake_model(model) as fake, servers() as started:
        files = ServerFiles(tmp_path, fake.url)
        files.hold.touch()  # the tool waits (up to two minutes) while the file exists
        server = await crash_during_a_tool_call(files, started)
        groups, watchdog = children(server)
        cleanup |= groups
        assert groups and watchdog is not None
        assert members(groups)
        await server.kill()
        await until_gone(groups)
        for _ in range(200):  # the watchdog exits once it has killed (real clock)
            if watchdog not in {pid for pid, _, _ in processes()}:
                break
            await trio.sleep(0.05)  # real clock: another process
        assert watchdog not in {pid for pid, _, _ in processes()}
        restarted = await start_server(files)
        started.append(restarted)
        assert restarted.recovered == (1, 1)
        assert restarted.groups_killed == 0  # nothing was left to kill
        assert await restarted.stop() == 0


async def test_a_restart_kills_the_group_a_crash_left_running(
    tmp_path: Path, cleanup: set[int]
) -> None:
    model = SlowModel(tokens=2, delay=0.0, tool_sleep=0.0)
    async with fake_model(model) as fake, servers() as started:
        files = ServerFiles(tmp_path, fake.url)
        files.hold.touch()
        server = await crash_during_a_tool_call(files, started)
        groups, watchdog = children(server)
        cleanup |= groups
        assert groups and watchdog is not None
        await until_recorded(files, groups)  # the record is written just after the start
        os.kill(watchdog, signal.SIGKILL)  # both die: nothing kills the tool's group
        await server.kill()
        await trio.sleep(0.2)  # real clock: give a (wrong) kill the time to land
        assert members(groups), "the tool's group should have outlived the server"
        with trio.fail_after(GONE_WITHIN + 60):  # start-up itself takes seconds
            restarted = await start_server(files)
        started.append(restarted)
        await until_gone(groups)
        assert restarted.recovered == (1, 1)
        assert restarted.groups_killed == len(groups)
        assert await restarted.stop() == 0
