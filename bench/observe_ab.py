"""Observability's server CPU per token, before and after (issue 24): run by hand.

    git -C /work/main worktree add /work/wt/obsbench-base 5efd3c5   # the commit before it
    .venv/bin/python bench/observe_ab.py --base /work/wt/obsbench-base --cycles 20
    .venv/bin/python bench/observe_ab.py --checkout pre=../pre --checkout metrics=../metrics

Three variants of ``greenroom serve`` on one machine, each measured by
``bench/side_by_side.py --servers greenroom --scenarios x10 --concurrency 10 --rounds 1``
(10 sessions at once, 5 turns of 200 tokens each, over SSE then WebSocket; server CPU is the
server process's utime + stime over the measured phase):

* ``base``: the checkout at ``--base`` (imported through ``PYTHONPATH``; this venv's packages),
  and any other ``--checkout NAME=PATH`` the same way;
* ``off``: this tree, tracing off (metrics and logs on, as always);
* ``sdk``: this tree, tracing on (``--tracing sdk``: the SDK, a batch processor, an exporter
  that drops the spans).

The machine is shared, so the variants run in short interleaved runs, the order rotated every
cycle; the summary gives each variant's median and, per cycle, the ratio to ``base`` of the
same cycle (their median and the geometric mean). Raw lines go to ``--jsonl``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OURS = ("off", "sdk")


def run(variant: str, trees: dict[str, Path], cycle: int, jsonl: Path) -> list[dict[str, object]]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    tracing = "sdk" if variant == "sdk" else "off"
    if variant in trees:
        env["PYTHONPATH"] = str(trees[variant])
    command = [sys.executable, str(HERE / "side_by_side.py"), "--servers", "greenroom"]
    command += ["--scenarios", "x10", "--concurrency", "10", "--rounds", "1"]
    command += ["--tracing", tracing]
    out = subprocess.run(command, env=env, capture_output=True, text=True, cwd="/tmp")
    rows = []
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            row.update(variant=variant, cycle=cycle)
            rows.append(row)
    with jsonl.open("a") as sink:
        for row in rows:
            sink.write(json.dumps(row) + "\n")
    if not rows:
        print(out.stderr[-2000:], file=sys.stderr)
    return rows


def summary(rows: list[dict[str, object]], variants: list[str]) -> None:
    for server in ("greenroom", "greenroom-ws"):
        by: dict[tuple[str, int], float] = {}
        for row in rows:
            if row["server"] == server and not row["errors"]:
                by[(str(row["variant"]), int(str(row["cycle"])))] = float(
                    str(row["server_us_per_token"])
                )
        label = "SSE" if server == "greenroom" else "WS"
        base = {c: v for (n, c), v in by.items() if n == variants[0]}
        for variant in variants:
            mine = {c: v for (n, c), v in by.items() if n == variant}
            if not mine:
                continue
            line = f"x10 {label} {variant}: median {statistics.median(mine.values()):.1f} us/token"
            line += f" (n={len(mine)}, min {min(mine.values()):.0f}, max {max(mine.values()):.0f})"
            ratios = [mine[c] / base[c] for c in mine if c in base]
            if variant != variants[0] and ratios:
                geo = math.exp(statistics.fmean(math.log(r) for r in ratios))
                line += f"; / {variants[0]} per cycle: median {statistics.median(ratios):.3f},"
                line += f" geometric mean {geo:.3f}"
            print(line)
        on = {c: v for (n, c), v in by.items() if n == "sdk"}
        off = {c: v for (n, c), v in by.items() if n == "off"}
        paired = [on[c] / off[c] for c in on if c in off]
        if paired:
            geo = math.exp(statistics.fmean(math.log(r) for r in paired))
            print(
                f"x10 {label} sdk / off per cycle (tracing's cost): median "
                f"{statistics.median(paired):.3f}, geometric mean {geo:.3f}, n={len(paired)}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, help="a checkout of 5efd3c5 (variant base)")
    parser.add_argument(
        "--checkout",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="another checkout to measure as variant NAME (tracing off); repeatable",
    )
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--variants", nargs="+", help="default: the checkouts, then off and sdk")
    parser.add_argument("--jsonl", type=Path, default=Path("observe_ab.jsonl"))
    parser.add_argument("--summary-only", action="store_true", help="summarise --jsonl")
    args = parser.parse_args()
    trees = {"base": args.base} if args.base else {}
    for given in args.checkout:
        name, _, path = given.partition("=")
        if not path or name in OURS:
            parser.error(f"--checkout {given!r}: NAME=PATH, NAME not off or sdk")
        trees[name] = Path(path)
    variants = args.variants or [*trees, *OURS]
    unknown = [v for v in variants if v not in trees and v not in OURS]
    if unknown:
        parser.error(f"unknown variants {unknown}: give their --checkout")
    if not args.summary_only:
        for cycle in range(args.cycles):
            shift = cycle % len(variants)
            for variant in variants[shift:] + variants[:shift]:
                run(variant, trees, cycle, args.jsonl)
            print(f"cycle {cycle + 1}/{args.cycles} done", flush=True)
    rows = [json.loads(line) for line in args.jsonl.read_text().splitlines() if line.strip()]
    summary(rows, variants)


if __name__ == "__main__":
    main()
