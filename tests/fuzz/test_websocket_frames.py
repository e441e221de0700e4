"""Arbitrary JSON to every WebSocket op of a live ``greenroom serve``: surrogates, huge and
negative numbers, deep nesting, wrong types. Each frame must get exactly one reply, the
connection must stay open (a ``ping`` right after it is answered), and the server stays healthy.

REAL clock and a real subprocess; every wait is bounded. Each example opens its own connection
in its own ``trio.run`` (hypothesis drives a synchronous test).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import trio
from hypothesis import HealthCheck, given, settings, strategies as st
from trio_websocket import open_websocket_url

from greenroom.transport import OPERATIONS
from tests.fuzz.run import TOKEN, live_server, run_one_turn
from tests.slowness import slow

OPS = sorted({op.name for op in OPERATIONS if op.websocket} | {"subscribe", "unsubscribe"})
# Ops that wait or stream: their frames are fuzzed with short waits (below) or end by
# themselves (run: the echo model's turn).
FIELDS = [
    "session_id",
    "message_id",
    "agent",
    "agent_name",
    "title",
    "messages",
    "message",
    "input_tokens",
    "output_tokens",
    "cost",
    "permissions",
    "since",
    "confirmation",
    "safety_policy",
    "summary",
    "session_ids",
    "starred",
    "action",
    "content",
    "idempotency_key",
    "model",
    "message_index",
]

SURROGATES = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)  # lone ones, unpaired
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(st.characters() | SURROGATES, max_size=20),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=12,
)
deep = st.integers(min_value=1, max_value=200).map(lambda n: "[" * n + "]" * n)


SESSION = "@session@"  # replaced by a fresh session's id when the frame is sent


@st.composite
def frames(draw: st.DrawFn) -> str:
    frame: dict[str, Any] = {"id": draw(st.just("x") | values), "op": draw(st.sampled_from(OPS))}
    if draw(st.booleans()):
        frame["session_id"] = SESSION  # a fresh session per example: reach the handlers
    for name in draw(st.lists(st.sampled_from(FIELDS), max_size=5, unique=True)):
        frame[name] = draw(values)
    frame["wait"] = "10ms"  # status waits briefly
    frame["timeout"] = "10ms"
    text = json.dumps(frame)  # lone surrogates come out as \ud800 escapes
    if draw(st.integers(0, 9)) == 0:
        text = text[:-1] + ', "x": ' + draw(deep) + "}"  # nesting beyond the limit
    return text


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with live_server() as url:
        run_one_turn(url)
        yield url


async def _exchange(url: str, text: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Send ``text`` then a ping; returns (the frames received, the ping's reply) once both
    requests are answered (replies of concurrent requests may come in either order)."""
    ws_url = url.replace("http://", "ws://", 1) + "/api/ws"
    protocols = [f"bearer.{TOKEN}"]
    seen: list[dict[str, Any]] = []
    with trio.fail_after(slow(20)):
        async with open_websocket_url(ws_url, subprotocols=protocols) as ws:
            await ws.send_message(json.dumps({"id": "new", "op": "create"}))
            created = json.loads(await ws.get_message())
            assert created["ok"], created
            await ws.send_message(text.replace(SESSION, created["result"]["id"]))
            await ws.send_message(json.dumps({"id": "after", "op": "ping"}))
            after: dict[str, Any] = {}
            while not (after and any("ok" in f for f in seen)):
                frame = json.loads(await ws.get_message())
                if frame.get("id") == "after" and "ok" in frame:
                    after = frame
                else:
                    seen.append(frame)
            return seen, after


@pytest.mark.slow
def test_any_frame_gets_a_reply_and_the_connection_stays_open(server: str) -> None:
    url = server

    @given(text=frames())
    @settings(
        max_examples=150,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def check(text: str) -> None:
        seen, after = trio.run(_exchange, url, text)
        assert after["ok"] is True, after  # the connection outlived the frame
        replies = [f for f in seen if "ok" in f]
        assert len(replies) == 1, (text, seen)  # every frame is answered, once
        for reply in replies:
            if not reply["ok"] and reply["error"]["code"] != "wait_timed_out":  # 503 by design
                assert reply["error"]["status"] < 500, (text, reply)

    check()
    health = httpx.get(f"{url}/health", timeout=slow(10))
    assert health.status_code == 200
