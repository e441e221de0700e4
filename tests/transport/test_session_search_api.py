"""``GET /api/sessions`` with search parameters and the WebSocket ``list`` op (decision 0026),
on the memory, SQLite (a file) and PostgreSQL (a database per test) stores: the list without
parameters keeps docker-agent's shape; ``q`` finds the one session that spoke of zebracorns;
pages follow ``next_cursor``; bad input is a 400 naming the parameter.

Real clock: the SQL stores work in threads."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from quart.testing import QuartClient as Client
from trio_websocket import open_websocket_url

from greenroom.domain import ChatMessage, Message, Session
from greenroom.persistence import Store
from tests.test_store_contract import KINDS, open_store
from tests.transport.support import Env, Live, WSClient


@pytest.fixture(params=KINDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    async with open_store(request.param, tmp_path) as opened:
        yield opened


async def add(env: Env, title: str, *texts: str, starred: bool = False) -> str:
    items = tuple(Message(ChatMessage(role="user", content=t)) for t in texts)
    created = await env.registry.create(Session.new(title=title, items=items, starred=starred))
    return created.id


async def get(client: Client, query: str) -> tuple[int, Any]:
    r = await client.get(f"/api/sessions{query}")
    return r.status_code, await r.get_json()


async def test_q_zebracorn_returns_that_session_and_not_the_others(
    env: Env, client: Client
) -> None:
    zoo = await add(env, "Zoo day", "We met a zebracorn by the gate")
    await add(env, "Farm", "cows and a zebra", starred=True)
    await add(env, "Notes", "unicorns are not real")
    status, body = await get(client, "?q=zebracorn")
    assert status == 200
    assert [s["id"] for s in body["sessions"]] == [zoo]
    assert body["next_cursor"] is None
    assert body["sessions"][0]["title"] == "Zoo day"
    assert body["sessions"][0]["num_messages"] == 1
    status, body = await get(client, "?q=zebra&starred=true")
    assert [s["title"] for s in body["sessions"]] == ["Farm"]


async def test_without_parameters_the_list_is_docker_agents_array(env: Env, client: Client) -> None:
    for n in range(3):
        await add(env, f"s{n}", "hello")
    status, body = await get(client, "")
    assert status == 200 and isinstance(body, list) and len(body) == 3
    assert [s["title"] for s in body] == ["s2", "s1", "s0"]
    assert set(body[0]) == {
        "id", "title", "created_at", "num_messages", "input_tokens", "output_tokens",
        "working_dir", "starred", "agent_file", "agent_name",
    }  # fmt: skip
    status, unrelated = await get(client, "?foo=bar")  # unknown parameters change nothing
    assert unrelated == body
    status, page = await get(client, "?limit=200")
    assert page == {"sessions": body, "next_cursor": None}


async def test_pages_follow_next_cursor_while_sessions_are_added(env: Env, client: Client) -> None:
    for n in range(7):
        await add(env, f"t{n}", f"zebracorn {n}")
    walks = [
        ("?limit=3", "?limit=200"),
        ("?limit=3&q=zebracorn", "?q=zebracorn&limit=200"),
        ("?limit=2&q=zebracorn&order=recent", "?q=zebracorn&limit=200"),
    ]
    for query, whole in walks:
        _, everything = await get(client, whole)
        expected = [s["id"] for s in everything["sessions"]]
        seen: list[str] = []
        url = query
        for _ in range(10):  # bounded: at most 4 pages
            status, body = await get(client, url)
            assert status == 200, body
            seen += [s["id"] for s in body["sessions"]]
            await add(env, "late", "zebracorn late")  # newer: not part of this walk
            if body["next_cursor"] is None:
                break
            url = f"{query}&cursor={body['next_cursor']}"
        assert len(seen) == len(set(seen)) and set(seen) == set(expected), query


def b64(value: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


@pytest.mark.parametrize(
    ("query", "path"),
    [
        ("?since=yesterday", "query.since"),
        ("?since=2025-01-31T12:00:00", "query.since"),  # no offset
        ("?since=2025-02-30T12:00:00Z", "query.since"),  # no such day
        ("?until=2025-01-31 12:00:00Z", "query.until"),
        ("?limit=0", "query.limit"),
        ("?limit=201", "query.limit"),
        ("?limit=ten", "query.limit"),
        ("?limit=-1", "query.limit"),
        ("?starred=maybe", "query.starred"),
        ("?order=random", "query.order"),
        ("?agent=", "query.agent"),
        ("?q=" + "x" * 501, "query.q"),
        ("?cursor=%25%25%25", "query.cursor"),
        ("?cursor=" + b64({"a": 1}), "query.cursor"),
        ("?cursor=" + b64(["recent", None, 1, 2]), "query.cursor"),
        ("?cursor=" + b64(["recent", 1.5, 1, 2, 3]), "query.cursor"),
        ("?cursor=" + b64(["recent", None, "1", 2, 3]), "query.cursor"),
        ("?cursor=" + b64(["recent", None, 2**64, 2, 3]), "query.cursor"),
        ("?cursor=" + b64(["recent", None, True, 2, 3]), "query.cursor"),
        ("?cursor=" + b64(["sideways", None, 1, 2, 3]), "query.cursor"),
        ("?q=zebra&cursor=" + b64(["recent", None, 1, 2, 3]), "query.cursor"),  # wrong order
        ("?cursor=" + b64(["relevance", -1.0, 1, 2, 3]), "query.cursor"),  # no q: recent
    ],
)
async def test_bad_input_is_a_400_naming_the_parameter(
    env: Env, client: Client, query: str, path: str
) -> None:
    status, body = await get(client, query)
    assert status == 400, body
    assert body["path"] == path and body["code"] == "invalid_request", body


async def test_a_valid_cursor_of_another_walk_is_only_a_position(env: Env, client: Client) -> None:
    await add(env, "a", "x")
    status, body = await get(client, "?cursor=" + b64(["recent", None, 0, 0, 10**6]))
    assert status == 200 and body == {"sessions": [], "next_cursor": None}


@pytest.mark.parametrize("store", ["memory"], indirect=True)
async def test_the_websocket_list_op_searches_too(env: Env, live: Live) -> None:
    zoo = await add(env, "Zoo", "a zebracorn")
    others = [await add(env, f"o{n}", "nothing") for n in range(3)]
    async with open_websocket_url(live.ws_url) as ws:
        client = WSClient(ws)
        assert len(await client.result("list")) == 4  # no parameters: the array
        page = await client.result("list", q="zebracorn")
        assert [s["id"] for s in page["sessions"]] == [zoo]
        page = await client.result("list", limit=2)
        assert [s["id"] for s in page["sessions"]] == [others[2], others[1]]
        page = await client.result("list", limit=2, cursor=page["next_cursor"])
        assert [s["id"] for s in page["sessions"]] == [others[0], zoo]
        assert page["next_cursor"] is None
        frame = await client.call("list", cursor="nope!")
        assert frame["ok"] is False and frame["error"]["path"] == "$.cursor"
        frame = await client.call("list", limit=0)
        assert frame["error"]["status"] == 400 and frame["error"]["path"] == "$.limit"


async def test_the_python_client_searches_and_pages() -> None:
    from greenroom.testing import open_greenroom

    async with open_greenroom() as gr:
        for n in range(3):
            text = "a zebracorn" if n == 1 else "nothing"
            items = (Message(ChatMessage(role="user", content=text)),)
            await gr.store.add_session(Session.new(title=f"s{n}", items=items, starred=n == 2))
        page = await gr.client.search_sessions("zebracorn")
        assert [s["title"] for s in page["sessions"]] == ["s1"]
        page = await gr.client.search_sessions(limit=2)
        assert [s["title"] for s in page["sessions"]] == ["s2", "s1"]
        page = await gr.client.search_sessions(limit=2, cursor=page["next_cursor"])
        assert [s["title"] for s in page["sessions"]] == ["s0"] and page["next_cursor"] is None
        page = await gr.client.search_sessions(starred=True)
        assert [s["title"] for s in page["sessions"]] == ["s2"]
