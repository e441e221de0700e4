"""A seeded chaos run: random operations on random nodes while nodes are killed and
restarted, stopped and continued, or cut off from the database; then quiesce and check every
invariant (tests/cluster/_checker.py).

``make test`` runs a minute of it (``GREENROOM_CHAOS_SECONDS``, default 60) from one fixed seed
(``GREENROOM_CHAOS_SEED``, default 688201; the operations still interleave as the machine's
timing has it). Other seeds, by hand (``random`` draws one and prints it)::

    GREENROOM_CHAOS_SEED=random .venv/bin/pytest tests/cluster/test_chaos.py -s
"""

from __future__ import annotations

import os
import random
from collections import Counter
from functools import partial

import attrs
import httpx
import pytest
import trio

from tests.cluster._clients import (
    Roamer,
    create,
    eventually,
    idle,
    start_run,
    verify,
)
from tests.cluster._nodes import Cluster, Node, node_client
from tests.pg import run_sql
from tests.slowness import slow

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

SECONDS = float(os.environ.get("GREENROOM_CHAOS_SECONDS", "60"))
_SEED = os.environ.get("GREENROOM_CHAOS_SEED", "688201")
SEED = random.randrange(1_000_000) if _SEED == "random" else int(_SEED)
SESSIONS = 8
WORKERS = 4
NAMES = ("n1", "n2", "n3")  # each reaches the database through a proxy of its own
OP_LIMIT = slow(8)  # seconds one client operation may take (a stopped node never answers)


@attrs.define
class Chaos:
    nodes: Cluster
    rng: random.Random
    sessions: list[str]
    deleted: set[str] = attrs.field(factory=set)
    reruns: Counter[str] = attrs.field(factory=Counter)
    ops: Counter[str] = attrs.field(factory=Counter)
    faults: list[str] = attrs.field(factory=list)

    def pick_node(self) -> Node | None:
        usable = [n for n in self.nodes.alive() if not n.stopped]
        return self.rng.choice(usable) if usable else None

    async def worker(self) -> None:
        while True:
            node = self.pick_node()
            live = [s for s in self.sessions if s not in self.deleted]
            if node is None or not live:
                await trio.sleep(0.1)  # real clock: wait for a node to come back
                continue
            session = self.rng.choice(live)
            op = self.rng.choices(["run", "get", "decide", "cancel", "delete"], [8, 3, 3, 1, 0.05])
            with trio.move_on_after(OP_LIMIT):
                try:
                    async with node_client(node, timeout=OP_LIMIT) as http:
                        outcome = await self.operate(http, op[0], session)
                except httpx.HTTPError:
                    outcome = "transport error"
                self.ops[f"{op[0]} {outcome}"] += 1
            await trio.sleep(self.rng.uniform(0.05, 0.3))  # real clock: a client's pace

    async def operate(self, http: httpx.AsyncClient, op: str, session: str) -> str:
        base = f"/api/sessions/{session}"
        if op == "run":
            return str((await start_run(http, session, "chaos")).status_code)
        if op == "get":
            return str((await http.get(base)).status_code)
        if op == "cancel":
            return str((await http.post(f"{base}/cancel", json={})).status_code)
        if op == "delete":
            response = await http.delete(base)
            if response.status_code == 200:
                self.deleted.add(session)
            return str(response.status_code)
        response = await http.get(f"{base}/recovery/decisions")
        if response.status_code != 200 or not response.json().get("in_doubt"):
            return f"none {response.status_code}"
        call = response.json()["in_doubt"][0]["tool_call_id"]
        action = self.rng.choice(["skip", "done", "rerun"])
        if action == "rerun":
            self.reruns[call] += 1  # counted when asked: an unanswered rerun may still run
        body = {"tool_call_id": call, "action": action, "decided_by": "chaos"}
        response = await http.post(f"{base}/recovery/decisions", json=body)
        return f"{action} {response.status_code}"

    async def faulter(self) -> None:
        ttl = self.nodes.ttl
        while True:
            await trio.sleep(self.rng.uniform(4, 7))  # real clock: time between faults
            name = self.rng.choice(NAMES)
            node = self.nodes.node(name)
            fault = self.rng.choice(["kill", "stop", "partition"])
            length = self.rng.uniform(0, 2 * ttl)
            self.faults.append(f"{fault} {name} {length:.1f}s")
            if fault == "kill":
                await self.nodes.restart(name)
            elif fault == "stop":
                node.pause()
                await trio.sleep(length)  # real clock: the pause being simulated
                node.resume()
            else:
                assert node.proxy is not None
                node.proxy.pause()
                await trio.sleep(length)  # real clock: the partition being simulated
                node.proxy.resume()


async def test_chaos(nodes: Cluster) -> None:
    print(f"chaos: seed {SEED}, {SECONDS:.0f} s (GREENROOM_CHAOS_SEED to repeat)")
    rng = random.Random(SEED)
    await nodes.start_all(list(NAMES), via_proxy=True)
    async with node_client(nodes.node("n1")) as http:
        sessions = [await create(http) for _ in range(SESSIONS)]
    chaos = Chaos(nodes, rng, sessions)
    roamers = [Roamer.of(f"c{k}", s, rng.sample(NAMES, 3)) for k, s in enumerate(sessions)]
    async with trio.open_nursery() as watching:
        for roamer in roamers:
            watching.start_soon(roamer.run, nodes)
        with trio.move_on_after(SECONDS):
            async with trio.open_nursery() as nursery:
                for _ in range(WORKERS):
                    nursery.start_soon(chaos.worker)
                nursery.start_soon(chaos.faulter)
        print(f"chaos: faults {chaos.faults}")
        print(f"chaos: operations {sorted(chaos.ops.items())}")
        await quiesce(nodes)
        live = [s for s in sessions if s not in chaos.deleted]
        for session in live:
            await eventually("turn ended", partial(idle, nodes.dsn, session), 30)
        heads = dict(await run_sql(nodes.dsn, "SELECT session_id, last_seq FROM gr_heads"))
        with trio.fail_after(slow(30)):
            for roamer in roamers:
                session = roamer.watcher.session_id
                if session in chaos.deleted:
                    await roamer.watcher.exited.wait()
                else:
                    roamer.watcher.expect(int(heads[session]))
                    await roamer.watcher.caught_up.wait()
        for node in nodes.alive():
            async with node_client(node) as http:
                for session in chaos.deleted:
                    assert (await http.get(f"/api/sessions/{session}")).status_code == 404
        watching.cancel_scope.cancel()
    assert chaos.faults and sum(chaos.ops.values()) > 0
    await verify(nodes, roamers, deleted=frozenset(chaos.deleted), reruns=dict(chaos.reruns))


async def quiesce(nodes: Cluster) -> None:
    """Every node running, continued and connected; then their leases settle (2 x ttl)."""
    for name in NAMES:
        node = nodes.node(name)
        node.resume()
        if node.proxy is not None:
            node.proxy.resume()
        if not node.running:
            await nodes.start(name)
    await trio.sleep(slow(2 * nodes.ttl))  # real clock: stale leases expire, sweepers run
