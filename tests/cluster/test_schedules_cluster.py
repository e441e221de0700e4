"""Scheduled runs on a cluster (decision 0028): three nodes on one PostgreSQL database all run
a scheduler and all wake at each occurrence; the compare-and-set claim lets exactly one of
them fire it. A schedule every two seconds (the sixth cron field is seconds) fires several
occurrences; then every occurrence made exactly one session, and exactly one node's log says
it fired it.

Real clock: the nodes are other processes. The waits are bounded polls scaled by ``slow()``;
an occurrence the nodes were all too busy to see in its second fires late, once (a missed
occurrence), so the count is what the schedule says it fired, never a fixed number."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import httpx
import pytest
import trio

from tests.cluster._clients import AGENT, create, eventually, head, idle
from tests.cluster._nodes import Cluster, node_client
from tests.slowness import slow

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

OCCURRENCES = 4
FIRED = re.compile(r"schedule (\S+): firing the occurrence of (.+)$", re.MULTILINE)


async def schedule_of(http: httpx.AsyncClient, schedule_id: str) -> dict[str, Any]:
    r = await http.get(f"/api/schedules/{schedule_id}")
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


async def test_a_schedule_fires_once_per_occurrence_on_a_three_node_cluster(
    nodes: Cluster,
) -> None:
    n1, n2, n3 = await nodes.start_all(["n1", "n2", "n3"])
    async with node_client(n1) as h1, node_client(n2) as h2, node_client(n3) as h3:
        body = {"cron": "* * * * * */2", "timezone": "UTC", "agent": AGENT}
        r = await h2.post("/api/schedules", json={**body, "message": "tick", "title": "tick"})
        assert r.status_code == 201, r.text
        schedule_id = r.json()["id"]
        assert (await schedule_of(h3, schedule_id))["cron"] == "* * * * * */2"  # shared

        async def fired_enough() -> bool:
            fires: int = (await schedule_of(h1, schedule_id))["fires"]
            return fires >= OCCURRENCES

        await eventually("occurrences fired", fired_enough, slow(60))
        r = await h3.post(f"/api/schedules/{schedule_id}/pause")
        assert r.status_code == 200 and r.json()["paused"] is True
        fires: int = r.json()["fires"]  # claims made before the pause; none after it

        async def all_recorded() -> bool:
            titled = [s for s in (await h2.get("/api/sessions")).json() if s["title"]]
            return len(titled) >= fires

        await eventually("every fired occurrence's session", all_recorded, slow(30))
        sessions = (await h1.get("/api/sessions")).json()
        titles = Counter(s["title"] for s in sessions)
        assert len(sessions) == fires >= OCCURRENCES, titles
        assert all(t.startswith("tick (") for t in titles), titles
        assert max(titles.values()) == 1, f"an occurrence fired twice: {titles}"
        final = await schedule_of(h2, schedule_id)
        assert final["fires"] == fires and final["last_error"] == "", final
        # Each occurrence was fired by exactly one node (each node logs what it fires).
        logs = {node.name: node.log_text() for node in (n1, n2, n3)}
        fired = Counter(
            when
            for text in logs.values()
            for sid, when in FIRED.findall(text)
            if sid == schedule_id
        )
        assert len(fired) == fires and max(fired.values()) == 1, fired
        assert {f"tick ({when})" for when in fired} == set(titles)


async def test_occurrences_for_a_session_another_node_owns_are_forwarded_to_it(
    nodes: Cluster,
) -> None:
    n1, n2, n3 = await nodes.start_all(["n1", "n2", "n3"])
    async with (
        node_client(n1) as h1,
        node_client(n2) as h2,
        trio.open_nursery() as nursery,
    ):
        session = await create(h1)

        async def subscribed(*, task_status: trio.TaskStatus[None]) -> None:
            # A subscriber keeps the session's actor, and so its ownership, on n1.
            async with h1.stream("GET", f"/api/sessions/{session}/events") as r:
                assert r.status_code == 200
                task_status.started()
                async for _ in r.aiter_bytes():
                    pass

        await nursery.start(subscribed)

        async def owned_by_n1() -> bool:
            return (await head(nodes.dsn, session))[1] == "n1"

        await eventually("n1 owns the session", owned_by_n1, slow(20))
        body = {"cron": "* * * * * */2", "agent": AGENT, "message": "tick", "session_id": session}
        r = await h2.post("/api/schedules", json=body)
        assert r.status_code == 201, r.text
        schedule_id = r.json()["id"]

        def fired_elsewhere() -> bool:  # an occurrence n2 or n3 won: forwarded to n1
            return any(schedule_id in node.log_text() for node in (n2, n3))

        await eventually("an occurrence fired by another node", fired_elsewhere, slow(60))
        paused = (await h2.post(f"/api/schedules/{schedule_id}/pause")).json()
        fires: int = paused["fires"]

        async def settled() -> bool:  # every firing recorded, the last turn over
            got = await schedule_of(h2, schedule_id)
            done = got["last_occurrence"] == paused["last_occurrence"] and got["last_fired_at"]
            return bool(done) and await idle(nodes.dsn, session)

        await eventually("the last firing recorded", settled, slow(60))
        assert (await head(nodes.dsn, session))[1] == "n1"  # it never moved
        # Every occurrence reached the session once: a user message, or a follow-up still
        # queued (one that came as a turn ended waits for the next turn).
        history = (await h1.get(f"/api/sessions/{session}")).json()["messages"]
        ticks = [m for m in history if m["message"]["content"] == "tick"]
        queue = (await h2.get(f"/api/sessions/{session}/queue")).json()
        assert len(ticks) + queue["followup"]["depth"] == fires >= 1, (ticks, queue, fires)
        logs = "".join(node.log_text() for node in (n1, n2, n3))
        assert "did not start" not in logs and "occurrence failed" not in logs, logs[-3000:]
        assert (await schedule_of(h1, schedule_id))["last_error"] == ""
        nursery.cancel_scope.cancel()
