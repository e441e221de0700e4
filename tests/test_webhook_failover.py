"""Webhooks on a PostgreSQL cluster (issue 25): a node whose deliverer dies in the middle of an
attempt holds its claim only until the lease runs out; then another node's deliverer sends the
same delivery (same id). Two real stores on one database, real deliverers and a real receiver
on 127.0.0.1; a short lease so it takes about a second. Real clock: the stores work through
threads; every wait is bounded."""

from __future__ import annotations

import time

import trio

from greenroom.domain import Session, parse_webhook_allow
from greenroom.serve import Deliverer, WebhookPolicy
from tests.pg import database, node
from tests.slowness import slow
from tests.test_run_log_contract import ended_run
from tests.webhook_receiver import Receiver, verify

SECRET = "cluster-secret"
POLICY = WebhookPolicy(timeout=0.5, lease=0.5, poll=0.05, base_delay=0.1, max_delay=0.1)


async def test_a_dead_nodes_claim_runs_out_and_another_node_delivers() -> None:
    receiver = Receiver(hold=trio.Event())
    async with (
        trio.open_nursery() as nursery,
        database() as dsn,
        node(dsn, "n1") as one,
        node(dsn, "n2") as two,
    ):
        await nursery.start(receiver.serve)
        allow = parse_webhook_allow((f"{receiver.url}/hooks/",))
        sid = (await one.store.add_session(Session.new())).id
        await ended_run(one, sid, "r1", webhook=f"{receiver.url}/hooks/x", delivery_id="d1")

        first = Deliverer(one.run_log, allow, SECRET, POLICY, single_node=False, name="n1")
        dies = trio.CancelScope()
        nursery.start_soon(_run_until, first, dies)
        with trio.fail_after(slow(10)):
            await receiver.wait_for(1)  # n1's attempt is in flight...
        dies.cancel()  # ...when n1 dies: its claim stays in the database
        assert receiver.hold is not None
        receiver.hold.set()

        second = Deliverer(two.run_log, allow, SECRET, POLICY, single_node=False, name="n2")
        await nursery.start(second.run)
        with trio.fail_after(slow(10)):
            hits = await receiver.wait_for(2)
            while True:
                record = await two.run_log.run(sid, "r1")
                assert record is not None and record.delivery is not None
                if record.delivery.state == "delivered":
                    break
                await trio.sleep(0.02)  # real clock: n2 records it
        receiver.stop()
        nursery.cancel_scope.cancel()
    assert [h.delivery_id for h in hits] == ["d1", "d1"]
    assert all(verify(SECRET, h.headers, h.body, time.time(), tolerance=60) for h in hits)
    assert record.delivery.attempts == 1  # n1's attempt was never recorded


async def _run_until(deliverer: Deliverer, scope: trio.CancelScope) -> None:
    with scope:
        await deliverer.run()
