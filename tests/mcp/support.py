"""Helpers for the MCP tests: the test server's command line, a ToolHost that records what the
MCP code asks of the runtime, and small waits bounded by deadlines.

The servers are real subprocesses speaking the real protocol, so these tests run on the real
clock; every wait is bounded by ``trio.fail_after``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import attrs
import trio

from greenroom.agents import ElicitationAnswer
from greenroom.agents.mcp import McpServer, StdioSpec
from greenroom.agents.tools import EgressPolicy, parse_networks
from greenroom.agents.tools._base import McpSettings
from greenroom.domain import Event
from tests.slowness import slow

SERVER = Path(__file__).with_name("stdio_server.py")
# Remote test servers listen on loopback, which the egress policy refuses unless allowed.
LOOPBACK = EgressPolicy(parse_networks(["127.0.0.0/8"]))
QUICK = McpSettings(
    start_timeout=slow(20.0),
    call_timeout=slow(20.0),
    restart_backoff=(0.05, 0.1, 0.2),
    egress=LOOPBACK,
)


def server_spec(
    *args: str, cwd: Path | None = None, env: Mapping[str, str] | None = None
) -> StdioSpec:
    return StdioSpec(
        sys.executable, (str(SERVER), *args), dict(env or os.environ), cwd or Path.cwd()
    )


@attrs.define(eq=False)
class FakeHost:
    """A ToolHost: services run in ``nursery``; elicitations get ``answer``."""

    nursery: trio.Nursery
    answer: ElicitationAnswer = attrs.field(
        factory=lambda: ElicitationAnswer("accept", {"name": "Ada"})
    )
    asked: list[dict[str, Any]] = attrs.field(factory=list)
    events: list[Event] = attrs.field(factory=list)

    async def elicit(
        self,
        message: str,
        *,
        schema: Any = None,
        meta: Mapping[str, Any] | None = None,
        mode: str = "form",
        url: str = "",
    ) -> ElicitationAnswer:
        await trio.lowlevel.checkpoint()
        self.asked.append({"message": message, "schema": schema, "mode": mode, "url": url})
        return self.answer

    async def change_model(self, ref: str) -> str:
        raise NotImplementedError

    async def revert_model(self) -> None:
        raise NotImplementedError

    def start_service(self, fn: Callable[[], Awaitable[None]]) -> None:
        self.nursery.start_soon(fn)

    def notify(self, event: Event) -> None:
        self.events.append(event)


def new_server(
    host: FakeHost, *args: str, settings: McpSettings = QUICK, prefix: str = ""
) -> McpServer:
    return McpServer(server_spec(*args), host, settings, prefix=prefix)


async def until(predicate: Callable[[], bool], *, within: float = slow(20.0)) -> None:
    """Wait until ``predicate()`` holds (polling: the server is another process)."""
    with trio.fail_after(within):
        while True:
            if predicate():
                return
            await trio.sleep(0.02)  # real clock: another process does the work


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not count)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status
