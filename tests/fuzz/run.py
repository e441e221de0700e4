"""Schemathesis against a live ``greenroom serve``: every operation, all phases, all checks.

``make test`` runs a bounded deterministic pass (tests/fuzz/test_schemathesis.py); ``make fuzz``
runs a long one by hand (``python -m tests.fuzz.run --examples 100``) whose figures go into
docs/benchmarks.md. The server runs on 127.0.0.1 port 0 with the in-memory store and the bundled
agent on its key-less echo model; one turn runs first, so /api/ready answers at once.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

CONFIG = Path(__file__).with_name("schemathesis.toml")
TOKEN = "fuzz-token"
# The endless /events stream and the WebSocket pseudo-path are tested elsewhere.
EXCLUDED = ("events", "websocket")
_KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL")


@contextmanager
def live_server() -> Iterator[str]:
    env = {k: v for k, v in os.environ.items() if k not in _KEYS}
    command = [sys.executable, "-m", "greenroom.cli", "serve", "--port", "0", "--db", ":memory:"]
    proc = subprocess.Popen(
        [*command, "--auth-token", TOKEN],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # blocks until the server prints its URL (or exits)
        match = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
        assert match, f"unexpected first line from greenroom serve: {line!r}"
        yield match.group(1)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        if proc.stdout is not None:
            proc.stdout.close()


def run_one_turn(url: str) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=url, headers=headers, timeout=20) as client:
        session = client.post("/api/sessions", json={"title": "fuzz"}).raise_for_status().json()
        body = {"messages": [{"role": "user", "content": "hello"}]}
        with client.stream("POST", f"/api/sessions/{session['id']}/agent/default", json=body) as r:
            r.raise_for_status()
            for _ in r.iter_lines():  # bounded: the echo model's turn ends by itself
                pass


def schemathesis(
    url: str,
    *,
    examples: int,
    deterministic: bool,
    seed: int | None,
    max_time: int | None = None,
) -> tuple[int, str]:
    st = Path(sys.executable).with_name("st")
    command = [str(st), "--config-file", str(CONFIG), "run", f"{url}/openapi.json"]
    command += ["-H", f"Authorization: Bearer {TOKEN}", "--max-examples", str(examples)]
    for op in EXCLUDED:
        command += ["--exclude-operation-id", op]
    if deterministic:
        command.append("--generation-deterministic")
    elif seed is not None:
        command += ["--seed", str(seed)]
    if max_time is not None:  # fuzzing and stateful testing repeat until the budget is spent
        command += ["--max-time", str(max_time)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600, check=False)
    return done.returncode, done.stdout + done.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=100, help="examples per operation")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--max-time", type=int, default=None, help="seconds to keep fuzzing")
    args = parser.parse_args()
    with live_server() as url:
        run_one_turn(url)
        code, output = schemathesis(
            url,
            examples=args.examples,
            deterministic=False,
            seed=args.seed,
            max_time=args.max_time,
        )
    print(output)
    return code


if __name__ == "__main__":
    sys.exit(main())
