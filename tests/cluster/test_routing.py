"""Commands reach the owner from any node, subscriptions are served by every node, one node
wins a claim race, and a delete through any node ends the session everywhere."""

from __future__ import annotations

import json
from collections import Counter

import httpx
import pytest
import trio
from trio_websocket import open_websocket_url

from tests.cluster._clients import (
    Roamer,
    all_caught_up,
    all_exited,
    create,
    error_code,
    eventually,
    head,
    idle,
    run_to_end,
    start_run,
    verify,
)
from tests.cluster._nodes import Cluster, Node, node_client
from tests.crash_support import user
from tests.pg import run_sql
from tests.slowness import slow

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


async def test_routing_claim_race_and_delete(nodes: Cluster) -> None:
    n1, n2, n3 = await nodes.start_all(["n1", "n2", "n3"])
    async with (
        node_client(n1) as h1,
        node_client(n2) as h2,
        node_client(n3) as h3,
        trio.open_nursery() as nursery,
    ):
        # Routing: created on n1, run through n2, watched on each node.
        session = await create(h1)
        roamers = [Roamer.of(f"on-{n}", session, [n]) for n in ("n1", "n2", "n3")]
        for roamer in roamers:
            nursery.start_soon(roamer.run, nodes)
        types = await run_to_end(h2, session, "hello")
        assert types[0] == "stream_started" and types[-1] == "stream_stopped", types
        await eventually("turn over", lambda: idle(nodes.dsn, session), 20)
        sql = "SELECT last_seq FROM gr_heads WHERE session_id = %s"
        (last,) = (await run_sql(nodes.dsn, sql, session))[0]
        await all_caught_up(roamers, {session: int(last)}, 10)
        seen = [dict(r.log().entries) for r in roamers]
        assert seen[0] == seen[1] == seen[2] and len(seen[0]) == last
        # A WebSocket subscription on a node that does not own the session: the same log.
        _, owner, _, _ = await head(nodes.dsn, session)
        other = next(n for n in (n1, n2, n3) if n.name != owner)
        sse = [(seq, json.loads(body)) for seq, body in roamers[0].watcher.entries]
        assert await ws_replay(other, session, int(last)) == sse

        # Claim race: three nodes start a turn of one idle session at once.
        raced = await create(h3)
        answers: dict[str, tuple[int, str]] = {}

        async def race(name: str, http: httpx.AsyncClient) -> None:
            response = await start_run(http, raced, f"race via {name}")
            answers[name] = (response.status_code, error_code(response))

        async with trio.open_nursery() as racers:
            for name, http in (("n1", h1), ("n2", h2), ("n3", h3)):
                racers.start_soon(race, name, http)
        statuses = Counter(answers.values())
        assert statuses == {(200, ""): 1, (409, "session_busy"): 2}, answers
        await eventually("race turn over", lambda: idle(nodes.dsn, raced), 20)
        sql = "SELECT count(*) FROM gr_turns WHERE session_id = %s"
        assert (await run_sql(nodes.dsn, sql, raced))[0][0] == 1

        # Delete through a node that does not own the session; watched on the others.
        epoch, owner, _, _ = await head(nodes.dsn, session)
        via = next(n for n in (n1, n2, n3) if n.name != owner)
        async with node_client(via) as http:
            assert (await http.delete(f"/api/sessions/{session}")).status_code == 200
        await all_exited(roamers, 10)
        for http in (h1, h2, h3):
            assert (await http.get(f"/api/sessions/{session}")).status_code == 404
            run = await http.post(f"/api/sessions/{session}/agent/crash", json=user("back?"))
            assert run.status_code == 404, run.text
        assert (await head(nodes.dsn, session))[0] > epoch  # fenced for every former writer
        nursery.cancel_scope.cancel()
    await verify(nodes, roamers, deleted=frozenset({session}))


async def ws_replay(node: Node, session: str, last: int) -> list[tuple[int, object]]:
    """Subscribe over the WebSocket from seq 0 and take the events up to ``last``."""
    got: list[tuple[int, object]] = []
    with trio.fail_after(slow(15)):
        async with open_websocket_url(node.url.replace("http://", "ws://") + "/api/ws") as ws:
            frame = {"id": "s", "op": "subscribe", "session_id": session, "since": 0}
            await ws.send_message(json.dumps(frame))
            while not got or got[-1][0] < last:
                reply = json.loads(await ws.get_message())
                assert "error" not in reply, reply
                if reply.get("seq"):
                    got.append((reply["seq"], reply["event"]))
    return got
