"""Max-iterations continuation end to end: ``greenroom serve`` with a scripted agent whose
``max_iterations`` is 2, over HTTP (SSE + ``/resume``).

The turn stops at the limit with ``max_iterations_reached`` and waits; an approval lets it make
more model calls, a rejection ends it with docker-agent's note. Live server, real clock: every
wait is bounded by ``trio.fail_after``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from greenroom.serve import ServeConfig, serve

pytestmark = pytest.mark.slow
DEADLINE = 30


def think(call_id: str) -> list[dict[str, Any]]:
    return [{"tool_call": {"name": "think", "id": call_id, "arguments": {"thought": call_id}}}]


@asynccontextmanager
async def serving(tmp_path: Path, turns: list[Any]) -> AsyncIterator[httpx.AsyncClient]:
    (tmp_path / "script.json").write_text(json.dumps({"turns": turns}))
    agent = tmp_path / "agent.yaml"
    agent.write_text(
        "agents:\n  root:\n    model: scripted/script.json\n    max_iterations: 2\n"
        "    toolsets:\n      - type: think\n"
    )
    async with trio.open_nursery() as nursery:
        cfg = ServeConfig(
            agent_paths=(str(agent),), port=0, db=str(tmp_path / "db.sqlite3"),
            data_dir=str(tmp_path / "data"), graceful_timeout=1,
        )  # fmt: skip
        url: str = await nursery.start(serve, cfg)
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            yield client
        nursery.cancel_scope.cancel()


async def run_turn(client: httpx.AsyncClient, sid: str, answer: str) -> list[dict[str, Any]]:
    """Run a turn over SSE, answering each ``max_iterations_reached`` with ``answer``."""
    events: list[dict[str, Any]] = []
    body = {"messages": [{"role": "user", "content": "go"}]}
    async with client.stream("POST", f"/api/sessions/{sid}/agent/agent", json=body) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            events.append(event)
            if event["type"] == "max_iterations_reached":
                r = await client.post(f"/api/sessions/{sid}/resume", json={"confirmation": answer})
                assert r.status_code == 200, r.text
    return events


def kinds(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == kind]


async def test_max_iterations_waits_for_resume_approve_continues_reject_stops(
    tmp_path: Path,
) -> None:
    turns = [think("a"), think("b"), think("c"), "done", think("d"), think("e"), "never"]
    async with serving(tmp_path, turns) as client:
        created = await client.post("/api/sessions", json={"title": "limits"})
        sid = str(created.json()["id"])
        with trio.fail_after(DEADLINE):
            approved = await run_turn(client, sid, "approve")
        (reached,) = kinds(approved, "max_iterations_reached")
        assert (reached["max_iterations"], reached["session_id"]) == (2, sid)
        assert [e["tool_call_id"] for e in kinds(approved, "tool_call_response")] == ["a", "b", "c"]
        assert "".join(e["content"] for e in kinds(approved, "agent_choice")) == "done"
        assert approved[-1] == {**approved[-1], "type": "stream_stopped", "reason": "normal"}

        with trio.fail_after(DEADLINE):
            rejected = await run_turn(client, sid, "reject")
        assert len(kinds(rejected, "max_iterations_reached")) == 1
        assert [e["tool_call_id"] for e in kinds(rejected, "tool_call_response")] == ["d", "e"]
        note = "Execution stopped after reaching the configured max_iterations limit (2)."
        assert "".join(e["content"] for e in kinds(rejected, "agent_choice")) == note
        assert rejected[-1]["reason"] == "normal"

        session = (await client.get(f"/api/sessions/{sid}")).json()
        assert session["messages"][-1]["message"]["content"] == note
