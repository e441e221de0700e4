"""The process-log contract (issue 23): one suite, run against the memory, SQLite and
PostgreSQL stores. Records are kept per host, replaced per (host, pgid), survive a reopen of a
durable store, and are listed oldest first."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from greenroom.persistence import ProcessRecord, open_sqlite_store

from .test_event_store_contract import open_kind

pytestmark = pytest.mark.slow


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    async with open_kind(request.param, tmp_path / "procs.db") as opened:
        yield opened


async def test_records_are_kept_per_host_replaced_and_forgotten(store: Any) -> None:
    log = store.process_log
    assert await log.recorded_processes("h1") == []
    first = ProcessRecord("h1", 4242, 100, 10.0, "shell")
    second = ProcessRecord("h1", 77, 200, 20.0, "run_background_job")
    other = ProcessRecord("h2", 4242, 300, 5.0, "shell")
    for record in (second, first, other):
        await log.record_process(record)
    assert await log.recorded_processes("h1") == [first, second]
    assert await log.recorded_processes("h2") == [other]
    replaced = ProcessRecord("h1", 4242, 999, 30.0, "clean")
    await log.record_process(replaced)
    assert await log.recorded_processes("h1") == [second, replaced]
    await log.forget_process("h1", 4242)
    await log.forget_process("h1", 4242)  # twice: nothing happens
    await log.forget_process("h3", 1)
    assert await log.recorded_processes("h1") == [second]
    assert await log.recorded_processes("h2") == [other]


async def test_sqlite_records_survive_a_reopen(tmp_path: Path) -> None:
    record = ProcessRecord("h", 2**31 + 5, 2**40, 1.5, "shell")
    async with open_sqlite_store(tmp_path / "p.db") as store:
        await store.process_log.record_process(record)
    async with open_sqlite_store(tmp_path / "p.db") as store:
        assert await store.process_log.recorded_processes("h") == [record]
