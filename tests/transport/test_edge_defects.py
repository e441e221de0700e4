"""One test per defect found probing the API edge from outside: each sends the request that
broke the server and checks that it now gets a 4xx while the server (and a turn running on the
same session) carries on.

Live server on 127.0.0.1:0, REAL clock: every wait is bounded by ``trio.fail_after``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
import trio
from trio_websocket import open_websocket_url

from greenroom.errors import ConfigError
from greenroom.serve import ServeConfig, check_config
from tests.slowness import slow
from tests.transport.support import (
    Live,
    PhasedRuntime,
    RawConnection,
    WSClient,
    assert_healthy,
    read_to_end,
    read_until,
    sse_frames,
    user_body,
    ws_handshake,
)

JSON = {"Content-Type": "application/json"}
SURROGATE_TITLE = b'{"title": "\\ud800"}'  # a JSON escape of a lone surrogate: valid JSON
HOLD = [{"script": [], "hold": True}]
PHASED = [PhasedRuntime]


@asynccontextmanager
async def http(live: Live, **headers: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=live.url, timeout=slow(10), headers=headers) as client:
        yield client


async def new_session(client: httpx.AsyncClient) -> str:
    r = await client.post("/api/sessions", json={})
    assert r.status_code == 200, r.text
    return str(r.json()["id"])


# --- 1. any web page could drive a default server ----------------------------------------------


async def test_websocket_from_another_origin_is_refused(live: Live) -> None:
    origin = [("Origin", "http://evil.example")]
    status, _, body = await ws_handshake(live.url, origin)
    assert status == 403
    assert json.loads(body)["code"] == "cross_site_request"
    own = [(b"Origin", live.url.encode())]  # the server's own origin: the chat page
    async with open_websocket_url(live.ws_url, extra_headers=own) as ws:
        client = WSClient(ws)
        assert await client.result("list") == []
    async with open_websocket_url(live.ws_url) as ws:  # non-browser clients send no Origin
        assert await WSClient(ws).result("list") == []


async def test_dns_rebinding_host_is_refused(live: Live) -> None:
    async with http(live) as client:
        sid = await new_session(client)
        r = await client.get(f"/api/sessions/{sid}", headers={"Host": "evil.example:8080"})
        assert r.status_code == 421
        assert r.json()["code"] == "host_not_allowed"
        assert "--allowed-host evil.example" in r.json()["message"]
        r = await client.get(f"/api/sessions/{sid}", headers={"Host": "localhost"})
        assert r.status_code == 200
        assert (await client.get("/health", headers={"Host": "any.example"})).status_code == 200
    status, _, _ = await ws_handshake(live.url, [], host="evil.example")
    assert status == 421


async def test_cross_site_text_plain_post_is_415_and_changes_nothing(live: Live) -> None:
    async with http(live) as client:
        sid = await new_session(client)
        plain = {"Content-Type": "text/plain"}
        r = await client.post("/api/sessions", content=b'{"title": "x"}', headers=plain)
        assert (r.status_code, r.json()["code"]) == (415, "unsupported_media_type")
        r = await client.patch(
            f"/api/sessions/{sid}/title", content=b'{"title": "x"}', headers=plain
        )
        assert r.status_code == 415
        evil = {"Origin": "http://evil.example", **JSON}
        r = await client.patch(f"/api/sessions/{sid}/title", json={"title": "y"}, headers=evil)
        assert (r.status_code, r.json()["code"]) == (403, "cross_site_request")
        listed = (await client.get("/api/sessions")).json()
        assert [(s["id"], s["title"]) for s in listed] == [(sid, "")]


# --- 2. a lone surrogate crashed the actor and cancelled a running turn -------------------------


@pytest.mark.parametrize("runtime_class", PHASED)
async def test_lone_surrogate_is_400_and_a_running_turn_survives(live: Live) -> None:
    runtime = live.env.runtime
    async with http(live) as client, http(live) as runner:
        sid = await new_session(client)
        async with runner.stream(
            "POST", f"/api/sessions/{sid}/agent/agent", json=user_body("go")
        ) as run:
            frames = sse_frames(run)
            with trio.fail_after(slow(10)):
                await runtime.turn_started.wait()
            r = await client.patch(
                f"/api/sessions/{sid}/title", content=SURROGATE_TITLE, headers=JSON
            )
            assert (r.status_code, r.json()["path"]) == (400, "$.title")
            assert "lone surrogate" in r.json()["message"]
            r = await client.post("/api/sessions", content=SURROGATE_TITLE, headers=JSON)
            assert r.status_code == 400
            assert (await client.get("/api/sessions")).status_code == 200
            assert runtime.streams == 1  # the turn is still running
            runtime.release()
            rest = await read_to_end(frames)
        assert [f.data.get("content") for f in rest if f.type == "agent_choice"] == [
            "after release"
        ]
        assert isinstance(runtime, PhasedRuntime)
        assert (runtime.completed, runtime.cancelled) == (1, 0)
        assert (await client.get(f"/api/sessions/{sid}")).json()["title"] == ""


# --- 3. integers of 2^63 or more reached SQLite ---------------------------------------------------


async def test_huge_integers_are_400(live: Live) -> None:
    async with http(live) as client:
        sid = await new_session(client)
        body = {"input_tokens": 2**63, "output_tokens": 1}
        r = await client.patch(f"/api/sessions/{sid}/tokens", json=body)
        assert (r.status_code, r.json()["path"]) == (400, "$.input_tokens")
        r = await client.post("/api/sessions", json={"max_iterations": 2**64})
        assert (r.status_code, r.json()["path"]) == (400, "$.max_iterations")
        message = {"message": {"message": {"role": "user", "content": "x"}}}
        r = await client.patch(f"/api/sessions/{sid}/messages/{2**64}", json=message)
        assert (r.status_code, r.json()["code"]) == (400, "invalid_message_id")
        r = await client.patch(f"/api/sessions/{sid}/tokens", json={**body, "input_tokens": 5})
        assert r.status_code == 200


# --- 2 and 3 over the WebSocket: an error reply, never a closed connection ---------------------


@pytest.mark.parametrize("runtime_options", HOLD)
async def test_websocket_bad_values_get_error_replies(live: Live) -> None:
    runtime = live.env.runtime
    async with http(live) as client, open_websocket_url(live.ws_url) as ws:
        sid = await new_session(client)
        socket = WSClient(ws)
        run = await socket.call("run", session_id=sid, agent="agent", **user_body("go"))
        assert run["ok"], run
        with trio.fail_after(slow(10)):
            await runtime.turn_started.wait()
        lone = "\ud800"  # json.dumps writes it as the escape \\ud800
        raw = [
            json.dumps({"id": "a", "op": "set_title", "session_id": sid, "title": lone}),
            json.dumps(
                {"id": "b", "op": "set_tokens", "session_id": sid, "input_tokens": 2**63}
                | {"output_tokens": 0}
            ),
            json.dumps(
                {"id": "c", "op": "update_message", "session_id": sid, "message_id": 2**64}
                | {"message": {"message": {"role": "user"}}}
            ),
            json.dumps({"id": "d", "op": "subscribe", "session_id": "\udfff"}),
            json.dumps({"id": "e", "op": "get", "session_id": sid, "x": float("nan")}),
            json.dumps({"id": "\udc00", "op": "list"}),  # the id itself: answered with id null
        ]
        for frame in raw:
            await ws.send_message(frame)
        for frame_id in ["a", "b", "c", "d", None, None]:  # NaN is not JSON: no id to read
            reply = await socket.reply(frame_id)  # type: ignore[arg-type]
            assert reply["ok"] is False, reply
            assert reply["error"]["status"] == 400, reply
        assert runtime.streams == 1  # the turn on that session never noticed
        assert (await socket.result("get", session_id=sid))["title"] == ""
        runtime.release()


# --- 5. framing, tokens, run streams, idle and greedy clients ------------------------------------


async def test_content_length_with_transfer_encoding_is_400_and_closes(live: Live) -> None:
    conn = await RawConnection.open(live)
    try:
        head = conn.request_bytes(
            "POST",
            "/api/sessions",
            headers={
                "Content-Type": "application/json",
                "Content-Length": "2",
                "Transfer-Encoding": "chunked",
            },
        )
        await conn.send(head + b"2\r\n{}\r\n0\r\n\r\n")
        r = await conn.response()
        assert r.status == 400
        assert "Transfer-Encoding" in r.json()["message"]
        assert await conn.eof_within(2)
    finally:
        await conn.aclose()
    async with http(live) as client:
        assert (await client.get("/api/sessions")).json() == []  # nothing was created


@pytest.mark.parametrize("token", [" ", "\t\n", "two words", "naïve"])
def test_unusable_tokens_are_refused_at_startup(token: str) -> None:
    with pytest.raises(ConfigError, match="auth-token"):
        check_config(ServeConfig(auth_token=token))


def test_serve_with_a_blank_token_exits_2_with_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "greenroom.cli", "serve", "--port", "0", "--auth-token", "  "],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert "--auth-token" in done.stderr


@pytest.mark.parametrize("runtime_options", HOLD)
async def test_deleted_sessions_run_stream_ends_with_session_exited(live: Live) -> None:
    async with http(live) as client, http(live) as runner:
        sid = await new_session(client)
        async with runner.stream(
            "POST", f"/api/sessions/{sid}/agent/agent", json=user_body("go")
        ) as run:
            frames = sse_frames(run)
            with trio.fail_after(slow(10)):
                await live.env.runtime.turn_started.wait()
            assert (await client.delete(f"/api/sessions/{sid}")).status_code == 200
            rest = await read_until(frames, "session_exited")
        assert rest[-1].data == {"type": "session_exited", "reason": "session ended"}


@pytest.mark.parametrize("keep_alive_timeout", [0.5])
async def test_slow_request_headers_are_cut_off(live: Live) -> None:
    conn = await RawConnection.open(live)
    try:
        await conn.send(b"GET /api/sessions HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")
        assert await conn.eof_within(5), "a connection that never finished its headers stayed open"
    finally:
        await conn.aclose()
    await assert_healthy(live)


@pytest.mark.parametrize("max_connections_per_client", [2])
async def test_per_client_connection_cap(live: Live) -> None:
    async with http(live) as a, http(live) as b, http(live) as c:
        sid = await new_session(a)
        events = f"/api/sessions/{sid}/events"
        async with a.stream("GET", events) as first, b.stream("GET", events) as second:
            assert (first.status_code, second.status_code) == (200, 200)
            r = await c.get("/api/sessions")
            assert r.status_code == 429
            assert r.json()["code"] == "too_many_connections"
            assert r.headers["Retry-After"] == "1"
            assert r.headers["Connection"] == "close"
        with trio.fail_after(slow(5)):  # the streams' slots free once their requests end
            for _ in range(round(slow(500))):
                r = await c.get("/api/sessions")
                if r.status_code != 429:
                    break
                await trio.sleep(0.01)  # real clock: the server notices the closed streams
        assert r.status_code == 200
