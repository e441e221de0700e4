"""Defects of the black-box probe of issue 23 (items 7, 9, 10), one test each, through the
quart test client over an in-memory store and a FakeRuntime (no clock needed)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
from quart.testing import QuartClient as Client

from greenroom.domain import INT64_MAX, MAX_TOKEN_COUNT, add_cost, add_count
from tests.fakes import drain, user
from tests.transport.support import AGENT, Env, user_body


async def body_of(response: Any) -> Any:
    return json.loads(await response.get_data())


async def finish_turn(env: Env, sid: str) -> None:
    stream = await env.registry.session(sid).run(AGENT, (user("hi"),))
    with trio.fail_after(5):
        await drain(stream)


# --- 7. body-less POSTs took any content type; tools/toggle was not audited --------------------

NOT_JSON = [
    ({"Content-Type": "text/plain"}, b"x"),
    ({"Content-Type": "application/x-www-form-urlencoded"}, b"a=b"),
    ({"Content-Type": "multipart/form-data; boundary=x"}, b""),
    ({"Content-Type": "text/plain"}, b""),
    ({}, b"a=b"),
]


@pytest.mark.parametrize("route", ["tools/toggle", "thinking/toggle", "cancel"])
@pytest.mark.parametrize(("headers", "content"), NOT_JSON)
async def test_body_less_posts_refuse_what_is_not_json(
    client: Client, env: Env, route: str, headers: dict[str, str], content: bytes
) -> None:
    sid = await env.new_session()
    r = await client.post(f"/api/sessions/{sid}/{route}", data=content, headers=headers)
    assert r.status_code == 415, await r.get_data()
    assert (await body_of(r))["code"] == "unsupported_media_type"
    session = await env.registry.get(sid)
    assert (session.tools_approved, session.thinking, session.approvals) == (False, True, ())


async def test_tools_toggle_without_a_body_works_and_is_audited(client: Client, env: Env) -> None:
    sid = await env.new_session()
    r = await client.post(f"/api/sessions/{sid}/tools/toggle")
    assert r.status_code == 200, await r.get_data()
    r = await client.post(f"/api/sessions/{sid}/tools/toggle", json={})  # JSON is fine
    assert r.status_code == 200, await r.get_data()
    audited = await body_of(await client.get(f"/api/sessions/{sid}/approvals"))
    assert [(a["tool"], a["decision"]) for a in audited] == [
        ("*", "tools-toggle-on"),
        ("*", "tools-toggle-off"),
    ]
    assert all(a["decided_by"] for a in audited)  # the client's address


# --- 9. a 429 for a batch that does not fit queued part of it ----------------------------------


@pytest.mark.parametrize("runtime_options", [{"queue_capacity": 16}])
@pytest.mark.parametrize("route", ["steer", "followup"])
async def test_a_batch_that_does_not_fit_is_refused_whole(
    client: Client, env: Env, route: str
) -> None:
    sid = await env.new_session()
    await finish_turn(env, sid)
    queued = env.runtime.steered if route == "steer" else env.runtime.followed
    for count in (17, 64):
        texts = [f"m{n}" for n in range(count)]
        r = await client.post(f"/api/sessions/{sid}/{route}", json=user_body(*texts))
        assert r.status_code == 429
        assert (await body_of(r))["code"] == "queue_full"
        assert queued == []  # nothing queued: a retry duplicates nothing
    r = await client.post(f"/api/sessions/{sid}/{route}", json=user_body(*["x"] * 16))
    assert r.status_code == 202
    assert len(queued) == 16


# --- 10. counters overflowed ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"input_tokens": INT64_MAX, "output_tokens": 0}, "$.input_tokens"),
        ({"input_tokens": 0, "output_tokens": MAX_TOKEN_COUNT + 1}, "$.output_tokens"),
        ({"input_tokens": 0, "output_tokens": 0, "cost": 1e300}, "$.cost"),
    ],
)
async def test_token_counters_are_bounded(
    client: Client, env: Env, body: dict[str, Any], path: str
) -> None:
    sid = await env.new_session()
    r = await client.patch(f"/api/sessions/{sid}/tokens", json=body)
    assert r.status_code == 400
    assert (await body_of(r))["path"] == path
    ok = {"input_tokens": MAX_TOKEN_COUNT, "output_tokens": MAX_TOKEN_COUNT, "cost": 1e15}
    r = await client.patch(f"/api/sessions/{sid}/tokens", json=ok)
    assert r.status_code == 200, await r.get_data()


def test_usage_added_to_a_counter_never_leaves_64_bits() -> None:
    assert add_count(INT64_MAX - 1, 10) == INT64_MAX
    assert add_count(MAX_TOKEN_COUNT, 2**40) == MAX_TOKEN_COUNT + 2**40
    assert add_cost(1e15, 1e300) == 1e15
    assert add_cost(1.5, float("nan")) == 1.5
