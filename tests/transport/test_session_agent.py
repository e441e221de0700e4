"""The session's agent is part of the session (decision 0019).

The first run stores the agent file and agent name; GET, the snapshot and the listing return
them; a run naming another agent is refused with 409 ``agent_mismatch`` naming both, over REST
and over the WebSocket alike, also after a restart (SQLite) when no runtime is built yet.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio
from trio_websocket import open_websocket_url

from greenroom.client import ApiError
from greenroom.testing import Greenroom, ScriptedAgent, open_greenroom

SHELL = ScriptedAgent(turns=["shell here"], loop=True, name="root")
TODO = ScriptedAgent(turns=["todo here"], loop=True, name="root")
AGENTS = {"shell": SHELL, "todo": TODO}


async def _turn(gr: Greenroom, sid: str, text: str, agent: str, name: str = "") -> list[str]:
    client = gr.client
    snap = await client.snapshot(sid)
    async with client.events(sid, snap["last_event_seq"]) as events:
        await client.run(sid, text, agent=agent, agent_name=name)
        seen = await events.until("stream_stopped")
    return ["".join(e["content"] for e in seen if e.type == "agent_choice")]


async def test_the_first_run_stores_the_agent_and_another_is_refused(
    autojump_clock: trio.abc.Clock,
) -> None:
    with trio.fail_after(30):
        async with open_greenroom(agents=AGENTS) as gr:
            sid = (await gr.client.create_session(title="t"))["id"]
            got = await gr.client.session(sid)
            assert (got["agent_file"], got["agent_name"]) == ("", "")
            assert await _turn(gr, sid, "hi", "shell") == ["shell here"]
            got = await gr.client.session(sid)
            assert (got["agent_file"], got["agent_name"]) == ("shell", "root")
            snap = await gr.client.snapshot(sid)
            assert (snap["agent_file"], snap["agent_name"]) == ("shell", "root")
            [listed] = await gr.client.sessions()
            assert (listed["agent_file"], listed["agent_name"]) == ("shell", "root")

            with pytest.raises(ApiError) as refused:
                await gr.client.run(sid, "now todo", agent="todo")
            assert (refused.value.status, refused.value.code) == (409, "agent_mismatch")
            assert '"shell/root"' in refused.value.message
            assert '"todo"' in refused.value.message
            # Nothing of the refused run was stored.
            assert len((await gr.client.session(sid))["messages"]) == 2
            assert await _turn(gr, sid, "again", "shell") == ["shell here"]

            # A fork runs the parent's agent.
            fork = await gr.client.fork(sid, 1)
            assert (fork["agent_file"], fork["agent_name"]) == ("shell", "root")


async def test_another_agent_name_of_the_same_file_is_refused(
    autojump_clock: trio.abc.Clock,
) -> None:
    with trio.fail_after(30):
        async with open_greenroom(agents=AGENTS) as gr:
            sid = (await gr.client.create_session(title="t"))["id"]
            await _turn(gr, sid, "hi", "shell")
            assert await _turn(gr, sid, "x", "shell", "root") == ["shell here"]  # the same
            with pytest.raises(ApiError) as refused:
                await gr.client.run(sid, "x", agent="todo", agent_name="root")
            assert refused.value.code == "agent_mismatch"


async def test_the_agent_survives_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "gr.sqlite3"
    with trio.fail_after(60):
        async with open_greenroom(agents=AGENTS, store="sqlite", db_path=db) as gr:
            sid = (await gr.client.create_session(title="t"))["id"]
            assert await _turn(gr, sid, "hi", "todo") == ["todo here"]
        async with open_greenroom(agents=AGENTS, store="sqlite", db_path=db) as gr:
            got = await gr.client.session(sid)
            assert (got["agent_file"], got["agent_name"]) == ("todo", "root")
            # No runtime is built yet: the refusal comes from what the session stored.
            with pytest.raises(ApiError) as refused:
                await gr.client.run(sid, "hi", agent="shell")
            assert refused.value.code == "agent_mismatch"
            assert await _turn(gr, sid, "hi", "todo") == ["todo here"]


async def test_the_websocket_refuses_the_same_way() -> None:
    with trio.fail_after(30):
        async with open_greenroom(agents=AGENTS) as gr:
            sid = (await gr.client.create_session(title="t"))["id"]
            await _turn(gr, sid, "hi", "shell")
            url = gr.url.replace("http://", "ws://", 1) + "/api/ws"
            async with open_websocket_url(url) as ws:
                frame = {
                    "id": "r1",
                    "op": "run",
                    "session_id": sid,
                    "agent": "todo",
                    "messages": [{"role": "user", "content": "x"}],
                }
                await ws.send_message(json.dumps(frame))
                while True:
                    reply = json.loads(await ws.get_message())
                    if reply.get("id") == "r1" and "ok" in reply:
                        break
            assert reply["ok"] is False
            assert (reply["error"]["status"], reply["error"]["code"]) == (409, "agent_mismatch")
