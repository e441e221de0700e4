"""Transport throughput over SSE and WebSocket against a live ``greenroom serve``: run by hand.

    .venv/bin/python bench/transport.py [--turns 50] [--concurrency 10 50] [--rounds 5]

The server is a subprocess serving a scripted agent (200 text tokens per turn, looping, no
delays) with an in-memory store, or with ``--db sqlite`` a fresh SQLite file. Each scenario
runs in its own load-generator process (this file with ``--client``), so client and server
never share an interpreter:

* ``sse x1`` / ``ws x1``: one session, one connection, ``--turns`` turns back to back;
* ``sse xN`` / ``ws xN``: N sessions at once, each on its own connection, ``--rounds`` turns
  each.

Every session first plays one warm-up turn (its first turn also builds the runtime and sets
the title); the clock then runs from the moment all clients are ready to the last turn's end.
A token event is an ``agent_choice`` event. Time to first token runs from just before the
request is sent to the first ``agent_choice`` event parsed by the client. Server CPU is
utime + stime of the server process from ``/proc/<pid>/stat``, read by the client right
before and right after the measured phase, divided by the token events delivered; client CPU
is the load generator's own, the same way (it shows whether the client was the bottleneck).
"server waits" is the share of the wall time the server's main thread spent runnable but
waiting for a CPU (``/proc/<pid>/schedstat``): when it is large the machine was busy with
other work and the wall-clock rates understate the server, while CPU per token holds steady.

Every wait is bounded (``--timeout`` per scenario, a startup deadline for the server), and the
server and client processes are stopped on every path.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TOKENS_PER_TURN = 200
SOURCE = "bench"  # the agent file's name without extension: the source key
STARTUP_TIMEOUT = 60.0
MAX_FRAMES_PER_RUN = 10 * TOKENS_PER_TURN  # a run never legitimately sends this many
CLOCK_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
USER_MESSAGE = {"messages": [{"role": "user", "content": "Tell me a story."}]}


# --------------------------------------------------------------------------- shared helpers


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (all its threads) in seconds, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        text = stat.read()
    fields = text[text.rindex(")") + 2 :].split()  # the name may hold spaces and parentheses
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICK  # fields 14 and 15 of stat(5)


def run_queue_wait(pid: int) -> float:
    """Seconds the process's main thread has spent runnable but waiting for a CPU (schedstat);
    a large share of the wall time means the machine was busy with other work."""
    try:
        with open(f"/proc/{pid}/schedstat", encoding="ascii") as schedstat:
            return int(schedstat.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return float("nan")


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile (no interpolation): the value below which ``fraction`` lie."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(fraction * len(ordered) + 0.5)))
    return ordered[rank - 1]


# --------------------------------------------------------------------------- load generator


class RunCheck:
    """What one turn delivered to the client."""

    def __init__(self) -> None:
        self.tokens = 0
        self.frames = 0
        self.first_token: float | None = None
        self.stop_reason = ""

    def event(self, event: dict[str, Any], sent: float) -> None:
        self.frames += 1
        if self.frames > MAX_FRAMES_PER_RUN:
            raise RuntimeError(f"more than {MAX_FRAMES_PER_RUN} frames in one run")
        kind = event.get("type")
        if kind == "agent_choice":
            if self.first_token is None:
                self.first_token = time.perf_counter() - sent
            self.tokens += 1
        elif kind == "stream_stopped":
            self.stop_reason = str(event.get("reason", ""))
        elif kind == "error":
            raise RuntimeError(f"error event: {event}")

    def verify(self) -> None:
        if self.tokens != TOKENS_PER_TURN or self.stop_reason != "normal":
            raise RuntimeError(
                f"run delivered {self.tokens} tokens, stop reason {self.stop_reason!r}"
            )


class SseSession:
    """One session driven over REST + SSE by its own httpx client (one connection)."""

    def __init__(self, url: str) -> None:
        import httpx

        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        self.client = httpx.AsyncClient(base_url=url, limits=limits, timeout=30.0)
        self.session_id = ""

    async def open(self) -> None:
        response = await self.client.post("/api/sessions", json={})
        response.raise_for_status()
        self.session_id = response.json()["id"]

    async def run(self) -> RunCheck:
        check = RunCheck()
        path = f"/api/sessions/{self.session_id}/agent/{SOURCE}"
        sent = time.perf_counter()
        async with self.client.stream("POST", path, json=USER_MESSAGE) as response:
            if response.status_code != 200:
                await response.aread()
                raise RuntimeError(f"run: HTTP {response.status_code} {response.text[:200]}")
            buffer = b""
            async for chunk in response.aiter_bytes():
                buffer += chunk
                *frames, buffer = buffer.split(b"\n\n")
                for frame in frames:
                    for line in frame.split(b"\n"):
                        if line.startswith(b"data: "):
                            check.event(json.loads(line[6:]), sent)
        check.verify()
        return check

    async def __aenter__(self) -> SseSession:
        await self.client.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.client.__aexit__(*exc)


class WsSession:
    """One session driven over its own WebSocket connection (trio-websocket)."""

    def __init__(self, url: str) -> None:
        self.url = url.replace("http://", "ws://", 1) + "/api/ws"
        self.session_id = ""
        self.runs = 0
        self._connection: Any = None
        self._ws: Any = None

    async def __aenter__(self) -> WsSession:
        from trio_websocket import open_websocket_url

        self._connection = open_websocket_url(self.url)
        self._ws = await self._connection.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._connection.__aexit__(*exc)

    async def open(self) -> None:
        await self._ws.send_message(json.dumps({"id": "create", "op": "create"}))
        reply = json.loads(await self._ws.get_message())
        if not reply.get("ok"):
            raise RuntimeError(f"create: {reply}")
        self.session_id = reply["result"]["id"]

    async def run(self) -> RunCheck:
        self.runs += 1
        run_id = f"run{self.runs}"
        frame = {"id": run_id, "op": "run", "session_id": self.session_id, "agent": SOURCE}
        check = RunCheck()
        sent = time.perf_counter()
        await self._ws.send_message(json.dumps({**frame, **USER_MESSAGE}))
        for _ in range(MAX_FRAMES_PER_RUN + 2):
            message = json.loads(await self._ws.get_message())
            if "event" in message:
                check.event(message["event"], sent)
            elif message.get("end"):
                break
            elif message.get("ok") is False:
                raise RuntimeError(f"run: {message['error']}")
        else:
            raise RuntimeError("run: no end frame")
        check.verify()
        return check


async def load(config: dict[str, Any]) -> dict[str, Any]:
    """Drive ``sessions`` sessions concurrently; the measured phase starts when all are ready."""
    import trio

    sessions: int = config["sessions"]
    turns: int = config["turns"]
    server_pid: int = config["server_pid"]
    make = SseSession if config["transport"] == "sse" else WsSession
    ttft: list[float] = []
    errors: list[str] = []
    tokens = 0
    runs = 0
    ready = 0
    finished = 0
    all_ready = trio.Event()
    go = trio.Event()
    all_finished = trio.Event()
    release = trio.Event()

    def arrive(counter: str) -> None:
        nonlocal ready, finished
        if counter == "ready":
            ready += 1
            if ready == sessions:
                all_ready.set()
        else:
            finished += 1
            if finished == sessions:
                all_finished.set()

    async def drive(n: int) -> None:
        nonlocal tokens, runs
        arrived = {"ready": False, "finished": False}
        try:
            async with make(config["url"]) as client:
                await client.open()
                for _ in range(config["warmup"]):
                    await client.run()
                arrived["ready"] = True
                arrive("ready")
                await go.wait()
                for _ in range(turns):
                    check = await client.run()
                    tokens += check.tokens
                    runs += 1
                    assert check.first_token is not None
                    ttft.append(check.first_token)
                arrived["finished"] = True
                arrive("finished")
                await release.wait()  # connections close after the measured phase
        except Exception as exc:  # recorded; the others go on
            errors.append(f"session {n}: {type(exc).__name__}: {exc}")
            for counter, done in arrived.items():
                if not done:
                    arrive(counter)

    timed_out = False
    started = ended = cpu_start = cpu_end = wait_start = wait_end = 0.0
    usage_start = usage_end = os.times()
    with trio.move_on_after(config["timeout"]) as deadline:
        async with trio.open_nursery() as nursery:
            for n in range(sessions):
                nursery.start_soon(drive, n)
            await all_ready.wait()
            usage_start = os.times()
            cpu_start = cpu_seconds(server_pid)
            wait_start = run_queue_wait(server_pid)
            started = time.perf_counter()
            go.set()
            await all_finished.wait()
            ended = time.perf_counter()
            cpu_end = cpu_seconds(server_pid)
            wait_end = run_queue_wait(server_pid)
            usage_end = os.times()
            release.set()
    if deadline.cancelled_caught:
        timed_out = True
        if not started:  # never got to the measured phase: nothing to report
            cpu_start = cpu_end = wait_start = wait_end = 0.0
        elif not ended:
            ended = time.perf_counter()
            cpu_end = cpu_seconds(server_pid)
            wait_end = run_queue_wait(server_pid)
            usage_end = os.times()
    client_cpu = (usage_end.user + usage_end.system) - (usage_start.user + usage_start.system)
    return {
        "runs": runs,
        "tokens": tokens,
        "elapsed": ended - started if started else 0.0,
        "server_cpu": cpu_end - cpu_start,
        "client_cpu": client_cpu,
        "server_wait": wait_end - wait_start,
        "ttft": ttft,
        "errors": errors,
        "timed_out": timed_out,
    }


def client_main(config_text: str) -> None:
    import trio

    result = trio.run(load, json.loads(config_text))
    print(json.dumps(result), flush=True)


# --------------------------------------------------------------------------- orchestration


def write_agent(directory: Path) -> Path:
    tokens = [f" tok{n}" for n in range(TOKENS_PER_TURN)]
    script = directory / "script.json"
    script.write_text(json.dumps({"loop": True, "turns": [[{"text": tokens}]]}))
    agent = directory / f"{SOURCE}.yaml"
    agent.write_text(
        'version: "2"\n'
        "agents:\n"
        "  root:\n"
        f"    model: scripted/{script}\n"
        "    description: transport benchmark\n"
        "    instruction: Tell stories.\n"
    )
    return agent


def greenroom_command() -> list[str]:
    script = Path(sys.executable).with_name("greenroom")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from greenroom.cli import main; sys.exit(main())"]


def stop(process: subprocess.Popen[Any], name: str) -> None:
    """SIGTERM, then SIGKILL after a grace period; never leaves ``process`` running."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        print(f"{name} ignored SIGTERM for 15 s: killing it", file=sys.stderr)
        process.kill()
        process.wait(timeout=15)


