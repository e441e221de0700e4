"""Regression tests for the reliability traps of the stack (quart-trio on hypercorn), on a live
server with raw sockets where httpx would hide the behaviour.

REAL clock: every read is bounded by ``trio.fail_after``.
"""

from __future__ import annotations

import contextlib
import json
import socket

import pytest
import trio

from greenroom.serve import SEND_BUFFER, TCP_USER_TIMEOUT_MS, ServeConfig, hypercorn_config
from greenroom.transport import AppConfig, _app as transport_app  # white-box: DRAIN_SECONDS
from tests.slowness import slow
from tests.transport.support import (
    Live,
    RawConnection,
    RawResponse,
    assert_healthy,
    ws_handshake,
)

TOKEN = "trap-token"
BIG = 2 * 1024 * 1024  # over the 1 MiB body limit, and far over what fits in one TCP window


async def new_session(conn: RawConnection) -> str:
    await conn.send(conn.request_bytes("POST", "/api/sessions", body=b"{}"))
    r = await conn.response()
    assert r.status == 200
    sid = r.json()["id"]
    assert isinstance(sid, str)
    return sid


# --- Connection: close and keep-alive ----------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("GET", "/health", None, 200),
        ("POST", "/api/sessions", b'{"title": "t"}', 200),
        ("GET", "/api/nope", None, 404),
        ("PATCH", "/api/sessions/x/title", b"\xff\xfe", 400),
    ],
)
async def test_connection_close_gets_eof_at_once(
    live: Live, method: str, path: str, body: bytes | None, status: int
) -> None:
    conn = await RawConnection.open(live)
    try:
        await conn.send(
            conn.request_bytes(method, path, headers={"Connection": "close"}, body=body)
        )
        r = await conn.response()
        assert r.status == status
        assert await conn.eof_within(2), "the server kept a Connection: close connection open"
    finally:
        await conn.aclose()
    await assert_healthy(live)


async def test_keep_alive_serves_many_requests_on_one_connection(live: Live) -> None:
    conn = await RawConnection.open(live)
    try:
        sid = await new_session(conn)
        for i in range(20):
            body = json.dumps({"title": f"t{i}"}).encode()
            await conn.send(conn.request_bytes("PATCH", f"/api/sessions/{sid}/title", body=body))
            assert (await conn.response()).status == 200
        await conn.send(conn.request_bytes("GET", f"/api/sessions/{sid}"))
        assert (await conn.response()).json()["title"] == "t19"
    finally:
        await conn.aclose()


@pytest.mark.parametrize("keep_alive_timeout", [0.5])
async def test_idle_keep_alive_connection_closes_after_the_timeout(live: Live) -> None:
    conn = await RawConnection.open(live)
    try:
        await conn.send(conn.request_bytes("GET", "/api/ping"))
        assert (await conn.response()).status == 200
        start = trio.current_time()
        assert await conn.eof_within(5), "the idle keep-alive connection was never closed"
        assert trio.current_time() - start >= 0.4
    finally:
        await conn.aclose()
    await assert_healthy(live)


# --- early replies before the body was read ----------------------------------------------------


async def _early_reply_then_next_request(
    live: Live, request: bytes, expected: int, *, headers: dict[str, str] | None = None
) -> RawResponse:
    """Send ``request`` (with its big body) while reading the early reply, then a second
    request on the same keep-alive connection, which must be answered."""
    conn = await RawConnection.open(live)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn.send, request)
            first = await conn.response(within=slow(10))
        assert first.status == expected, first.body[:200]
        await conn.send(conn.request_bytes("GET", "/health", headers=headers))
        second = await conn.response(within=slow(10))
        assert second.status == 200
        assert second.json()["status"] == "ok"
        await conn.send(conn.request_bytes("GET", "/api/ping", headers=headers))
        assert (await conn.response()).status in (200, 401)
    finally:
        await conn.aclose()
    await assert_healthy(live)
    return first


async def test_early_413_leaves_the_connection_usable(live: Live) -> None:
    conn = await RawConnection.open(live)
    sid = await new_session(conn)
    await conn.aclose()
    body = json.dumps({"title": "x" * BIG}).encode()
    request = RawConnection(conn.stream, conn.host).request_bytes(
        "PATCH", f"/api/sessions/{sid}/title", body=body
    )
    first = await _early_reply_then_next_request(live, request, 413)
    assert first.json()["code"] == "payload_too_large"


async def test_chunked_body_over_the_limit_is_413(live: Live) -> None:
    conn = await RawConnection.open(live)
    try:
        head = conn.request_bytes(
            "POST",
            "/api/sessions",
            headers={"Transfer-Encoding": "chunked", "Content-Type": "application/json"},
        )
        payload = b'{"title": "' + b"x" * BIG + b'"}'
        pieces = [payload[i : i + 65536] for i in range(0, len(payload), 65536)]
        chunks = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn.send, head + chunks)
            first = await conn.response(within=slow(10))
        assert first.status == 413
        assert first.json()["code"] == "payload_too_large"
        await conn.send(conn.request_bytes("GET", "/health"))
        assert (await conn.response()).status == 200
    finally:
        await conn.aclose()
    await assert_healthy(live)


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        ("POST", "/api/nope", 404),  # unknown route: answered before the body is read
        ("PUT", "/api/ping", 405),  # wrong method
        ("GET", "/api/ping", 200),  # a route without a body ignores it
    ],
)
async def test_early_reply_with_a_big_body_leaves_the_connection_usable(
    live: Live, method: str, path: str, expected: int
) -> None:
    conn = RawConnection(None, "localhost")  # type: ignore[arg-type]
    request = conn.request_bytes(method, path, body=b"y" * BIG)
    await _early_reply_then_next_request(live, request, expected)


