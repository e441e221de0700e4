# ruff: noqa: E501  (expected upstream texts read best on one line)
"""todo, memory, script, fetch, api and openapi against real files, processes and a loopback
HTTP server; concurrency and cancellation of a batch of tool calls in the runtime.

Files, processes and sockets are real, so these tests run on the real clock, every wait
bounded by ``trio.fail_after``.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from greenroom.agents import ToolContext, ToolsetConfig
from greenroom.agents.tools import EgressPolicy, build_tools, parse_networks
from tests.slowness import slow

pytestmark = pytest.mark.slow
LOOPBACK = EgressPolicy(parse_networks(["127.0.0.0/8"]))


def tools_of(kind: str, root: Path, **options: Any) -> Any:
    ctx = ToolContext(
        working_dir=root, data_dir=root / "data", agent_file=str(root / "a.yaml"),
        env={"PATH": os.environ.get("PATH", "/bin"), "TOKEN": "t0k"},
        egress=LOOPBACK,  # the loopback web server (the egress policy refuses it by default)
    )  # fmt: skip
    return build_tools([ToolsetConfig(kind, options)], ctx)


async def call(tools: Any, tool_name: str, /, **args: Any) -> Any:
    with trio.fail_after(slow(20)):
        return await tools.tools[tool_name].call(args)


@asynccontextmanager
async def web(pages: dict[str, tuple[int, str, str]], seen: list[str]) -> AsyncIterator[str]:
    async def handle(stream: trio.SocketStream) -> None:
        async with stream:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    return
                data += chunk
            head = data.split(b"\r\n\r\n", 1)[0].decode()
            method, path = head.split(" ")[:2]
            seen.append(f"{method} {path}")
            status, ctype, body = pages.get(path.split("?")[0], (404, "text/plain", "nope"))
            if path.startswith("/echo"):
                body = json.dumps({"path": path, "head": head})
            raw = body.encode()
            answer = f"HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\nContent-Length: {len(raw)}\r\nConnection: close\r\n\r\n"
            await stream.send_all(answer.encode() + raw)

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, handle, 0, host="127.0.0.1"))
        yield f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}"
        nursery.cancel_scope.cancel()


async def test_todo_lifecycle_and_reminder(tmp_path: Path) -> None:
    todo = tools_of("todo", tmp_path)
    created = json.loads((await call(todo, "create_todos", descriptions=["a", "b"])).output)
    assert [t["id"] for t in created["created"]] == ["todo_1", "todo_2"]
    assert created["reminder"] == (
        "The following todos are still incomplete and MUST be completed:"
        " (pending) [todo_1] a (pending) [todo_2] b"
    )
    updated = json.loads(
        (await call(todo, "update_todos", updates=[{"id": "todo_1", "status": "completed"},
                                                   {"id": "todo_9", "status": "x"}])).output
    )  # fmt: skip
    assert (updated["updated"], updated["not_found"]) == (
        [{"id": "todo_1", "status": "completed"}],
        ["todo_9"],
    )
    missing = await call(todo, "update_todos", updates=[{"id": "todo_9", "status": "x"}])
    assert missing.is_error
    assert json.loads(missing.output) == {"not_found": ["todo_9"], "all_todos": None}
    assert json.loads((await call(tools_of("todo", tmp_path), "list_todos")).output) == {
        "todos": []
    }


async def test_memory_persists_per_agent_in_the_data_dir(tmp_path: Path) -> None:
    memory = tools_of("memory", tmp_path)
    added = (await call(memory, "add_memory", memory="Likes green tea", category="Prefs")).output
    mid = added.removeprefix("Memory added successfully with ID: ")
    await call(memory, "add_memory", memory="Works on greenroom")
    again = tools_of("memory", tmp_path)  # a new runtime: the same file
    found = json.loads((await call(again, "search_memories", query="GREEN tea")).output)
    assert [(m["id"], m["memory"], m["category"]) for m in found] == [
        (mid, "Likes green tea", "Prefs")
    ]
    assert len(json.loads((await call(again, "get_memories")).output)) == 2
    assert (await call(again, "search_memories", query="coffee")).output == "null"
    gone = await call(again, "update_memory", id="1", memory="x")
    assert (gone.output, gone.is_error) == (
        "Error calling tool: failed to update memory: memory not found: 1",
        True,
    )
    assert (
        await call(again, "delete_memory", id=mid)
    ).output == f"Memory with ID {mid} deleted successfully"
    files = list((tmp_path / "data/memory").glob("a-*/memory.db"))
    assert len(files) == 1
    assert (
        tools_of("memory", tmp_path, path="../x.db")
        .warnings[0]
        .startswith("toolset memory failed: invalid memory database path")
    )


async def test_script_tools_pass_arguments_as_environment(tmp_path: Path) -> None:
    scripts = {
        "greet": {"cmd": 'echo "hello $name"', "description": "Greet", "args": {"name": {"description": "who"}}, "required": ["name"]},
        "fail": {"cmd": "echo oops; exit 2"},
    }  # fmt: skip
    tools = tools_of("script", tmp_path, shell=scripts)
    assert tools.tools["greet"].spec.parameters["required"] == ["name"]
    assert (
        await call(tools, "greet", name="$(touch pwned); x")
    ).output == "hello $(touch pwned); x\n"
    assert not (tmp_path / "pwned").exists()
    failed = await call(tools, "fail")
    assert (failed.output, failed.is_error) == (
        "Error executing command 'echo oops; exit 2': exit status 2\nOutput: oops\n",
        True,
    )
    bad = tools_of("script", tmp_path, shell={"x": {"cmd": "echo $HOME"}})
    assert bad.warnings == ["toolset script failed: tool 'x' uses undefined args: ['HOME']"]


async def test_fetch_formats_robots_and_schemes(tmp_path: Path) -> None:
    seen: list[str] = []
    pages = {
        "/robots.txt": (200, "text/plain", "User-agent: *\nDisallow: /private\n"),
        "/page": (200, "text/html", "<h1>Title</h1><p>Some <a href='/x'>link</a></p><script>x()</script>"),
        "/private/p": (200, "text/html", "secret"),
        "/missing": (404, "text/plain", "nope"),
    }  # fmt: skip
    fetch = tools_of("fetch", tmp_path)
    async with web(pages, seen) as url:
        markdown = await call(fetch, "fetch", urls=[f"{url}/page"], format="markdown")
        assert markdown.output.startswith(f"Successfully fetched {url}/page (Status: 200, Length: ")
        assert "# Title" in markdown.output
        assert "[link](/x)" in markdown.output
        text = await call(fetch, "fetch", urls=[f"{url}/page"], format="text")
        assert text.output.split("\n\n", 1)[1] == "Title\nSome\nlink"
        blocked = await call(fetch, "fetch", urls=[f"{url}/private/p"], format="html")
        assert (blocked.output, blocked.is_error) == (
            f"Error fetching {url}/private/p: URL blocked by robots.txt",
            True,
        )
        several = json.loads(
            (await call(fetch, "fetch", urls=[f"{url}/missing", "ftp://x/y"], format="html")).output
        )
        assert several[0]["statusCode"] == 404  # a status is not an error
        assert several[1]["error"] == "only HTTP and HTTPS URLs are supported"
    assert "GET /private/p" not in seen


async def test_api_and_openapi_tools(tmp_path: Path) -> None:
    seen: list[str] = []
    spec: dict[str, Any] = {
        "openapi": "3.0.0",
        "info": {"title": "Pets"},
        "paths": {
            "/pets/{id}": {"get": {"operationId": "getPet", "summary": "Get a pet",
                "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "integer"}},
                               {"name": "verbose", "in": "query", "schema": {"type": "boolean"}}]}},
            "/pets": {"post": {"summary": "Add a pet", "requestBody": {"content": {"application/json": {
                "schema": {"$ref": "#/components/schemas/Pet"}}}}}},
        },
        "components": {"schemas": {"Pet": {"type": "object", "required": ["name"],
                                           "properties": {"name": {"type": "string"}}}}},
    }  # fmt: skip
    async with web({"/pets/7": (200, "application/json", '{"name": "Rex"}'),
                    "/pets": (500, "application/json", '{"error": "full"}')}, seen) as url:  # fmt: skip
        spec["servers"] = [{"url": url}]
        (tmp_path / "pets.json").write_text(json.dumps(spec))
        openapi = tools_of("openapi", tmp_path, url="pets.json")
        assert openapi.tools == {}
        assert await openapi.start() == []  # listed before the next model call
        get_pet, add_pet = openapi.tools["getPet"], openapi.tools["post_pets"]
        assert get_pet.annotations.read_only and not add_pet.annotations.read_only
        assert get_pet.spec.parameters["required"] == ["id"]
        assert add_pet.spec.parameters["required"] == ["body_name"]
        assert (await call(openapi, "getPet", id=7, verbose=True)).output == '{"name": "Rex"}'
        assert "GET /pets/7?verbose=True" in seen
        failed = await call(openapi, "post_pets", body_name="Tom")
        assert (failed.output, failed.is_error) == ('HTTP 500: {"error": "full"}', True)
        broken = tools_of("openapi", tmp_path, url="nope.json")
        assert (await broken.start())[0].startswith("openapi start failed: failed to read")

        api = tools_of("api", tmp_path, api_config={
            "name": "echo", "endpoint": url + "/echo?q=${q}", "method": "GET",
            "headers": {"Authorization": "Bearer ${env.TOKEN}"}, "args": {"q": {"type": "string"}},
        })  # fmt: skip
        echoed = json.loads((await call(api, "echo", q="a b&c")).output)
        assert echoed["path"] == "/echo?q=a%20b%26c"
        assert "Authorization: Bearer t0k" in echoed["head"]
        assert api.tools["echo"].annotations.read_only