def start_server(
    base: list[str], agent: Path, workdir: Path, processes: list[Any], db: str
) -> tuple[Any, str]:
    """Start ``greenroom serve`` and wait (bounded) for its ``listening`` line."""
    if db == "sqlite":
        db = str(workdir / "bench.sqlite3")
    command = [*base, "serve", str(agent), "--port", "0", "--db", db]
    command += ["--log-level", "warning", "--max-connections-per-client", "0"]
    with (workdir / "server.out").open("wb") as out, (workdir / "server.err").open("wb") as err:
        server = subprocess.Popen(command, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
    processes.append(server)
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        line = (workdir / "server.out").read_text(errors="replace")
        if "listening on " in line:
            return server, line.split("listening on ", 1)[1].split()[0]
        if server.poll() is not None:
            break
        time.sleep(0.05)
    raise RuntimeError(f"the server did not start (exit {server.poll()}):\n{server_log(workdir)}")


def server_log(workdir: Path) -> str:
    """The end of the server's stderr."""
    try:
        return (workdir / "server.err").read_text(errors="replace")[-2000:]
    except OSError:
        return ""


def run_client(config: dict[str, Any], processes: list[Any]) -> dict[str, Any]:
    """Run one scenario in a fresh load-generator process; a failure becomes an error row."""
    command = [sys.executable, __file__, "--client", json.dumps(config)]
    client = subprocess.Popen(command, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    processes.append(client)
    failure = ""
    try:
        out, _ = client.communicate(timeout=config["timeout"] + 30)
        if client.returncode == 0:
            result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
            return result
        failure = f"the load generator exited with {client.returncode}"
    except subprocess.TimeoutExpired:
        stop(client, "the load generator")
        failure = "the load generator did not finish in time"
    return {
        "runs": 0,
        "tokens": 0,
        "elapsed": 0.0,
        "server_cpu": 0.0,
        "client_cpu": 0.0,
        "server_wait": 0.0,
        "ttft": [],
        "errors": [failure],
        "timed_out": False,
    }


def row(name: str, result: dict[str, Any]) -> str:
    tokens = result["tokens"]
    elapsed = result["elapsed"] or float("nan")
    per_token = 1e6 / tokens if tokens else float("nan")
    ttft = [t * 1000 for t in result["ttft"]]
    notes = []
    if result["errors"]:
        notes.append(f"{len(result['errors'])} errors")
    if result["timed_out"]:
        notes.append("timed out")
    return (
        f"| {name:<7} | {result['runs']:>4} | {tokens:>6} | {tokens / elapsed:>8,.0f} | "
        f"{result['runs'] / elapsed:>6.1f} | {percentile(ttft, 0.5):>6.1f} | "
        f"{percentile(ttft, 0.99):>6.1f} | {result['server_cpu'] * per_token:>6.0f} | "
        f"{result['client_cpu'] * per_token:>6.0f} | {result['server_cpu'] / elapsed:>4.0%} | "
        f"{result['server_wait'] / elapsed:>4.0%} | "
        f"{', '.join(notes) or 'ok'} |"
    )


HEADER = (
    "| scenario | runs | tokens | tokens/s | runs/s | TTFT p50 ms | TTFT p99 ms "
    "| server µs/token | client µs/token | server busy | server waits | notes |\n"
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
)


def loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--client", metavar="CONFIG", help=argparse.SUPPRESS)
    parser.add_argument("--turns", type=int, default=50, help="measured turns, one session")
    parser.add_argument("--concurrency", type=int, nargs="*", default=[10, 50])
    parser.add_argument("--rounds", type=int, default=5, help="measured turns per session")
    parser.add_argument("--transports", nargs="+", choices=["sse", "ws"], default=["sse", "ws"])
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per scenario")
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    parser.add_argument(
        "--db",
        default=":memory:",
        help="the server's store: :memory: (default), sqlite (a fresh file in the temporary "
        "directory) or a path",
    )
    parser.add_argument(
        "--server",
        metavar="COMMAND",
        help="the greenroom command to benchmark, split like a shell would "
        "(default: the greenroom script beside this Python); 'serve AGENT --port 0 ...' follow",
    )
    args = parser.parse_args()
    if args.client:
        client_main(args.client)
        return
    if not 1 <= args.turns <= 1000 or not 1 <= args.rounds <= 100:
        parser.error("--turns must be in 1..1000 and --rounds in 1..100")
    if any(not 1 <= n <= 500 for n in args.concurrency):
        parser.error("--concurrency values must be in 1..500")

    # SIGTERM ends this process through the finally below, like Ctrl-C.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    print("command:", " ".join([Path(sys.executable).name, *sys.argv]))
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
    print(
        f"machine: nproc {affinity} ({os.cpu_count()} CPUs, {platform.machine()}), "
        f"Python {platform.python_version()}, Linux {platform.release()}, "
        f"load average {loadavg()} at start"
    )
    print(
        f"load generator: a separate process; SSE over httpx (bytes split into frames by hand), "
        f"WebSocket over trio-websocket; {TOKENS_PER_TURN} tokens per turn"
    )
    processes: list[subprocess.Popen[Any]] = []
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="greenroom-bench-") as directory:
        workdir = Path(directory)
        try:
            base = shlex.split(args.server) if args.server else greenroom_command()
            server, url = start_server(base, write_agent(workdir), workdir, processes, args.db)
            print(f"server: pid {server.pid}, {url}, store {args.db}")
            print()
            print(HEADER)
            scenarios = [(transport, 1, args.turns) for transport in args.transports]
            for sessions in args.concurrency:
                scenarios += [(transport, sessions, args.rounds) for transport in args.transports]
            for transport, sessions, turns in scenarios:
                config = {
                    "url": url,
                    "server_pid": server.pid,
                    "transport": transport,
                    "sessions": sessions,
                    "turns": turns,
                    "warmup": 1,
                    "timeout": args.timeout,
                }
                name = f"{transport} x{sessions}"
                result = run_client(config, processes)
                results[name] = result
                print(row(name, result), flush=True)
                for error in result["errors"][:5]:
                    print(f"    {error}", file=sys.stderr)
                if server.poll() is not None:
                    raise RuntimeError(
                        f"the server exited with {server.returncode}:\n{server_log(workdir)}"
                    )
        finally:
            for process in reversed(processes):
                stop(process, "a subprocess")
        if server.returncode != 0:
            print(f"the server exited with {server.returncode}:\n{server_log(workdir)}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    print()
    print(
        "µs/token: CPU time of that process per token event delivered; server busy: server "
        "CPU time / wall time; server waits: time the server was runnable but waiting for a "
        f"CPU / wall time. Load average {loadavg()} at the end."
    )
    errors = sum(len(r["errors"]) for r in results.values())
    if errors:
        print(f"{errors} errors (see stderr)")
        sys.exit(1)


if __name__ == "__main__":
    main()
