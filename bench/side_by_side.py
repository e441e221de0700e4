"""greenroom against LangGraph's agent server, side by side on one fake model: run by hand.

    make bench-peers                        # once: LangGraph into its own venv (.bench-peers)
    .venv/bin/python bench/side_by_side.py  # or: make bench

Three processes per measurement, all on 127.0.0.1: a fast fake OpenAI-compatible model
(``bench/fake_model.py``: pre-rendered chunks, 200 tokens per answer, its own CPU reported),
the server under test, and a load generator (``bench/_loadgen.py``, a fresh process per
scenario). greenroom runs ``greenroom serve`` on a SQLite file with an agent whose model is the
fake (the real ``openai`` provider path); LangGraph runs ``langgraph dev`` (in-memory runtime)
over a one-node graph calling ``ChatOpenAI`` against the same fake model, with as many jobs per
worker as the largest concurrency (its default of 10 would queue runs).

Scenarios, each against every server in one invocation, ``--rounds`` times (default 3; the
table shows the median and min-max of the rounds):

* ``x1``: one client, ``--turns`` turns back to back: TTFT p50/p99, turn time;
* ``x10``, ``x50``: that many sessions at once, ``--rounds-per-session`` turns each: turns/s,
  token events/s, TTFT and turn time p50/p99, errors;
  all three also give server CPU per token event and per turn (``/proc/<pid>/stat``, read just
  before and after the measured phase), greenroom over SSE and over WebSocket;
* ``memory``: server RSS per idle stored session (``--idle-sessions`` created, nothing run),
  listing all of them (greenroom: one ``GET /api/sessions``; LangGraph: ``threads/search`` in
  pages of 1,000, its maximum), and RSS per session after one turn (``--memory-sessions``);
* ``fanout``: ``--subscribers`` clients follow one session while one ``--fanout-tokens``-token
  turn streams (greenroom: ``GET /events``; LangGraph: joining the run's stream).

Output: one JSON line per measurement (also to ``--jsonl``), then a markdown table with the
ratios. Every wait is bounded (``--timeout`` per scenario, start-up deadlines) and every
process this starts is stopped on every path.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PEER_DIR = HERE / "langgraph_peer"
DEFAULT_PEERS = ROOT / ".bench-peers"
TOKENS = 200
STARTUP_TIMEOUT = 120.0
SOURCE = "bench"
FANOUT = "fanout"


# --------------------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop(process: subprocess.Popen[Any]) -> None:
    """SIGTERM, then SIGKILL after a grace period; never leaves ``process`` running."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=20)


@contextmanager
def started(
    command: list[str], workdir: Path, name: str, ready: Callable[[], str | None], **kw: Any
) -> Iterator[tuple[subprocess.Popen[Any], str]]:
    """Run ``command`` until the block ends; ``ready()`` returns its URL once it serves."""
    out = (workdir / f"{name}.out").open("wb")
    err = (workdir / f"{name}.err").open("wb")
    process = subprocess.Popen(command, stdout=out, stderr=err, stdin=subprocess.DEVNULL, **kw)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        url = None
        while time.monotonic() < deadline and process.poll() is None:
            url = ready()
            if url:
                break
            time.sleep(0.1)
        if not url:
            tail = (workdir / f"{name}.err").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{name} did not start (exit {process.poll()}):\n{tail}")
        yield process, url
    finally:
        stop(process)
        out.close()
        err.close()


def line_url(path: Path, prefix: str) -> Callable[[], str | None]:
    def ready() -> str | None:
        text = path.read_text(errors="replace") if path.exists() else ""
        if prefix in text:
            return text.split(prefix, 1)[1].split()[0]
        return None

    return ready


def http_ok(url: str) -> Callable[[], str | None]:
    def ready() -> str | None:
        try:
            with urllib.request.urlopen(url + "/ok", timeout=2) as response:
                return url if response.status == 200 else None
        except OSError:
            return None

    return ready


def fake_stats(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "/stats", timeout=10) as response:
        stats: dict[str, Any] = json.loads(response.read())
        return stats


# --------------------------------------------------------------------------- the servers


