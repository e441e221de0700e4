"""Helpers of the A2A server tests: a ``greenroom serve a2a`` server in this process (the real
code path, on 127.0.0.1:0) and a small JSON-RPC client over httpx."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import trio

from greenroom.serve import ServeConfig
from greenroom.serve._a2a import serve_a2a
from tests.slowness import slow

LIMIT = slow(30)  # real clock: every wait of these tests is bounded by it


def echo_agent(tmp_path: Path, name: str = "helper", token_delay: float = 0) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        "agents:\n  root:\n    model: talk\n    description: Answers with your words\n"
        "models:\n  talk:\n    provider: echo\n    model: echo\n"
        f"    provider_opts: {{token_delay: {token_delay}}}\n"
    )
    return path


def scripted_agent(tmp_path: Path, turns: list[Any], toolsets: str = "") -> Path:
    (tmp_path / "script.json").write_text(json.dumps({"turns": turns}))
    path = tmp_path / "scripted.yaml"
    path.write_text(
        "agents:\n  root:\n    model: scripted/script.json\n    description: Says its lines\n"
        + toolsets
    )
    return path


def config(tmp_path: Path, agent: Path, **options: Any) -> ServeConfig:
    return ServeConfig(
        agent_paths=(str(agent),),
        port=0,
        db=str(tmp_path / "a2a.sqlite3"),
        data_dir=str(tmp_path / "data"),
        graceful_timeout=1,
        titles=False,
        **options,
    )


@asynccontextmanager
async def a2a_server(
    cfg: ServeConfig, agent_name: str = "", working_dir: str = ""
) -> AsyncIterator[str]:
    """The server's base URL while it serves."""
    serving = partial(serve_a2a, cfg, agent_name, working_dir=working_dir, embedded=True)
    async with trio.open_nursery() as nursery:
        with trio.fail_after(LIMIT):
            url: str = await nursery.start(serving)
        yield url
        nursery.cancel_scope.cancel()


def user_message(text: str, **fields: Any) -> dict[str, Any]:
    return {
        "kind": "message",
        "role": "user",
        "messageId": f"m-{text[:8]}",
        "parts": [{"kind": "text", "text": text}],
        **fields,
    }


def call(method: str, params: Any, request_id: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


async def rpc(client: httpx.AsyncClient, url: str, body: Any) -> Any:
    with trio.fail_after(LIMIT):
        response = await client.post(url, json=body)
    assert response.status_code == 200, response.text
    return response.json()


async def sse_results(response: httpx.Response) -> AsyncIterator[Any]:
    """The JSON-RPC frames of a server-sent event stream, as they come."""
    async for line in response.aiter_lines():
        if line.startswith("data: "):
            yield json.loads(line[6:])


def artifact_text(events: list[Any]) -> str:
    return "".join(
        part["text"]
        for event in events
        if event["kind"] == "artifact-update"
        for part in event["artifact"]["parts"]
    )
