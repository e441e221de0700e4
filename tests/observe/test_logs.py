"""Logs (issue 24): one JSON object per line with the session and turn a line belongs to, the
trace id only when OpenTelemetry is loaded, and ``greenroom serve --log-format json`` as a
real process (its metrics too, over a SQLite store)."""

from __future__ import annotations

import io
import json
import logging
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from greenroom.observe import JsonFormatter, configure_logging, log_context
from greenroom.testing import ScriptedAgent, Tool, ToolCallContext, open_greenroom
from tests.observe.test_metrics import samples, total
from tests.slowness import slow
from tests.transport.test_serve import serve

TOOL_LOGGER = "greenroom.tests.tool"


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    """What ``TOOL_LOGGER`` logs, as JSON lines."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter(node="node-a"))
    logger = logging.getLogger(TOOL_LOGGER)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield out
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)


async def _logging_tool(ctx: ToolCallContext) -> str:
    await trio.lowlevel.checkpoint()
    logging.getLogger(TOOL_LOGGER).info("tool ran with %s", ctx.arguments.get("n"))
    return "ok"


async def test_a_line_logged_during_a_turn_names_its_session_and_turn(
    autojump_clock: trio.abc.Clock, json_lines: io.StringIO
) -> None:
    call = {"tool_call": {"name": "note", "arguments": {"n": 7}}}
    agent = ScriptedAgent(turns=[[call], "Done."], tools=[Tool("note", _logging_tool)], loop=True)
    with trio.fail_after(30):
        async with open_greenroom(agent) as gr:
            sid = (await gr.client.create_session(title="t"))["id"]
            async with gr.client.events(sid, 0) as events:
                await gr.client.run(sid, "go")
                seen = await events.until("stream_stopped")
    logging.getLogger(TOOL_LOGGER).info("outside any turn")
    lines = [json.loads(line) for line in json_lines.getvalue().splitlines()]
    inside, outside = lines
    assert inside["message"] == "tool ran with 7"
    assert inside["session_id"] == sid
    assert inside["turn_id"]  # the turn's record id (no event carries it)
    assert inside["level"] == "info" and inside["logger"] == TOOL_LOGGER
    assert inside["node"] == "node-a"
    assert inside["time"].endswith("+00:00")
    assert "trace_id" not in inside  # OpenTelemetry is not loaded in this test
    assert "session_id" not in outside and "turn_id" not in outside
    assert [e.type for e in seen][-1] == "stream_stopped"


def _record(message: str, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError("boom")
        except ValueError:
            exc_info = sys.exc_info()
    return logging.LogRecord("greenroom.x", logging.ERROR, __file__, 1, message, (), exc_info)


def test_a_json_line_is_one_line_and_carries_the_traceback() -> None:
    line = JsonFormatter().format(_record('a "quoted"\nmessage', exc=True))
    assert "\n" not in line
    parsed = json.loads(line)
    assert parsed["message"] == 'a "quoted"\nmessage'
    assert parsed["level"] == "error"
    assert "ValueError: boom" in parsed["exception"]
    assert "node" not in parsed


def test_ids_come_from_the_context_and_are_reset() -> None:
    formatter = JsonFormatter()
    with log_context(session_id="s-1", turn_id="t-1"):
        inner = json.loads(formatter.format(_record("in")))
    after = json.loads(formatter.format(_record("out")))
    assert (inner["session_id"], inner["turn_id"]) == ("s-1", "t-1")
    assert "session_id" not in after


class _SpanContext:
    is_valid = True
    trace_id = 0x0AF7651916CD43DD8448EB211C80319C
    span_id = 0x00F067AA0BA902B7


class _Span:
    def get_span_context(self) -> _SpanContext:
        return _SpanContext()


def test_the_trace_id_is_read_only_when_opentelemetry_is_loaded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    formatter = JsonFormatter()
    monkeypatch.delitem(sys.modules, "opentelemetry.trace", raising=False)
    assert "trace_id" not in json.loads(formatter.format(_record("no otel")))
    fake: Any = types.ModuleType("opentelemetry.trace")
    fake.get_current_span = _Span
    monkeypatch.setitem(sys.modules, "opentelemetry.trace", fake)
    parsed = json.loads(formatter.format(_record("with a span")))
    assert parsed["trace_id"] == "0af7651916cd43dd8448eb211c80319c"
    assert parsed["span_id"] == "00f067aa0ba902b7"
    fake.get_current_span = lambda: None  # an API we do not know: no ids, still a line
    assert "trace_id" not in json.loads(formatter.format(_record("odd api")))


def test_the_http_clients_say_a_line_per_request_only_at_debug() -> None:
    names = ("httpx", "httpx2")
    try:
        configure_logging("info", "json")
        assert all(logging.getLogger(n).getEffectiveLevel() == logging.WARNING for n in names)
        configure_logging("debug", "json")
        assert all(logging.getLogger(n).getEffectiveLevel() == logging.DEBUG for n in names)
    finally:
        for name in names:
            logging.getLogger(name).setLevel(logging.NOTSET)


@pytest.mark.slow
async def test_serve_logs_json_lines_and_serves_metrics(tmp_path: Path) -> None:
    db = tmp_path / "sessions.sqlite3"
    async with (
        serve(tmp_path, "--db", str(db), "--log-format", "json") as server,
        httpx.AsyncClient(base_url=server.url, timeout=slow(10)) as client,
    ):
        sid = (await client.post("/api/sessions", json={"title": "t"})).json()["id"]
        source = (await client.get("/api/agents")).json()[0]["name"]
        body = {"messages": [{"role": "user", "content": "hello"}]}
        async with client.stream("POST", f"/api/sessions/{sid}/agent/{source}", json=body) as r:
            assert r.status_code == 200
            await r.aread()
        scrape = await client.get("/metrics")
        assert scrape.status_code == 200
        found = samples(scrape.text)
        assert total(found, "greenroom_turns_total", outcome="done") == 1
        assert total(found, "greenroom_store_commit_seconds_count") > 0
        assert total(found, "greenroom_store_commit_batch_size_sum") > 0
        written = total(found, "greenroom_events_written_total")
        assert written >= 4  # stream_started ... stream_stopped, token events between
        assert total(found, "greenroom_event_delivery_lag_seconds_count") >= 1
        assert total(found, "greenroom_model_calls_total", provider="echo", outcome="ok") == 1
        assert await server.terminate() == 0
    lines = [line for line in server.stderr.decode().splitlines() if line.strip()]
    assert lines, "the server logged nothing"
    parsed = [json.loads(line) for line in lines]  # every line is one JSON object
    assert all({"time", "level", "message", "logger"} <= set(p) for p in parsed)
    assert any(p["message"] == "shutting down" for p in parsed)
