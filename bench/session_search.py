"""Session search and list pages over a big store (decision 0026): run by hand.

    .venv/bin/python bench/session_search.py [--backend sqlite|postgres|both]
        [--sessions 100000] [--messages 20] [--repeats 15]
        [--server postgresql://postgres@127.0.0.1:5432]
        [--keep-file /tmp/bench.db] [--keep-database gr_bench_kept] [--fill-only]

Fills a fresh store (SQLite: a temporary file; PostgreSQL: a database of its own, dropped
afterwards) with ``--sessions`` root sessions of ``--messages`` user/assistant messages each,
in bulk SQL through the store's own writer connection (so the search triggers, generated
columns and indexes do their usual work), then times ``Store.search_sessions`` (a read
connection in a worker thread, as the endpoint uses it): each query ``--repeats`` times,
median and worst. Texts are drawn from a fixed vocabulary with a fixed seed; ``zebracorn``
is in 10 sessions, ``okapi`` in about 1 %, ``build`` in about 30 % of the messages. Every loop
is bounded by the arguments.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import random
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from greenroom.domain import SessionQuery, format_datetime, query_words
from greenroom.persistence import open_sqlite_store

CHUNK = 2000  # sessions per bulk transaction
_WORDS = (
    "the a to of and in is it for that on with this you be are as file test run code error "
    "please can we change function line value return make add fix check list model agent "
    "server session page query index table row column message user tool call result output "
    "python trio sqlite postgres docker shell path name type class method field string number"
)
VOCABULARY = _WORDS.split()
T0 = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)


def texts(rng: random.Random, n: int, messages: int, rare: set[int]) -> list[str]:
    """The messages of session ``n``: about 12 words each."""
    out = []
    for m in range(messages):
        words = rng.choices(VOCABULARY, k=rng.randint(6, 18))
        if rng.random() < 0.3:
            words.append("build")
        if n % 100 == 37 and m == 3:
            words.append("okapi")
        if n in rare and m == 5:
            words.append("zebracorn")
        out.append(" ".join(words))
    return out


def rows(start: int, count: int, messages: int, rare: set[int]) -> tuple[list[Any], list[Any]]:
    rng = random.Random(start)
    sessions, items = [], []
    for n in range(start, start + count):
        sid = f"bench-{n:07d}"
        created = format_datetime(T0 + dt.timedelta(seconds=n * 7))
        sessions.append((sid, created, f"Session {n} about {rng.choice(VOCABULARY)}", n % 50 == 0))
        for m, text in enumerate(texts(rng, n, messages, rare)):
            role = "user" if m % 2 == 0 else "assistant"
            body = json.dumps({"message": {"role": role, "content": text}}, separators=(",", ":"))
            items.append((sid, m, role, body))
    return sessions, items


def fill_sqlite(conn: Any, sessions: list[Any], items: list[Any]) -> None:
    conn.executemany(
        "INSERT INTO sessions (id, created_at, title, starred) VALUES (?, ?, ?, ?)", sessions
    )
    conn.executemany("INSERT INTO heads (session_id) VALUES (?)", [(s[0],) for s in sessions])
    conn.executemany(
        "INSERT INTO items (session_id, position, kind, role, body) VALUES (?, ?, 'message', ?, ?)",
        items,
    )


def fill_postgres(conn: Any, sessions: list[Any], items: list[Any]) -> None:
    with conn.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO gr_sessions (session_id, created_at, title, starred)"
            " VALUES (%s, %s, %s, %s)",
            [(s[0], s[1], s[2], int(s[3])) for s in sessions],
        )
        cursor.executemany(
            "INSERT INTO gr_heads (session_id) VALUES (%s)", [(s[0],) for s in sessions]
        )
        with cursor.copy("COPY gr_items (session_id, pos, kind, role, body) FROM STDIN") as copy:
            for sid, m, role, body in items:
                copy.write_row((sid, m, "message", role, body))


@asynccontextmanager
async def sqlite_store(keep: str | None) -> AsyncIterator[tuple[Any, bool]]:
    if keep:  # a kept file: filled once, reused by later runs
        fresh = not await trio.Path(keep).exists()
        async with open_sqlite_store(Path(keep)) as store:
            yield store, fresh
        return
    with tempfile.TemporaryDirectory(prefix="greenroom-bench-") as directory:
        async with open_sqlite_store(Path(directory) / "bench.db") as store:
            yield store, True


@asynccontextmanager
async def postgres_store(server: str, keep: str | None) -> AsyncIterator[tuple[Any, bool]]:
    import psycopg

    from greenroom.persistence.postgres import open_postgres_store

    name = keep or f"gr_bench_{secrets.token_hex(4)}"

    def admin(sql: str) -> bool:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
            if sql == "exists":
                found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
                return found.fetchone() is not None
            conn.execute(sql.encode())
            return True

    fresh = True
    if keep:
        fresh = not await trio.to_thread.run_sync(admin, "exists")
    if fresh:
        await trio.to_thread.run_sync(admin, f"CREATE DATABASE {name}")
    try:
        async with open_postgres_store(
            f"{server}/{name}", node_id="bench", advertise_url=""
        ) as store:
            await store.membership.join()
            yield store, fresh
    finally:
        if not keep:
            await trio.to_thread.run_sync(admin, f"DROP DATABASE {name} WITH (FORCE)")


async def fill(store: Any, fill_chunk: Callable[..., None], sessions: int, messages: int) -> float:
    rare = set(random.Random(7).sample(range(sessions), min(10, sessions)))
    started = time.perf_counter()
    for start in range(0, sessions, CHUNK):
        count = min(CHUNK, sessions - start)
        chunk = rows(start, count, messages, rare)
        await store.group_commit.write(lambda conn, chunk=chunk: fill_chunk(conn, *chunk))
    return time.perf_counter() - started


async def timed(store: Any, query: SessionQuery, repeats: int) -> tuple[float, float, Any]:
    samples, page = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        page = await store.search_sessions(query)
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples), max(samples), page


async def run(kind: str, args: argparse.Namespace) -> None:
    if kind == "postgres":
        opener = postgres_store(args.server, args.keep_database)
    else:
        opener = sqlite_store(args.keep_file)
    fill_chunk = fill_postgres if kind == "postgres" else fill_sqlite
    async with opener as (store, fresh):
        total = args.sessions * args.messages
        if fresh:
            seconds = await fill(store, fill_chunk, args.sessions, args.messages)
            if kind == "postgres":
                await store.run_read(lambda conn: conn.execute("ANALYZE"))
            print(f"\n{kind}: {args.sessions} sessions, {total} messages filled in {seconds:.0f} s")
        else:
            print(f"\n{kind}: reusing the kept store ({args.sessions} sessions assumed)")
        if args.fill_only:
            return
        first = await store.search_sessions(SessionQuery(limit=50))
        cases = [
            ("list, first page (limit 50)", SessionQuery(limit=50)),
            ("list, next page (cursor)", SessionQuery(limit=50, after=first.next)),
            ("list, starred only", SessionQuery(limit=50, starred=True)),
            ("q=zebracorn (10 sessions)", SessionQuery(words=query_words("zebracorn"))),
            ("q=okapi (1 % of sessions)", SessionQuery(words=query_words("okapi"), limit=50)),
            (
                "q=okapi, recent order",
                SessionQuery(words=query_words("okapi"), order="recent", limit=50),
            ),
            ("q=zebrac (a prefix)", SessionQuery(words=query_words("zebrac"))),
            ("q=okapi build (two words)", SessionQuery(words=query_words("okapi build"))),
            ("q=build (30 % of messages)", SessionQuery(words=query_words("build"), limit=50)),
            (
                "q=build, recent order",
                SessionQuery(words=query_words("build"), order="recent", limit=50),
            ),
            ("q=bui (a common prefix)", SessionQuery(words=query_words("bui"), limit=50)),
            ("q=build error (two common)", SessionQuery(words=query_words("build error"))),
        ]
        build = await store.search_sessions(SessionQuery(words=query_words("build"), limit=50))
        cases.append(
            (
                "q=build, next page (cursor)",
                SessionQuery(words=query_words("build"), limit=50, after=build.next),
            )
        )
        okapi = await store.search_sessions(SessionQuery(words=query_words("okapi"), limit=50))
        cases.insert(
            5,
            (
                "q=okapi, next page (cursor)",
                SessionQuery(words=query_words("okapi"), limit=50, after=okapi.next),
            ),
        )
        print(f"{'query':34} {'median ms':>10} {'worst ms':>9} {'found':>6}")
        for label, query in cases:
            median, worst, page = await timed(store, query, args.repeats)
            print(f"{label:34} {median:10.1f} {worst:9.1f} {len(page.sessions):6}")
        started = time.perf_counter()
        everything = await store.list_sessions()
        elapsed = (time.perf_counter() - started) * 1000
        print(f"{'the whole list (no parameters)':34} {elapsed:10.0f} {'':9} {len(everything):6}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="sqlite")
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--messages", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--server", default="postgresql://postgres@127.0.0.1:5432")
    parser.add_argument("--keep-file", help="SQLite: fill this file once, reuse it afterwards")
    parser.add_argument("--keep-database", help="PostgreSQL: the same with a database name")
    parser.add_argument("--fill-only", action="store_true", help="fill (or reuse), time nothing")
    args = parser.parse_args()
    print(
        f"Python {sys.version.split()[0]}, {platform.machine()}, {os.cpu_count()} CPUs, "
        f"{args.sessions} sessions x {args.messages} messages, {args.repeats} repeats"
    )
    kinds = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    for kind in kinds:
        trio.run(run, kind, args)


if __name__ == "__main__":
    main()
