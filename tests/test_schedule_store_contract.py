"""The schedule store's contract (decision 0028): one suite, run against the memory, SQLite and
PostgreSQL stores. Schedules are kept with their next occurrence; an occurrence is claimed by
exactly one caller (the compare-and-set on ``next_fire``), also when claims race; a paused or
deleted schedule is never claimed; a durable store keeps it all across a reopen."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from greenroom.errors import ScheduleNotFound
from greenroom.persistence import Schedule, open_sqlite_store

from . import pg
from .test_event_store_contract import open_kind

pytestmark = pytest.mark.slow


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    async with open_kind(request.param, tmp_path / "schedules.db") as opened:
        yield opened


def schedule(id_: str, next_fire: int, created_at: float = 1.0, **fields: Any) -> Schedule:
    values: dict[str, Any] = {
        "cron": "*/5 * * * *",
        "timezone": "Europe/Berlin",
        "agent": "default",
        "agent_name": "",
        "message": "report, please",
        "session_id": "",
        "title": "",
        "paused": False,
        **fields,
    }
    return Schedule(id=id_, next_fire=next_fire, created_at=created_at, **values)


async def test_schedules_are_kept_listed_paused_and_deleted(store: Any) -> None:
    s = store.schedules
    assert await s.list_schedules() == [] and await s.next_due() is None
    a = schedule("a", 3_000, 2.0, title="nightly", agent_name="root")
    b = schedule("b", 1_000, 1.0, session_id="sess-1", message="ünïcode ✓")
    await s.add_schedule(a)
    await s.add_schedule(b)
    assert await s.get_schedule("a") == a
    assert await s.list_schedules() == [b, a]  # oldest first
    assert await s.next_due() == 1_000
    assert await s.due_schedules(999.9) == []
    assert await s.due_schedules(3_000.5) == [b, a]  # earliest occurrence first
    paused = await s.set_paused("b", True)
    assert paused == attrs.evolve(b, paused=True)
    assert await s.next_due() == 3_000
    assert await s.due_schedules(10_000) == [a]
    assert await s.set_paused("b", False, 5_000) == attrs.evolve(b, next_fire=5_000)
    await s.delete_schedule("a")
    assert await s.list_schedules() == [attrs.evolve(b, next_fire=5_000)]
    for missing in (s.get_schedule("a"), s.delete_schedule("a"), s.set_paused("a", True, 1)):
        with pytest.raises(ScheduleNotFound):
            await missing


async def test_an_occurrence_is_claimed_once(store: Any) -> None:
    s = store.schedules
    await s.add_schedule(schedule("a", 1_000))
    assert await s.claim_occurrence("a", 1_000, 1_300) is True
    assert await s.claim_occurrence("a", 1_000, 1_300) is False  # moved on already
    got = await s.get_schedule("a")
    assert (got.next_fire, got.fires, got.last_occurrence) == (1_300, 1, 1_000)
    await s.record_fire("a", 1_000.25, "sess-9", "")
    got = await s.get_schedule("a")
    assert (got.last_fired_at, got.last_session_id, got.last_error) == (1_000.25, "sess-9", "")
    await s.record_fire("a", 1_300.5, "", "agent_not_found: no agent")
    assert (await s.get_schedule("a")).last_error == "agent_not_found: no agent"
    await s.record_fire("gone", 1.0, "", "")  # a schedule deleted meanwhile: nothing
    await s.set_paused("a", True)
    assert await s.claim_occurrence("a", 1_300, 1_600) is False  # paused: never claimed
    await s.delete_schedule("a")
    assert await s.claim_occurrence("a", 1_300, 1_600) is False


async def test_racing_claims_of_one_occurrence_have_one_winner(store: Any) -> None:
    s = store.schedules
    await s.add_schedule(schedule("a", 60))
    won: list[int] = []

    async def claim(n: int) -> None:
        if await s.claim_occurrence("a", 60, 120):
            won.append(n)

    async with trio.open_nursery() as nursery:
        for n in range(8):
            nursery.start_soon(claim, n)
    assert len(won) == 1
    assert (await s.get_schedule("a")).fires == 1


async def test_sqlite_schedules_survive_a_reopen(tmp_path: Path) -> None:
    kept = schedule("a", 2**40, 1.5, paused=True)
    async with open_sqlite_store(tmp_path / "s.db") as store:
        await store.schedules.add_schedule(kept)
    async with open_sqlite_store(tmp_path / "s.db") as store:
        assert await store.schedules.list_schedules() == [kept]


async def test_three_postgres_nodes_racing_for_occurrences_claim_each_once() -> None:
    async with (
        pg.database() as dsn,
        pg.node(dsn, "n1") as n1,
        pg.node(dsn, "n2") as n2,
        pg.node(dsn, "n3") as n3,
    ):
        nodes = {"n1": n1, "n2": n2, "n3": n3}
        await n1.schedules.add_schedule(schedule("a", 60))
        won: list[tuple[int, str]] = []

        async def claim(name: str, due: int) -> None:
            if await nodes[name].schedules.claim_occurrence("a", due, due + 60):
                won.append((due, name))

        for due in range(60, 60 * 11, 60):  # ten occurrences, each raced by every node
            async with trio.open_nursery() as nursery:
                for name in nodes:
                    for _ in range(3):
                        nursery.start_soon(claim, name, due)
        assert [due for due, _ in won] == list(range(60, 60 * 11, 60)), won
        got = await n3.schedules.get_schedule("a")
        assert (got.fires, got.next_fire, got.last_occurrence) == (10, 660, 600)
