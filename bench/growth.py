"""Growth curves (issue 27): how greenroom's costs grow with what it holds. Run by hand:

    .venv/bin/python bench/growth.py history [--sizes 10 100 1000 5000] [--rounds 3]
    .venv/bin/python bench/growth.py live [--sessions 100 300 1000] [--backend sqlite|postgres]
    .venv/bin/python bench/growth.py idle [--connections 1000 3000 10000]
    .venv/bin/python bench/growth.py stored [--stored 100000] [--messages 20]

Every scenario starts ``bench/fake_model.py`` and ``greenroom serve`` as processes on 127.0.0.1
port 0 (``bench/side_by_side.py``'s helpers), drives them from this process (``bench/_loadgen.py``'s
HTTP client and turn scenario) and reads the server's CPU and RSS from /proc. Every wait is
bounded by ``--timeout`` and every loop by a count; every process started is stopped.

- ``history``: a session per size with that many prior messages (inserted through the store
  before the server starts), compaction off (a 10M-token window); one warm-up turn each, then
  ``--turns`` turns: server CPU per turn. Sizes interleave within a round; ``--rounds`` rounds.
- ``live``: N sessions streaming at once (``_loadgen.turns``): turns/s, TTFT p99, server RSS
  growth per live session, errors.
- ``idle``: N idle WebSocket connections, then N idle ``/events`` SSE streams: RSS per
  connection and server CPU per connection over ``--rest`` seconds at rest.
- ``stored``: a SQLite store filled by ``bench/session_search.py``'s bulk fill; a cold server
  on it: a list page, a search, and "open" (a stored session's first ``/events`` byte, its actor
  spawned cold), each ``--repeats`` times.

Each curve prints a least-squares slope of log(cost) against log(size): ~0 flat, ~1 linear.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _loadgen  # noqa: E402
from _growth_harness import (  # noqa: E402
    FILLER,
    OPENING,
    SOURCE,
    database,
    fake_model,
    loadavg,
    raise_fd_limit,
    server,
    slope,
)
from _loadgen import Http, cpu_seconds, rss_bytes  # noqa: E402

# --------------------------------------------------------------------------- history length


async def prefill(db: Path, sizes: list[int]) -> dict[int, str]:
    from greenroom.domain import Message, Session
    from greenroom.persistence import open_sqlite_store

    ids = {}
    async with open_sqlite_store(db) as store:
        for size in sizes:
            items = tuple(
                Message.user(f"{n}: {FILLER}") if n % 2 == 0 else Message.assistant(FILLER)
                for n in range(size)
            )
            ids[size] = (await store.add_session(Session.new(title=f"h{size}", items=items))).id
    return ids


async def history_turns(
    url: str, pid: int, ids: dict[int, str], turns: int, tokens: int, limit_s: float
) -> dict[int, dict[str, float]]:
    client = _loadgen.Greenroom(url, SOURCE)
    out = {}
    with trio.fail_after(limit_s):
        async with Http(url) as http:
            for size, session in ids.items():
                await client.turn(http, session)  # warm-up: the actor loads the session
                cpu, wall = cpu_seconds(pid), time.perf_counter()
                for _ in range(turns):
                    result = await client.turn(http, session)
                    if result.tokens != tokens:
                        raise RuntimeError(f"{result.tokens} of {tokens} tokens")
                out[size] = {
                    "cpu_ms": (cpu_seconds(pid) - cpu) / turns * 1000,
                    "wall_ms": (time.perf_counter() - wall) / turns * 1000,
                }
    return out


def prompt_floor(size: int, repeats: int = 20) -> float:
    """CPU ms to build one prompt of ``size`` history messages, in this process: the session's
    prompt (``build_messages``), the token estimate, OpenAI's message shape and its JSON, i.e.
    the per-turn work that must grow with the history."""
    from greenroom.agents._config import AgentConfig
    from greenroom.agents._prompt import build_messages
    from greenroom.agents._tokens import estimate_tokens
    from greenroom.agents.providers._openai_messages import to_openai_messages
    from greenroom.domain import Message, Session

    items = tuple(
        Message.user(f"{n}: {FILLER}") if n % 2 == 0 else Message.assistant(FILLER)
        for n in range(size)
    )
    session = Session.new(title="floor", items=items)
    agent = AgentConfig(name="root", model="fake", instruction="Tell stories.")
    cpu = time.process_time()
    for _ in range(repeats):
        messages = build_messages(session, agent)
        estimate_tokens(messages)
        json.dumps({"messages": to_openai_messages(messages)})
    return (time.process_time() - cpu) / repeats * 1000


def history(args: argparse.Namespace, workdir: Path) -> None:
    rounds: list[dict[int, dict[str, float]]] = []
    with fake_model(workdir) as model_url:
        for r in range(args.rounds):
            db = workdir / f"history-{r}.sqlite3"
            ids = trio.run(prefill, db, args.sizes)
            with server(workdir, str(db), model_url, args.tokens) as (pid, url):
                found = trio.run(
                    history_turns, url, pid, ids, args.turns, args.tokens, args.timeout
                )
            rounds.append(found)
            print(f"round {r + 1}: {json.dumps(found)}  load {loadavg()}", flush=True)
    floors = {size: statistics.median(prompt_floor(size) for _ in range(3)) for size in args.sizes}
    print(f"\n{args.turns} turns of {args.tokens} tokens per size per round, median of rounds")
    print(
        "| prior messages | server CPU ms/turn (median) | runs | prompt alone ms "
        "| turn minus prompt ms | wall ms/turn |"
    )
    print("|---:|---:|---|---:|---:|---:|")
    medians, rest = [], []
    for size in args.sizes:
        cpus = [r[size]["cpu_ms"] for r in rounds]
        medians.append(statistics.median(cpus))
        rest.append(medians[-1] - floors[size])
        wall = statistics.median(r[size]["wall_ms"] for r in rounds)
        runs = ", ".join(f"{c:.1f}" for c in cpus)
        print(
            f"| {size:,} | {medians[-1]:.1f} | {runs} | {floors[size]:.2f} | {rest[-1]:.1f} "
            f"| {wall:.1f} |"
        )
    print(f"slope log(CPU/turn) vs log(messages): {slope(args.sizes, medians):.2f}")
    print(
        f"slope log(prompt alone) vs log(messages): {slope(args.sizes, list(floors.values())):.2f}"
    )
    if min(rest) > 0:
        print(f"slope log(turn minus prompt) vs log(messages): {slope(args.sizes, rest):.2f}")
    upper = [s for s in args.sizes if s >= 1000]
    if len(upper) >= 2:
        tail = medians[-len(upper) :]
        print(f"slope over {upper}: {slope(upper, tail):.2f}")


# --------------------------------------------------------------------------- live sessions


def live(args: argparse.Namespace, workdir: Path) -> None:
    raise_fd_limit()
    rows = []
    with fake_model(workdir) as model_url:
        for n in args.sessions:
            for _ in range(args.rounds):
                with (
                    database(args.backend, workdir) as db,
                    server(workdir, db, model_url, args.tokens) as (pid, url),
                ):
                    before = rss_bytes(pid)
                    config = {
                        "server": "greenroom",
                        "url": url,
                        "source": SOURCE,
                        "sessions": n,
                        "server_pid": pid,
                        "tokens": args.tokens,
                        "warmup": 1,
                        "turns": args.turns,
                        "timeout": args.timeout,
                    }
                    raw = trio.run(_loadgen.turns, config)
                    after = rss_bytes(pid)
                row = {
                    "sessions": n,
                    "turns_s": raw["turns"] / raw["elapsed"] if raw["elapsed"] else 0.0,
                    "ttft_p50": _loadgen.percentile(raw["ttft"], 0.5) * 1000,
                    "ttft_p99": _loadgen.percentile(raw["ttft"], 0.99) * 1000,
                    "cpu_ms_turn": raw["server_cpu"] / max(1, raw["turns"]) * 1000,
                    "rss_mb": after / 2**20,
                    "kb_per_session": (after - before) / n / 1024,
                    "errors": len(raw["errors"]),
                    "error_samples": raw["errors"][:2],
                }
                rows.append(row)
                print(json.dumps(row), f"load {loadavg()}", flush=True)
    print(
        f"\n{args.backend}: {args.turns} turns of {args.tokens} tokens per session after a warm-up"
    )
    print(
        "| live sessions | turns/s | TTFT p50 ms | TTFT p99 ms | CPU ms/turn | RSS MB "
        "| RSS KB per live session | errors |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    sizes, cpu = [], []
    for n in args.sessions:
        mine = [row for row in rows if row["sessions"] == n]

        def med(key: str, mine: list[dict[str, Any]] = mine) -> float:
            return float(statistics.median(row[key] for row in mine))

        sizes.append(n)
        cpu.append(med("cpu_ms_turn"))
        print(
            f"| {n:,} | {med('turns_s'):.0f} | {med('ttft_p50'):.0f} | {med('ttft_p99'):.0f} "
            f"| {med('cpu_ms_turn'):.1f} | {med('rss_mb'):.0f} | {med('kb_per_session'):.0f} "
            f"| {sum(row['errors'] for row in mine)} |"
        )
    if len(sizes) >= 2:
        print(f"slope log(CPU/turn) vs log(live sessions): {slope(sizes, cpu):.2f}")


# --------------------------------------------------------------------------- idle connections


async def hold_idle(
    url: str, pid: int, kind: str, count: int, rest: float, limit_s: float
) -> dict[str, float]:
    """Open ``count`` idle connections of ``kind``; RSS and CPU of the server at rest."""
    with trio.fail_after(limit_s):
        return await _hold_idle(url, pid, kind, count, rest)


async def _hold_idle(url: str, pid: int, kind: str, count: int, rest: float) -> dict[str, float]:
    from trio_websocket import open_websocket_url

    opened = 0
    failures: list[str] = []
    all_open = trio.Event()
    release = trio.Event()
    async with Http(url) as http:
        sessions = [
            (await http.json("POST", "/api/sessions", {}))["id"] for _ in range(min(count, 100))
        ]
    await trio.sleep(0.5)
    before = rss_bytes(pid)

    opening = trio.Semaphore(OPENING)

    async def one(n: int) -> None:
        nonlocal opened
        await opening.acquire()  # released once this connection is open (or has failed)
        held = True
        try:
            if kind == "ws":
                ws_url = url.replace("http://", "ws://", 1) + "/api/ws"
                async with open_websocket_url(ws_url):
                    opening.release()
                    held = False
                    opened += 1
                    if opened == count:
                        all_open.set()
                    await release.wait()
            else:
                async with Http(url) as http:
                    pieces = await _loadgen.Greenroom(url, SOURCE).subscribe(
                        http, sessions[n % len(sessions)]
                    )
                    async for _ in pieces:  # the first bytes: the stream is open
                        break
                    opening.release()
                    held = False
                    opened += 1
                    if opened == count:
                        all_open.set()
                    await release.wait()
        except Exception as exc:  # recorded; counted as not opened
            failures.append(f"{type(exc).__name__}: {exc}")
            if held:
                opening.release()
            if len(failures) + opened == count:
                all_open.set()

    result: dict[str, float] = {}
    async with trio.open_nursery() as nursery:
        for n in range(count):
            nursery.start_soon(one, n)
        await all_open.wait()
        await trio.sleep(1.0)
        during = rss_bytes(pid)
        cpu, wall = cpu_seconds(pid), time.perf_counter()
        await trio.sleep(rest)
        cpu, wall = cpu_seconds(pid) - cpu, time.perf_counter() - wall
        result = {
            "opened": opened,
            "failed": len(failures),
            "rss_kb_each": (during - before) / max(1, opened) / 1024,
            "rss_mb": during / 2**20,
            "cpu_percent": cpu / wall * 100,
            "cpu_us_per_s_each": cpu / wall / max(1, opened) * 1e6,
        }
        if failures:
            result["sample"] = failures[0]  # type: ignore[assignment]
        release.set()
    return result


def idle(args: argparse.Namespace, workdir: Path) -> None:
    limit = raise_fd_limit()
    print(f"fd limit (soft, raised to hard): {limit}")
    rows = []
    with fake_model(workdir) as model_url:
        for kind in ("ws", "sse"):
            for n in args.connections:
                if n + 200 > limit:  # client and server each hold n descriptors
                    print(f"skip {kind} x{n}: fd limit {limit}")
                    continue
                for _ in range(args.rounds):
                    with (
                        database("sqlite", workdir) as db,
                        server(workdir, db, model_url, args.tokens) as (pid, url),
                    ):
                        found = trio.run(hold_idle, url, pid, kind, n, args.rest, args.timeout)
                    rows.append({"kind": kind, "n": n, **found})
                    print(json.dumps(rows[-1]), f"load {loadavg()}", flush=True)
    print(f"\nidle connections, {args.rest:.0f} s at rest, median of {args.rounds} rounds")
    print(
        "| kind | connections | opened | RSS KB each | server RSS MB | CPU % at rest "
        "| CPU µs/s each |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for kind in ("ws", "sse"):
        for n in args.connections:
            mine = [r for r in rows if r["kind"] == kind and r["n"] == n]
            if not mine:
                continue

            def med(key: str, mine: list[dict[str, Any]] = mine) -> float:
                return statistics.median(float(r[key]) for r in mine)

            print(
                f"| {kind} | {n:,} | {med('opened'):.0f} | {med('rss_kb_each'):.1f} "
                f"| {med('rss_mb'):.0f} | {med('cpu_percent'):.2f} "
                f"| {med('cpu_us_per_s_each'):.2f} |"
            )


# --------------------------------------------------------------------------- stored sessions


async def fill_store(db: Path, sessions: int, messages: int) -> float:
    import session_search

    from greenroom.persistence import open_sqlite_store

    async with open_sqlite_store(db) as store:
        return await session_search.fill(store, session_search.fill_sqlite, sessions, messages)


async def stored_probe(url: str, sessions: int, repeats: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {"open": [], "list": [], "search": [], "next": []}
    step = max(1, sessions // (repeats + 1))
    async with Http(url) as http:
        for n in range(repeats):
            sid = f"bench-{(n + 1) * step % sessions:07d}"
            started = time.perf_counter()
            status, _, pieces = await http.request("GET", f"/api/sessions/{sid}/events")
            if status != 200:
                raise RuntimeError(f"events: HTTP {status}")
            async for _ in pieces:
                break
            samples["open"].append((time.perf_counter() - started) * 1000)
            await http.close()  # leave the stream
            for key, path in (
                ("list", "/api/sessions?limit=50"),
                ("search", "/api/sessions?q=okapi&limit=50"),
            ):
                started = time.perf_counter()
                page = await http.json("GET", path)
                samples[key].append((time.perf_counter() - started) * 1000)
                if not page:
                    raise RuntimeError(f"{path}: empty")
    return samples


def stored(args: argparse.Namespace, workdir: Path) -> None:
    db = workdir / "stored.sqlite3"
    seconds = trio.run(fill_store, db, args.stored, args.messages)
    print(f"filled {args.stored:,} sessions x {args.messages} messages in {seconds:.0f} s")
    all_samples: dict[str, list[float]] = {}
    with fake_model(workdir) as model_url:
        for r in range(args.rounds):
            with server(workdir, str(db), model_url, args.tokens) as (_, url):  # cold start
                found = trio.run(stored_probe, url, args.stored, args.repeats)
            for key, values in found.items():
                all_samples.setdefault(key, []).extend(values)
            print(
                f"round {r + 1}: "
                + ", ".join(f"{k} {statistics.median(v):.1f} ms" for k, v in found.items() if v),
                f"load {loadavg()}",
                flush=True,
            )
    print(f"\n{args.stored:,} stored sessions, {args.rounds} cold servers x {args.repeats}")
    print("| operation | median ms | p90 ms | worst ms |")
    print("|---|---:|---:|---:|")
    for key, label in (
        ("open", "open a stored session (first /events byte, actor cold)"),
        ("list", "list, first page (limit 50)"),
        ("search", "search q=okapi (1 % of sessions, limit 50)"),
    ):
        values = all_samples[key]
        p90 = _loadgen.percentile(values, 0.9)
        print(f"| {label} | {statistics.median(values):.1f} | {p90:.1f} | {max(values):.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("scenario", choices=["history", "live", "idle", "stored"])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000, 5000])
    parser.add_argument("--sessions", type=int, nargs="+", default=[100, 300, 1000])
    parser.add_argument("--connections", type=int, nargs="+", default=[1000, 3000, 10000])
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--stored", type=int, default=100_000)
    parser.add_argument("--messages", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--tokens", type=int, default=20)
    parser.add_argument("--rest", type=float, default=10.0, help="seconds at rest (idle)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per measurement")
    args = parser.parse_args()
    print("command:", " ".join([Path(sys.executable).name, *sys.argv]))
    print(f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}, load {loadavg()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="greenroom-growth-") as directory:
        {"history": history, "live": live, "idle": idle, "stored": stored}[args.scenario](
            args, Path(directory)
        )


if __name__ == "__main__":
    main()
