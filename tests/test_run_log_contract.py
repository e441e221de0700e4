"""The run log of every store (issue 25): run records written with a turn's start and end, the
webhook outbox row written in the same transaction as the end, claims with a lease, attempts
recorded only by the claim's holder; on SQLite a delivery written before a crash goes out after
the file is opened again; on PostgreSQL two nodes claiming at once never take the same row."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
import trio

from greenroom.domain import ChatMessage, Message, Session
from greenroom.errors import SessionNotFound
from greenroom.persistence import (
    Delivery,
    Persistence,
    TurnEnd,
    TurnStart,
    open_sqlite_store,
)

from .pg import database, node
from .test_event_store_contract import open_kind

T0 = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    async with open_kind(request.param, tmp_path / "runs.db") as opened:
        yield opened


async def ended_run(
    store: Persistence, sid: str, run_id: str, *, webhook: str = "", delivery_id: str = ""
) -> Delivery | None:
    """A run of ``sid`` from start to end (with its delivery when ``webhook``)."""
    lease = await store.ownership.claim(sid)
    start = TurnStart(run_id, sid, lease.last_seq + 1, T0, "agent.yaml", "root", T0, "m/1", webhook)
    await store.writer.begin_turn(lease, start, (Message(ChatMessage("user", "hi")),))
    delivery = None
    if webhook:
        body = b'{"run":"%s"}' % run_id.encode()
        delivery = Delivery(delivery_id or f"d-{run_id}", sid, run_id, webhook, body, 1.0)
    end = TurnEnd(
        run_id,
        sid,
        "done",
        lease.last_seq,
        ended_at=T0 + dt.timedelta(seconds=3),
        first_token_at=T0 + dt.timedelta(seconds=1),
        model="m/2",
        input_tokens=10,
        output_tokens=4,
        cost=0.25,
        delivery=delivery,
    )
    await store.writer.end_turn(lease, end)
    return delivery


async def test_a_run_record_says_how_it_ran(store: Persistence) -> None:
    sid = (await store.store.add_session(Session.new())).id
    await ended_run(store, sid, "r1")
    await ended_run(store, sid, "r2", webhook="http://127.0.0.1:9/h")
    runs = await store.run_log.runs(sid, 10)
    assert [r.turn.turn_id for r in runs] == ["r2", "r1"]
    first = runs[1].turn
    assert (first.state, first.model, first.input_tokens, first.output_tokens) == (
        "done",
        "m/2",
        10,
        4,
    )
    assert first.cost == 0.25
    assert (first.created_at, first.started_at) == (T0, T0)
    assert first.first_token_at == T0 + dt.timedelta(seconds=1)
    assert first.ended_at == T0 + dt.timedelta(seconds=3)
    assert runs[1].delivery is None
    delivery = runs[0].delivery
    assert delivery is not None and delivery.state == "pending" and delivery.run_id == "r2"
    assert (await store.run_log.run(sid, "r2")) == runs[0]
    assert await store.run_log.run(sid, "nope") is None
    assert [r.turn.turn_id for r in await store.run_log.runs(sid, 1)] == ["r2"]
    with pytest.raises(SessionNotFound):
        await store.run_log.runs("missing", 10)


async def test_a_claim_holds_until_its_lease_ends_and_only_its_holder_records(
    store: Persistence,
) -> None:
    log = store.run_log
    sid = (await store.store.add_session(Session.new())).id
    woken = log.outbox_written()
    await ended_run(store, sid, "r1", webhook="http://127.0.0.1:9/h", delivery_id="d1")
    assert woken.is_set()  # the deliverer hears of it after the commit

    (claimed,) = await log.claim_deliveries("a", now=100.0, lease=30.0, limit=10)
    assert (claimed.delivery_id, claimed.body, claimed.attempts) == ("d1", b'{"run":"r1"}', 0)
    assert await log.claim_deliveries("b", now=110.0, lease=30.0, limit=10) == []
    # a's lease ran out: b takes it; a's late record is refused
    (taken,) = await log.claim_deliveries("b", now=131.0, lease=30.0, limit=10)
    assert taken.delivery_id == "d1"
    assert not await log.record_attempt("d1", "a", "delivered", 1, "", 132.0, 132.0)
    # b fails once: pending again, due at 140, claimed by nobody meanwhile
    assert await log.record_attempt("d1", "b", "pending", 1, "HTTP 500", 132.0, 140.0)
    assert not await log.record_attempt("d1", "b", "delivered", 2, "", 133.0, 133.0)
    assert await log.claim_deliveries("c", now=139.0, lease=30.0, limit=10) == []  # not due
    (record,) = await log.runs(sid, 1)
    assert record.delivery is not None
    assert (record.delivery.state, record.delivery.attempts) == ("pending", 1)
    assert record.delivery.last_error == "HTTP 500"
    (again,) = await log.claim_deliveries("c", now=140.0, lease=30.0, limit=10)
    assert again.attempts == 1
    assert await log.record_attempt("d1", "c", "delivered", 2, "", 141.0, 141.0)
    assert await log.claim_deliveries("d", now=1e9, lease=30.0, limit=10) == []
    delivered = (await log.run(sid, "r1")).delivery  # type: ignore[union-attr]
    assert delivered is not None
    assert (delivered.state, delivered.attempts, delivered.finished_at) == ("delivered", 2, 141.0)


async def test_a_delivery_outlives_its_session(store: Persistence) -> None:
    sid = (await store.store.add_session(Session.new())).id
    await ended_run(store, sid, "r1", webhook="http://127.0.0.1:9/h", delivery_id="d1")
    await store.store.delete_session(sid)
    (claimed,) = await store.run_log.claim_deliveries("a", now=1.0, lease=30.0, limit=10)
    assert claimed.delivery_id == "d1"


async def test_sqlite_a_delivery_claimed_before_a_crash_goes_out_after_reopening(
    tmp_path: Path,
) -> None:
    path = tmp_path / "crash.db"
    async with open_sqlite_store(path) as first:
        sid = (await first.store.add_session(Session.new())).id
        await ended_run(first, sid, "r1", webhook="http://127.0.0.1:9/h", delivery_id="d1")
        (claimed,) = await first.run_log.claim_deliveries("dead", now=1.0, lease=1e6, limit=5)
        # the process dies here with the claim held (closing writes nothing of the outbox)
    async with open_sqlite_store(path) as second:
        assert await second.run_log.claim_deliveries("new", now=2.0, lease=30.0, limit=5) == []
        assert await second.run_log.release_claims() == 1  # one node: a dead process's claims
        (again,) = await second.run_log.claim_deliveries("new", now=2.0, lease=30.0, limit=5)
    assert again.delivery_id == claimed.delivery_id == "d1"
    assert again.body == claimed.body


async def test_postgres_two_nodes_claiming_at_once_never_take_the_same_row() -> None:
    async with database() as dsn, node(dsn, "n1") as one, node(dsn, "n2") as two:
        sid = (await one.store.add_session(Session.new())).id
        for n in range(40):
            await ended_run(one, sid, f"r{n}", webhook="http://127.0.0.1:9/h")
        taken: dict[str, list[str]] = {"n1": [], "n2": []}

        async def claim(store: Any, name: str) -> None:
            while True:
                got = await store.run_log.claim_deliveries(name, now=5.0, lease=60.0, limit=3)
                if not got:
                    return
                taken[name] += [d.delivery_id for d in got]

        async with trio.open_nursery() as nursery:
            nursery.start_soon(claim, one, "n1")
            nursery.start_soon(claim, two, "n2")
    everything = taken["n1"] + taken["n2"]
    assert len(everything) == len(set(everything)) == 40


async def test_a_run_a_crash_interrupted_gets_its_webhook_from_recovery(store: Persistence) -> None:
    import json

    from greenroom.actors import recover

    sid = (await store.store.add_session(Session.new())).id
    lease = await store.ownership.claim(sid)
    start = TurnStart("r1", sid, lease.last_seq + 1, T0, "agent.yaml", "root", T0, "", "http://h/x")
    await store.writer.begin_turn(lease, start, (Message(ChatMessage("user", "hi")),))
    # the process dies here: the run is left running, with no delivery yet
    assert await store.run_log.claim_deliveries("a", now=1.0, lease=30.0, limit=5) == []

    report = await recover(store)

    assert report.turns_interrupted == 1
    (delivery,) = await store.run_log.claim_deliveries("a", now=1.0, lease=30.0, limit=5)
    summary = json.loads(delivery.body)
    assert (delivery.run_id, delivery.url) == ("r1", "http://h/x")
    assert summary["type"] == "run.ended"
    assert summary["run"]["id"] == "r1"
    assert summary["run"]["status"] == "interrupted"
    assert summary["run"]["reason"] == "server_restart"
    record = await store.run_log.run(sid, "r1")
    assert record is not None and record.turn.state == "interrupted"
