"""A slow MCP start-up never blocks the session's mailbox (real server, real clock).

The test server waits on a FIFO before it serves, so the test decides when the start ends.
Meanwhile the session answers status (``building``) and steer; a delete stops the server (its
process is gone) and answers the waiting run.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from greenroom.actors import Registry, open_registry
from greenroom.agents import AgentSources, LocalRuntimeFactory, QueuedMessage
from greenroom.domain import Session
from greenroom.errors import GreenroomError, SessionNotFound, SessionNotRunning
from greenroom.persistence import open_memory_store
from tests.fakes import drain, user
from tests.mcp.support import QUICK, SERVER, alive, until
from tests.slowness import slow

pytestmark = pytest.mark.slow
DEADLINE = slow(60)


def write_agent(tmp_path: Path, fifo: Path, record: Path) -> Path:
    (tmp_path / "script.json").write_text(json.dumps({"turns": ["started at last"]}))
    agent = tmp_path / "slow.yaml"
    args = ", ".join(f'"{a}"' for a in (SERVER, "--wait-fifo", fifo, "--record", record))
    agent.write_text(
        "agents:\n"
        "  root:\n"
        "    model: scripted/script.json\n"
        "    toolsets:\n"
        "      - type: mcp\n"
        f"        command: {sys.executable}\n"
        f"        args: [{args}]\n"
    )
    return agent


@asynccontextmanager
async def slow_session(tmp_path: Path) -> AsyncIterator[tuple[Registry, str, Path, Path]]:
    fifo, record = tmp_path / "gate", tmp_path / "record.jsonl"
    os.mkfifo(fifo)
    sources = AgentSources.from_paths((str(write_agent(tmp_path, fifo, record)),))
    factory = LocalRuntimeFactory(sources, env={}, data_dir=tmp_path / "data", mcp=QUICK)
    async with open_memory_store() as store, open_registry(store, factory) as registry:
        session = await registry.create(Session.new(working_dir=str(tmp_path)))
        yield registry, session.id, fifo, record


async def start_run(registry: Registry, sid: str, nursery: trio.Nursery) -> list[object]:
    outcome: list[object] = []

    async def run() -> None:
        try:
            outcome.append(await registry.session(sid).run("slow", (user("hi"),)))
        except GreenroomError as exc:
            outcome.append(exc)

    nursery.start_soon(run)
    return outcome


def server_pid(record: Path) -> int:
    return int(json.loads(record.read_text().splitlines()[0])["pid"])


async def test_status_and_steer_answer_and_delete_stops_the_starting_server(
    tmp_path: Path,
) -> None:
    with trio.fail_after(DEADLINE):
        async with slow_session(tmp_path) as (registry, sid, _, record):
            handle = registry.session(sid)
            async with trio.open_nursery() as nursery:
                outcome = await start_run(registry, sid, nursery)
                await until(lambda: record.exists() and bool(record.read_text()))
                pid = server_pid(record)
                assert (await handle.status()).building is True
                with pytest.raises(SessionNotRunning):
                    await handle.steer((QueuedMessage("hurry up"),))
                await registry.delete(sid)
                await registry.wait_stopped(sid)
            assert isinstance(outcome[0], SessionNotFound)
            assert not alive(pid)


async def test_the_run_goes_on_once_the_server_is_up(tmp_path: Path) -> None:
    with trio.fail_after(DEADLINE):
        async with slow_session(tmp_path) as (registry, sid, fifo, record):
            handle = registry.session(sid)
            async with trio.open_nursery() as nursery:
                outcome = await start_run(registry, sid, nursery)
                await until(lambda: record.exists() and bool(record.read_text()))
                assert outcome == []
                assert (await handle.status()).building is True
                writer = await trio.to_thread.run_sync(os.open, fifo, os.O_WRONLY)
                os.close(writer)  # the server reads EOF and starts serving
                await until(lambda: bool(outcome))
                entries = await drain(outcome[0])
            types = [json.loads(entry.data)["type"] for entry in entries]
            assert "mcp_init_finished" in types and "agent_choice" in types, types
            assert (await handle.status()).building is False
