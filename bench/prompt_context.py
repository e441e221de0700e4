"""What prompt context costs per model call (issue 20): environment info and prompt files.

    .venv/bin/python bench/prompt_context.py [--calls 50] [--repo PATH]

``add_environment_info`` builds its block for every model call: outside a git repository it
reads no process; inside one it runs ``git rev-parse`` and ``git status --porcelain`` (each
with a 2 s deadline). ``add_prompt_files`` reads the files upward from the working directory
(in a worker thread). Each figure is the median of ``--calls`` calls, wall clock, after one
warm-up call.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import tempfile
import time
from pathlib import Path

import trio

from greenroom.agents._environment import environment_info, prompt_context


async def median_ms(calls: int, fn) -> float:  # type: ignore[no-untyped-def]
    await fn()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        await fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


async def main(calls: int, repo: Path) -> None:
    today = dt.date.today()
    with tempfile.TemporaryDirectory() as plain:
        deep = Path(plain) / "a" / "b" / "c"
        deep.mkdir(parents=True)
        (Path(plain) / "AGENTS.md").write_text("Rules.\n" * 200)
        figures = {
            "environment info, not a repository": await median_ms(
                calls, lambda: environment_info(Path(plain), today)
            ),
            f"environment info, in a repository ({repo})": await median_ms(
                calls, lambda: environment_info(repo, today)
            ),
            "one prompt file three levels up": await median_ms(
                calls,
                lambda: prompt_context(
                    deep, environment=False, prompt_files=["AGENTS.md"], today=today
                ),
            ),
        }
    for what, ms in figures.items():
        print(f"{what}: {ms:.2f} ms per model call")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parent.parent)
    args = parser.parse_args()
    trio.run(main, args.calls, args.repo)