def write_greenroom_agents(directory: Path, model_url: str, fanout_tokens: int) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for source, model in ((SOURCE, "bench-model"), (FANOUT, f"bench-model@{fanout_tokens}")):
        (directory / f"{source}.yaml").write_text(
            'version: "2"\n'
            "agents:\n"
            "  root:\n"
            "    model: fake\n"
            "    description: side-by-side benchmark\n"
            "    instruction: Tell stories.\n"
            "models:\n"
            "  fake:\n"
            "    provider: openai\n"
            f"    model: {model}\n"
            f"    base_url: {model_url}/v1\n"
        )
    return directory


@contextmanager
def greenroom(
    workdir: Path, model_url: str, args: argparse.Namespace
) -> Iterator[tuple[subprocess.Popen[Any], str]]:
    db = workdir / "greenroom" / "sessions.sqlite3"
    if db.parent.exists():
        shutil.rmtree(db.parent)
    agents = write_greenroom_agents(workdir / "greenroom" / "agents", model_url, args.fanout_tokens)
    script = Path(sys.executable).with_name("greenroom")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "greenroom.cli"]
    if args.tracing == "sdk":  # the SDK on, spans dropped at export (bench/_traced_serve.py)
        command = [sys.executable, str(HERE / "_traced_serve.py")]
    command += ["serve", str(agents), "--port", "0", "--db", str(db), "--log-level", "warning"]
    command += ["--max-connections-per-client", "0"]  # the load generator is one address
    out = workdir / "greenroom.out"
    with started(command, workdir, "greenroom", line_url(out, "listening on ")) as running:
        yield running


@contextmanager
def langgraph(
    workdir: Path, model_url: str, args: argparse.Namespace
) -> Iterator[tuple[subprocess.Popen[Any], str]]:
    peer = workdir / "langgraph"
    if peer.exists():
        shutil.rmtree(peer)  # its dev server persists threads under .langgraph_api here
    peer.mkdir(parents=True)
    for name in ("graph.py", "langgraph.json"):
        shutil.copy(PEER_DIR / name, peer / name)
    port = free_port()
    python = args.peers / "bin" / "python"
    cli = args.peers / "bin" / "langgraph"
    command = [str(python), str(cli), "dev", "--no-browser", "--no-reload", "--port", str(port)]
    command += ["--n-jobs-per-worker", str(max(64, *args.concurrency))]
    env = {
        **os.environ,
        "BENCH_MODEL_URL": f"{model_url}/v1",
        "BENCH_FANOUT_MODEL": f"bench-model@{args.fanout_tokens}+500",
        "LANGSMITH_TRACING": "false",
        "LANGCHAIN_TRACING_V2": "false",
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
        "DO_NOT_TRACK": "1",
    }
    ready = http_ok(f"http://127.0.0.1:{port}")
    with started(command, workdir, "langgraph", ready, cwd=peer, env=env) as running:
        yield running


SERVERS = {"greenroom": greenroom, "langgraph": langgraph}


def versions(args: argparse.Namespace) -> dict[str, str]:
    found = {"python": platform.python_version()}
    ours = [sys.executable, "-m", "pip", "list", "--format=json", "--disable-pip-version-check"]
    theirs = [str(args.peers / "bin" / "python"), *ours[1:]]
    wanted = {
        "greenroom",
        "openai",
        "trio",
        "hypercorn",
        "quart-trio",
        "httpx2",
        "msgspec",
        "langgraph",
        "langgraph-api",
        "langgraph-cli",
        "langgraph-runtime-inmem",
        "langchain-openai",
        "langchain-core",
        "uvicorn",
    }
    for label, command in (("", ours), ("peers: ", theirs)):
        try:
            listed = json.loads(subprocess.run(command, capture_output=True, check=True).stdout)
        except (OSError, subprocess.CalledProcessError, ValueError):
            continue
        for package in listed:
            if package["name"].lower() in wanted:
                found[label + package["name"].lower()] = package["version"]
    return found


# --------------------------------------------------------------------------- measurements


