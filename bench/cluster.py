"""Cluster figures against real nodes on the local PostgreSQL: run by hand, never by tests.

    .venv/bin/python -m bench.cluster [--rounds 3] [--sessions 8] [--tokens 300]
        [--nodes 1 2 3] [--throughput-only]

Needs PostgreSQL at 127.0.0.1:5432 (trust, user postgres); every part runs on a scratch
database (created, then dropped) with nodes started by the cluster test harness
(tests/cluster/_nodes.py: lease ttl 3 s, renew 0.5 s) and the in-process fake OpenAI model on
loopback. Three figures, each bounded:

* takeover: a node owning a session mid-turn is killed with SIGKILL; the time until another
  node has claimed the session (epoch + 1) and its turn is no longer running (polled every
  20 ms from the database). ``--rounds`` kills.
* remote subscriber latency: a session owned by n1 streams 100 tokens/s; one ``/events``
  subscriber on n1 (local) and one on n2 (remote, served from the database); for each event
  the remote arrival time minus the local one (both clients in this process).
* token events/s: ``--sessions`` turns at once of ``--tokens`` tokens each (no model delay),
  counted on the run streams: one SQLite node, then each count of PostgreSQL nodes in
  ``--nodes`` (default: two) with the sessions split between them, the same total load.
  ``--rounds`` rounds each, the best reported. ``--throughput-only`` skips the first two.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from functools import partial
from pathlib import Path

import attrs
import httpx
import trio

from tests.agents import fake_openai as fo
from tests.agents.fake_sse import Recorded, Reply
from tests.cluster._clients import create, head, idle
from tests.cluster._nodes import Cluster, cluster, node_client
from tests.crash_support import ServerFiles, client, fake_model, start_server, user
from tests.pg import run_sql

BUDGET = 300  # seconds any one part may take


@attrs.define
class TextModel:
    """Answers every request with ``tokens`` words, ``delay`` seconds before each frame."""

    tokens: int = 300
    delay: float = 0.0

    def __call__(self, request: Recorded) -> Reply:
        words = [f"w{n} " for n in range(self.tokens)]
        return fo.text_reply(*words, delay=self.delay)


async def poll(condition: Callable[[], Awaitable[bool]], limit: float) -> float:
    """Seconds until ``condition`` holds, polled every 20 ms; fails after ``limit`` s."""
    start = time.monotonic()
    with trio.fail_after(limit):
        for _ in range(int(limit / 0.02) + 1):
            if await condition():
                break
            await trio.sleep(0.02)  # real clock: the nodes are other processes
    return time.monotonic() - start


async def streaming(nodes: Cluster, session: str) -> bool:
    sql = "SELECT last_seq FROM gr_heads WHERE session_id = %s"
    return int((await run_sql(nodes.dsn, sql, session))[0][0]) > 5


async def owned_by(nodes: Cluster, session: str, name: str) -> bool:
    return (await head(nodes.dsn, session))[1] == name


async def taken(nodes: Cluster, session: str, epoch: int) -> bool:
    now, owner, _, _ = await head(nodes.dsn, session)
    return now > epoch and owner != "n1" and await idle(nodes.dsn, session)


async def takeover(nodes: Cluster, model: TextModel, rounds: int) -> list[float]:
    model.tokens, model.delay = 400, 0.05  # a 20 s turn: killed well before its end
    await nodes.start_all(["n1", "n2"])
    times = []
    for _ in range(rounds):
        n1 = nodes.node("n1")
        async with node_client(n1) as http:
            session = await create(http)
            path = f"/api/sessions/{session}/agent/crash?on_disconnect=continue"
            async with http.stream("POST", path, json=user("go")) as response:
                assert response.status_code == 200
        await poll(partial(streaming, nodes, session), 30)
        epoch = (await head(nodes.dsn, session))[0]
        killed = time.monotonic()
        await n1.kill()
        await poll(partial(taken, nodes, session, epoch), 60)
        times.append(time.monotonic() - killed)
        await nodes.start("n1")
    return times


async def remote_latency(nodes: Cluster, model: TextModel, turns: int) -> list[float]:
    model.tokens, model.delay = 100, 0.01  # 100 tokens/s
    n1, n2 = await nodes.start_all(["n1", "n2"])
    async with node_client(n1) as h1, node_client(n2) as h2:
        session = await create(h1)
        arrivals: dict[str, dict[int, float]] = {"local": {}, "remote": {}}
        async with trio.open_nursery() as nursery:
            # The first subscription claims the session: n1's, so n1 owns it and n2 mirrors.
            nursery.start_soon(subscribe, h1, session, arrivals["local"])
            await poll(partial(owned_by, nodes, session, "n1"), 30)
            nursery.start_soon(subscribe, h2, session, arrivals["remote"])
            await trio.sleep(1)  # real clock: the remote subscription is open
            for _ in range(turns):
                path = f"/api/sessions/{session}/agent/crash"
                async with h1.stream("POST", path, json=user("go")) as response:
                    async for _ in response.aiter_bytes():
                        pass
            await trio.sleep(1)  # real clock: the last events reach both subscribers
            nursery.cancel_scope.cancel()
    assert (await head(nodes.dsn, session))[1] == "n1"
    local, remote = arrivals["local"], arrivals["remote"]
    return [remote[seq] - local[seq] for seq in local if seq in remote]


async def subscribe(http: httpx.AsyncClient, session: str, into: dict[int, float]) -> None:
    headers = {"Last-Event-ID": "0"}
    async with http.stream("GET", f"/api/sessions/{session}/events", headers=headers) as r:
        seq = 0
        async for line in r.aiter_lines():
            if line.startswith("id: "):
                seq = int(line[4:])
            elif line.startswith("data: ") and seq:
                into.setdefault(seq, time.monotonic())


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of these processes, all threads (``/proc/<pid>/stat``)."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


@attrs.frozen
class Rate:
    events_per_s: float
    server_us_per_event: float  # the serving processes' CPU, all of them, per token event


async def best_rate(
    clients: list[httpx.AsyncClient], sessions: int, rounds: int, pids: list[int]
) -> Rate:
    """The best of ``rounds`` runs of :func:`token_rate`, with the servers' CPU per event."""
    best = Rate(0.0, 0.0)
    for _ in range(rounds):
        before = cpu_seconds(pids)
        rate, events = await token_rate(clients, sessions)
        spent = cpu_seconds(pids) - before
        if rate > best.events_per_s:
            best = Rate(rate, spent / max(events, 1) * 1e6)
    return best