async def test_early_reply_to_a_huge_declared_body_closes_the_connection(live: Live) -> None:
    """Too big to drain: the reply says ``Connection: close`` and the server hangs up."""
    conn = await RawConnection.open(live)
    try:
        head = conn.request_bytes(
            "POST",
            "/api/sessions",
            headers={"Content-Length": str(100 * 1024 * 1024), "Content-Type": "application/json"},
        )
        await conn.send(head + b"x" * 65536)
        r = await conn.response()
        assert r.status == 413
        assert r.headers["connection"] == "close"
        assert await conn.eof_within(5)
    finally:
        await conn.aclose()
    await assert_healthy(live)


async def test_early_reply_to_a_stalled_body_closes_the_connection(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The body stops arriving: after the drain deadline the reply goes out with
    ``Connection: close`` (never a reply withheld for good)."""
    monkeypatch.setattr(transport_app, "DRAIN_SECONDS", 0.3)
    conn = await RawConnection.open(live)
    try:
        head = conn.request_bytes(
            "POST", "/api/nope", headers={"Content-Length": "100000", "Content-Type": "x/y"}
        )
        await conn.send(head + b"x" * 1000)  # and nothing more
        start = trio.current_time()
        r = await conn.response()
        assert r.status == 404
        assert r.headers["connection"] == "close"
        assert trio.current_time() - start >= 0.25
        assert await conn.eof_within(5)
    finally:
        await conn.aclose()
    await assert_healthy(live)


@pytest.mark.parametrize("app_config", [AppConfig(auth_token=TOKEN)])
async def test_early_401_leaves_the_connection_usable(live: Live) -> None:
    conn = RawConnection(None, "localhost")  # type: ignore[arg-type]
    request = conn.request_bytes("POST", "/api/sessions", body=b"z" * BIG)
    first = await _early_reply_then_next_request(live, request, 401)
    assert first.json() == {"message": "missing Authorization header", "code": "unauthorized"}


# --- bad input never breaks the server ----------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [b'{"title": "\xc3\x28"}', b"[" * 50_000 + b"]" * 50_000, b'{"a":' * 100 + b"1" + b"}" * 100],
    ids=["bad-utf8", "deep-50k", "depth-100"],
)
async def test_malformed_bodies_are_400(live: Live, body: bytes) -> None:
    conn = await RawConnection.open(live)
    try:
        await conn.send(conn.request_bytes("POST", "/api/sessions", body=body))
        r = await conn.response()
        assert r.status == 400
        assert r.json()["code"] == "invalid_request"
        await conn.send(conn.request_bytes("GET", "/health"))
        assert (await conn.response()).status == 200
    finally:
        await conn.aclose()


async def test_huge_header_is_refused_and_the_server_stays_healthy(live: Live) -> None:
    conn = await RawConnection.open(live)
    try:
        request = conn.request_bytes("GET", "/api/ping", headers={"X-Big": "h" * 200_000})
        async with trio.open_nursery() as nursery:

            async def send() -> None:
                with contextlib.suppress(trio.BrokenResourceError):  # the server hung up first
                    await conn.send(request)

            nursery.start_soon(send)
            try:
                r = await conn.response()
            except (EOFError, trio.BrokenResourceError):
                pass  # hung up without an answer: also a refusal
            else:
                assert 400 <= r.status < 500
    finally:
        await conn.aclose()
    await assert_healthy(live)


# --- 405 and WebSocket auth ----------------------------------------------------------------------


async def test_405_keeps_the_allow_header(live: Live) -> None:
    conn = await RawConnection.open(live)
    try:
        await conn.send(conn.request_bytes("DELETE", "/api/sessions"))
        r = await conn.response()
        assert r.status == 405
        assert {m.strip() for m in r.headers["allow"].split(",")} >= {"GET", "POST"}
        assert r.headers["content-type"] == "application/json"
        assert r.json()["code"] == "method_not_allowed"
    finally:
        await conn.aclose()


@pytest.mark.parametrize("app_config", [AppConfig(auth_token=TOKEN)])
async def test_websocket_without_a_token_is_refused(live: Live) -> None:
    status, _, body = await ws_handshake(live.url, [])
    assert status == 401
    assert json.loads(body)["code"] == "unauthorized"
    status, _, _ = await ws_handshake(live.url, [("Authorization", f"Bearer {TOKEN}")])
    assert status == 101
    await assert_healthy(live)


# --- slow readers are dropped by the kernel -------------------------------------------------------


def test_listening_sockets_bound_stuck_writers() -> None:
    """Hypercorn shields its writes; TCP_USER_TIMEOUT and a bounded SO_SNDBUF on the listening
    socket (inherited by accepted ones) let the kernel drop a client that stopped reading."""
    config = hypercorn_config(ServeConfig(host="127.0.0.1", port=0))
    sockets = config.create_sockets()
    try:
        (sock,) = sockets.insecure_sockets
        user_timeout = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT)
        assert user_timeout == TCP_USER_TIMEOUT_MS
        send_buffer = sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
        assert SEND_BUFFER <= send_buffer <= 2 * SEND_BUFFER  # Linux doubles the request
    finally:
        for sock in sockets.insecure_sockets:
            sock.close()
