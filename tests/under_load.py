"""The whole suite on a loaded machine: ``make test-under-load`` (by hand, not part of make test).

    python -m tests.under_load [--runs 3] [--burners 2] [--slowness 4] [-- PYTEST_ARGS...]

Starts ``--burners`` processes that only burn CPU, then runs pytest ``--runs`` times in a row
with ``GREENROOM_TEST_SLOWNESS`` raised (every real-clock wait of the suite scales with it, see
``tests/slowness.py``), and stops the burners however it ends. It prints one line per run (its
exit status and wall time) and exits non-zero when any run failed.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BURN = "while True:\n    pass\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--burners", type=int, default=2)
    parser.add_argument("--slowness", type=float, default=4.0)
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args(argv)
    env = {**os.environ, "GREENROOM_TEST_SLOWNESS": str(args.slowness)}
    burners = [
        subprocess.Popen([sys.executable, "-c", BURN], stdin=subprocess.DEVNULL)
        for _ in range(args.burners)
    ]
    failed = 0
    try:
        for run in range(1, args.runs + 1):
            started = time.monotonic()
            done = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", *args.pytest_args], cwd=ROOT, env=env
            )
            took = time.monotonic() - started
            failed += done.returncode != 0
            print(
                f"under load: run {run}/{args.runs}: exit {done.returncode} in {took:.0f} s "
                f"({args.burners} burners, GREENROOM_TEST_SLOWNESS={args.slowness:g})",
                flush=True,
            )
    finally:
        for burner in burners:
            burner.send_signal(signal.SIGKILL)
            burner.wait()
    print(f"under load: {args.runs - failed} of {args.runs} runs passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
