"""Run records over the API (issue 25): a run's id, its record, and the JSON answer of a run
for clients that cannot read a stream (``?wait=true`` or ``Accept: application/json``).

A run is a turn started by ``POST /api/sessions/{id}/agent/{agent}`` (or the WebSocket
``run`` op); its id comes back in the ``Greenroom-Run-Id`` header and on its first
``stream_started`` event.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from greenroom.actors import RunStream, answer_json, run_json
from greenroom.domain import check_webhook

from ._context import Context, Reply, Request
from ._params import RUNS_LIMIT

RUN_ID_HEADER = "Greenroom-Run-Id"
DEFAULT_LIMIT = 50


def wants_json(query: Mapping[str, Any], headers: Mapping[str, Any]) -> bool:
    """``?wait=true``, or an Accept naming application/json and not text/event-stream (the
    stream is what docker-agent's clients ask for)."""
    if query.get("wait"):
        return True
    accept = str(headers.get("accept", ""))
    types = {part.split(";")[0].strip().lower() for part in accept.split(",")}
    return "application/json" in types and "text/event-stream" not in types


def run_webhook(ctx: Context, url: str) -> str:
    """The run body's ``webhook``, normalised, if the operator's allow-list covers it."""
    return check_webhook(url, ctx.config.webhook_allow) if url else ""


async def run_result(ctx: Context, session_id: str, stream: RunStream) -> Reply:
    """Read the run to its end, then answer with its record and final assistant message.
    A client that leaves meanwhile closes the stream (which cancels the run unless it was
    started with ``on_disconnect=continue``)."""
    try:
        async for _ in stream:
            pass
    finally:
        stream.close()
    record = await ctx.registry.run(session_id, stream.run_id)
    body = {"run": run_json(record), "message": answer_json(stream.answer())}
    return Reply(body, headers={RUN_ID_HEADER: stream.run_id})


async def list_runs(ctx: Context, req: Request) -> Reply:
    session_id = req.params["session_id"]
    records = await ctx.registry.runs(session_id, req.query.get("limit", DEFAULT_LIMIT))
    return Reply({"runs": [run_json(r) for r in records]})


async def get_run(ctx: Context, req: Request) -> Reply:
    record = await ctx.registry.run(req.params["session_id"], req.params["run_id"])
    return Reply(run_json(record))


RUN_OPERATIONS: tuple[tuple[tuple[Any, ...], dict[str, Any]], ...] = (
    # (name, method, path, handler, summary), then the Operation's other fields (_ops.py)
    (
        (
            "list_runs",
            "GET",
            "/api/sessions/{session_id}/runs",
            list_runs,
            "The session's runs, newest first: status, timings, agent, model, tokens, cost, "
            "error, webhook delivery (greenroom extension)",
        ),
        {"query": (RUNS_LIMIT,), "errors": (400, 404)},
    ),
    (
        (
            "get_run",
            "GET",
            "/api/sessions/{session_id}/runs/{run_id}",
            get_run,
            "One run's record (greenroom extension)",
        ),
        {"errors": (404,)},
    ),
)
