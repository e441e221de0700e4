"""A turn's trace end to end: ``serve`` with an agent whose model is a fake OpenAI-compatible
server on 127.0.0.1:0 and whose tool asks for approval. A run that carries ``traceparent``
(REST header, or a WebSocket op's field) is one trace: request → actor command → turn → model
calls and the tool call (→ its approval wait, → its store write, linked from a commit batch),
and each model request the fake server received carries that trace, with the model call's span
as parent. Live sockets: real clock, every wait bounded."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from trio_websocket import open_websocket_url

from greenroom.serve import ServeConfig, serve
from tests.agents import fake_openai as fo
from tests.observe.support import (
    PARENT_ID,
    TRACE_ID,
    TRACEPARENT,
    ancestors,
    child,
    header_ids,
    named,
    one,
    parent_id,
    span_id,
    trace_id,
)
from tests.slowness import slow

pytestmark = pytest.mark.slow
DEADLINE = slow(30)
KEY_VAR = "GREENROOM_TRACE_TEST_KEY"
RUN_ROUTE = "POST /api/sessions/{session_id}/agent/{agent}"


def write_agent(tmp_path: Path, fake: fo.FakeOpenAI) -> Path:
    agent = tmp_path / "writer.yaml"
    agent.write_text(
        "agents:\n"
        "  root:\n"
        "    model: main\n"
        "    instruction: You are a test agent.\n"
        "    toolsets:\n"
        "      - type: filesystem\n"
        "models:\n"
        "  main:\n"
        "    provider: openai\n"
        f"    model: {fo.MODEL}\n"
        f"    base_url: {fake.base_url}\n"
        f"    token_key: {KEY_VAR}\n"
    )
    return agent


def script(fake: fo.FakeOpenAI) -> None:
    arguments = ['{"path": "notes.txt", ', '"content": "hi"}']
    fake.script(
        fo.tool_call_reply(fo.ToolCallScript("call_1", "write_file", arguments)),
        fo.text_reply("Wro", "te it"),
    )


@asynccontextmanager
async def serving(tmp_path: Path) -> AsyncIterator[tuple[fo.FakeOpenAI, httpx.AsyncClient, str]]:
    async with trio.open_nursery() as nursery:
        fake: fo.FakeOpenAI = await nursery.start(fo.FakeOpenAI().serve)
        cfg = ServeConfig(
            agent_paths=(str(write_agent(tmp_path, fake)),), port=0,
            db=str(tmp_path / "db.sqlite3"), data_dir=str(tmp_path / "data"), graceful_timeout=1,
        )  # fmt: skip
        url: str = await nursery.start(serve, cfg)
        async with httpx.AsyncClient(base_url=url, timeout=slow(10)) as client:
            yield fake, client, url
        nursery.cancel_scope.cancel()


async def new_session(client: httpx.AsyncClient, tmp_path: Path) -> str:
    work = tmp_path / "work"
    work.mkdir()
    created = await client.post("/api/sessions", json={"title": "t", "working_dir": str(work)})
    assert created.status_code == 200, created.text
    return str(created.json()["id"])


def check_turn_tree(spans: Sequence[ReadableSpan], fake: fo.FakeOpenAI, request: str) -> None:
    """The turn's spans under ``request`` (the server span), and the model requests' headers."""
    traced = [s for s in spans if trace_id(s) == TRACE_ID]
    served = one(traced, request)
    assert parent_id(served) == PARENT_ID  # the caller's span
    # The first run of a session parks until its runtime is built, then runs under the
    # same request's context: the second RunTurn command span holds the turn.
    commands = [s for s in named(traced, "actor RunTurn") if parent_id(s) == span_id(served)]
    assert len(commands) == 2
    assert commands[0].attributes is not None
    assert commands[0].attributes["greenroom.outcome"] == "NeedsRuntime"
    # The build the first run started is part of its trace; its InstallRuntime command (sent
    # by the build task) dispatched the parked run again.
    assert parent_id(one(traced, "actor InstallRuntime")) == span_id(served)
    turn = one(traced, "invoke_agent root")
    assert parent_id(turn) == span_id(commands[1])
    assert turn.attributes is not None and turn.attributes["greenroom.turn.state"] == "done"

    calls = sorted(named(traced, f"chat {fo.MODEL}"), key=lambda s: s.start_time or 0)
    assert [parent_id(c) for c in calls] == [span_id(turn)] * 2
    first, second = (c.attributes or {} for c in calls)
    assert first["gen_ai.request.model"] == fo.MODEL
    assert first["gen_ai.system"] == "openai"
    assert first["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert second["gen_ai.response.finish_reasons"] == ("stop",)
    assert (second["gen_ai.usage.input_tokens"], second["gen_ai.usage.output_tokens"]) == (12, 5)
    assert [e.name for e in calls[1].events] == ["gen_ai.first_token"]  # the streamed text

    tool = child(traced, turn, "execute_tool write_file")
    assert tool.attributes is not None
    assert tool.attributes["gen_ai.tool.call.id"] == "call_1"
    assert tool.attributes["greenroom.tool.is_error"] is False
    approval = child(traced, tool, "approval wait")
    assert approval.attributes is not None
    assert approval.attributes["greenroom.approval.answer"] == "approve"
    # The call's durable intent: a store write under the tool, carried by a commit batch
    # (a root span of the writer thread) that links back to it.
    write = [s for s in named(traced, "store write") if parent_id(s) == span_id(tool)]
    assert write, "no store write under the tool call"
    commits = [
        c
        for c in named(spans, "store commit")
        if any(link.context.span_id == span_id(write[0]) for link in c.links)
    ]
    assert len(commits) == 1 and parent_id(commits[0]) is None
    assert ancestors(traced, write[0])[-1] == request

    # Each model request carried the trace, its parent the model call that sent it.
    assert len(fake.requests) == 2
    sent = [header_ids(r.headers["traceparent"]) for r in fake.requests]
    assert sent == [(TRACE_ID, span_id(c)) for c in calls]


async def test_a_rest_run_is_one_trace_down_to_the_model(
    spans: InMemorySpanExporter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_VAR, "sk-trace")
    with trio.fail_after(DEADLINE):
        async with serving(tmp_path) as (fake, client, _):
            script(fake)
            sid = await new_session(client, tmp_path)
            body = {"messages": [{"role": "user", "content": "write notes"}]}
            headers = {"traceparent": TRACEPARENT}
            run = f"/api/sessions/{sid}/agent/writer"
            types = []
            async with client.stream("POST", run, json=body, headers=headers) as response:
                assert response.status_code == 200
                async for line in response.aiter_lines():
                    if line.startswith("data: "):
                        event = json.loads(line[6:])
                        types.append(event["type"])
                        if event["type"] == "tool_call_confirmation":
                            answer = {"confirmation": "approve"}
                            r = await client.post(f"/api/sessions/{sid}/resume", json=answer)
                            assert r.status_code == 200, r.text
            assert types[-1] == "stream_stopped"
        check_turn_tree(spans.get_finished_spans(), fake, RUN_ROUTE)


async def test_a_websocket_run_continues_the_ops_traceparent(
    spans: InMemorySpanExporter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_VAR, "sk-trace")
    with trio.fail_after(DEADLINE):
        async with serving(tmp_path) as (fake, client, url):
            script(fake)
            sid = await new_session(client, tmp_path)
            ws_url = url.replace("http://", "ws://") + "/api/ws"
            async with open_websocket_url(ws_url) as ws:
                frame: dict[str, Any] = {
                    "id": 1, "op": "run", "session_id": sid, "agent": "writer",
                    "messages": [{"role": "user", "content": "write notes"}],
                    "traceparent": TRACEPARENT,
                }  # fmt: skip
                await ws.send_message(json.dumps(frame))
                while True:
                    message = json.loads(await ws.get_message())
                    if message.get("end"):
                        break
                    event = message.get("event") or {}
                    if event.get("type") == "tool_call_confirmation":
                        answer = {"id": 2, "op": "resume", "session_id": sid,
                                  "confirmation": "approve"}  # fmt: skip
                        await ws.send_message(json.dumps(answer))
                    assert message.get("ok", True), message
        check_turn_tree(spans.get_finished_spans(), fake, "ws run")
