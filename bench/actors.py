"""Session-actor costs: command round trip, event fan-out, memory per idle actor. Run by hand:

    .venv/bin/python bench/actors.py [--runs 3] [--calls 20000] [--actors 10000]

- Round trip: ``await handle.snapshot()`` on a live idle actor (mailbox command + one-shot
  reply channel + the handler), timed one call at a time; median and p99 of ``--calls``.
- Fan-out: ``EventLog.append`` of small ``agent_choice`` events with 1, 10 and 100 subscribers,
  each draining concurrently in its own task as the transports read (the first entry, then
  every entry already waiting); the producer yields every ``PACE`` events, as a turn's ``emit``
  does (decision 0038; after every event before). Cost = wall time from the first append until
  every subscriber has read every event, per event per subscriber (encoding each event's JSON
  once is included). For scale, the same loop over a bare memory channel (no log) is timed too.
- Memory: ``--actors`` small sessions (one user message each) in the in-memory store, then one
  idle actor spawned for each. tracemalloc gives the bytes the session data takes (measured
  alone) and the bytes the actors add on top (the store and the actor share the frozen session,
  so that is the actor's own cost); an event log per session (what a snapshot creates) is
  measured after that. The same steps in a fresh process without tracemalloc give the RSS growth.

Every run uses a fresh store and registry on the real clock; the summary gives the median of the
runs' figures. CPU time (process_time) is printed next to wall time: on a shared VM it is the
steadier figure.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import trio

from greenroom.actors import EventLog, LogEntry, RegistryConfig, Subscription, open_registry
from greenroom.actors._turn import PACE
from greenroom.agents import BuiltRuntime
from greenroom.domain import AgentChoice, Message, Session
from greenroom.errors import AgentNotFound
from greenroom.persistence import open_memory_store
from greenroom.transport._sse import LOG_BATCH

FANOUT = {1: 50_000, 10: 10_000, 100: 2_000}  # subscribers -> events (500k..200k deliveries)
# The producer yields every PACE events, as a turn's emit does (decision 0038); it was after
# every event before.
YIELD_EVERY = PACE


class NoRuntimes:
    """A factory for benchmarks that never run a turn."""

    async def build(self, source: str, agent_name: str, session: Session) -> BuiltRuntime:
        raise AgentNotFound(source)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


# --- round trip ----------------------------------------------------------------------------


async def round_trip(calls: int) -> dict[str, float]:
    async with open_memory_store() as store, open_registry(store, NoRuntimes()) as registry:
        session = await registry.create(Session.new(title="bench"))
        handle = registry.session(session.id)
        for _ in range(1000):  # warm up: spawn the actor, fill caches
            await handle.snapshot()
        samples = []
        clock = time.perf_counter_ns
        cpu = time.process_time()
        for _ in range(calls):
            started = clock()
            await handle.snapshot()
            samples.append((clock() - started) / 1000)
        cpu = time.process_time() - cpu
    return {
        "median_us": statistics.median(samples),
        "p99_us": percentile(samples, 0.99),
        "cpu_us": cpu / calls * 1e6,
    }


# --- fan-out -------------------------------------------------------------------------------


async def fan_out(subscribers: int, events: int) -> dict[str, float]:
    log = EventLog("bench", capacity=1024, subscriber_buffer=1024)
    subscriptions = [log.subscribe() for _ in range(subscribers)]
    received: list[int] = []
    event = AgentChoice("token ", "root", "bench")

    async def drain(subscription: Subscription) -> None:
        # As the transports read: the first entry, then everything already waiting.
        count = 0
        with subscription:
            async for _ in subscription:
                count += 1 + len(subscription.ready(LOG_BATCH))
        received.append(count)

    async with trio.open_nursery() as nursery:
        for subscription in subscriptions:
            nursery.start_soon(drain, subscription)
        await trio.sleep(0.01)  # every subscriber is waiting for its first event
        started, cpu = time.perf_counter(), time.process_time()
        for n in range(events):
            log.append(event)
            if n % YIELD_EVERY == YIELD_EVERY - 1:
                await trio.lowlevel.checkpoint()
        log.close()  # appends session_exited and ends every subscription
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    dropped = sum(1 for s in subscriptions if s.dropped)
    if dropped or received != [events + 1] * subscribers:
        raise RuntimeError(f"fan-out lost events: {dropped} dropped, received {set(received)}")
    deliveries = (events + 1) * subscribers
    return {"us_per_delivery": elapsed / deliveries * 1e6, "cpu_us": cpu / deliveries * 1e6}


async def trio_floor(events: int = 50_000) -> float:
    """µs per message through a bare memory channel, 1 producer checkpointing per message to 1
    consumer: the scheduling floor any per-event fan-out in trio pays, with no log at all."""
    send, receive = trio.open_memory_channel[int](1024)

    async def consume() -> None:
        async for _ in receive:
            pass

    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume)
        await trio.sleep(0.01)
        started = time.perf_counter()
        async with send:
            for n in range(events):
                send.send_nowait(n)
                await trio.lowlevel.checkpoint()
    return (time.perf_counter() - started) / events * 1e6


def encode_cost(events: int = 50_000) -> float:
    """µs to sequence-encode one event (LogEntry.of): the part of an append shared by all."""
    event = AgentChoice("token ", "root", "bench")
    started = time.perf_counter()
    for n in range(events):
        LogEntry.of(n, event)
    return (time.perf_counter() - started) / events * 1e6


# --- memory --------------------------------------------------------------------------------


def rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


async def idle_actors(count: int, measure: Callable[[], int]) -> dict[str, float]:
    """Bytes per session (data), per idle actor beyond it, per event log; by ``measure``."""
    config = RegistryConfig(idle_timeout=3600.0)  # none retires while we measure
    async with open_memory_store() as store, open_registry(store, NoRuntimes(), config) as registry:
        gc.collect()
        base = measure()
        ids = []
        for n in range(count):
            session = Session.new(title=f"bench {n}", items=(Message.user(f"hello {n}"),))
            ids.append((await store.add_session(session)).id)
        gc.collect()
        with_sessions = measure()
        for session_id in ids:
            (await registry.subscribe(session_id)).close()  # spawns an idle actor, no command
        await trio.sleep(0.01)
        gc.collect()
        with_actors = measure()
        if len(registry.live_ids()) != count:
            raise RuntimeError(f"expected {count} live actors, have {len(registry.live_ids())}")
        for session_id in ids:
            registry.ensure_log(session_id)  # what the first snapshot or subscriber adds
        gc.collect()
        with_logs = measure()
    return {
        "session_kb": (with_sessions - base) / count / 1024,
        "actor_kb": (with_actors - with_sessions) / count / 1024,
        "log_kb": (with_logs - with_actors) / count / 1024,
    }


def rss_in_fresh_process(count: int) -> dict[str, float]:
    # RSS only grows when the allocator needs new pages: measure in a process that has not
    # freed anything yet (a second pass in one process reuses the first pass's memory).
    probe = [sys.executable, __file__, "--rss-probe", "--actors", str(count)]
    output = subprocess.run(probe, check=True, capture_output=True, text=True).stdout
    return {key: float(value) for key, value in json.loads(output).items()}


async def memory(count: int) -> dict[str, float]:
    rss = rss_in_fresh_process(count)
    tracemalloc.start()
    try:
        traced = await idle_actors(count, lambda: tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()
    return {**traced, **{f"rss_{key}": value for key, value in rss.items()}}


# --- driver --------------------------------------------------------------------------------


async def one_run(calls: int, actors: int) -> dict[str, float]:
    figures: dict[str, float] = {}
    for key, value in (await round_trip(calls)).items():
        figures[f"rt_{key}"] = value
    figures["encode_us"] = encode_cost()
    figures["floor_us"] = await trio_floor()
    for subscribers, events in FANOUT.items():
        for key, value in (await fan_out(subscribers, events)).items():
            figures[f"fan{subscribers}_{key}"] = value
    for key, value in (await memory(actors)).items():
        figures[f"mem_{key}"] = value
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--actors", type=int, default=10_000)
    parser.add_argument("--rss-probe", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rss_probe:
        print(json.dumps(trio.run(idle_actors, args.actors, rss_bytes)))
        return

    print(f"machine: nproc={os.cpu_count()} {platform.machine()}, Python {sys.version.split()[0]}")
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    runs: list[dict[str, float]] = []
    for n in range(args.runs):
        figures = trio.run(one_run, args.calls, args.actors)
        runs.append(figures)
        print(f"run {n + 1}: " + ", ".join(f"{k}={v:.2f}" for k, v in figures.items()))
    median: dict[str, Any] = {key: statistics.median(r[key] for r in runs) for key in runs[0]}

    def row(label: str, value: float, unit: str, target: str = "") -> None:
        print(f"  {label:<60} {value:>9.2f} {unit:<3} {target}".rstrip())

    print(f"\nmedian of {args.runs} runs:")
    row("round trip snapshot(), median", median["rt_median_us"], "µs", "target <= 50")
    row("round trip snapshot(), p99", median["rt_p99_us"], "µs")
    row("round trip, CPU per call", median["rt_cpu_us"], "µs")
    row("encode one event (LogEntry.of)", median["encode_us"], "µs")
    row("trio floor: bare channel, 1 -> 1, per message", median["floor_us"], "µs")
    for subscribers in FANOUT:
        row(
            f"fan-out, {subscribers} subscriber(s), per event per subscriber",
            median[f"fan{subscribers}_us_per_delivery"],
            "µs",
            "target <= 5",
        )
        row("  CPU", median[f"fan{subscribers}_cpu_us"], "µs")
    # What one more subscriber costs, from the 10- and 100-subscriber totals.
    total10 = median["fan10_us_per_delivery"] * 10
    total100 = median["fan100_us_per_delivery"] * 100
    row("fan-out, marginal cost of one more subscriber", (total100 - total10) / 90, "µs")
    row(f"session data ({args.actors} small sessions), each", median["mem_session_kb"], "KB")
    row("idle actor beyond its session data (tracemalloc)", median["mem_actor_kb"], "KB", "<= 10")
    row("event log per session (tracemalloc)", median["mem_log_kb"], "KB")
    row("RSS growth per session", median["mem_rss_session_kb"], "KB")
    row("RSS growth per idle actor", median["mem_rss_actor_kb"], "KB")
    row("RSS growth per event log", median["mem_rss_log_kb"], "KB")


if __name__ == "__main__":
    main()