def run_loadgen(config: dict[str, Any], timeout: float) -> dict[str, Any]:
    command = [sys.executable, str(HERE / "_loadgen.py"), json.dumps(config)]
    client = subprocess.Popen(command, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        out, _ = client.communicate(timeout=timeout + 60)
    except subprocess.TimeoutExpired:
        stop(client)
        return {"errors": ["the load generator did not finish in time"]}
    if client.returncode != 0:
        return {"errors": [f"the load generator exited with {client.returncode}"]}
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def summarise(kind: str, raw: dict[str, Any], fake: dict[str, float]) -> dict[str, Any]:
    """The figures of one measurement (``fake``: the model server's CPU and tokens)."""
    errors = raw.get("errors", [])
    out: dict[str, Any] = {"errors": len(errors), "error_samples": errors[:3]}
    if kind == "turns" and raw.get("tokens"):
        tokens, turns, elapsed = raw["tokens"], raw["turns"], raw["elapsed"] or float("nan")
        out.update(
            turns=turns,
            turns_per_s=turns / elapsed,
            tokens_per_s=tokens / elapsed,
            ttft_p50_ms=_pct(raw["ttft"], 0.5) * 1e3,
            ttft_p99_ms=_pct(raw["ttft"], 0.99) * 1e3,
            turn_p50_ms=_pct(raw["turn_times"], 0.5) * 1e3,
            turn_p99_ms=_pct(raw["turn_times"], 0.99) * 1e3,
            server_us_per_token=raw["server_cpu"] / tokens * 1e6,
            server_ms_per_turn=raw["server_cpu"] / turns * 1e3,
            client_us_per_token=raw["client_cpu"] / tokens * 1e6,
            model_us_per_token=fake["cpu"] / fake["tokens"] * 1e6 if fake["tokens"] else None,
        )
    elif kind == "memory" and "turn_rss_delta" in raw:
        out.update(
            idle_kb_per_session=raw["idle_rss_delta"] / raw["idle_sessions"] / 1024,
            list_count=raw["list_count"],
            list_ms=statistics.median(raw["list_seconds"]) * 1e3,
            turn_kb_per_session=raw["turn_rss_delta"] / max(1, raw["turn_sessions"]) / 1024,
        )
    elif kind == "fanout" and raw.get("elapsed"):
        out.update(
            deliveries=raw["deliveries"],
            deliveries_per_s=raw["deliveries"] / raw["elapsed"],
            server_us_per_delivery=raw["server_cpu"] / max(1, raw["deliveries"]) * 1e6,
        )
    return out


def _pct(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(fraction * len(ordered) + 0.5)))
    return ordered[rank - 1]


def measure(
    args: argparse.Namespace, workdir: Path, model_url: str, server: str, round_no: int
) -> Iterator[dict[str, Any]]:
    """Every scenario against ``server``: the turn scenarios on one fresh server process,
    memory, listing and fan-out on another."""
    transports = ["greenroom", "greenroom-ws"] if server == "greenroom" else ["langgraph"]
    source = SOURCE if server == "greenroom" else "agent"
    fanout_source = FANOUT if server == "greenroom" else "fanout"
    base = {"tokens": TOKENS, "source": source, "timeout": args.timeout}
    scenarios: list[tuple[str, str, dict[str, Any]]] = []
    for transport in transports:
        shapes = [(1, args.turns)] + [(n, args.rounds_per_session) for n in args.concurrency]
        for sessions, turns in shapes:
            name = f"x{sessions}"
            config = {"kind": "turns", "sessions": sessions, "turns": turns, "warmup": 1}
            scenarios.append((transport, name, config))
    with SERVERS[server](workdir, model_url, args) as (process, url):
        for transport, name, config in scenarios:
            if name not in args.scenarios:
                continue
            yield _one(args, model_url, process, url, transport, name, round_no, base | config)
    if not {"memory", "fanout"} & set(args.scenarios):
        return
    with SERVERS[server](workdir, model_url, args) as (process, url):
        if "memory" in args.scenarios:
            config = {
                "kind": "memory",
                "idle": args.idle_sessions,
                "sessions": args.memory_sessions,
            }
            yield _one(args, model_url, process, url, server, "memory", round_no, base | config)
        if "fanout" in args.scenarios:
            config = {
                "kind": "fanout",
                "subscribers": args.subscribers,
                "fanout_source": fanout_source,
            }
            base_fanout = base | {"tokens": args.fanout_tokens}
            yield _one(
                args, model_url, process, url, server, "fanout", round_no, base_fanout | config
            )


