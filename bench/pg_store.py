"""Event rows per second through the PostgreSQL writer, beside the SQLite writer: run by hand.

    .venv/bin/python bench/pg_store.py [--runs 3] [--events 50000] [--sessions 1,100]
        [--server postgresql://postgres@127.0.0.1:5432]

Each session is one producer (as one session actor would be): it appends token-delta events
(write-behind, as a running turn does) and keeps at most ``WINDOW`` of them uncommitted,
waiting for the commit listener beyond that. The clock runs from the first append to the
commit of the last row. Each PostgreSQL run uses a fresh database (dropped afterwards), each
SQLite run a fresh temporary file.
"""

from __future__ import annotations

import argparse
import os
import platform
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
import trio

from greenroom.domain import AgentChoice, Session, encode_event, event_type
from greenroom.persistence import EventRow, open_sqlite_store
from greenroom.persistence.postgres import open_postgres_store

WINDOW = 256  # uncommitted events one session may have in flight
EVENT = AgentChoice("token ")
BODY, TYPE = encode_event(EVENT), event_type(EVENT)


@asynccontextmanager
async def postgres(server: str) -> AsyncIterator[Any]:
    name = f"gr_bench_{secrets.token_hex(4)}"

    def admin(sql: str) -> None:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
            conn.execute(sql.encode())

    await trio.to_thread.run_sync(admin, f"CREATE DATABASE {name}")
    try:
        async with open_postgres_store(
            f"{server}/{name}", node_id="bench", advertise_url=""
        ) as store:
            await store.membership.join()
            yield store
    finally:
        await trio.to_thread.run_sync(admin, f"DROP DATABASE {name} WITH (FORCE)")


@asynccontextmanager
async def sqlite() -> AsyncIterator[Any]:
    with tempfile.TemporaryDirectory(prefix="greenroom-bench-") as directory:
        async with open_sqlite_store(Path(directory) / "bench.db") as store:
            yield store


async def run_once(store: Any, sessions: int, total: int) -> tuple[float, float, float]:
    """(events per second, CPU µs per event, events per commit)."""
    committed: dict[str, int] = {}
    failed: dict[str, str] = {}
    progress = trio.Event()

    def listener(heads: Mapping[str, int], lost: Mapping[str, str]) -> None:
        nonlocal progress
        committed.update(heads)
        failed.update(lost)
        progress.set()
        progress = trio.Event()

    store.writer.listen(listener)
    ids = [(await store.add_session(Session.new(title=f"bench {n}"))).id for n in range(sessions)]
    leases = [await store.ownership.claim(sid) for sid in ids]
    per, extra = divmod(total, sessions)
    batches = store.batches

    async def produce(n: int) -> None:
        lease, count = leases[n], per + (1 if n < extra else 0)
        sid = lease.session_id
        for seq in range(lease.last_seq + 1, lease.last_seq + count + 1):
            while seq - committed.get(sid, 0) > WINDOW:
                if sid in failed:
                    raise RuntimeError(f"{sid}: {failed[sid]}")
                await progress.wait()
            store.writer.append_event(EventRow(sid, seq, lease.epoch, TYPE, BODY, time.time()))
            if seq % 32 == 0:
                await trio.lowlevel.checkpoint()  # a turn yields between its tokens too
        while committed.get(sid, 0) < lease.last_seq + count:
            await progress.wait()

    started, cpu = time.perf_counter(), time.process_time()
    async with trio.open_nursery() as nursery:
        for n in range(sessions):
            nursery.start_soon(produce, n)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    return total / elapsed, cpu / total * 1e6, total / max(1, store.batches - batches)


async def measure(kind: str, server: str, sessions: int, total: int) -> tuple[float, float, float]:
    opener = postgres(server) if kind == "postgres" else sqlite()
    async with opener as store:
        return await run_once(store, sessions, total)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--sessions", default="1,100")
    parser.add_argument("--server", default="postgresql://postgres@127.0.0.1:5432")
    args = parser.parse_args()

    with psycopg.connect(f"{args.server}/postgres") as conn:
        server_version = conn.info.server_version
    print("command:", " ".join([Path(sys.executable).name, *sys.argv]))
    print(
        f"machine: {os.cpu_count()} CPUs ({platform.machine()}), Python "
        f"{platform.python_version()}, SQLite {__import__('sqlite3').sqlite_version}, "
        f"PostgreSQL {server_version // 10000}.{server_version % 10000}, "
        f"psycopg {psycopg.__version__}"
    )
    print(f"event: agent_choice, {len(BODY)}-byte body; window {WINDOW} per session")
    print(f"load average before: {', '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print()
    print(
        "| store    | sessions | events | median events/s | runs (events/s)        "
        "| CPU µs/event | events/commit |"
    )
    print(
        "|----------|---------:|-------:|----------------:|------------------------"
        "|-------------:|--------------:|"
    )
    for sessions in (int(s) for s in args.sessions.split(",")):
        for kind in ("sqlite", "postgres"):
            results = [
                trio.run(measure, kind, args.server, sessions, args.events)
                for _ in range(args.runs)
            ]
            rates = [rate for rate, _, _ in results]
            cpu = statistics.median(c for _, c, _ in results)
            per_commit = statistics.median(p for _, _, p in results)
            runs = ", ".join(f"{rate:,.0f}" for rate in rates)
            print(
                f"| {kind:<8} | {sessions:>8} | {args.events:>6,} "
                f"| {statistics.median(rates):>15,.0f} "
                f"| {runs:<22} | {cpu:>12.1f} | {per_commit:>13.1f} |"
            )
    print(f"load average after: {', '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
