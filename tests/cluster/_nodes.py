"""Several real ``greenroom serve`` nodes on one PostgreSQL database created for the test
(tests/pg.py: its server, its skip rules).

Each node is a subprocess on 127.0.0.1 port 0 with a short lease (``TTL`` / ``RENEW``), its
stdout and stderr in a log file of its own (one per start), optionally reaching PostgreSQL
through its own :class:`~tests.cluster._proxy.Proxy`. Nodes can be killed (SIGKILL), stopped
(SIGSTOP), continued (SIGCONT) and started again under the same node id.

PostgreSQL is ``GREENROOM_TEST_POSTGRES`` (default 127.0.0.1:5432, trust, user ``postgres``);
the database ``gr_t_<hex>`` is created for the test and dropped after it. Without a reachable
server the tests are skipped, unless ``GREENROOM_REQUIRE_POSTGRES=1`` (then they fail).
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlsplit

import attrs
import httpx
import trio

from tests import pg
from tests.cluster._proxy import Proxy
from tests.crash_support import ServerFiles
from tests.slowness import slow

TTL = slow(3.0)  # seconds: the node lease (a loaded machine renews late)
RENEW = slow(0.5)  # seconds between renewals
STARTUP = slow(60)  # a child server's start, on a busy machine
LISTENING = re.compile(r"greenroom listening on (http://127\.0\.0\.1:\d+)")


def via(database_url: str, port: int) -> str:
    """The same database reached through 127.0.0.1:``port`` (a proxy)."""
    url = urlsplit(database_url)
    return url._replace(netloc=f"{url.username}@127.0.0.1:{port}").geturl()


@attrs.define(eq=False)
class Node:
    name: str
    process: trio.Process
    url: str
    log: Path
    proxy: Proxy | None
    stopped: bool = False  # SIGSTOPped (and not continued yet)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process.returncode is None

    def signal(self, sig: signal.Signals) -> None:
        if self.running:
            self.process.send_signal(sig)

    async def kill(self) -> None:
        """SIGKILL: no shutdown code runs (a stopped process dies too)."""
        self.signal(signal.SIGKILL)
        with trio.fail_after(slow(10)):
            await self.process.wait()

    async def terminate(self) -> int:
        self.signal(signal.SIGCONT)  # a stopped process would never see SIGTERM
        self.signal(signal.SIGTERM)
        with trio.fail_after(slow(30)):
            return await self.process.wait()

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)
        self.stopped = True

    def resume(self) -> None:
        self.signal(signal.SIGCONT)
        self.stopped = False

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


@attrs.define(eq=False)
class Cluster:
    """The nodes of one test, on one database; every node is killed at the end."""

    dsn: str  # the scratch database
    files: ServerFiles
    nursery: trio.Nursery  # runs the proxies
    nodes: dict[str, Node] = attrs.field(factory=dict)
    starts: int = 0
    extra_args: tuple[str, ...] = ()
    ttl: float = TTL
    renew: float = RENEW
    agent: Path | None = None

    def node(self, name: str) -> Node:
        return self.nodes[name]

    def alive(self) -> list[Node]:
        return [node for node in self.nodes.values() if node.running]

    async def start(self, name: str, *, via_proxy: bool = False) -> Node:
        """Start node ``name`` (again: same node id, same proxy if it had one)."""
        old = self.nodes.get(name)
        proxy = old.proxy if old is not None else None
        if proxy is None and via_proxy:
            url = urlsplit(self.dsn)
            proxy = Proxy(url.hostname or "127.0.0.1", url.port or 5432)
            await self.nursery.start(proxy.serve)
        database = via(self.dsn, proxy.port) if proxy else self.dsn
        self.starts += 1
        log = self.files.directory / f"{name}.{self.starts}.log"
        if self.agent is None:  # written once: a rewrite makes running nodes reload it
            self.agent = self.files.agent
        command = [sys.executable, "-m", "greenroom.cli", "serve", str(self.agent)]
        command += ["--port", "0", "--db", database, "--node-id", name]
        command += ["--lease-ttl", str(self.ttl), "--lease-renew", str(self.renew)]
        command += ["--retain-deltas", "0", "--retain-deltas-per-session", "0"]
        command += ["--log-level", "info", *self.extra_args]
        with log.open("ab") as out:
            process = await trio.lowlevel.open_process(
                command, stdout=out, stderr=subprocess.STDOUT, env=self.files.env()
            )
        node = Node(name, process, "", log, proxy)
        try:
            node.url = await _listening(node)
        except BaseException:
            with trio.CancelScope(shield=True):
                await node.kill()
            raise
        self.nodes[name] = node
        return node

    async def start_all(self, names: list[str], *, via_proxy: bool = False) -> list[Node]:
        """Start several nodes at once (their imports overlap)."""
        async with trio.open_nursery() as nursery:
            for name in names:
                nursery.start_soon(self._start, name, via_proxy)
        return [self.nodes[name] for name in names]

    async def _start(self, name: str, via_proxy: bool) -> None:
        await self.start(name, via_proxy=via_proxy)

    async def restart(self, name: str) -> Node:
        await self.nodes[name].kill()
        return await self.start(name)

    async def close(self) -> None:
        with trio.CancelScope(shield=True):
            for node in self.nodes.values():
                await node.kill()
            for node in self.nodes.values():
                if node.proxy is not None:
                    node.proxy.resume()


async def _listening(node: Node) -> str:
    """The node's URL, once its log has the listening line and it answers /ready."""
    with trio.fail_after(STARTUP):
        while not (found := LISTENING.search(node.log_text())):
            if not node.running:
                raise AssertionError(f"node {node.name} exited early:\n{node.log_text()}")
            await trio.sleep(0.05)  # real clock: the child is importing and joining
        url = found.group(1)
        async with httpx.AsyncClient(base_url=url, timeout=slow(5)) as http:
            # /ready: the database answers and the lease is held. (On a loaded machine a node
            # may fence itself while it starts: the loop was blocked past the ttl after its
            # join. It rejoins at its next renewal; tests start once it has.)
            for _ in range(round(STARTUP * 20)):
                if (await http.get("/ready")).status_code == 200:
                    break
                await trio.sleep(0.05)  # real clock: not ready yet
    return url


@asynccontextmanager
async def cluster(
    files: ServerFiles, *, extra_args: tuple[str, ...] = ()
) -> AsyncIterator[Cluster]:
    """A scratch database and the nodes started on it (none yet)."""
    async with pg.database() as database, trio.open_nursery() as nursery:
        nodes = Cluster(database, files, nursery, extra_args=extra_args)
        try:
            yield nodes
        finally:
            await nodes.close()
            nursery.cancel_scope.cancel()


def node_client(node: Node, timeout: float = slow(30)) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=100, max_keepalive_connections=20)
    return httpx.AsyncClient(base_url=node.url, timeout=timeout, limits=limits)
