"""The harness of ``bench/growth.py``: the fake model and ``greenroom serve`` as processes on
127.0.0.1 port 0, a fresh database per measurement, the fd limit, and the log-log slope."""

from __future__ import annotations

import math
import os
import resource
import secrets
import signal
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import side_by_side  # noqa: E402

SOURCE = "growth"
PG = "postgresql://postgres@127.0.0.1:5432"
OPENING = 32  # connections being opened at once (the accept backlog is finite)
FILLER = "The build passed; 3 files changed, 42 insertions(+), 7 deletions(-). Next step?"


def slope(sizes: list[float], costs: list[float]) -> float:
    """Least-squares slope of log(cost) against log(size)."""
    if len(sizes) < 2:
        return float("nan")
    xs = [math.log(s) for s in sizes]
    ys = [math.log(max(c, 1e-12)) for c in costs]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )


def raise_fd_limit() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def write_agent(directory: Path, model_url: str, tokens: int) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{SOURCE}.yaml").write_text(
        'version: "2"\n'
        "agents:\n"
        "  root:\n"
        "    model: fake\n"
        "    description: growth benchmark\n"
        "    instruction: Tell stories.\n"
        "models:\n"
        "  fake:\n"
        "    provider: openai\n"
        f"    model: bench-model@{tokens}\n"
        f"    base_url: {model_url}/v1\n"
        "    limit: {context: 10000000, output: 4096}\n"  # compaction never triggers
    )
    return directory


@contextmanager
def fake_model(workdir: Path) -> Iterator[str]:
    command = [sys.executable, str(HERE / "fake_model.py"), "--port", "0"]
    ready = side_by_side.line_url(workdir / "fake-model.out", "listening on ")
    with side_by_side.started(command, workdir, "fake-model", ready) as (_, url):
        yield url


@contextmanager
def server(workdir: Path, db: str, model_url: str, tokens: int) -> Iterator[tuple[int, str]]:
    agents = write_agent(workdir / "agents", model_url, tokens)
    script = Path(sys.executable).with_name("greenroom")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "greenroom.cli"]
    command += ["serve", str(agents), "--port", "0", "--db", db, "--log-level", "warning"]
    command += ["--max-connections-per-client", "0"]
    # A session waits at the start barrier until every other one is warmed up (seconds with
    # 1,000): its keep-alive connection must outlive that (the default 5 s closes it).
    command += ["--keep-alive-timeout", "600"]
    profile = os.environ.get("GROWTH_PYSPY")  # a path: record the server with py-spy
    if profile:
        spy = Path(sys.executable).with_name("py-spy")
        command = [str(spy), "record", "-r", "200", "-f", "raw", "-o", profile, "--", *command]
    out = workdir / "greenroom.out"
    if out.exists():
        out.unlink()
    ready = side_by_side.line_url(out, "listening on ")
    with side_by_side.started(command, workdir, "greenroom", ready) as (process, url):
        pid = process.pid
        if profile:  # the server is py-spy's child
            for _ in range(100):
                children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
                if children:
                    break
                time.sleep(0.1)
            pid = int(children[0])
        try:
            yield pid, url
        finally:
            if profile:  # py-spy writes its file on SIGINT
                process.send_signal(signal.SIGINT)
                process.wait(timeout=60)


@contextmanager
def database(backend: str, workdir: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield str(workdir / f"growth-{secrets.token_hex(3)}.sqlite3")
        return
    import psycopg

    name = f"gr_growth_{secrets.token_hex(4)}"
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}".encode())
    try:
        yield f"{PG}/{name}"
    finally:
        with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)".encode())


def loadavg() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())
