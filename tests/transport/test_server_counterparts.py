"""Counterparts of the upstream server tests (spec/upstream_session_manager_test.go.txt), over
real HTTP against a live server on 127.0.0.1:0.

REAL clock: every wait is bounded by ``trio.fail_after``.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio

from greenroom.domain import Message
from tests.slowness import slow
from tests.transport.support import AGENT, Live, message_body, read_to_end, sse_frames, user_body


@pytest.fixture
def runtime_options() -> dict[str, Any]:
    return {"hold": True}  # a turn streams until the test releases it


async def _stored_contents(client: httpx.AsyncClient, sid: str) -> list[str]:
    r = await client.get(f"/api/sessions/{sid}")
    assert r.status_code == 200
    return [m["message"]["content"] for m in r.json()["messages"]]


# upstream: TestServer_AddMessage_Returns409WhileSessionStreaming
async def test_add_message_returns_409_while_session_streaming(live: Live) -> None:
    runtime = live.env.runtime
    sid = await live.env.new_session()
    async with httpx.AsyncClient(base_url=live.url, timeout=slow(10)) as client:
        run = f"/api/sessions/{sid}/agent/{AGENT}"
        async with client.stream("POST", run, json=user_body("hi")) as stream:
            assert stream.status_code == 200
            with trio.fail_after(slow(5)):
                await runtime.turn_started.wait()

            r = await client.post(
                f"/api/sessions/{sid}/messages", json=message_body("user", "should be rejected")
            )
            assert r.status_code == 409
            assert r.json()["code"] == "session_busy"

            runtime.release()
            await read_to_end(sse_frames(stream))  # drain, like `for range ch {}`
        assert await _stored_contents(client, sid) == ["hi"]
        r = await client.post(
            f"/api/sessions/{sid}/messages", json=message_body("user", "accepted now")
        )
        assert r.status_code == 201
        assert await _stored_contents(client, sid) == ["hi", "accepted now"]


# upstream: TestServer_UpdateMessage_Returns409WhileSessionStreaming
async def test_update_message_returns_409_while_session_streaming(live: Live) -> None:
    runtime = live.env.runtime
    sid = await live.env.new_session()
    message_id = await live.env.store.add_message(sid, Message.user("original"))
    async with httpx.AsyncClient(base_url=live.url, timeout=slow(10)) as client:
        run = f"/api/sessions/{sid}/agent/{AGENT}"
        async with client.stream("POST", run, json=user_body("hi")) as stream:
            assert stream.status_code == 200
            with trio.fail_after(slow(5)):
                await runtime.turn_started.wait()

            r = await client.patch(
                f"/api/sessions/{sid}/messages/{message_id}",
                json=message_body("user", "should be rejected"),
            )
            assert r.status_code == 409
            assert r.json()["code"] == "session_busy"

            runtime.release()
            await read_to_end(sse_frames(stream))
        assert await _stored_contents(client, sid) == ["original", "hi"]
        r = await client.patch(
            f"/api/sessions/{sid}/messages/{message_id}", json=message_body("user", "edited")
        )
        assert r.status_code == 200
        assert await _stored_contents(client, sid) == ["edited", "hi"]


# upstream: TestElicitationEndpoint_RoutesAnswerToSessionRuntime
async def test_elicitation_endpoint_routes_answer_to_session_runtime(live: Live) -> None:
    runtime = live.env.runtime
    sid = await live.env.new_session()
    await live.env.registry.attach_runtime(sid, runtime)  # the session's runtime, registered
    async with httpx.AsyncClient(base_url=live.url, timeout=slow(10)) as client:
        body = {"action": "accept", "content": {"confirmed": True}, "elicitation_id": "eid-42"}
        r = await client.post(f"/api/sessions/{sid}/elicitation", json=body)
        assert r.status_code == 200
        assert r.json() is None
    # Passed verbatim: the elicitation_id must reach the runtime for per-request routing.
    assert runtime.elicitation_answers == [("accept", {"confirmed": True}, "eid-42")]
