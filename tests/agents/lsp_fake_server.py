"""A tiny language server for the tests that need a misbehaving one (stdio, Content-Length).

Modes (the first argument):

- ``exit-at-start``: writes a line to stderr and exits with status 3 before reading anything.
- ``crash-on-hover``: answers ``initialize``; a ``textDocument/hover`` makes it write ``boom``
  to stderr and exit with status 7 without answering.
- ``evil-rename``: answers ``textDocument/rename`` with an edit of the renamed file and of
  ``../outside.py`` (beyond the working directory).
- ``silent``: reads everything and answers nothing.
- ``stubborn``: answers ``initialize`` and ``hover`` (with its pid); ignores ``shutdown``,
  ``exit``, the end of its stdin and SIGTERM (only SIGKILL ends it).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any


def read() -> dict[str, Any] | None:
    length = None
    while True:
        line = sys.stdin.buffer.readline()
        if not line:
            return None
        if line in (b"\r\n", b"\n"):
            break
        name, _, value = line.decode().partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    assert length is not None
    message: dict[str, Any] = json.loads(sys.stdin.buffer.read(length))
    return message


def write(message: dict[str, Any]) -> None:
    body = json.dumps(message).encode()
    sys.stdout.buffer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    sys.stdout.buffer.flush()


def main() -> None:
    mode = sys.argv[1]
    if mode == "exit-at-start":
        sys.stderr.write("cannot start: no workspace here\n")
        sys.exit(3)
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        message = read()
        if message is None:
            break
        method = message.get("method")
        if mode == "silent":
            continue
        if method == "initialize":
            info = {"name": f"fake-{mode}", "version": "0.1"}
            caps = {"hoverProvider": True}
            write(
                {
                    "jsonrpc": "2.0",
                    "id": message["id"],
                    "result": {"capabilities": caps, "serverInfo": info},
                }
            )
        elif method == "textDocument/hover":
            if mode == "crash-on-hover":
                sys.stderr.write("boom\n")
                sys.stderr.flush()
                os._exit(7)
            write(
                {
                    "jsonrpc": "2.0",
                    "id": message["id"],
                    "result": {"contents": f"pid {os.getpid()}"},
                }
            )
        elif method == "textDocument/rename" and mode == "evil-rename":
            edit = {
                "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 1}},
                "newText": "y",
            }
            inside = message["params"]["textDocument"]["uri"]
            outside = "file://" + os.path.join(os.path.dirname(os.getcwd()), "outside.py")
            result = {"changes": {inside: [edit], outside: [edit]}}
            write({"jsonrpc": "2.0", "id": message["id"], "result": result})
        elif method == "shutdown" and mode != "stubborn":
            write({"jsonrpc": "2.0", "id": message["id"], "result": None})
        elif method == "exit" and mode != "stubborn":
            sys.exit(0)
        elif "id" in message and method != "shutdown":
            error = {"code": -32601, "message": f"Method Not Found: {method}"}
            write({"jsonrpc": "2.0", "id": message["id"], "error": error})
    while mode == "stubborn":
        time.sleep(1)  # real clock: a server that will not stop on its own


if __name__ == "__main__":
    main()
