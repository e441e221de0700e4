"""Clients of a cluster: ``/events`` watchers that roam to another node when their stream
ends, a WebSocket subscriber, the session operations the scenarios use, and bounded polling of
the database."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs
import httpx
import trio
from trio_websocket import ConnectionClosed, open_websocket_url

from tests.cluster._checker import ClientLog, Expectations, Snapshot, check, digest, load_snapshot
from tests.cluster._nodes import Cluster, Node, node_client
from tests.crash_support import Watcher, side_effect_lines, user
from tests.pg import run_sql
from tests.slowness import slow

AGENT = "crash"  # the agent file crash_support writes
POLL = 0.05  # seconds between polls (real clock: other processes)


@attrs.define
class Roamer:
    """A Watcher of one session that reconnects, with its last seq, to the first running node
    of ``prefer`` each time its stream ends (a node killed, stopped or fenced), until the
    session ends (session_exited or 404) or it is cancelled."""

    name: str
    watcher: Watcher
    prefer: Sequence[str]
    connections: list[tuple[str, int]] = attrs.field(factory=list)  # (node, first entry)
    statuses: list[int] = attrs.field(factory=list)

    @property
    def served(self) -> list[str]:
        """The nodes of the connections that delivered at least one event, in order."""
        ends = [start for _, start in self.connections[1:]] + [len(self.watcher.entries)]
        return [
            name for (name, start), end in zip(self.connections, ends, strict=True) if end > start
        ]

    @classmethod
    def of(cls, name: str, session_id: str, prefer: Sequence[str]) -> Roamer:
        return cls(name, Watcher(session_id, gaps_allowed=True), prefer)

    async def run(self, cluster: Cluster) -> None:
        while not self.watcher.exited.is_set():
            node = self._pick(cluster)
            if node is None:
                await trio.sleep(POLL)  # real clock: every preferred node is down for now
                continue
            self.connections.append((node.name, len(self.watcher.entries)))
            async with node_client(node, timeout=slow(60)) as http:
                status = await self.watcher.watch(http)
            self.statuses.append(status)
            if status == 404:
                return
            await trio.sleep(POLL)  # real clock: do not spin on a node that refuses

    def _pick(self, cluster: Cluster) -> Node | None:
        for name in self.prefer:
            node = cluster.nodes.get(name)
            if node is not None and node.running and not node.stopped:
                return node
        return None

    def log(self) -> ClientLog:
        entries = tuple((seq, digest(body)) for seq, body in self.watcher.entries)
        return ClientLog(self.name, self.watcher.session_id, entries, frozenset(self.watcher.gaps))

    def types(self) -> list[str]:
        return [json.loads(body)["type"] for _, body in self.watcher.entries]


@attrs.define
class WsSubscriber:
    """A WebSocket ``subscribe`` of one session on one node, from seq 0: the (seq, event type)
    of every event it gets, in order, until the connection ends."""

    session_id: str
    events: list[tuple[int, str]] = attrs.field(factory=list)

    def types(self) -> list[str]:
        return [kind for _, kind in self.events]

    async def run(self, node: Node) -> None:
        url = node.url.replace("http://", "ws://") + "/api/ws"
        async with open_websocket_url(url) as ws:
            frame = {"id": "s", "op": "subscribe", "session_id": self.session_id, "since": 0}
            await ws.send_message(json.dumps(frame))
            try:
                while True:
                    reply = json.loads(await ws.get_message())
                    if reply.get("seq"):
                        self.events.append((reply["seq"], reply["event"]["type"]))
            except ConnectionClosed:
                return


async def create(http: httpx.AsyncClient) -> str:
    # Autonomous: the side-effect tool runs without asking (it is not read-only).
    response = await http.post("/api/sessions", json={"safety_policy": "autonomous"})
    assert response.status_code == 200, response.text
    return str(response.json()["id"])


async def start_run(http: httpx.AsyncClient, session_id: str, text: str) -> httpx.Response:
    """Start a turn that goes on without this client (``on_disconnect=continue``); the
    response (its status and, for an error, its JSON body; a 200's stream is left unread)."""
    path = f"/api/sessions/{session_id}/agent/{AGENT}?on_disconnect=continue"
    async with http.stream("POST", path, json=user(text)) as response:
        if response.status_code != 200:
            await response.aread()
        return response


async def run_to_end(http: httpx.AsyncClient, session_id: str, text: str) -> list[str]:
    """Run a turn and read its stream to the end; the event types."""
    path = f"/api/sessions/{session_id}/agent/{AGENT}"
    types = []
    async with http.stream("POST", path, json=user(text)) as response:
        assert response.status_code == 200, (response.status_code, await response.aread())
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                types.append(json.loads(line[6:])["type"])
    return types


def error_code(response: httpx.Response) -> str:
    try:
        return str(response.json().get("code", ""))
    except (ValueError, httpx.ResponseNotRead):  # a stream left unread, or not JSON
        return ""


# --- the database ------------------------------------------------------------------------------


async def head(database_url: str, session_id: str) -> tuple[int, str | None, int | None, str]:
    """(epoch, owner node, owner incarnation, state) of the session's gr_heads row."""
    sql = "SELECT epoch, owner_node, owner_inc, state FROM gr_heads WHERE session_id = %s"
    (row,) = await run_sql(database_url, sql, session_id)
    return int(row[0]), row[1], row[2], str(row[3])


async def running_turns(database_url: str, session_id: str) -> int:
    sql = "SELECT count(*) FROM gr_turns WHERE session_id = %s AND state = 'running'"
    return int((await run_sql(database_url, sql, session_id))[0][0])


async def eventually(
    what: str, condition: Callable[[], Awaitable[bool] | bool], limit: float
) -> float:
    """Poll ``condition`` (plain or async) until it holds; the seconds it took. Fails after
    ``limit`` s."""
    start = trio.current_time()
    with trio.move_on_after(limit):
        for _ in range(int(limit / POLL) + 1):
            held = condition()
            if held if isinstance(held, bool) else await held:
                return trio.current_time() - start
            await trio.sleep(POLL)  # real clock: the nodes are other processes
    raise AssertionError(f"{what}: not within {limit} s")


async def idle(database_url: str, session_id: str) -> bool:
    """The session's turn ended (no running turn, head not running)."""
    if await running_turns(database_url, session_id):
        return False
    return (await head(database_url, session_id))[3] != "running"


async def verify(
    cluster: Cluster,
    roamers: Sequence[Roamer],
    *,
    deleted: frozenset[str] = frozenset(),
    reruns: dict[str, int] | None = None,
    quiescent: bool = True,
) -> Snapshot:
    """Run the invariant checker over the database, the roamers' logs and the side-effect
    file; fail with every violation. The snapshot it checked."""
    snapshot = await trio.to_thread.run_sync(load_snapshot, cluster.dsn)
    expect = Expectations(
        deleted=deleted,
        side_effects=tuple(side_effect_lines(cluster.files.side_effects)),
        reruns=reruns or {},
        quiescent=quiescent,
    )
    problems = check(snapshot, [r.log() for r in roamers], expect)
    assert problems == [], "\n".join(problems[:20])
    return snapshot


async def in_doubt(http: httpx.AsyncClient, session_id: str) -> list[str]:
    """The ids of the session's tool calls in doubt (asked through any node)."""
    response = await http.get(f"/api/sessions/{session_id}/recovery/decisions")
    assert response.status_code == 200, response.text
    return [str(call["tool_call_id"]) for call in response.json()["in_doubt"]]


async def decide(http: httpx.AsyncClient, session_id: str, call: str, action: str) -> Any:
    body = {"tool_call_id": call, "action": action, "decided_by": "cluster-test"}
    response = await http.post(f"/api/sessions/{session_id}/recovery/decisions", json=body)
    assert response.status_code == 200, response.text
    return response.json()


async def taken_over(database_url: str, session_id: str, epoch: int, dead: str) -> bool:
    """Another node claimed the session (a higher epoch) and its turn is no longer running."""
    now, owner, _, _ = await head(database_url, session_id)
    return now > epoch and owner != dead and await idle(database_url, session_id)


async def all_caught_up(roamers: Sequence[Roamer], targets: dict[str, int], limit: float) -> None:
    """Each roamer has received its session's events up to ``targets[session]``; fails with
    where each one stands."""
    for roamer in roamers:
        roamer.watcher.expect(targets[roamer.watcher.session_id])
    with trio.move_on_after(limit):
        for roamer in roamers:
            await roamer.watcher.caught_up.wait()
        return
    raise AssertionError(
        "not caught up: "
        + "; ".join(
            f"{r.name} at {r.watcher.last} of {r.watcher.target}, statuses {r.statuses[-5:]},"
            f" served by {r.served[-5:]}, problems {r.watcher.problems[-3:]}"
            for r in roamers
            if not r.watcher.caught_up.is_set()
        )
    )


async def all_exited(roamers: Sequence[Roamer], limit: float) -> None:
    """Each roamer got ``session_exited``; fails with where each one stands."""
    with trio.move_on_after(limit):
        for roamer in roamers:
            await roamer.watcher.exited.wait()
        return
    raise AssertionError(
        "no session_exited: "
        + "; ".join(
            f"{r.name} at {r.watcher.last} (last types {r.types()[-3:]}), statuses"
            f" {r.statuses[-5:]}, served by {r.served[-5:]}"
            for r in roamers
            if not r.watcher.exited.is_set()
        )
    )
