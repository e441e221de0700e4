"""Committed ``add_message`` per second on the SQLite store: run by hand.

    .venv/bin/python bench/store.py [--runs 3] [--one 5000] [--many 20000] [--producers 100]

Each producer is one session (as one session actor would be) and awaits each ``add_message``
before sending the next, so every counted message is committed and acknowledged. The clock
runs from the first call to the last acknowledgement; each run uses a fresh temporary file.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

from greenroom.domain import Message, Session
from greenroom.persistence import SqliteStore, open_sqlite_store

CONTENT = "The build passed; 3 files changed, 42 insertions(+), 7 deletions(-). " * 2


async def run_once(path: Path, producers: int, total: int) -> tuple[float, float, int]:
    """(messages per second, CPU µs per message, transactions) for ``total`` messages.

    CPU time is the whole process's (trio thread and writer thread): unlike the rate, it
    barely moves when other processes compete for the machine.
    """
    per_producer, extra = divmod(total, producers)
    async with open_sqlite_store(path) as store:
        sessions = [
            (await store.add_session(Session.new(title=f"bench {n}"))).id for n in range(producers)
        ]
        batches = store.batches

        async def produce(store: SqliteStore, session_id: str, count: int) -> None:
            for _ in range(count):
                await store.add_message(session_id, Message.assistant(CONTENT))

        started, cpu = time.perf_counter(), time.process_time()
        async with trio.open_nursery() as nursery:
            for n, session_id in enumerate(sessions):
                count = per_producer + (1 if n < extra else 0)
                nursery.start_soon(produce, store, session_id, count)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        batches = store.batches - batches
    return total / elapsed, cpu / total * 1e6, batches


def measure(producers: int, total: int, runs: int) -> list[tuple[float, float, int]]:
    results = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="greenroom-bench-") as directory:
            results.append(trio.run(run_once, Path(directory) / "bench.db", producers, total))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--one", type=int, default=5_000, help="messages with 1 producer")
    parser.add_argument("--many", type=int, default=20_000, help="messages with many producers")
    parser.add_argument("--producers", type=int, default=100)
    args = parser.parse_args()

    print("command:", " ".join([Path(sys.executable).name, *sys.argv]))
    print(
        f"machine: {os.cpu_count()} CPUs ({platform.machine()}), Python "
        f"{platform.python_version()}, SQLite {__import__('sqlite3').sqlite_version}"
    )
    print(f"message: one assistant message, {len(CONTENT)}-character content")
    print(f"load average before: {', '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print()
    print(
        "| producers | messages | median msg/s | runs (msg/s)            "
        "| CPU µs/msg | msgs/commit |"
    )
    print(
        "|----------:|---------:|-------------:|-------------------------"
        "|-----------:|------------:|"
    )
    for producers, total in ((1, args.one), (args.producers, args.many)):
        results = measure(producers, total, args.runs)
        rates = [rate for rate, _, _ in results]
        cpu = statistics.median(cpu for _, cpu, _ in results)
        per_commit = statistics.median(total / batches for _, _, batches in results)
        runs = ", ".join(f"{rate:,.0f}" for rate in rates)
        print(
            f"| {producers:>9} | {total:>8,} | {statistics.median(rates):>12,.0f} "
            f"| {runs:<23} | {cpu:>10.1f} | {per_commit:>11.1f} |"
        )
    print(f"load average after: {', '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
