"""Scheduled runs on an SQLite file across restarts (decision 0028): the occurrences missed
while no server ran fire once when it starts (not once per missed occurrence), a restart does
not fire them again, and a schedule created through the API is still there after a restart.

Real clock (SQLite works in threads, so trio's mock clock would jump while it does): the
schedules fire once a year, so no occurrence comes due during the test by itself; the waits
are bounded polls of the scheduler's rounds, scaled by ``slow()``."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from greenroom.actors import Scheduler
from greenroom.persistence import Schedule, open_sqlite_store
from greenroom.testing import Greenroom, ScriptedAgent, open_greenroom
from tests.slowness import slow

pytestmark = pytest.mark.slow

AGENT = ScriptedAgent(turns=["Happy new year."], loop=True)
NEW_YEAR_2020 = int(datetime(2020, 1, 1, tzinfo=UTC).timestamp())


def scheduler_of(gr: Greenroom) -> Scheduler:
    scheduler = gr._context.scheduler  # white-box: how many rounds it has read
    assert isinstance(scheduler, Scheduler)
    return scheduler


async def rounds(gr: Greenroom, count: int) -> None:
    """Until the scheduler has read the due schedules ``count`` more times (it is woken)."""
    scheduler = scheduler_of(gr)
    target = scheduler.rounds + count
    with trio.fail_after(slow(10)):  # real clock: SQLite reads in threads
        while scheduler.rounds < target:
            scheduler.changed()
            await scheduler.wait_round()


async def recorded(http: httpx.AsyncClient, schedule_id: str) -> dict[str, Any]:
    """The schedule once its last firing is recorded (the firing runs beside the rounds)."""
    with trio.fail_after(slow(10)):
        while True:
            got = await schedule_of(http, schedule_id)
            if got["last_fired_at"]:
                return got
            await trio.sleep(0.02)  # real clock: the firing is SQLite writes in threads


async def schedule_of(http: httpx.AsyncClient, schedule_id: str) -> dict[str, Any]:
    r = await http.get(f"/api/schedules/{schedule_id}")
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


async def test_missed_occurrences_fire_once_at_start_and_never_again(tmp_path: Path) -> None:
    db = tmp_path / "sessions.db"
    async with open_sqlite_store(db) as store:  # written while no server ran, years ago
        await store.schedules.add_schedule(
            Schedule(
                id="yearly",
                cron="0 0 1 1 *",
                timezone="UTC",
                agent="default",
                agent_name="",
                message="happy new year",
                session_id="",
                title="greeting",
                paused=False,
                next_fire=NEW_YEAR_2020,  # 2020, 2021, ... all missed
                created_at=NEW_YEAR_2020 - 60.0,
            )
        )
    before = time.time()
    async with (
        open_greenroom(AGENT, store="sqlite", db_path=db) as gr,
        httpx.AsyncClient(base_url=gr.url) as http,
    ):
        got = await recorded(http, "yearly")
        await rounds(gr, 3)  # more rounds fire nothing more
        assert await schedule_of(http, "yearly") == got
        assert got["fires"] == 1 and got["last_error"] == ""
        assert got["last_occurrence"] == "2020-01-01T00:00:00Z"  # the oldest missed one
        year = datetime.now(UTC).year
        assert got["next_fire"] == f"{year + 1}-01-01T00:00:00Z"  # then the next one from now
        sessions = (await http.get("/api/sessions")).json()
        assert [s["id"] for s in sessions] == [got["last_session_id"]]
        assert sessions[0]["title"] == "greeting (2020-01-01 00:00:00 UTC)"
        fired_at = datetime.fromisoformat(got["last_fired_at"]).timestamp()
        assert before <= fired_at <= time.time()
    async with (
        open_greenroom(AGENT, store="sqlite", db_path=db) as gr,
        httpx.AsyncClient(base_url=gr.url) as http,
    ):
        await rounds(gr, 3)
        again = await schedule_of(http, "yearly")
        assert again["fires"] == 1  # a restart fires nothing again
        assert again["last_session_id"] == got["last_session_id"]
        assert len((await http.get("/api/sessions")).json()) == 1


async def test_a_schedule_made_through_the_api_survives_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "sessions.db"
    async with (
        open_greenroom(AGENT, store="sqlite", db_path=db) as gr,
        httpx.AsyncClient(base_url=gr.url) as http,
    ):
        body = {"cron": "0 6 1 1 *", "timezone": "Pacific/Auckland", "agent": "default"}
        r = await http.post("/api/schedules", json={**body, "message": "kia ora"})
        assert r.status_code == 201, r.text
        made = r.json()
        paused = (await http.post(f"/api/schedules/{made['id']}/pause")).json()
    async with (
        open_greenroom(AGENT, store="sqlite", db_path=db) as gr,
        httpx.AsyncClient(base_url=gr.url) as http,
    ):
        await rounds(gr, 1)
        assert await schedule_of(http, made["id"]) == paused
        resumed = (await http.post(f"/api/schedules/{made['id']}/resume")).json()
        assert resumed["next_fire"] == made["next_fire"]  # 06:00 NZDT on Jan 1st = 17:00 UTC
        assert made["next_fire"].endswith("-12-31T17:00:00Z")
