"""Code mode end to end (decision 0032): ``greenroom serve`` with a ``code_mode_tools`` agent
driven by the scripted model over HTTP (SSE + /resume).

The model calls ``run_tools_with_javascript`` with scripts that call the filesystem and shell
tools: each inner call that asks waits for a decision sent by the test (one question per call),
a deny rule refuses without asking and the script sees it thrown, a rejected call never runs,
and the stored history has only the script's call. Live server, real clock: every wait is
bounded by ``trio.fail_after``.
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
from tests.slowness import slow
from tests.test_tools_e2e import new_session, responses, run_turn, tool

pytestmark = pytest.mark.slow
DEADLINE = slow(60)
FIRST = """
const wrote = write_file({path: "notes.txt", content: "hello"});
const shown = shell({cmd: "cat notes.txt"});
console.log("wrote:", wrote);
return {wrote, shown};
"""
SECOND = """
try { shell({cmd: "rm notes.txt"}) } catch (e) { console.error("refused:", e.message) }
write_file({path: "side.txt", content: "no"});
return "not reached";
"""


@asynccontextmanager
async def serving(tmp_path: Path, turns: list[Any]) -> AsyncIterator[httpx.AsyncClient]:
    (tmp_path / "script.json").write_text(json.dumps({"turns": turns}))
    agent = tmp_path / "agent.yaml"
    agent.write_text(
        "agents:\n"
        "  root:\n"
        "    model: scripted/script.json\n"
        "    code_mode_tools: true\n"
        "    toolsets:\n"
        "      - type: filesystem\n"
        "      - type: shell\n"
        "      - type: todo\n"
        "permissions:\n"
        '  deny: ["shell:cmd=rm *"]\n'
    )
    async with trio.open_nursery() as nursery:
        cfg = ServeConfig(
            agent_paths=(str(agent),), port=0, db=str(tmp_path / "db.sqlite3"),
            data_dir=str(tmp_path / "data"), graceful_timeout=1,
        )  # fmt: skip
        url: str = await nursery.start(serve, cfg)
        async with httpx.AsyncClient(base_url=url, timeout=slow(10)) as client:
            yield client
        nursery.cancel_scope.cancel()


async def test_a_script_asks_once_per_call_over_http(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    turns = [
        [tool("run_tools_with_javascript", "c1", script=FIRST),
         tool("write_file", "w0", path="direct.txt", content="x"),
         tool("create_todo", "t1", description="check the notes")],
        [tool("run_tools_with_javascript", "c2", script=SECOND)],
        "All done.",
    ]  # fmt: skip
    async with serving(tmp_path, turns) as client:
        sid = await new_session(client, work)
        asked: list[tuple[str, str]] = []

        async def decide(event: dict[str, Any]) -> None:
            call = event["tool_call"]
            asked.append((call["function"]["name"], call["id"]))
            answer = {
                "write_file": {"confirmation": "approve"},
                "shell": {"confirmation": "approve"},
            }[call["function"]["name"]]
            if len(asked) == 3:  # the second script's write
                answer = {"confirmation": "reject", "reason": "not today"}
            r = await client.post(f"/api/sessions/{sid}/resume", json=answer)
            assert r.status_code == 200, r.text

        with trio.fail_after(DEADLINE):
            events = await run_turn(client, sid, "go", decide)

        # One question per inner call; the deny rule never asked; the outer calls never asked.
        assert [name for name, _ in asked] == ["write_file", "shell", "write_file"]
        assert all(call_id.startswith("js_") for _, call_id in asked)
        got = responses(events)
        first = json.loads(got["c1"])
        value = json.loads(first["value"])
        assert value["wrote"] == "File written successfully: notes.txt (5 bytes)"
        assert "hello" in value["shown"]
        assert first["stdout"] == f"wrote: {value['wrote']}\n"
        assert "tool_calls" not in first
        # The agent's tools are the script's now; todo tools stay the model's own.
        assert got["w0"].startswith("Tool 'write_file' is not available.")
        assert json.loads(got["t1"])["created"]["description"] == "check the notes"

        second = json.loads(got["c2"])
        assert second["value"].startswith("Error: The user rejected the tool call.")
        names = [(c["name"], "error" in c) for c in second["tool_calls"]]
        assert names == [("shell", True), ("write_file", True)]
        assert second["stderr"] == f"refused: {second['tool_calls'][0]['error']}\n"
        assert (work / "notes.txt").read_text() == "hello"  # the denied rm never ran
        assert not (work / "side.txt").exists()  # the rejected write never ran
        assert not (work / "direct.txt").exists()
        assert events[-1]["type"] == "stream_stopped"

        audit = (await client.get(f"/api/sessions/{sid}/approvals")).json()
        assert [(a["tool"], a["decision"], a["tool_call_id"]) for a in audit] == [
            ("write_file", "approve", asked[0][1]),
            ("shell", "approve", asked[1][1]),
            ("write_file", "reject", asked[2][1]),
        ]
        session = (await client.get(f"/api/sessions/{sid}")).json()
        stored = [m["message"] for m in session["messages"] if "message" in m]
        tool_ids = [m["tool_call_id"] for m in stored if m["role"] == "tool"]
        assert sorted(tool_ids) == ["c1", "c2", "t1", "w0"]  # no message for an inner call
