"""The ``a2a`` toolset against a fake A2A agent on 127.0.0.1 (agent card, JSON-RPC
``message/stream`` over server-sent events, ``message/send``). Real clock, bounded."""

from __future__ import annotations

import json
from typing import Any

import trio

from greenroom.agents._config import ToolsetConfig
from greenroom.agents.tools import ToolContext, build_tools

from .fake_sse import FakeSSEServer, Recorded, Reply

LIMIT = 15


def _json(body: Any) -> Reply:
    return Reply(events=(json.dumps(body).encode(),), content_type="application/json")


def _sse(*results: Any, error: Any = None) -> Reply:
    frames = [{"jsonrpc": "2.0", "id": "1", "result": r} for r in results]
    if error is not None:
        frames.append({"jsonrpc": "2.0", "id": "1", "error": error})
    return Reply(events=tuple(f"data: {json.dumps(f)}\n\n".encode() for f in frames))


def text_message(text: str) -> dict[str, Any]:
    return {"kind": "message", "role": "agent", "parts": [{"kind": "text", "text": text}]}


class FakeAgent:
    def __init__(self, server: FakeSSEServer, card: dict[str, Any], answer: Reply) -> None:
        self.card, self.answer = card, answer
        server.responder = self.respond

    def respond(self, request: Recorded) -> Reply:
        if request.path == "/.well-known/agent-card.json":
            return _json(self.card) if self.card else Reply(status=404, body={})
        if request.path == "/.well-known/agent.json":
            return Reply(status=404, body={})
        return self.answer


async def start_tools(url: str, **options: Any) -> Any:
    config = ToolsetConfig(type="a2a", options={"url": url, **options})
    tools = build_tools([config], ToolContext(env={"TOKEN": "t0k"}))
    with trio.fail_after(LIMIT):
        warnings = await tools.start()
    return tools, warnings


async def test_each_skill_is_a_tool_and_a_call_streams_the_answer(nursery: trio.Nursery) -> None:
    server = await nursery.start(FakeSSEServer(Reply(status=404, body={})).serve)
    card = {
        "name": "Blue Player",
        "description": "Plays tic-tac-toe",
        "url": f"{server.url}/rpc",
        "capabilities": {"streaming": True},
        "skills": [{"id": "play-move", "name": "Play", "description": "Plays one move"}],
    }
    answer = _sse(
        {"kind": "task", "id": "t1", "status": {"state": "submitted"}},
        {"kind": "status-update", "status": {"state": "working", "message": text_message("X ")}},
        {"kind": "artifact-update", "artifact": {"parts": [{"kind": "text", "text": "at 1,1"}]}},
    )
    FakeAgent(server, card, answer)
    tools, warnings = await start_tools(server.url, name="blue", headers={"X-Key": "${env.TOKEN}"})
    assert warnings == []
    assert list(tools.tools) == ["blue_play_move"]
    spec = tools.tools["blue_play_move"].spec
    assert spec.description == "Calls the 'Play' skill of the Blue Player agent. Plays one move"
    assert "## Blue Player" in tools.instructions[0]
    with trio.fail_after(LIMIT):
        result = await tools.tools["blue_play_move"].call({"message": "your move"})
    assert not result.is_error and result.output == "X at 1,1"
    sent = server.requests[-1]
    assert sent.path == "/rpc" and sent.headers["x-key"] == "t0k"
    assert sent.json["method"] == "message/stream"
    assert sent.json["params"]["message"]["parts"] == [{"kind": "text", "text": "your move"}]
    server.stop()


async def test_a_card_without_skills_or_streaming_and_an_error_answer(
    nursery: trio.Nursery,
) -> None:
    server = await nursery.start(FakeSSEServer(Reply(status=404, body={})).serve)
    card = {"name": "Red Player", "description": "Plays red", "capabilities": {"streaming": False}}
    agent = FakeAgent(
        server, card, _json({"jsonrpc": "2.0", "id": "1", "result": text_message("O")})
    )
    tools, _ = await start_tools(server.url + "/")
    assert list(tools.tools) == ["red_player"]
    tool = tools.tools["red_player"]
    with trio.fail_after(LIMIT):
        assert (await tool.call({"message": "go"})).output == "O"
    assert server.requests[-1].json["method"] == "message/send"
    assert server.requests[-1].path == "/"  # no url in the card: the toolset's
    agent.answer = _json(
        {"jsonrpc": "2.0", "id": "1", "error": {"code": -32000, "message": "busy"}}
    )
    with trio.fail_after(LIMIT):
        failed = await tool.call({"message": "go"})
    assert failed.is_error and failed.output == "A2A call failed: busy"
    finished = {
        "kind": "task",
        "status": {"state": "completed"},
        "artifacts": [{"artifactId": "a", "parts": [{"kind": "text", "text": "O at 2,2"}]}],
    }
    agent.answer = _json({"jsonrpc": "2.0", "id": "1", "result": finished})
    with trio.fail_after(LIMIT):  # a finished task's answer is its artifacts
        assert (await tool.call({"message": "go"})).output == "O at 2,2"
    agent.answer = _json({"jsonrpc": "2.0", "id": "1", "result": {"kind": "task", "status": {}}})
    with trio.fail_after(LIMIT):
        assert (await tool.call({"message": "go"})).output == "No response from agent"
    server.stop()


async def test_an_agent_without_a_card_is_a_warning_and_retried(nursery: trio.Nursery) -> None:
    server = await nursery.start(FakeSSEServer(Reply(status=404, body={})).serve)
    agent = FakeAgent(server, {}, _sse(text_message("late")))
    tools, warnings = await start_tools(server.url)
    assert tools.tools == {}
    assert len(warnings) == 1 and "failed to fetch A2A agent card" in warnings[0]
    agent.card = {"name": "Late", "url": f"{server.url}/rpc"}
    with trio.fail_after(LIMIT):
        assert await tools.start() == []  # read again before the next model call
    assert list(tools.tools) == ["late"]
    server.stop()
