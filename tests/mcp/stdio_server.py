"""A test MCP server over stdio, written with the SDK's server side (run as a subprocess).

    python stdio_server.py [--name NAME] [--instructions TEXT] [--wait-fifo PATH]
                           [--exit-at-start CODE] [--hang-at-start] [--record PATH]

Tools: ``echo`` (read-only), ``add``, ``ask`` (elicits a name), ``grow`` (adds a tool and
says the list changed), ``die`` (the process exits), ``hang`` (never answers), ``garbage``
(writes malformed JSON-RPC lines to stdout first), ``flood`` (many of them), ``huge_line``
(writes one endless line), ``shout`` (floods stderr), ``pid`` (the server's process id),
``spawn_child`` (starts a child that outlives nobody: it sleeps; its pid is the result).

``--wait-fifo`` blocks before serving until something opens the FIFO for writing (a slow
start the test controls); ``--record`` appends the process's argv and pid to a file.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations
from pydantic import BaseModel


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", default="test-server")
    parser.add_argument("--instructions", default="")
    parser.add_argument("--wait-fifo", default="")
    parser.add_argument("--exit-at-start", type=int, default=None)
    parser.add_argument("--hang-at-start", action="store_true")
    parser.add_argument("--record", default="")
    options, _ = parser.parse_known_args()
    if options.record:
        with open(options.record, "a", encoding="utf-8") as f:
            f.write(
                json.dumps({"argv": sys.argv, "pid": os.getpid(), "env": dict(os.environ)}) + "\n"
            )
    if options.exit_at_start is not None:
        print("cannot start: configured to fail", file=sys.stderr, flush=True)
        sys.exit(options.exit_at_start)
    if options.hang_at_start:
        while True:
            time.sleep(3600)  # real clock: a subprocess that never answers initialize
    if options.wait_fifo:
        with open(options.wait_fifo, encoding="utf-8") as fifo:  # blocks until a writer opens
            fifo.read()

    # The SDK moves the protocol off fd 1 (so stray prints cannot corrupt it); keep the pipe
    # itself to write bad protocol output on purpose.
    wire = os.dup(1)
    server = MCPServer(options.name, instructions=options.instructions or None, log_level="ERROR")

    @server.tool(description="Echo the text back", annotations=ToolAnnotations(read_only_hint=True))
    def echo(text: str) -> str:
        return f"echo: {text}"

    @server.tool(description="Add two numbers")
    def add(a: int, b: int) -> int:
        return a + b

    class Name(BaseModel):
        name: str

    @server.tool(description="Ask the user for their name")
    async def ask(ctx: Context) -> str:
        answer = await ctx.elicit("What is your name?", Name)
        data = getattr(answer, "data", None)
        return f"{answer.action}: {data.name if data is not None else ''}"

    @server.tool(description="Add a tool called fresh")
    async def grow(ctx: Context) -> str:
        server.add_tool(lambda: "fresh!", name="fresh", description="A tool added later")
        await ctx.session.send_tool_list_changed()
        return "grown"

    @server.tool(description="Exit the server process")
    def die() -> str:
        os._exit(3)

    @server.tool(description="Never answer")
    def hang() -> str:
        while True:
            time.sleep(3600)  # real clock: a tool that never answers

    @server.tool(description="Write malformed JSON-RPC lines, then answer")
    def garbage() -> str:
        os.write(wire, b"this is not json\n")
        os.write(wire, b'{"jsonrpc": "2.0", "method": 42}\n')
        os.write(wire, b'{"jsonrpc": "2.0", "id": 999999, "result": {"bogus": true}}\n')
        return "after garbage"

    @server.tool(description="Write n malformed lines to stdout, then answer")
    def flood(n: int) -> str:
        os.write(wire, b"not json at all\n" * n)
        return f"flooded {n}"

    @server.tool(description="Write one line that never ends")
    def huge_line() -> str:
        chunk = b"x" * 65536
        while True:
            os.write(wire, chunk)

    @server.tool(description="Flood stderr, then answer")
    def shout() -> str:
        line = b"noise " * 1000 + b"\n"
        for _ in range(2000):
            os.write(2, line)
        return "shouted"

    @server.tool(
        description="The server's process id", annotations=ToolAnnotations(read_only_hint=True)
    )
    def pid() -> str:
        return str(os.getpid())

    @server.tool(description="Start a child process that sleeps; returns its pid")
    def spawn_child() -> str:
        child = subprocess.Popen(  # real clock: a grandchild that outlives a killed server
            [sys.executable, "-c", "import time; time.sleep(600)"]  # real clock
        )
        return str(child.pid)

    server.run()


if __name__ == "__main__":
    main()
