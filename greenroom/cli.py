"""The ``greenroom`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from greenroom import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="greenroom", description=__doc__)
    parser.add_argument("--version", action="version", version=f"greenroom {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("serve", help="serve the session API")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        print("greenroom serve: the HTTP transport is not built yet (see the open issues).")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
