"""Start-up cost of the ``greenroom`` command, as CPU time of the child: run by hand.

    python bench/startup.py [--repeat 5] [--greenroom PATH]

Four figures (the median of ``--repeat`` runs, user + system CPU seconds of the child process,
so a busy machine changes the wall time but hardly the figure):

- ``greenroom --help``;
- ``greenroom validate`` of the bundled agent file;
- ``greenroom serve`` of an echo agent until ``/health`` answers 200 (the child's CPU time read
  from ``/proc/PID/stat`` at that moment);
- the first turn against an OpenAI-compatible model (``bench/fake_model.py``, 20 tokens): the
  serving child's CPU time from ``/health`` to the end of the turn's stream, which is what the
  provider's first use adds once.

Wall-clock seconds are printed beside each figure for information only. Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = ROOT / "greenroom" / "agents" / "bundled" / "default.yaml"
CLOCK_TICK = os.sysconf("SC_CLK_TCK")
STARTUP_TIMEOUT = 120.0

ECHO_AGENT = """version: "2"
agents:
  root:
    model: echo
    instruction: Repeat.
models:
  echo:
    provider: echo
    model: echo
"""

OPENAI_AGENT = """version: "2"
agents:
  root:
    model: fake
    instruction: Tell stories.
models:
  fake:
    provider: openai
    model: bench-model@20
    base_url: {url}/v1
"""


def child_cpu(command: list[str]) -> tuple[float, float]:
    """Run ``command`` to its end: (its CPU seconds, wall seconds)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) a running process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICK


def stop(process: subprocess.Popen[Any]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_for_line(path: Path, prefix: str, process: subprocess.Popen[Any]) -> str:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline and process.poll() is None:
        text = path.read_text(errors="replace") if path.exists() else ""
        if prefix in text:
            return text.split(prefix, 1)[1].split()[0]
        time.sleep(0.005)
    raise RuntimeError(f"no {prefix!r} line (exit {process.poll()}): {path.read_text()[-2000:]}")


def request(url: str, method: str, path: str, body: object = None) -> tuple[int, bytes]:
    host, port = url.removeprefix("http://").rstrip("/").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        conn.request(method, path, body=data, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


@contextmanager
def serving(command: list[str], workdir: Path) -> Iterator[tuple[subprocess.Popen[Any], str]]:
    err = workdir / "serve.out"
    with err.open("wb") as sink:
        process = subprocess.Popen(
            command, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        try:
            yield process, wait_for_line(err, "listening on ", process)
        finally:
            stop(process)


def serve_to_health(
    greenroom: str, agent: Path, workdir: Path, *, turn: bool
) -> tuple[float, float, float]:
    """(CPU at /health, wall to /health, CPU the first turn added)."""
    db = workdir / "sessions.sqlite3"
    db.unlink(missing_ok=True)
    command = [greenroom, "serve", str(agent), "--port", "0", "--db", str(db)]
    command += ["--log-level", "warning", "--no-titles"]
    start = time.perf_counter()
    with serving(command, workdir) as (process, url):
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            try:
                if request(url, "GET", "/health")[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("/health never answered")
            time.sleep(0.005)
        wall = time.perf_counter() - start
        at_health = proc_cpu(process.pid)
        added = 0.0
        if turn:
            status, body = request(url, "POST", "/api/sessions", {})
            session = json.loads(body)["id"]
            status, body = request(
                url,
                "POST",
                f"/api/sessions/{session}/agent/{agent.stem}",
                {"messages": [{"role": "user", "content": "Tell me a story."}]},
            )
            if status != 200 or b'"reason":"normal"' not in body:
                raise RuntimeError(f"turn failed: {status} {body[-300:]!r}")
            added = proc_cpu(process.pid) - at_health
    return at_health, wall, added


@contextmanager
def fake_model(workdir: Path) -> Iterator[str]:
    out = workdir / "fake.out"
    with out.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "fake_model.py"), "--port", "0"],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
        try:
            yield wait_for_line(out, "listening on ", process)
        finally:
            stop(process)


def median(values: list[float]) -> float:
    return statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    default = Path(sys.executable).with_name("greenroom")
    parser.add_argument("--greenroom", default=str(default), help="the command to measure")
    args = parser.parse_args()
    rows: dict[str, tuple[list[float], list[float]]] = {}

    def add(name: str, cpu: float, wall: float) -> None:
        cpus, walls = rows.setdefault(name, ([], []))
        cpus.append(cpu)
        walls.append(wall)

    with tempfile.TemporaryDirectory(prefix="greenroom-startup-") as tmp:
        workdir = Path(tmp)
        echo = workdir / "echo.yaml"
        echo.write_text(ECHO_AGENT)
        with fake_model(workdir) as model_url:
            openai = workdir / "openai.yaml"
            openai.write_text(OPENAI_AGENT.format(url=model_url))
            for _ in range(args.repeat):
                add("greenroom --help", *child_cpu([args.greenroom, "--help"]))
                add("greenroom validate", *child_cpu([args.greenroom, "validate", str(BUNDLED)]))
                cpu, wall, _ = serve_to_health(args.greenroom, echo, workdir, turn=False)
                add("greenroom serve (echo) to /health", cpu, wall)
                cpu, wall, added = serve_to_health(args.greenroom, openai, workdir, turn=True)
                add("greenroom serve (openai) to /health", cpu, wall)
                add("first turn (openai-compatible), added", added, 0.0)
    print(f"| step | CPU s (median of {args.repeat}) | wall s |")
    print("|---|---:|---:|")
    for name, (cpus, walls) in rows.items():
        shown = f"{median(walls):.2f}" if any(walls) else "-"
        print(f"| {name} | {median(cpus):.2f} | {shown} |")


if __name__ == "__main__":
    main()