async def token_rate(clients: list[httpx.AsyncClient], sessions: int) -> tuple[float, int]:
    """Token events per second of ``sessions`` turns at once, spread over ``clients``, and
    how many there were."""
    ids = [await create(clients[n % len(clients)]) for n in range(sessions)]
    counts = [0] * sessions

    async def turn(n: int) -> None:
        http = clients[n % len(clients)]
        path = f"/api/sessions/{ids[n]}/agent/crash"
        async with http.stream("POST", path, json=user("go")) as response:
            async for line in response.aiter_lines():
                token = line.startswith("data: ") and '"agent_choice"' in line
                if token and json.loads(line[6:])["type"] == "agent_choice":
                    counts[n] += 1

    start = time.monotonic()
    async with trio.open_nursery() as nursery:
        for n in range(sessions):
            nursery.start_soon(turn, n)
    return sum(counts) / (time.monotonic() - start), sum(counts)


async def throughput_sqlite(files: ServerFiles, rounds: int, sessions: int) -> Rate:
    server = await start_server(files)
    try:
        async with client(server) as http:
            return await best_rate([http], sessions, rounds, [server.pid])
    finally:
        await server.stop()


async def throughput_cluster(nodes: Cluster, rounds: int, sessions: int, count: int) -> Rate:
    """Best of ``rounds``: ``sessions`` turns at once spread over ``count`` PostgreSQL nodes
    (each session created on, hence owned by, the node its client talks to)."""
    started = await nodes.start_all([f"n{n + 1}" for n in range(count)])
    async with AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(node_client(n, 120)) for n in started]
        return await best_rate(clients, sessions, rounds, [n.pid for n in started])


def pct(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def main(args: argparse.Namespace) -> None:
    model = TextModel()
    with tempfile.TemporaryDirectory(prefix="gr-bench-cluster-") as tmp:
        root = Path(tmp)
        async with fake_model(model) as fake:
            if not args.throughput_only:
                await failover_and_latency(args, model, fake.url, root)
            model.tokens, model.delay = args.tokens, 0.0
            with trio.fail_after(BUDGET):
                (root / "s").mkdir()
                files = ServerFiles(root / "s", fake.url)
                one = await throughput_sqlite(files, args.rounds, args.sessions)
            print(
                f"token events/s, {args.sessions} turns of {args.tokens} tokens at once"
                f" (best of {args.rounds}): one SQLite node {one.events_per_s:,.0f}"
                f" (server CPU {one.server_us_per_event:.0f} µs/event)"
            )
            for count in args.nodes:
                with trio.fail_after(BUDGET):
                    (root / f"c{count}").mkdir()
                    async with cluster(ServerFiles(root / f"c{count}", fake.url)) as nodes:
                        rate = await throughput_cluster(nodes, args.rounds, args.sessions, count)
                print(
                    f"  {count} PostgreSQL node{'s' if count > 1 else ''}:"
                    f" {rate.events_per_s:,.0f}"
                    f" ({(rate.events_per_s / one.events_per_s - 1) * 100:+.0f} % vs SQLite),"
                    f" all nodes' CPU {rate.server_us_per_event:.0f} µs/event"
                )


async def failover_and_latency(
    args: argparse.Namespace, model: TextModel, url: str, root: Path
) -> None:
    with trio.fail_after(BUDGET):
        (root / "t").mkdir()
        async with cluster(ServerFiles(root / "t", url)) as nodes:
            times = await takeover(nodes, model, args.rounds)
    print(
        f"takeover after kill -9 (ttl 3 s): median {statistics.median(times):.2f} s,"
        f" max {max(times):.2f} s, {[round(t, 2) for t in times]}"
    )
    with trio.fail_after(BUDGET):
        (root / "l").mkdir()
        async with cluster(ServerFiles(root / "l", url)) as nodes:
            added = await remote_latency(nodes, model, args.rounds)
    print(
        f"remote subscriber, added latency over {len(added)} events:"
        f" p50 {pct(added, 0.5) * 1000:.1f} ms, p90 {pct(added, 0.9) * 1000:.1f} ms,"
        f" p99 {pct(added, 0.99) * 1000:.1f} ms"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=300)
    parser.add_argument("--nodes", type=int, nargs="+", default=[2], choices=[1, 2, 3, 4])
    parser.add_argument(
        "--throughput-only", action="store_true", help="skip the takeover and latency figures"
    )
    trio.run(main, parser.parse_args())