def _one(
    args: argparse.Namespace,
    model_url: str,
    process: subprocess.Popen[Any],
    url: str,
    transport: str,
    name: str,
    round_no: int,
    config: dict[str, Any],
) -> dict[str, Any]:
    before = fake_stats(model_url)
    raw = run_loadgen(
        {**config, "server": transport, "url": url, "server_pid": process.pid}, args.timeout
    )
    after = fake_stats(model_url)
    fake = {
        "cpu": after["cpu_seconds"] - before["cpu_seconds"],
        "tokens": after["tokens"] - before["tokens"],
    }
    if process.poll() is not None:
        raw.setdefault("errors", []).append(f"the server exited with {process.returncode}")
    return {
        "round": round_no,
        "server": transport,
        "scenario": name,
        **summarise(config["kind"], raw, fake),
        "model_requests": after["requests"] - before["requests"],
        "model_caps_seen": {
            cap: count - before["max_tokens_seen"].get(cap, 0)
            for cap, count in after["max_tokens_seen"].items()
            if count != before["max_tokens_seen"].get(cap, 0)
        },
        "loadavg": _loadavg(),
    }


def _loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "?"


# --------------------------------------------------------------------------- the table


METRICS = [
    # scenario, metric, label, unit, True when larger is better
    ("x1", "ttft_p50_ms", "x1: TTFT p50", "ms", False),
    ("x1", "ttft_p99_ms", "x1: TTFT p99", "ms", False),
    ("x1", "turn_p50_ms", "x1: turn time p50", "ms", False),
    ("x1", "server_us_per_token", "x1: server CPU per token event", "µs", False),
    ("x1", "server_ms_per_turn", "x1: server CPU per turn", "ms", False),
    ("x10", "turns_per_s", "x10: turns/s", "", True),
    ("x10", "tokens_per_s", "x10: token events/s", "", True),
    ("x10", "ttft_p50_ms", "x10: TTFT p50", "ms", False),
    ("x10", "ttft_p99_ms", "x10: TTFT p99", "ms", False),
    ("x10", "turn_p99_ms", "x10: turn time p99", "ms", False),
    ("x10", "server_us_per_token", "x10: server CPU per token event", "µs", False),
    ("x10", "errors", "x10: errors", "", False),
    ("x50", "turns_per_s", "x50: turns/s", "", True),
    ("x50", "tokens_per_s", "x50: token events/s", "", True),
    ("x50", "ttft_p50_ms", "x50: TTFT p50", "ms", False),
    ("x50", "ttft_p99_ms", "x50: TTFT p99", "ms", False),
    ("x50", "turn_p99_ms", "x50: turn time p99", "ms", False),
    ("x50", "server_us_per_token", "x50: server CPU per token event", "µs", False),
    ("x50", "server_ms_per_turn", "x50: server CPU per turn", "ms", False),
    ("x50", "model_us_per_token", "x50: fake model's CPU per token", "µs", False),
    ("x50", "errors", "x50: errors", "", False),
    ("memory", "idle_kb_per_session", "memory per idle stored session", "KB", False),
    ("memory", "turn_kb_per_session", "memory per session after one turn", "KB", False),
    ("memory", "list_ms", "listing all sessions (10,000+)", "ms", False),
    ("fanout", "deliveries_per_s", "fan-out: token deliveries/s", "", True),
    ("fanout", "server_us_per_delivery", "fan-out: server CPU per delivery", "µs", False),
]
COLUMNS = [
    ("greenroom", "greenroom SSE"),
    ("greenroom-ws", "greenroom WS"),
    ("langgraph", "LangGraph"),
]
DASH = "\u2013"
TIMES = "\u00d7"


def values(rows: list[dict[str, Any]], server: str, scenario: str, metric: str) -> list[float]:
    found = []
    for row in rows:
        if row["server"] == server and row["scenario"] == scenario:
            value = row.get(metric)
            if isinstance(value, int | float):
                found.append(float(value))
    return found


def cell(found: list[float], unit: str) -> str:
    if not found:
        return DASH
    med = statistics.median(found)
    text = _fmt(med)
    if len(found) > 1:
        text += f" ({_fmt(min(found))}{DASH}{_fmt(max(found))})"
    return f"{text} {unit}".rstrip()


