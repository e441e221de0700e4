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

from tests.cluster._clients import AGENT, eventually
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
