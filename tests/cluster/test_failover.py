"""``kill -9`` of the node that owns sessions mid-turn and mid-tool: another node takes them
over within the lease, subscribers on survivors see the turn interrupted, clients resume on
another node, and tool calls in doubt wait for a person's decision."""

from __future__ import annotations

import logging
from functools import partial

import pytest
import trio

from tests.cluster._clients import (
    Roamer,
    WsSubscriber,
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
from tests.crash_support import side_effect_lines, user
from tests.slowness import slow

log = logging.getLogger(__name__)

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

TAKEOVER_BOUND = slow(20)  # seconds: ttl 3 + sweep + margin, generous on 2 busy cores


async def test_kill_owner_mid_turn_and_mid_tool(nodes: Cluster) -> None:
    n1, n2, n3 = await nodes.start_all(["n1", "n2", "n3"])
    files = nodes.files
    files.hold.touch()  # tools wait in the tool until the file is gone
    async with (
        node_client(n1) as h1,
        node_client(n2) as h2,
        node_client(n3) as h3,
        trio.open_nursery() as nursery,
    ):
        streaming, skipped, rerun = [await create(h1) for _ in range(3)]
        roamers = [
            Roamer.of("from-n1", streaming, ["n1", "n2"]),  # resumes on n2 after the kill
            Roamer.of("on-n2", streaming, ["n2"]),
            Roamer.of("on-n3", streaming, ["n3"]),
            Roamer.of("tool-on-n3", skipped, ["n3"]),
        ]
        # n1 claims all three (the first node to run or subscribe to a session claims it).
        for session in (skipped, rerun):
            assert (await start_run(h1, session, "call the tool")).status_code == 200
        nursery.start_soon(roamers[0].run, nodes)
        await eventually("n1 owns them", partial(owned_by, nodes, [streaming], "n1"), 20)
        for roamer in roamers[1:]:
            nursery.start_soon(roamer.run, nodes)
        await eventually("tools running", lambda: lines_at_least(nodes, 2), 20)
        assert (await start_run(h1, streaming, "stream")).status_code == 200
        await eventually("tokens flowing", lambda: tokens_at_least(roamers[0], 3), 20)
        ws_on_n3 = WsSubscriber(streaming)  # live from n3's mirror, over the WebSocket
        nursery.start_soon(ws_on_n3.run, n3)
        await eventually("ws on n3 live", lambda: len(ws_on_n3.events) >= 3, 20)
        epochs = {s: (await head(nodes.dsn, s))[0] for s in (streaming, skipped, rerun)}
        assert {(await head(nodes.dsn, s))[1] for s in epochs} == {"n1"}

        await n1.kill()
        files.hold.unlink()  # the killed node's tools end (their lines are written)
        waited = await eventually(
            "takeover", lambda: all_taken_over(nodes, epochs, "n1"), TAKEOVER_BOUND
        )
        log.info("takeover after kill -9: %.2f s (ttl %s s)", waited, nodes.ttl)
        for roamer in roamers[:3]:
            seen = partial(has_type, roamer, "turn_interrupted")
            await eventually(f"{roamer.name} sees the interruption", seen, 10)
        assert "n2" in roamers[0].served  # resumed by Last-Event-ID on a survivor
        await eventually(
            "the WebSocket on n3 sees the interruption",
            lambda: "turn_interrupted" in ws_on_n3.types(),
            10,
        )
        seqs = [seq for seq, _ in ws_on_n3.events]
        assert seqs == list(range(1, len(seqs) + 1))  # no hole, no repeat

        # The calls in doubt: a run waits for a decision, whichever node it reaches.
        (skipped_call,) = await in_doubt(h3, skipped)
        (rerun_call,) = await in_doubt(h2, rerun)
        refused = await h2.post(f"/api/sessions/{skipped}/agent/crash", json=user("again"))
        assert (refused.status_code, error_code(refused)) == (409, "needs_decision")
        await decide(h3, skipped, skipped_call, "skip")
        assert "stream_stopped" in await run_to_end(h2, skipped, "after the decision")
        before = lines_of(nodes, rerun_call)
        outcome = await decide(h2, rerun, rerun_call, "rerun")
        assert outcome["result"].strip() == f"side effect {rerun_call} done"
        assert lines_of(nodes, skipped_call) == 1
        assert lines_of(nodes, rerun_call) == before + 1 == 2
        # The session whose turn was cut off takes a new turn on its new owner.
        assert "stream_stopped" in await run_to_end(h3, streaming, "go on")
        nursery.cancel_scope.cancel()
    await verify(nodes, roamers, reruns={rerun_call: 1})


async def lines_at_least(nodes: Cluster, count: int) -> bool:
    return len(side_effect_lines(nodes.files.side_effects)) >= count


def lines_of(nodes: Cluster, call: str) -> int:
    return [c for c, _ in side_effect_lines(nodes.files.side_effects)].count(call)


async def tokens_at_least(roamer: Roamer, count: int) -> bool:
    return roamer.types().count("agent_choice") >= count


async def has_type(roamer: Roamer, kind: str) -> bool:
    return kind in roamer.types()


async def all_taken_over(nodes: Cluster, epochs: dict[str, int], dead: str) -> bool:
    for session, epoch in epochs.items():
        if not await taken_over(nodes.dsn, session, epoch, dead):
            return False
    return True


async def owned_by(nodes: Cluster, sessions: list[str], name: str) -> bool:
    owners = [(await head(nodes.dsn, s))[1] for s in sessions]
    return owners == [name] * len(sessions)
