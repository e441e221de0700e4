"""A stopping node drains: on SIGTERM it stops being ready, marks itself ``draining``, lets its
running turn finish (here: a tool that waits for a file), then leaves, so its sessions are free
at once on the other nodes (the lease is far longer than the test)."""

from __future__ import annotations

import json
import signal
from functools import partial

import pytest
import trio

from tests.cluster._clients import Roamer, create, eventually, head, run_to_end, start_run
from tests.cluster._nodes import Cluster, node_client
from tests.cluster.test_failover import has_type, lines_at_least
from tests.pg import run_sql
from tests.slowness import slow

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


async def test_sigterm_drains_the_running_turn_then_frees_the_sessions(nodes: Cluster) -> None:
    nodes.ttl = 30  # far longer than the test: only the node's leave can free the session
    n1, n2 = await nodes.start_all(["n1", "n2"])
    files = nodes.files
    files.hold.touch()  # the tool waits until the file is gone
    async with node_client(n1) as h1, node_client(n2) as h2, trio.open_nursery() as nursery:
        session = await create(h1)
        watcher = Roamer.of("on-n2", session, ["n2"])
        assert (await start_run(h1, session, "call the tool")).status_code == 200  # n1 claims
        nursery.start_soon(watcher.run, nodes)
        await eventually("tool running", lambda: lines_at_least(nodes, 1), 20)

        n1.signal(signal.SIGTERM)

        async def draining() -> bool:
            ready = await h1.get("/ready")
            return ready.status_code == 503 and ready.json().get("draining") is True

        await eventually("n1 says it is draining", draining, 10)
        await eventually("draining on record", partial(node_state_is, nodes, "n1", "draining"), 10)
        assert n1.running and (await head(nodes.dsn, session))[1] == "n1"
        files.hold.unlink()  # the tool ends: the turn finishes on n1
        with trio.fail_after(slow(30)):
            assert await n1.process.wait() == 0
        await eventually(
            "the turn's end reaches n2", partial(has_type, watcher, "stream_stopped"), 10
        )
        events = [json.loads(body) for _, body in watcher.watcher.entries]
        assert "tool_call_response" in watcher.types()  # the tool was not cut off
        said = "".join(e.get("content", "") for e in events if e["type"] == "agent_choice")
        assert said.endswith("All done."), said  # nor the model's answer after it
        _, owner, _, state = await head(nodes.dsn, session)
        assert (owner, state) == (None, "idle")  # left: free at once, no lease to wait for
        assert "stream_stopped" in await run_to_end(h2, session, "after the drain")
        nursery.cancel_scope.cancel()


async def node_state_is(nodes: Cluster, name: str, state: str) -> bool:
    sql = "SELECT state FROM gr_nodes WHERE node_id = %s"
    return [tuple(row) for row in await run_sql(nodes.dsn, sql, name)] == [(state,)]
