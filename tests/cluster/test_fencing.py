"""A node that stops (SIGSTOP past its lease) or loses only the database (a partition
through its proxy) fences itself: others take its sessions over, nothing it wrote after the
takeover is stored, and it re-joins with a new incarnation."""

from __future__ import annotations

from functools import partial

import pytest
import trio

from tests.cluster._clients import (
    Roamer,
    create,
    decide,
    error_code,
    eventually,
    head,
    in_doubt,
    run_to_end,
    start_run,
    taken_over,
    verify,
)
from tests.cluster._nodes import Cluster, node_client
from tests.cluster.test_failover import (
    TAKEOVER_BOUND,
    has_type,
    lines_at_least,
    owned_by,
    tokens_at_least,
)
from tests.pg import run_sql
from tests.slowness import slow

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


async def incarnation(nodes: Cluster, name: str) -> int:
    sql = "SELECT incarnation FROM gr_nodes WHERE node_id = %s"
    return int((await run_sql(nodes.dsn, sql, name))[0][0])


async def incarnation_above(nodes: Cluster, name: str, old: int) -> bool:
    return await incarnation(nodes, name) > old


async def test_stopped_owner_and_partitioned_owner_fence_themselves(nodes: Cluster) -> None:
    n1, n2, n3 = await nodes.start_all(["n1", "n2"]) + [await nodes.start("n3", via_proxy=True)]
    files = nodes.files
    async with (
        node_client(n1) as h1,
        node_client(n2) as h2,
        node_client(n3) as h3,
        trio.open_nursery() as nursery,
    ):
        # SIGSTOP of the owner for longer than its lease, mid-tool.
        files.hold.touch()
        paused = await create(h1)
        zombie_client = Roamer.of("on-n1", paused, ["n1"])
        survivor_client = Roamer.of("on-n2", paused, ["n2"])
        roamers = [zombie_client, survivor_client]
        assert (await start_run(h1, paused, "call the tool")).status_code == 200  # n1 claims
        for roamer in roamers:
            nursery.start_soon(roamer.run, nodes)
        await eventually("tool started", partial(has_type, zombie_client, "tool_call"), 20)
        epoch = (await head(nodes.dsn, paused))[0]
        old_inc = await incarnation(nodes, "n1")
        n1.pause()
        waited = await eventually(
            "takeover", partial(taken_over, nodes.dsn, paused, epoch, "n1"), TAKEOVER_BOUND
        )
        print(f"takeover of a SIGSTOPped owner: {waited:.2f} s (ttl {nodes.ttl} s)")
        (call,) = await in_doubt(h2, paused)
        await decide(h2, paused, call, "skip")
        files.hold.unlink()  # the stopped node's tool may end now: its result is fenced
        assert "stream_stopped" in await run_to_end(h2, paused, "on the new owner")
        n1.resume()
        await eventually("n1 re-joins", partial(incarnation_above, nodes, "n1", old_inc), 20)
        assert "fenc" in n1.log_text().lower(), n1.log_text()[-2000:]
        # Nothing of the stopped owner's epoch after the takeover (what it tried is fenced).
        sql = "SELECT count(*) FROM gr_events WHERE session_id = %s AND epoch <= %s AND seq > %s"
        entries = survivor_client.watcher.entries
        takeover_seq = min(seq for seq, body in entries if b"turn_interrupted" in body)
        assert (await run_sql(nodes.dsn, sql, paused, epoch, takeover_seq))[0][0] == 0

        # A database-only partition of the owner (its proxy pauses): it fences itself.
        parted = await create(h3)
        cut_off = Roamer.of("on-n3", parted, ["n3"])
        watcher = Roamer.of("on-n1b", parted, ["n1", "n2"])
        roamers += [cut_off, watcher]
        files.hold.touch()
        assert (await start_run(h3, parted, "stream")).status_code == 200  # n3 claims
        nursery.start_soon(cut_off.run, nodes)
        nursery.start_soon(watcher.run, nodes)
        await eventually("tokens flowing", partial(tokens_at_least, cut_off, 2), 20)
        epoch = (await head(nodes.dsn, parted))[0]
        old_inc = await incarnation(nodes, "n3")
        assert n3.proxy is not None
        n3.proxy.pause()
        start = trio.current_time()

        async def fenced() -> bool:
            with trio.move_on_after(slow(2)):
                response = await h3.post(f"/api/sessions/{parted}/cancel", json={})
                return response.status_code == 503 and error_code(response) == "node_fenced"
            return False

        fence_after = await eventually("n3 fences itself", fenced, TAKEOVER_BOUND)
        print(f"partitioned node fenced after {fence_after:.2f} s (ttl {nodes.ttl} s)")
        assert fence_after <= nodes.ttl + 2
        await eventually("its stream ended", partial(stream_ended, cut_off), 10)
        await eventually(
            "takeover", partial(taken_over, nodes.dsn, parted, epoch, "n3"), TAKEOVER_BOUND
        )
        print(f"takeover of a partitioned owner: {trio.current_time() - start:.2f} s")
        n3.proxy.resume()
        await eventually("n3 re-joins", partial(incarnation_above, nodes, "n3", old_inc), 20)
        files.hold.unlink()
        for call in await in_doubt(h1, parted):
            await decide(h1, parted, call, "skip")
        assert "stream_stopped" in await run_to_end(h3, parted, "after the partition")
        nursery.cancel_scope.cancel()
    await verify(nodes, roamers)


async def test_restart_with_the_same_node_id_frees_its_sessions_at_once(nodes: Cluster) -> None:
    nodes.ttl = 30  # far longer than the test: only the incarnation bump can free them
    n1, n2 = await nodes.start_all(["n1", "n2"])
    async with node_client(n1) as h1, node_client(n2) as h2:
        sessions = [await create(h2) for _ in range(2)]
        idle_one, busy_one = sessions
        assert "stream_stopped" in await run_to_end(h2, idle_one, "a whole turn")
        nodes.files.hold.touch()
        assert (await start_run(h2, busy_one, "call the tool")).status_code == 200
        await eventually("n2 owns both", partial(owned_by, nodes, sessions, "n2"), 20)
        await eventually("the tool runs", partial(lines_at_least, nodes, 2), 20)
        killed = trio.current_time()
        await nodes.restart("n2")
        nodes.files.hold.unlink()
        assert "stream_stopped" in await run_to_end(h1, idle_one, "claimed at once")
        epoch = 0  # any claim after the restart will do
        await eventually(
            "busy session recovered", partial(taken_over, nodes.dsn, busy_one, epoch, ""), 20
        )
        assert trio.current_time() - killed < nodes.ttl
        assert await in_doubt(h1, busy_one)


async def stream_ended(roamer: Roamer) -> bool:
    return bool(roamer.statuses)
