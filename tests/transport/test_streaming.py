"""Streaming on a live server (hypercorn on 127.0.0.1:0, in the test's nursery): the run stream
and the event log over SSE with httpx, and the WebSocket API with trio-websocket.

These tests run on the REAL clock: every wait is bounded by ``trio.fail_after`` and each real
sleep says so in a comment.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trio
from trio_websocket import open_websocket_url

from greenroom.actors import RegistryConfig, StreamState
from greenroom.domain import AgentChoice, StreamStarted, StreamStopped
from greenroom.persistence import RetentionPolicy
from greenroom.transport import AppConfig, _ws
from tests.fakes import FakeRuntime
from tests.slowness import slow
from tests.transport.support import (
    AGENT,
    Live,
    PhasedRuntime,
    WSClient,
    close_transport,
    message_body,
    read_to_end,
    read_until,
    receive_until_closed,
    sse_frames,
    user_body,
    ws_handshake,
)

SCRIPT = [StreamStarted(), AgentChoice("one"), AgentChoice("two"), StreamStopped()]
TYPES = ["stream_started", "agent_choice", "agent_choice", "stream_stopped"]
TOKEN = "live-token"


@pytest.fixture
def runtime_options() -> dict[str, Any]:
    return {"script": list(SCRIPT)}


@asynccontextmanager
async def http(live: Live, **headers: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=live.url, timeout=slow(10), headers=headers) as client:
        yield client


async def new_session(client: httpx.AsyncClient, title: str = "") -> str:
    r = await client.post("/api/sessions", json={"title": title} if title else {})
    assert r.status_code == 200, r.text
    sid = r.json()["id"]
    assert isinstance(sid, str)
    return sid


async def wait_until(predicate: Callable[[], bool], *, within: float = slow(5)) -> None:
    """Poll ``predicate`` (real clock) until it holds."""
    with trio.fail_after(within):
        while True:
            if predicate():
                return
            await trio.sleep(0.01)  # real clock: polling live-server state


async def status_of(client: httpx.AsyncClient, sid: str) -> dict[str, Any]:
    r = await client.get(f"/api/sessions/{sid}/status")
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def run_path(sid: str, query: str = "") -> str:
    return f"/api/sessions/{sid}/agent/{AGENT}" + (f"?{query}" if query else "")


# --- the run stream ------------------------------------------------------------------------


async def test_run_stream_frames_carry_the_event_log_seq(live: Live) -> None:
    async with http(live) as client:
        sid = await new_session(client)
        async with client.stream("POST", run_path(sid), json=user_body("hello")) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            assert r.headers["cache-control"] == "no-cache"
            frames = await read_to_end(sse_frames(r))
        assert [f.type for f in frames] == TYPES
        assert [f.id for f in frames] == [1, 2, 3, 4]
        assert frames[1].data == {"type": "agent_choice", "content": "one"}

        # The same events, with the same seqs, are in the session's event log.
        async with client.stream("GET", f"/api/sessions/{sid}/events") as r:
            replay = await read_until(sse_frames(r), "stream_stopped")
        assert [(f.id, f.data) for f in replay] == [(f.id, f.data) for f in frames]

        # Drained: the next run starts at once and continues the sequence.
        async with client.stream("POST", run_path(sid), json=user_body("again")) as r:
            again = await read_to_end(sse_frames(r))
        assert [f.id for f in again] == [5, 6, 7, 8]
        got = (await client.get(f"/api/sessions/{sid}")).json()
        assert [m["message"]["content"] for m in got["messages"]] == ["hello", "again"]


async def test_run_errors_before_streaming_are_json(live: Live) -> None:
    async with http(live) as client:
        sid = await new_session(client)
        r = await client.post(f"/api/sessions/{sid}/agent/nope", json=user_body("x"))
        assert r.status_code == 404
        assert r.headers["content-type"] == "application/json"
        assert r.json()["code"] == "agent_not_found"
        r = await client.post(run_path("missing"), json=user_body("x"))
        assert r.status_code == 404
        assert r.json()["code"] == "session_not_found"
        r = await client.post(
            run_path(sid), content=b"{bad json", headers={"Content-Type": "application/json"}
        )
        assert r.status_code == 400


@pytest.mark.parametrize("runtime_options", [{"script": list(SCRIPT), "hold": True}])
async def test_busy_409_during_a_run(live: Live) -> None:
    runtime = live.env.runtime
    async with http(live) as client:
        sid = await new_session(client)
        msg_id = (
            await client.post(f"/api/sessions/{sid}/messages", json=message_body("user", "m"))
        ).json()["id"]
        async with client.stream("POST", run_path(sid), json=user_body("first")) as r:
            frames = sse_frames(r)
            await read_until(frames, "stream_stopped")  # the script is out; the turn holds
            assert runtime.streams == 1

            second = await client.post(run_path(sid), json=user_body("second"))
            assert second.status_code == 409
            assert second.json()["code"] == "session_busy"
            add = await client.post(f"/api/sessions/{sid}/messages", json=message_body("user", "x"))
            assert add.status_code == 409
            upd = await client.patch(
                f"/api/sessions/{sid}/messages/{msg_id}", json=message_body("user", "x")
            )
            assert upd.status_code == 409
            assert (await status_of(client, sid))["streaming"] is True

            runtime.release()
            assert await read_to_end(frames) == []  # the stream ends with the turn
        assert runtime.max_concurrent == 1
        got = (await client.get(f"/api/sessions/{sid}")).json()
        assert [m["message"]["content"] for m in got["messages"]] == ["m", "first"]


@pytest.mark.parametrize("runtime_class", [PhasedRuntime])
async def test_client_disconnect_cancels_the_turn(live: Live) -> None:
    runtime = live.env.runtime
    assert isinstance(runtime, PhasedRuntime)
    async with http(live) as client:
        sid = await new_session(client)
        async with client.stream("POST", run_path(sid), json=user_body("go")) as r:
            await read_until(sse_frames(r), "stream_stopped")
            assert runtime.streams == 1
        # The response is closed mid-stream: the server cancels the turn.
        await wait_until(lambda: runtime.streams == 0)
        assert (runtime.cancelled, runtime.completed) == (1, 0)
        with trio.fail_after(slow(5)):
            while True:
                if not (await status_of(client, sid))["streaming"]:
                    break
                await trio.sleep(0.01)  # real clock: the actor reports the turn's end
        # Idle again: a new run is accepted (and this time it runs to its end).
        runtime.release()
        async with client.stream("POST", run_path(sid), json=user_body("again")) as r:
            assert r.status_code == 200
            frames = await read_to_end(sse_frames(r))
        assert frames[-1].type == "stream_stopped"
        assert runtime.completed == 1


@pytest.mark.parametrize("runtime_class", [PhasedRuntime])
@pytest.mark.parametrize("runtime_options", [{"script": list(SCRIPT), "tick_every": 0.02}])
async def test_on_disconnect_continue_keeps_the_turn(live: Live) -> None:
    runtime = live.env.runtime
    assert isinstance(runtime, PhasedRuntime)
    async with http(live) as client, http(live) as watcher:
        sid = await new_session(client)
        async with watcher.stream("GET", f"/api/sessions/{sid}/events") as events:
            log = sse_frames(events)
            path = run_path(sid, "on_disconnect=continue")
            async with client.stream("POST", path, json=user_body("go")) as r:
                first = await read_until(sse_frames(r), "stream_stopped")
            # The run stream is gone; the server noticed (its turn has no reader any more).
            registry = live.env.registry
            await wait_until(
                lambda: (
                    registry.statistics(sid).state is StreamState.RUNNING
                    and not registry.statistics(sid).run_stream_open
                )
            )
            seen = await read_until(log, "stream_stopped")
            assert [f.id for f in seen] == [f.id for f in first]
            # Ticks emitted after the disconnect still reach the /events subscriber.
            ticks = [await read_until(log, "agent_choice") for _ in range(3)]
            assert all(t[-1].data["content"].startswith("tick") for t in ticks)
            assert runtime.streams == 1 and runtime.cancelled == 0
            assert (await status_of(client, sid))["streaming"] is True

            runtime.release()
            rest = await read_until(log, "stream_stopped")
            assert rest[-1].type == "stream_stopped"
            assert any(f.data.get("content") == "after release" for f in rest)
        await wait_until(lambda: runtime.streams == 0)
        assert (runtime.completed, runtime.cancelled) == (1, 0)


# --- the event log -------------------------------------------------------------------------


async def _ran_once(client: httpx.AsyncClient, sid: str) -> None:
    async with client.stream("POST", run_path(sid), json=user_body("hi")) as r:
        frames = await read_to_end(sse_frames(r))
    assert [f.id for f in frames] == [1, 2, 3, 4]


async def test_events_replay_after_since(live: Live) -> None:
    async with http(live) as client:
        sid = await new_session(client)
        await _ran_once(client, sid)
        for since, expected in [(None, [1, 2, 3, 4]), (0, [1, 2, 3, 4]), (2, [3, 4])]:
            query = "" if since is None else f"?since={since}"
            async with client.stream("GET", f"/api/sessions/{sid}/events{query}") as r:
                assert r.status_code == 200
                assert r.headers["content-type"].startswith("text/event-stream")
                frames = await read_until(sse_frames(r), "stream_stopped")
            assert [f.id for f in frames] == expected, since


async def test_events_replay_after_last_event_id(live: Live) -> None:
    async with http(live) as client:
        sid = await new_session(client)
        await _ran_once(client, sid)
        path = f"/api/sessions/{sid}/events"
        async with client.stream("GET", path, headers={"Last-Event-ID": "3"}) as r:
            frames = await read_until(sse_frames(r), "stream_stopped")
        assert [f.id for f in frames] == [4]
        # ?since wins over the header; an unparsable resume point is a 400 naming it (replaying
        # everything instead would hand a resuming client duplicates it cannot tell apart).
        async with client.stream("GET", f"{path}?since=1", headers={"Last-Event-ID": "3"}) as r:
            frames = await read_until(sse_frames(r), "stream_stopped")
        assert [f.id for f in frames] == [2, 3, 4]
        r = await client.get(f"{path}?since=abc")
        assert (r.status_code, r.json()["path"]) == (400, "query.since")
        r = await client.get(path, headers={"Last-Event-ID": "x1"})
        assert (r.status_code, r.json()["path"]) == (400, "header.Last-Event-ID")


async def test_events_then_live_tail(live: Live) -> None:
    async with http(live) as client, http(live) as watcher:
        sid = await new_session(client)
        async with watcher.stream("GET", f"/api/sessions/{sid}/events") as events:
            assert events.status_code == 200
            log = sse_frames(events)
            await _ran_once(client, sid)  # subscribed before the first event: sees all
            frames = await read_until(log, "stream_stopped")
            assert [f.id for f in frames] == [1, 2, 3, 4]
            await client.patch(f"/api/sessions/{sid}/title", json={"title": "t"})
            await _second_run(client, sid)
            frames = await read_until(log, "stream_stopped")
            assert frames[0].type == "session_title"
            assert [f.id for f in frames] == [5, 6, 7, 8, 9]


async def _second_run(client: httpx.AsyncClient, sid: str) -> None:
    async with client.stream("POST", run_path(sid), json=user_body("again")) as r:
        await read_to_end(sse_frames(r))


@pytest.mark.parametrize("registry_config", [RegistryConfig(log_capacity=3)])
async def test_a_resume_point_older_than_the_ring_is_replayed_from_the_store(live: Live) -> None:
    async with http(live) as client:
        sid = await new_session(client)
        await _ran_once(client, sid)  # seqs 1-4; the ring keeps 2-4, the store all
        async with client.stream("GET", f"/api/sessions/{sid}/events?since=0") as r:
            frames = await read_until(sse_frames(r), "stream_stopped")
        assert [f.id for f in frames] == [1, 2, 3, 4]  # no gap: nothing was lost
        async with client.stream("GET", f"/api/sessions/{sid}/events?since=1") as r:
            frames = await read_until(sse_frames(r), "stream_stopped")
        assert [f.id for f in frames] == [2, 3, 4]


@pytest.mark.parametrize("registry_config", [RegistryConfig(log_capacity=1)])
async def test_gap_only_where_retention_removed_token_deltas(live: Live) -> None:
    async with http(live) as client:
        sid = await new_session(client)
        await _ran_once(client, sid)  # 1 stream_started, 2-3 agent_choice, 4 stream_stopped
        removed = await live.env.store.apply_retention(RetentionPolicy(None, 1), 0.0)
        assert removed == 1  # the older delta (seq 2)
        async with client.stream("GET", f"/api/sessions/{sid}/events?since=0") as r:
            frames = await read_until(sse_frames(r), "stream_stopped")
        assert [(f.id, f.type) for f in frames] == [
            (1, "stream_started"),
            (None, "gap"),  # control event: no id
            (3, "agent_choice"),
            (4, "stream_stopped"),
        ]


@pytest.mark.parametrize("app_config", [AppConfig(heartbeat=0.2)])
async def test_heartbeat_ping(live: Live) -> None:
    async with http(live) as client:
        sid = await new_session(client)
        async with client.stream("GET", f"/api/sessions/{sid}/events") as r:
            start = trio.current_time()
            pings = 0
            with trio.fail_after(slow(5)):
                async for frame in sse_frames(r):
                    if frame.comment == "ping":
                        pings += 1
                        if pings == 3:
                            break
            elapsed = trio.current_time() - start
        assert 0.4 <= elapsed < 3


async def test_delete_ends_the_event_stream_with_session_exited(live: Live) -> None:
    async with http(live) as client, http(live) as watcher:
        sid = await new_session(client)
        await _ran_once(client, sid)
        async with watcher.stream("GET", f"/api/sessions/{sid}/events?since=4") as events:
            log = sse_frames(events)
            assert (await client.delete(f"/api/sessions/{sid}")).status_code == 200
            rest = await read_to_end(log)
        data = [f for f in rest if f.data is not None]
        assert [(f.id, f.data) for f in data] == [
            (5, {"type": "session_exited", "reason": "session ended"})
        ]
        r = await client.get(f"/api/sessions/{sid}/events")
        assert r.status_code == 404
        assert r.json()["code"] == "session_not_found"


@pytest.mark.parametrize("runtime_options", [{"script": list(SCRIPT), "hold": True}])
async def test_delete_during_a_run_ends_both_streams(live: Live) -> None:
    async with http(live) as client, http(live) as watcher, http(live) as runner:
        sid = await new_session(client)
        async with (
            watcher.stream("GET", f"/api/sessions/{sid}/events") as events,
            runner.stream("POST", run_path(sid), json=user_body("x")) as run,
        ):
            run_frames = sse_frames(run)
            await read_until(run_frames, "stream_stopped")
            r = await client.delete(f"/api/sessions/{sid}?wait=true&timeout=5s")
            assert r.status_code == 200
            assert r.json() == {"message": "session deleted"}
            # The run stream ends with the same sequenced session_exited as /events.
            rest = [(f.id, f.data) for f in await read_to_end(run_frames) if f.data is not None]
            terminal = {"type": "session_exited", "reason": "session ended"}
            assert rest == [(len(SCRIPT) + 1, terminal)]
            log = await read_until(sse_frames(events), "session_exited")
            assert log[-1].id == len(SCRIPT) + 1
        assert live.env.runtime.streams == 0


# --- WebSocket -----------------------------------------------------------------------------


@asynccontextmanager
async def ws_client(live: Live, **options: Any) -> AsyncIterator[WSClient]:
    async with open_websocket_url(live.ws_url, **options) as ws:
        yield WSClient(ws)


def is_event(sid: str, *, run: str | None = None) -> Callable[[dict[str, Any]], bool]:
    def match(frame: dict[str, Any]) -> bool:
        if frame.get("session_id") != sid or "event" not in frame:
            return False
        return run is None or frame.get("run") == run

    return match


async def ws_events_until(
    ws: WSClient, sid: str, stop_type: str, *, run: str | None = None
) -> list[dict[str, Any]]:
    out = []
    with trio.fail_after(slow(10)):
        while True:
            frame = await ws.wait_for(is_event(sid, run=run))
            out.append(frame)
            if frame["event"]["type"] == stop_type:
                return out


async def test_ws_compact_op_compacts_and_subscribers_see_it(live: Live) -> None:
    async with ws_client(live) as ws:
        sid = (await ws.result("create"))["id"]
        run_id = await ws.send({"op": "run", "session_id": sid, "agent": AGENT, **user_body("hi")})
        await ws_events_until(ws, sid, "stream_stopped", run=run_id)
        assert await ws.result("subscribe", session_id=sid) == {"subscribed": sid}
        reply = await ws.result("compact", session_id=sid, instructions="keep it short")
        assert reply == {"status": "compacting"}
        events = await ws_events_until(ws, sid, "session_compaction")
        assert events[-1]["event"]["status"] == "started"
        events = await ws_events_until(ws, sid, "session_compaction")
        assert events[-1]["event"]["status"] == "completed"
        assert live.env.runtime.compactions == ["keep it short"]


async def test_ws_a_bug_in_an_op_closes_the_socket_with_1011_and_the_server_goes_on(
    live: Live, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken() -> None:
        raise RuntimeError("a bug in the list")

    async with open_websocket_url(live.ws_url) as conn:
        ws = WSClient(conn)
        created = await ws.result("create", title="before the bug")
        monkeypatch.setattr(live.env.registry, "list_sessions", broken)
        await ws.send({"op": "list"})
        code, _ = await receive_until_closed(ws)
        await close_transport(conn)
    assert code == 1011
    assert "WebSocket connection failed" in caplog.text
    monkeypatch.undo()
    async with ws_client(live) as ws:  # the next connection is served as before
        assert [s["id"] for s in await ws.result("list")] == [created["id"]]


async def test_ws_frames_go_out_after_the_writer_ended_idle(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_ws, "WRITER_IDLE", 0.01)  # real clock: the writer ends quickly
    async with ws_client(live) as ws:
        for n in range(3):
            created = await ws.result("create", title=f"after idle {n}")
            assert created["title"] == f"after idle {n}"
            await trio.sleep(0.05)  # real clock: past WRITER_IDLE, the writer task has ended


async def test_ws_session_ops(live: Live) -> None:
    async with ws_client(live) as ws:
        created = await ws.result("create", title="WS session")
        sid = created["id"]
        assert created["title"] == "WS session" and created["messages"] == []
        listed = await ws.result("list")
        assert [s["id"] for s in listed] == [sid]
        got = await ws.result("get", session_id=sid)
        assert got["id"] == sid and got["title"] == "WS session"

        added = await ws.result("add_message", session_id=sid, **message_body("user", "u0"))
        assert added["status"] == "added"
        await ws.result("add_message", session_id=sid, **message_body("assistant", "a0"))
        await ws.result("add_message", session_id=sid, **message_body("user", "u1"))
        updated = await ws.result(
            "update_message",
            session_id=sid,
            message_id=str(added["id"]),
            **message_body("user", "u0 edited"),
        )
        assert updated == {"status": "updated"}
        # A message id as a JSON number works too (add_message answers it as one).
        await ws.result(
            "update_message", session_id=sid, message_id=added["id"], **message_body("user", "u0!")
        )
        assert await ws.result("set_title", session_id=sid, title="Renamed") == {
            "id": sid,
            "title": "Renamed",
        }
        fork = await ws.result("fork", session_id=sid, message_index=1)
        assert fork["title"] == "Renamed (fork 1)"
        assert [m["message"]["content"] for m in fork["messages"]] == ["u0!", "a0"]
        alias = await ws.result("fork", session_id=sid, user_message_index=0)
        assert alias["messages"] == []

        got = await ws.result("get", session_id=sid)
        assert [m["message"]["content"] for m in got["messages"]] == ["u0!", "a0", "u1"]
        assert await ws.result("delete", session_id=sid) == {"message": "session deleted"}
        gone = await ws.call("get", session_id=sid)
        assert gone["ok"] is False
        assert gone["error"]["status"] == 404
        assert gone["error"]["code"] == "session_not_found"
        listed = await ws.result("list")
        assert {s["id"] for s in listed} == {fork["id"], alias["id"]}


async def test_ws_run_streams_events_then_end(live: Live) -> None:
    async with ws_client(live) as ws:
        sid = (await ws.result("create"))["id"]
        run_id = await ws.send(
            {"op": "run", "session_id": sid, "agent": AGENT, **user_body("hello")}
        )
        reply = await ws.reply(run_id)
        assert reply == {"id": run_id, "ok": True, "result": {"streaming": True}}
        events = await ws_events_until(ws, sid, "stream_stopped", run=run_id)
        assert [f["event"]["type"] for f in events] == TYPES
        assert [f["seq"] for f in events] == [1, 2, 3, 4]
        end = await ws.wait_for(lambda f: f.get("end") is True)
        assert end == {"session_id": sid, "run": run_id, "end": True}

        # With an agent name, and a busy error while a run holds.
        live.env.runtime.hold = True
        run_id = await ws.send(
            {"op": "run", "session_id": sid, "agent": AGENT, "agent_name": "root", **user_body("x")}
        )
        assert (await ws.reply(run_id))["ok"] is True
        await ws_events_until(ws, sid, "stream_stopped", run=run_id)
        busy = await ws.call("run", session_id=sid, agent=AGENT, **user_body("y"))
        assert busy["ok"] is False
        assert busy["error"]["status"] == 409 and busy["error"]["code"] == "session_busy"
        live.env.runtime.release()
        end = await ws.wait_for(lambda f: f.get("end") is True and f.get("run") == run_id)
        assert end["session_id"] == sid
        assert live.env.factory.builds == [(AGENT, "", sid)]


async def ws_batched_until(
    ws: WSClient, sid: str, stop_type: str, *, run: str | None = None
) -> list[dict[str, Any]]:
    """The events of ``batch`` frames (each frame's ``events`` in order) up to ``stop_type``."""
    out: list[dict[str, Any]] = []

    def batch_frame(frame: dict[str, Any]) -> bool:
        return frame.get("session_id") == sid and "events" in frame and frame.get("run") == run

    with trio.fail_after(slow(10)):
        while True:
            frame = await ws.wait_for(batch_frame)
            assert frame["events"], "a batch frame holds at least one event"
            out += frame["events"]
            if out[-1]["event"]["type"] == stop_type:
                return out


async def test_ws_batch_run_and_subscription_carry_the_same_events(live: Live) -> None:
    async with http(live) as client, ws_client(live) as ws:
        sid = (await ws.result("create"))["id"]
        run_id = await ws.send(
            {"op": "run", "session_id": sid, "agent": AGENT, "batch": True, **user_body("hi")}
        )
        assert (await ws.reply(run_id))["ok"] is True
        events = await ws_batched_until(ws, sid, "stream_stopped", run=run_id)
        assert [e["event"]["type"] for e in events] == TYPES
        assert [e["seq"] for e in events] == [1, 2, 3, 4]
        end = await ws.wait_for(lambda f: f.get("end") is True)
        assert end == {"session_id": sid, "run": run_id, "end": True}
        assert [f for f in ws.pending if "event" in f] == []  # nothing came unbatched

        assert await ws.result("subscribe", session_id=sid, batch=True) == {"subscribed": sid}
        replay = await ws_batched_until(ws, sid, "stream_stopped")
        assert [e["seq"] for e in replay] == [1, 2, 3, 4]
        await _second_run(client, sid)
        tail = await ws_batched_until(ws, sid, "stream_stopped")
        assert [e["seq"] for e in tail] == [5, 6, 7, 8]

        for op in ("run", "subscribe"):
            bad = await ws.call(op, session_id=sid, agent=AGENT, batch="yes", **user_body("x"))
            assert bad["error"]["status"] == 400 and bad["error"]["path"] == "$.batch"


@pytest.mark.parametrize("runtime_options", [{"script": list(SCRIPT), "hold": True}])
async def test_ws_steer_and_followup(live: Live) -> None:
    runtime = live.env.runtime
    async with ws_client(live) as ws:
        sid = (await ws.result("create"))["id"]
        not_running = await ws.call("steer", session_id=sid, **user_body("x"))
        assert not_running["ok"] is False and not_running["error"]["status"] == 409
        run_id = await ws.send({"op": "run", "session_id": sid, "agent": AGENT, **user_body("x")})
        await ws_events_until(ws, sid, "stream_stopped", run=run_id)

        assert await ws.result("steer", session_id=sid, **user_body("steer me")) == {
            "status": "queued"
        }
        first = await ws.result(
            "followup", session_id=sid, idempotency_key="k1", **user_body("later")
        )
        assert first == {"status": "queued_streaming", "duplicate": False}
        again = await ws.result(
            "followup", session_id=sid, idempotency_key="k1", **user_body("later")
        )
        assert again == {"status": "duplicate", "duplicate": True}
        other = await ws.result("followup", session_id=sid, **user_body("more"))
        assert other["duplicate"] is False
        assert [m.content for m in runtime.steered] == ["steer me"]
        assert [m.content for m in runtime.followed] == ["later", "more"]
        empty = await ws.call("steer", session_id=sid, messages=[])
        assert empty["error"]["status"] == 400
        assert empty["error"]["path"] == "$.messages"
        runtime.release()
        await ws.wait_for(lambda f: f.get("end") is True)


async def test_ws_subscribe_since_and_unsubscribe(live: Live) -> None:
    async with http(live) as client, ws_client(live) as ws:
        sid = await new_session(client)
        await _ran_once(client, sid)

        assert await ws.result("subscribe", session_id=sid) == {"subscribed": sid}
        replay = await ws_events_until(ws, sid, "stream_stopped")
        assert [f["seq"] for f in replay] == [1, 2, 3, 4]
        assert all("run" not in f for f in replay)

        # Resubscribing replaces the subscription; with since only newer events come.
        assert await ws.result("subscribe", session_id=sid, since=2) == {"subscribed": sid}
        replay = await ws_events_until(ws, sid, "stream_stopped")
        assert [f["seq"] for f in replay] == [3, 4]

        await client.patch(f"/api/sessions/{sid}/title", json={"title": "live"})
        await _second_run(client, sid)
        live_frames = await ws_events_until(ws, sid, "stream_stopped")
        assert [f["seq"] for f in live_frames] == [5, 6, 7, 8, 9]

        assert await ws.result("unsubscribe", session_id=sid) == {
            "unsubscribed": sid,
            "was_subscribed": True,
        }
        await _second_run(client, sid)  # nothing of this reaches the socket
        assert await ws.result("unsubscribe", session_id=sid) == {
            "unsubscribed": sid,
            "was_subscribed": False,
        }
        assert [f for f in ws.pending if "event" in f] == []

        bad = await ws.call("subscribe", session_id=sid, since="3")
        assert bad["error"]["status"] == 400 and bad["error"]["path"] == "$.since"
        missing = await ws.call("subscribe", session_id="nope")
        assert missing["error"]["status"] == 404


async def test_ws_subscription_ends_on_delete(live: Live) -> None:
    async with http(live) as client, ws_client(live) as ws:
        sid = await new_session(client)
        await ws.result("subscribe", session_id=sid)
        assert (await client.delete(f"/api/sessions/{sid}")).status_code == 200
        exited = await ws_events_until(ws, sid, "session_exited")
        assert exited[-1]["seq"] == 1
        end = await ws.wait_for(lambda f: f.get("subscription_ended") is True)
        assert end == {"session_id": sid, "subscription_ended": True, "reason": "session_exited"}


async def test_ws_error_frames_keep_the_connection(live: Live) -> None:
    async with ws_client(live) as ws:
        await ws.ws.send_message("{not json")
        frame = await ws.receive()
        assert frame["id"] is None and frame["ok"] is False
        assert frame["error"]["status"] == 400 and frame["error"]["code"] == "invalid_request"

        await ws.ws.send_message("[1, 2]")
        assert (await ws.receive())["error"]["status"] == 400

        await ws.ws.send_message(b"\xff\xfe binary garbage")
        assert (await ws.receive())["error"]["status"] == 400

        await ws.ws.send_message("[" * 10_000 + "]" * 10_000)
        assert (await ws.receive())["error"]["status"] == 400

        unknown = await ws.call("explode")
        assert unknown["ok"] is False
        assert unknown["error"]["status"] == 404 and "explode" in unknown["error"]["message"]

        no_op = await ws.call("")
        assert no_op["error"]["status"] == 404

        rest_only = await ws.call("run_agent", session_id="x")  # served as run + agent_name
        assert rest_only["error"]["status"] == 404

        no_sid = await ws.call("get")
        assert no_sid["error"]["status"] == 400
        assert no_sid["error"]["path"] == "$.session_id"

        wrong_type = await ws.call("set_title", session_id="x", title=5)
        assert wrong_type["error"]["status"] == 400 and wrong_type["error"]["path"] == "$.title"

        extra = await ws.call("set_title", session_id="x", title="t", bogus=1)
        assert extra["error"]["status"] == 400

        big = json.dumps({"id": "big", "op": "create", "title": "x" * (1024 * 1024)})
        await ws.ws.send_message(big)
        too_big = await ws.receive()
        assert too_big["ok"] is False
        assert too_big["error"]["status"] == 413
        assert too_big["error"]["code"] == "payload_too_large"

        # Still open: a later op works.
        assert await ws.result("ping") == {"status": "ok"}
        sid = (await ws.result("create", title="after"))["id"]
        assert (await ws.result("get", session_id=sid))["title"] == "after"


@pytest.mark.parametrize("app_config", [AppConfig(auth_token=TOKEN)])
async def test_ws_auth(live: Live) -> None:
    header = [(b"authorization", f"Bearer {TOKEN}".encode())]
    async with ws_client(live, extra_headers=header) as ws:
        assert await ws.result("ping") == {"status": "ok"}
        assert ws.ws.subprotocol is None

    async with ws_client(live, subprotocols=[f"bearer.{TOKEN}"]) as ws:
        assert ws.ws.subprotocol == f"bearer.{TOKEN}"
        assert await ws.result("ping") == {"status": "ok"}

    refusals = [
        ([], "missing Authorization header"),
        ([("Authorization", "Bearer wrong")], "invalid token"),
        ([("Authorization", TOKEN)], "invalid Authorization header format"),
        ([("Sec-WebSocket-Protocol", "bearer.wrong")], "invalid token"),
        ([("Sec-WebSocket-Protocol", "chat")], "missing Authorization header"),
    ]
    for headers, message in refusals:
        status, _, body = await ws_handshake(live.url, headers)
        assert status == 401, headers
        assert json.loads(body) == {"message": message, "code": "unauthorized"}, headers
    # The raw handshake does succeed with a token (the refusals are not a client artefact).
    status, answer, _ = await ws_handshake(
        live.url, [("Sec-WebSocket-Protocol", f"bearer.{TOKEN}")]
    )
    assert status == 101
    assert answer["sec-websocket-protocol"] == f"bearer.{TOKEN}"


@pytest.mark.parametrize("app_config", [AppConfig(ws_buffer=4)])
@pytest.mark.parametrize(
    "runtime_options",
    [{"script": [AgentChoice(f"{i:05d}" + "x" * 65_536) for i in range(400)]}],
)
async def test_ws_slow_client_is_closed_with_1013(live: Live) -> None:
    runtime = live.env.runtime
    assert isinstance(runtime, FakeRuntime)
    async with http(live) as client:
        sid = await new_session(client)
    # message_queue_size=1: once one message waits unread, the client stops reading the socket.
    async with open_websocket_url(live.ws_url, message_queue_size=1) as conn:
        ws = WSClient(conn)
        await ws.send({"op": "run", "session_id": sid, "agent": AGENT, **user_body("flood")})
        # 400 x 64 KiB cannot all fit in the socket buffers: the server's queue overflows, it
        # gives up on the client and the turn (whose stream is gone) is cancelled.
        await wait_until(lambda: runtime.turns == 1 and runtime.streams == 0, within=slow(20))
        code, frames = await receive_until_closed(ws, within=slow(20))
        assert code == 1013
        assert sum("event" in f for f in frames) < 400
        await close_transport(conn)
    async with http(live) as client:
        assert (await status_of(client, sid))["streaming"] is False
