"""The JSON-RPC connection under ``greenroom serve acp``, on in-memory streams: answers to
requests it sent, late answers, errors both ways."""

from __future__ import annotations

import json
from typing import Any

import trio
import trio.testing

from greenroom.serve._jsonrpc import METHOD_NOT_FOUND, Connection, Params, RpcError


class Peer:
    """The other end: writes lines, reads messages one by one."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.buffer = b""

    async def send(self, message: dict[str, Any]) -> None:
        await self.stream.send_all(json.dumps(message).encode() + b"\n")

    async def receive(self) -> dict[str, Any]:
        while b"\n" not in self.buffer:
            self.buffer += await self.stream.receive_some(65536)
        line, self.buffer = self.buffer.split(b"\n", 1)
        message: dict[str, Any] = json.loads(line)
        return message


async def test_requests_both_ways_and_a_late_answer_is_dropped() -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    peer = Peer(theirs)
    conn: Connection

    async def ask(params: Params) -> Any:
        return {"asked": await conn.request("question", {"n": params["n"]})}

    conn = Connection(ours, ours, {"ask": ask}, {})
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.serve)
        # A request of the peer whose handler asks the peer back.
        await peer.send({"jsonrpc": "2.0", "id": "a", "method": "ask", "params": {"n": 1}})
        question = await peer.receive()
        assert question["method"] == "question"
        await peer.send({"jsonrpc": "2.0", "id": question["id"], "result": "yes"})
        assert await peer.receive() == {"jsonrpc": "2.0", "id": "a", "result": {"asked": "yes"}}

        # A request this side abandons: the peer's late answer is dropped, nothing breaks.
        with trio.CancelScope() as scope:
            nursery.start_soon(_cancel_soon, scope)
            await conn.request("ignored", {})
        await peer.receive()  # the abandoned question
        await peer.send({"jsonrpc": "2.0", "id": 2, "result": "too late"})
        await peer.send({"jsonrpc": "2.0", "id": 7, "method": "nope", "params": {}})
        answer = await peer.receive()
        assert answer["id"] == 7
        assert answer["error"]["code"] == METHOD_NOT_FOUND
        assert "this agent answers ask" in answer["error"]["message"]

        # An error answer is raised to the asker.
        async def failing() -> None:
            try:
                await conn.request("q", {})
            except RpcError as exc:
                errors.append((exc.code, exc.message))

        errors: list[tuple[int, str]] = []
        nursery.start_soon(failing)
        failing_question = await peer.receive()
        error = {"code": -32000, "message": "no"}
        await peer.send({"jsonrpc": "2.0", "id": failing_question["id"], "error": error})
        await trio.testing.wait_all_tasks_blocked()
        assert errors == [(-32000, "no")]
        await theirs.aclose()  # the peer's input ends: serve returns


async def _cancel_soon(scope: trio.CancelScope) -> None:
    await trio.testing.wait_all_tasks_blocked()
    scope.cancel()