def _fmt(value: float) -> str:
    if value != value:  # NaN
        return "nan"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def table(rows: list[dict[str, Any]]) -> str:
    head = "| measurement | " + " | ".join(label for _, label in COLUMNS)
    head += " | greenroom SSE vs LangGraph |\n|---|" + "---:|" * (len(COLUMNS) + 1)
    lines = [head]
    for scenario, metric, label, unit, larger_better in METRICS:
        cells = []
        medians: dict[str, float] = {}
        for server, _ in COLUMNS:
            found = values(rows, server, scenario, metric)
            cells.append(cell(found, unit))
            if found:
                medians[server] = statistics.median(found)
        ratio = DASH
        ours, theirs = medians.get("greenroom"), medians.get("langgraph")
        if metric != "errors" and ours and theirs:
            factor = ours / theirs if larger_better else theirs / ours
            ratio = f"{factor:.1f}{TIMES} {'more' if larger_better else 'less'}"
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {ratio} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--turns", type=int, default=50, help="x1: turns in a row")
    parser.add_argument("--concurrency", type=int, nargs="*", default=[10, 50])
    parser.add_argument("--rounds-per-session", type=int, default=5)
    parser.add_argument("--idle-sessions", type=int, default=10_000)
    parser.add_argument("--memory-sessions", type=int, default=200)
    parser.add_argument("--subscribers", type=int, default=20)
    parser.add_argument("--fanout-tokens", type=int, default=2000)
    parser.add_argument("--servers", nargs="+", choices=list(SERVERS), default=list(SERVERS))
    parser.add_argument(
        "--scenarios",
        nargs="+",
        default=None,
        help="any of x1 x<N> memory fanout (default: all)",
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per scenario")
    parser.add_argument("--peers", type=Path, default=DEFAULT_PEERS, help="the peers' venv")
    parser.add_argument("--jsonl", type=Path, help="also append the JSON lines here")
    parser.add_argument(
        "--tracing",
        choices=("off", "sdk"),
        default="off",
        help="greenroom's traces: off, or sdk (the OpenTelemetry SDK, a batch processor, an "
        "exporter that drops the spans: bench/_traced_serve.py)",
    )
    args = parser.parse_args()
    if not 1 <= args.rounds <= 10 or not 1 <= args.turns <= 1000:
        parser.error("--rounds must be in 1..10 and --turns in 1..1000")
    if any(not 1 <= n <= 500 for n in args.concurrency) or not 1 <= args.subscribers <= 500:
        parser.error("--concurrency and --subscribers values must be in 1..500")
    if not 1 <= args.idle_sessions <= 100_000 or not 10 <= args.memory_sessions <= 10_000:
        parser.error("--idle-sessions must be in 1..100000, --memory-sessions in 10..10000")
    if args.scenarios is None:
        args.scenarios = ["x1", *(f"x{n}" for n in args.concurrency), "memory", "fanout"]
    if "langgraph" in args.servers and not (args.peers / "bin" / "langgraph").exists():
        missing = f"LangGraph is not installed in {args.peers}: run `make bench-peers`"
        print(missing, file=sys.stderr)
        sys.exit(2)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    cpus = len(os.sched_getaffinity(0))
    print(f"command: {Path(sys.executable).name} {' '.join(sys.argv)}")
    print(
        f"machine: {cpus} CPUs ({platform.machine()}), Linux {platform.release()}, "
        f"load average {_loadavg()} at start"
    )
    print("versions:", json.dumps(versions(args)))
    rows: list[dict[str, Any]] = []
    jsonl = args.jsonl.open("a") if args.jsonl else None
    with tempfile.TemporaryDirectory(prefix="greenroom-side-by-side-") as directory:
        workdir = Path(directory)
        model = [sys.executable, str(HERE / "fake_model.py"), "--tokens", str(TOKENS)]
        out = workdir / "fake-model.out"
        fake = started(model, workdir, "fake-model", line_url(out, "listening on "))
        with fake as (_, model_url):
            for round_no in range(1, args.rounds + 1):
                order = args.servers if round_no % 2 else list(reversed(args.servers))
                for server in order:  # alternate which server goes first
                    for row in measure(args, workdir, model_url, server, round_no):
                        rows.append(row)
                        print(json.dumps(row), flush=True)
                        if jsonl is not None:
                            jsonl.write(json.dumps(row) + "\n")
                            jsonl.flush()
    if jsonl is not None:
        jsonl.close()
    print()
    print(table(rows))
    print()
    print(
        f"Median of {args.rounds} rounds (min{DASH}max in brackets); load average {_loadavg()} at "
        "the end. CPU figures are the server process's utime + stime over the measured phase."
    )
    if any(row["errors"] for row in rows):
        print("some measurements had errors: see error_samples in the JSON lines")
        sys.exit(1)


if __name__ == "__main__":
    main()
