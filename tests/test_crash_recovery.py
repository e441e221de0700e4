"""``kill -9`` of a real ``greenroom serve`` mid-turn, restart on the same file, check invariants.

The crash harness: a pool of 50 sessions, each with an ``/events`` watcher; every cycle decides
the tool calls the last crash left in doubt, deletes and replaces a few sessions, starts 50
turns at once against a slow fake model (on loopback) whose turns call a tool that appends
``<call> <pid>`` to a side-effect file, then kills the server with SIGKILL at a seeded random
moment and restarts it. After each restart it checks:

- every (session, seq, body) a watcher received is in the store with that body, and a watcher
  resuming with its last seq gets exactly the missing events (no gap, no duplicate);
- each session's seqs are exactly 1..head, never reused;
- every acknowledged message (a run answered 200) is in its session's history;
- no turn is left running, and every interrupted turn has its ``turn_interrupted`` event;
- every tool call that ran has an intent, none is left ``started``, every call in doubt has
  its event, and no call ran twice;
- no deleted session reappears; what recovery printed matches what it wrote.

``make test`` runs ``GREENROOM_CRASH_CYCLES`` (default 20) cycles from ``GREENROOM_CRASH_SEED``
(default: random, printed); run more by hand, e.g.
``GREENROOM_CRASH_CYCLES=200 .venv/bin/pytest tests/test_crash_recovery.py -k harness -s``.
Real clock (separate processes); every wait is bounded.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
from pathlib import Path

import attrs
import httpx
import pytest
import trio
from trio_websocket import open_websocket_url

from tests.crash_support import (
    Database,
    Server,
    ServerFiles,
    SlowModel,
    Watcher,
    client,
    fake_model,
    servers,
    side_effect_lines,
    start_server,
    user,
)
from tests.slowness import slow
from tests.transport.support import WSClient, close_transport

pytestmark = pytest.mark.slow

CYCLES = int(os.environ.get("GREENROOM_CRASH_CYCLES", "20"))
SEED = int(os.environ.get("GREENROOM_CRASH_SEED", str(random.randrange(1_000_000))))
SESSIONS = 50
DELETES_PER_CYCLE = 2
CYCLE_BUDGET = slow(90)  # seconds one cycle may take (a busy 2-core machine)


@attrs.define
class Harness:
    files: ServerFiles
    rng: random.Random
    watchers: dict[str, Watcher] = attrs.field(factory=dict)
    acknowledged: dict[str, list[str]] = attrs.field(factory=dict)  # session -> user messages
    deleted: set[str] = attrs.field(factory=set)
    killed_pids: set[int] = attrs.field(factory=set)
    in_doubt: dict[str, list[str]] = attrs.field(factory=dict)  # session -> calls to decide
    heads: dict[str, int] = attrs.field(factory=dict)  # after the last recovery
    known_calls: set[str] = attrs.field(factory=set)  # every tool call id the store has had
    decisions: int = 0

    async def new_session(self, http: httpx.AsyncClient) -> str:
        # Autonomous: the side-effect tool runs without asking (it is not read-only).
        body = {"title": "crash", "safety_policy": "autonomous"}
        response = await http.post("/api/sessions", json=body)
        assert response.status_code == 200, response.text
        session_id: str = response.json()["id"]
        self.watchers[session_id] = Watcher(session_id)
        self.acknowledged[session_id] = []
        return session_id

    async def decide(self, http: httpx.AsyncClient, session_id: str, calls: list[str]) -> None:
        """Refused while in doubt; each call skipped (stored with who decided)."""
        run = await http.post(f"/api/sessions/{session_id}/agent/crash", json=user("refused"))
        assert run.status_code == 409 and run.json()["code"] == "needs_decision", run.text
        path = f"/api/sessions/{session_id}/recovery/decisions"
        listed = (await http.get(path)).json()["in_doubt"]
        assert sorted(c["tool_call_id"] for c in listed) == sorted(calls)
        for call_id in calls:
            body = {"tool_call_id": call_id, "action": "skip", "decided_by": "harness"}
            response = await http.post(path, json=body)
            assert response.status_code == 200, response.text
            self.decisions += 1

    async def run(self, http: httpx.AsyncClient, session_id: str, text: str) -> None:
        path = f"/api/sessions/{session_id}/agent/crash?on_disconnect=continue"
        try:
            async with http.stream("POST", path, json=user(text)) as response:
                if response.status_code == 200:  # acknowledged: the message is stored
                    self.acknowledged[session_id].append(text)
                else:
                    raise AssertionError(f"run refused: {response.status_code}")
        except httpx.TransportError:
            pass  # killed before it answered: not acknowledged


async def test_crash_harness(tmp_path: Path) -> None:
    print(f"crash harness: seed {SEED}, {CYCLES} cycles (GREENROOM_CRASH_SEED to repeat)")
    async with fake_model(SlowModel()) as fake, servers() as started:
        files = ServerFiles(tmp_path, fake.url)
        harness = Harness(files, random.Random(SEED))
        server = await start_server(files)
        started.append(server)
        for cycle in range(CYCLES):
            with trio.fail_after(CYCLE_BUDGET):
                await one_cycle(harness, server, cycle)
                server = await start_server(files)
                started.append(server)
                await trio.to_thread.run_sync(check_store, harness, server)
        with trio.fail_after(CYCLE_BUDGET):
            async with client(server) as http, trio.open_nursery() as nursery:
                await resume_watchers(harness, http, nursery)
                nursery.cancel_scope.cancel()
        assert await server.stop() == 0
    assert harness.killed_pids and harness.decisions > 0  # crashes did land mid-tool


async def resume_watchers(harness: Harness, http: httpx.AsyncClient, nursery: trio.Nursery) -> None:
    """Each watcher resumes with its last seq: it must get exactly what it missed (checked as
    it reads: no gap, no duplicate), up to the head recovery left."""
    for session_id, watcher in harness.watchers.items():
        watcher.expect(harness.heads.get(session_id, 0))
        nursery.start_soon(watcher.watch, http)
    with trio.fail_after(slow(30)):
        for watcher in harness.watchers.values():
            await watcher.caught_up.wait()
    for watcher in harness.watchers.values():
        assert watcher.problems == [], (watcher.session_id, watcher.problems[:5])
    for session_id in harness.deleted:
        response = await http.get(f"/api/sessions/{session_id}")
        assert response.status_code == 404, f"deleted session {session_id} reappeared"


async def one_cycle(harness: Harness, server: Server, cycle: int) -> None:
    rng = harness.rng
    async with client(server) as http, trio.open_nursery() as nursery:
        if not harness.watchers:
            for _ in range(SESSIONS):
                await harness.new_session(http)
        await resume_watchers(harness, http, nursery)
        for session_id, calls in harness.in_doubt.items():
            await harness.decide(http, session_id, calls)
        for session_id in rng.sample(sorted(harness.watchers), DELETES_PER_CYCLE):
            response = await http.delete(f"/api/sessions/{session_id}")
            assert response.status_code == 200, response.text
            harness.deleted.add(session_id)
            del harness.watchers[session_id], harness.acknowledged[session_id]
            new = await harness.new_session(http)
            nursery.start_soon(harness.watchers[new].watch, http)
        async with trio.open_nursery() as runs:
            for n, session_id in enumerate(harness.watchers):
                runs.start_soon(harness.run, http, session_id, f"cycle {cycle} turn {n}")
        await trio.sleep(rng.uniform(0.1, 1.4))  # real clock: the crash lands mid-way
        harness.killed_pids.add(server.pid)
        await server.kill()
        nursery.cancel_scope.cancel()


def check_store(harness: Harness, server: Server) -> None:
    db = Database(harness.files.db)
    try:
        check_database(harness, server, db)
    finally:
        db.close()


def check_database(harness: Harness, server: Server, db: Database) -> None:
    # Every event a subscriber saw is stored with those bytes; seqs are 1..head.
    for session_id, watcher in harness.watchers.items():
        stored = db.events(session_id)
        head = db.head(session_id)
        assert sorted(stored) == list(range(1, head + 1)), f"{session_id}: holes or reuse"
        for seq, body in watcher.received.items():
            assert stored.get(seq) == body, f"{session_id} seq {seq}: seen {body!r}"
        # Every acknowledged message is in the history.
        contents = [m.get("content") for m in db.messages(session_id) if m["role"] == "user"]
        missing = [t for t in harness.acknowledged[session_id] if t not in contents]
        assert not missing, f"{session_id}: acknowledged messages lost: {missing}"
    # No turn is left running; each interrupted one says so in its log.
    assert db.rows("SELECT COUNT(*) FROM turns WHERE state = 'running'")[0][0] == 0
    said = {
        (session_id, body["type"], body.get("turn_id") or body["tool_call"]["id"])
        for session_id, body in (
            (sid, json.loads(b))
            for sid, b in db.rows(
                "SELECT session_id, body FROM events"
                " WHERE type IN ('turn_interrupted', 'tool_call_in_doubt')"
            )
        )
    }
    interrupted = db.rows("SELECT session_id, turn_id FROM turns WHERE state = 'interrupted'")
    for session_id, turn_id in interrupted:
        assert (session_id, "turn_interrupted", turn_id) in said, f"{turn_id}: no event"
    # Tool calls: an intent for everything that ran, none left started, none run twice.
    calls = db.tool_calls()
    assert [c for c, (_, state) in calls.items() if state == "started"] == []
    in_doubt = [c for c, (_, state) in calls.items() if state == "in_doubt"]
    for call_id in in_doubt:
        assert (calls[call_id][0], "tool_call_in_doubt", call_id) in said, f"{call_id}: no event"
    lines = side_effect_lines(harness.files.side_effects)
    ran = [call for call, _ in lines]
    assert len(ran) == len(set(ran)), "a tool call ran twice"
    # Sessions are deleted before a cycle's turns start, so every call that ran was in the
    # store at some check (its records go with a deleted session).
    harness.known_calls |= set(calls)
    # (The pid on a line is the server's, or 1 for a shell the kill orphaned before it wrote:
    # tools are processes of their own and may outlive a killed server.)
    for call_id, _ in lines:
        assert call_id in harness.known_calls, f"{call_id} ran without an intent"
    # No deleted session is back.
    assert not harness.deleted & db.sessions()
    # What recovery printed is what it wrote (every call in doubt was decided before the kill).
    ended = db.rows("SELECT ended_at FROM turns WHERE state = 'interrupted'")
    just_now = sum(1 for (at,) in ended if dt.datetime.fromisoformat(at) >= server.started_at)
    assert server.recovered == (just_now, len(in_doubt))
    # What the next cycle needs: calls to decide, heads to resume to.
    harness.in_doubt = {}
    for call_id in in_doubt:
        harness.in_doubt.setdefault(calls[call_id][0], []).append(call_id)
    harness.heads = {sid: db.head(sid) for sid in harness.watchers}


# --- decisions over HTTP and WebSocket ---------------------------------------------------------


async def test_decisions_round_trip_over_http_and_websocket(tmp_path: Path) -> None:
    model = SlowModel(tokens=2, delay=0.0, tool_sleep=0.0)
    async with fake_model(model) as fake, servers() as started:
        files = ServerFiles(tmp_path, fake.url)
        hold = files.hold
        hold.touch()  # every tool call waits in the tool until the file is gone
        server = await start_server(files)
        started.append(server)
        async with client(server) as http:
            sessions = []
            for _ in range(6):
                response = await http.post("/api/sessions", json={"safety_policy": "autonomous"})
                sessions.append(response.json()["id"])
            for session_id in sessions:
                path = f"/api/sessions/{session_id}/agent/crash?on_disconnect=continue"
                async with http.stream("POST", path, json=user("go")) as response:
                    assert response.status_code == 200
            with trio.fail_after(slow(30)):
                for _ in range(round(slow(600))):
                    if len(side_effect_lines(files.side_effects)) == len(sessions):
                        break
                    await trio.sleep(0.05)  # real clock: until every tool has started
        await server.kill()
        hold.unlink()  # reruns go straight through

        server = await start_server(files)
        started.append(server)
        assert server.recovered == (6, 6)
        calls = {sid: await pending_call(server, sid) for sid in sessions}
        async with client(server) as http:
            for session_id, action in zip(sessions[:3], ("rerun", "done", "skip"), strict=True):
                before = len(side_effect_lines(files.side_effects))
                await decide_over_http(http, session_id, calls[session_id], action)
                added = side_effect_lines(files.side_effects)[before:]
                # A rerun runs the tool exactly once more (this process); the others never.
                expected = [(calls[session_id], server.pid)] if action == "rerun" else []
                assert added[: len(expected)] == expected
                assert [c for c, _ in added].count(calls[session_id]) == len(expected)
        async with open_websocket_url(server.url.replace("http", "ws", 1) + "/api/ws") as conn:
            ws = WSClient(conn)
            for session_id, action in zip(sessions[3:], ("rerun", "done", "skip"), strict=True):
                before = len(side_effect_lines(files.side_effects))
                await decide_over_websocket(ws, session_id, calls[session_id], action)
                added = side_effect_lines(files.side_effects)[before:]
                expected = [(calls[session_id], server.pid)] if action == "rerun" else []
                assert added == expected
            await close_transport(conn)
        ran = [call for call, _ in side_effect_lines(files.side_effects)]
        for session_id in sessions:  # once before the crash, once more for each rerun
            assert ran.count(calls[session_id]) == (
                2 if session_id in (sessions[0], sessions[3]) else 1
            )
        db = Database(files.db)
        try:
            decided = db.rows("SELECT tool_call_id, decision, decided_by FROM tool_calls")
        finally:
            db.close()
        by_call = {call: (decision, who) for call, decision, who in decided}
        assert by_call[calls[sessions[1]]] == ("done", "http-client")
        assert by_call[calls[sessions[4]]] == ("done", "ws-client")
        assert await server.stop() == 0


async def pending_call(server: Server, session_id: str) -> str:
    async with client(server) as http:
        pending = (await http.get(f"/api/sessions/{session_id}/recovery/decisions")).json()
    assert pending["state"] == "needs_decision"
    (call,) = pending["in_doubt"]
    assert json.loads(call["arguments"])["call"] == call["tool_call_id"]
    return str(call["tool_call_id"])


async def decide_over_http(
    http: httpx.AsyncClient, session_id: str, call_id: str, action: str
) -> None:
    run_path = f"/api/sessions/{session_id}/agent/crash"
    refused = await http.post(run_path, json=user("too early"))
    assert refused.status_code == 409 and refused.json()["code"] == "needs_decision"
    body = {"tool_call_id": call_id, "action": action, "decided_by": "http-client"}
    response = await http.post(f"/api/sessions/{session_id}/recovery/decisions", json=body)
    assert response.status_code == 200, response.text
    outcome = response.json()
    assert (outcome["action"], outcome["pending"], outcome["decided_by"]) == (
        action,
        0,
        "http-client",
    )
    if action == "rerun":
        assert outcome["result"].strip() == f"side effect {call_id} done"
    async with http.stream("POST", run_path, json=user("after the decision")) as run:
        assert run.status_code == 200
        async for _ in run.aiter_bytes():
            pass  # the turn runs to its end


async def decide_over_websocket(ws: WSClient, session_id: str, call_id: str, action: str) -> None:
    pending = await ws.result("recovery_decisions", session_id=session_id)
    assert [c["tool_call_id"] for c in pending["in_doubt"]] == [call_id]
    refused = await ws.call("run", session_id=session_id, agent="crash", **user("too early"))
    assert refused["ok"] is False and refused["error"]["code"] == "needs_decision"
    outcome = await ws.result(
        "recovery_decide",
        session_id=session_id,
        tool_call_id=call_id,
        action=action,
        decided_by="ws-client",
    )
    assert (outcome["action"], outcome["pending"], outcome["decided_by"]) == (
        action,
        0,
        "ws-client",
    )
    pending = await ws.result("recovery_decisions", session_id=session_id)
    assert pending == {"state": "idle", "in_doubt": []}
