"""End to end through HTTP: ``greenroom serve`` with an agent file whose model is a fake
OpenAI- or Anthropic-compatible server, driven over httpx like a client would.

Each test starts, in its own nursery, a fake model server and ``serve`` (SQLite store in
``tmp_path``, port 0), runs turns over SSE and reads the session back. Everything runs on the
real clock (live sockets), so every wait is bounded by ``trio.fail_after``.

The title task and the turn call the model at the same time, and the fake servers answer
requests first come, first served: a test that lets a title be generated scripts the same
reply twice, so either request may take either reply. Tests that do not look at titles create
their session with a title (a given title is never overwritten, so no title call is made).
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio

from greenroom.serve import ServeConfig, serve
from tests.agents import fake_anthropic as fa, fake_openai as fo
from tests.agents.fake_sse import FakeSSEServer
from tests.fakes import without_timestamp
from tests.slowness import slow

pytestmark = pytest.mark.slow

KEY_VAR = "GREENROOM_E2E_TEST_KEY"  # a variable no real setup uses
KEY = "sk-e2e-test"
DEADLINE = slow(30)  # seconds (real clock) per test; a turn takes < 1 s


# --- the server under test ------------------------------------------------------------------


@attrs.define
class Running:
    client: httpx.AsyncClient
    url: str


@asynccontextmanager
async def serving(agent_file: Path, db: Path, **options: Any) -> AsyncIterator[Running]:
    """``serve`` on 127.0.0.1:0 over ``agent_file`` and ``db``; stopped on exit."""
    async with trio.open_nursery() as nursery:
        cfg = ServeConfig(
            agent_paths=(str(agent_file),), port=0, db=str(db), graceful_timeout=1, **options
        )
        url: str = await nursery.start(serve, cfg)
        async with httpx.AsyncClient(base_url=url, timeout=slow(10)) as client:
            yield Running(client, url)
        nursery.cancel_scope.cancel()


def write_agent(tmp_path: Path, name: str, model: dict[str, str], *, think: bool = False) -> Path:
    """An agent file ``<name>.yaml`` with one agent ``root`` on model ``main``."""
    lines = [
        'version: "2"',
        "agents:",
        "  root:",
        "    model: main",
        "    description: end-to-end test agent",
        "    instruction: You are a test agent.",
    ]
    if think:
        lines += ["    toolsets:", "      - type: think"]
    lines += ["models:", "  main:"]
    lines += [f"    {key}: {json.dumps(value)}" for key, value in model.items()]
    path = tmp_path / f"{name}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def openai_model(fake: FakeSSEServer, token_key: str = KEY_VAR) -> dict[str, str]:
    return {
        "provider": "openai",
        "model": fo.MODEL,
        "base_url": f"{fake.url}/v1",
        "token_key": token_key,
    }


# --- SSE ---------------------------------------------------------------------------------------


@attrs.define
class Frame:
    id: int | None
    data: dict[str, Any]

    @property
    def type(self) -> str:
        return str(self.data.get("type", ""))


def parse_sse(body: str) -> list[Frame]:
    """The data frames of a complete SSE body (comments dropped)."""
    frames = []
    for block in body.split("\n\n"):
        event_id: int | None = None
        data: list[str] = []
        for line in block.split("\n"):
            if line.startswith("id:"):
                event_id = int(line[3:].strip())
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
        if data:
            frames.append(Frame(event_id, without_timestamp(json.loads("\n".join(data)))))
    return frames


async def run_turn(
    client: httpx.AsyncClient, session_id: str, source: str, text: str
) -> list[Frame]:
    """POST a run and read its SSE stream to the end (the server ends it with the turn)."""
    body = {"messages": [{"role": "user", "content": text}]}
    async with client.stream("POST", f"/api/sessions/{session_id}/agent/{source}", json=body) as r:
        assert r.status_code == 200, await r.aread()
        assert r.headers["content-type"].startswith("text/event-stream")
        raw = b"".join([part async for part in r.aiter_bytes()])
    frames = parse_sse(raw.decode())
    assert frames, "empty run stream"
    ids = [f.id for f in frames if f.id is not None]
    assert len(ids) == len(frames), f"a frame without an id: line: {types(frames)}"
    assert ids == sorted(set(ids)), f"ids not strictly increasing: {ids}"
    # A session_title may come first (a titled session announces it) or anywhere (the title
    # task finished while the turn ran); the turn itself is stream_started ... stream_stopped.
    turn = [f for f in frames if f.type != "session_title"]
    assert turn[0].type == "stream_started", types(frames)
    assert frames[-1].type == "stream_stopped", types(frames)
    assert all(f.data.get("session_id", session_id) == session_id for f in frames)
    return frames


def types(frames: list[Frame]) -> list[str]:
    return [f.type for f in frames]


def of_type(frames: list[Frame], kind: str) -> list[Frame]:
    return [f for f in frames if f.type == kind]


def before(frames: list[Frame], first: str, then: str) -> bool:
    """Every ``first`` frame comes before every ``then`` frame (and both exist)."""
    kinds = types(frames)
    if first not in kinds or then not in kinds:
        return False
    last_first = len(kinds) - 1 - kinds[::-1].index(first)
    return last_first < kinds.index(then)


# --- REST helpers ------------------------------------------------------------------------------


async def create_session(client: httpx.AsyncClient, title: str = "") -> str:
    r = await client.post("/api/sessions", json={"title": title} if title else {})
    assert r.status_code == 200, r.text
    session_id = r.json()["id"]
    assert isinstance(session_id, str) and session_id
    return session_id


async def get_session(client: httpx.AsyncClient, session_id: str) -> dict[str, Any]:
    r = await client.get(f"/api/sessions/{session_id}")
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def wait_for_title(client: httpx.AsyncClient, session_id: str) -> dict[str, Any]:
    """The session once its title task has set a title (polled, bounded)."""
    with trio.fail_after(slow(5)):
        while True:
            session = await get_session(client, session_id)
            if session["title"]:
                return session
            await trio.sleep(0.05)  # real clock: the title task runs on in the server


def chat(session: dict[str, Any]) -> list[tuple[str, str]]:
    """(role, content) of the session's visible messages."""
    return [(m["message"]["role"], m["message"]["content"]) for m in session["messages"]]


def title_requests(fake: FakeSSEServer) -> list[Any]:
    return [r for r in fake.requests if "titles for conversations" in json.dumps(r.json)]


def turn_requests(fake: FakeSSEServer) -> list[Any]:
    return [r for r in fake.requests if "titles for conversations" not in json.dumps(r.json)]


# --- tests -------------------------------------------------------------------------------------


async def test_openai_turn_over_sse_with_title_usage_and_stored_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_VAR, KEY)
    db = tmp_path / "sessions.sqlite3"
    tokens = ("Lisbon", " in", " three", " days")
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            fake: fo.FakeOpenAI = await nursery.start(fo.FakeOpenAI().serve)
            # The turn's call and the title's: the same answer, whichever comes first.
            fake.script(fo.text_reply(*tokens), fo.text_reply(*tokens))
            agent = write_agent(tmp_path, "trips", openai_model(fake))
            async with serving(agent, db) as server:
                client = server.client
                session_id = await create_session(client)
                frames = await run_turn(client, session_id, "trips", "Plan a weekend in Lisbon")

                choices = of_type(frames, "agent_choice")
                assert [f.data["content"] for f in choices] == list(tokens)
                assert all(f.data["agent_name"] == "root" for f in choices)
                (usage,) = of_type(frames, "token_usage")
                # The call's own usage; the session's totals may count the title call too.
                assert usage.data["usage"]["last_message"]["input_tokens"] == 12
                assert usage.data["usage"]["last_message"]["output_tokens"] == 5
                assert usage.data["usage"]["input_tokens"] in (12, 24)
                assert before(frames, "agent_choice", "token_usage")
                assert frames[-1].data["reason"] == "normal"
                assert not of_type(frames, "error")

                session = await wait_for_title(client, session_id)
                assert session["title"] == "Lisbon in three days"
                # The turn's call and the title's (12 + 5 tokens each) count for the session.
                assert (session["input_tokens"], session["output_tokens"]) == (24, 10)
                expected = [
                    ("user", "Plan a weekend in Lisbon"),
                    ("assistant", "Lisbon in three days"),
                ]
                assert chat(session) == expected

                # What the fake received: one streamed turn call and one title call.
                assert len(fake.requests) == 2
                (turn,) = turn_requests(fake)
                assert turn.path == "/v1/chat/completions"
                assert turn.headers["authorization"] == f"Bearer {KEY}"
                assert turn.json["model"] == fo.MODEL
                assert turn.json["stream"] is True
                assert turn.json["messages"][-1] == {
                    "role": "user",
                    "content": "Plan a weekend in Lisbon",
                }
                assert "max_tokens" not in turn.json
                (title,) = title_requests(fake)
                assert "Plan a weekend in Lisbon" in json.dumps(title.json)
                assert title.json["max_tokens"] == 20  # the title's cap is on the wire

            # The SQLite file kept it all: a new server on the same database serves it back.
            async with serving(agent, db) as server:
                again = await get_session(server.client, session_id)
                assert again["title"] == "Lisbon in three days"
                assert (again["input_tokens"], again["output_tokens"]) == (24, 10)
                assert chat(again) == expected
            nursery.cancel_scope.cancel()


async def test_anthropic_turn_over_sse_with_title_and_usage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_VAR, KEY)
    tokens = ("Packing", " for", " rain")
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            fake: fa.FakeAnthropic = await nursery.start(fa.FakeAnthropic().serve)
            fake.script(fa.text_reply(*tokens), fa.text_reply(*tokens))
            model = {
                "provider": "anthropic",
                "model": fa.MODEL,
                "base_url": fake.url,
                "token_key": KEY_VAR,
            }
            agent = write_agent(tmp_path, "packing", model)
            async with serving(agent, tmp_path / "db.sqlite3") as server:
                client = server.client
                session_id = await create_session(client)
                frames = await run_turn(client, session_id, "packing", "What to pack for Bergen?")

                assert [f.data["content"] for f in of_type(frames, "agent_choice")] == list(tokens)
                (usage,) = of_type(frames, "token_usage")
                # fa.text_reply: message_start says 25 input tokens, message_delta 7 output.
                assert usage.data["usage"]["last_message"]["input_tokens"] == 25
                assert usage.data["usage"]["last_message"]["output_tokens"] == 7
                assert before(frames, "agent_choice", "token_usage")
                assert frames[-1].data["reason"] == "normal"

                session = await wait_for_title(client, session_id)
                assert session["title"] == "Packing for rain"
                # The turn's call and the title's count for the session.
                assert (session["input_tokens"], session["output_tokens"]) == (50, 14)
                assert chat(session) == [
                    ("user", "What to pack for Bergen?"),
                    ("assistant", "Packing for rain"),
                ]

                assert len(fake.requests) == 2
                (turn,) = turn_requests(fake)
                assert turn.path == "/v1/messages"
                # Recent SDKs send the key as a bearer token, older ones as x-api-key.
                sent_key = turn.headers.get("x-api-key") or turn.headers.get("authorization")
                assert sent_key in (KEY, f"Bearer {KEY}")
                assert turn.json["model"] == fa.MODEL
                assert turn.json["stream"] is True
                assert turn.json["messages"][-1]["role"] == "user"
                assert "What to pack for Bergen?" in json.dumps(turn.json["messages"][-1])
                (title,) = title_requests(fake)
                assert title.json["max_tokens"] == 20
                assert turn.json["max_tokens"] != 20
            nursery.cancel_scope.cancel()


async def test_tool_call_turn_streams_the_call_and_its_response(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_VAR, KEY)
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            fake: fo.FakeOpenAI = await nursery.start(fo.FakeOpenAI().serve)
            call = fo.ToolCallScript("call_1", "think", ['{"thou', 'ght": "pl', 'an first"}'])
            fake.script(fo.tool_call_reply(call), fo.text_reply("Plan", " done"))
            agent = write_agent(tmp_path, "thinker", openai_model(fake), think=True)
            async with serving(agent, tmp_path / "db.sqlite3") as server:
                client = server.client
                session_id = await create_session(client, title="Tools")  # no title call
                frames = await run_turn(client, session_id, "thinker", "Think, then answer")
                assert frames[0].data == {
                    "type": "session_title",
                    "session_id": session_id,
                    "title": "Tools",
                }

                (tool_call,) = of_type(frames, "tool_call")
                assert tool_call.data["tool_call"]["id"] == "call_1"
                function = tool_call.data["tool_call"]["function"]
                assert function["name"] == "think"
                assert json.loads(function["arguments"]) == {"thought": "plan first"}
                assert tool_call.data["tool_definition"]["name"] == "think"
                (response,) = of_type(frames, "tool_call_response")
                assert response.data["tool_call_id"] == "call_1"
                assert response.data["response"] == "Thoughts:\nplan first"
                assert before(frames, "tool_call", "tool_call_response")
                assert before(frames, "tool_call_response", "agent_choice")
                contents = [f.data["content"] for f in of_type(frames, "agent_choice")]
                assert contents == ["Plan", " done"]
                # One token_usage per model call, the session's running totals.
                totals = [
                    (f.data["usage"]["input_tokens"], f.data["usage"]["output_tokens"])
                    for f in of_type(frames, "token_usage")
                ]
                assert totals == [(30, 10), (42, 15)]
                assert frames[-1].data["reason"] == "normal"

                session = await get_session(client, session_id)
                assert session["title"] == "Tools"
                assert (session["input_tokens"], session["output_tokens"]) == (42, 15)
                roles = [m["message"]["role"] for m in session["messages"]]
                assert roles == ["user", "assistant", "tool", "assistant"]
                assert session["messages"][2]["message"]["tool_call_id"] == "call_1"
                assert session["messages"][3]["message"]["content"] == "Plan done"

                # The second model call carried the tool's answer back.
                assert len(fake.requests) == 2
                assert fake.requests[0].json["tools"][0]["function"]["name"] == "think"
                sent = fake.requests[1].json["messages"]
                assert sent[-1]["role"] == "tool"
                assert sent[-1]["tool_call_id"] == "call_1"
                assert sent[-1]["content"] == "Thoughts:\nplan first"
            nursery.cancel_scope.cancel()


async def test_sessions_share_one_kept_alive_connection_to_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The server's model clients are pooled per endpoint: turns of different sessions, one
    # after the other, reuse one connection (the fake sees one client port).
    monkeypatch.setenv(KEY_VAR, KEY)
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            fake: fo.FakeOpenAI = await nursery.start(fo.FakeOpenAI().serve)
            fake.default = fo.text_reply("Hi", " there")
            agent = write_agent(tmp_path, "pooled", openai_model(fake))
            async with serving(agent, tmp_path / "db.sqlite3") as server:
                for n in range(3):
                    session_id = await create_session(server.client, title=f"S{n}")
                    for _ in range(2):
                        frames = await run_turn(server.client, session_id, "pooled", "hi")
                        assert frames[-1].data["reason"] == "normal"
            assert len(fake.requests) == 6
            assert len({r.client for r in fake.requests}) == 1
            nursery.cancel_scope.cancel()


async def test_no_title_request_when_the_server_turns_titles_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_VAR, KEY)
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            fake: fo.FakeOpenAI = await nursery.start(fo.FakeOpenAI().serve)
            fake.default = fo.text_reply("No", " title")
            agent = write_agent(tmp_path, "untitled", openai_model(fake))
            async with serving(agent, tmp_path / "db.sqlite3", titles=False) as server:
                session_id = await create_session(server.client)
                for _ in range(2):
                    await run_turn(server.client, session_id, "untitled", "hello")
                assert len(turn_requests(fake)) == 2
                assert title_requests(fake) == []
                assert (await get_session(server.client, session_id))["title"] == ""
            nursery.cancel_scope.cancel()


async def test_missing_key_is_an_error_event_and_the_session_stays_usable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    unset = "GREENROOM_E2E_UNSET_KEY"
    monkeypatch.delenv(unset, raising=False)
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            fake: fo.FakeOpenAI = await nursery.start(fo.FakeOpenAI().serve)
            agent = write_agent(tmp_path, "keyless", openai_model(fake, token_key=unset))
            async with serving(agent, tmp_path / "db.sqlite3") as server:
                client = server.client
                session_id = await create_session(client, title="Keys")  # no title call
                frames = await run_turn(client, session_id, "keyless", "hello?")

                (error,) = of_type(frames, "error")
                assert error.data["code"] == "missing_api_key"
                assert unset in error.data["error"]
                assert not of_type(frames, "agent_choice")
                assert frames[-1].data["reason"] == "error"
                assert fake.requests == []  # refused before any request

                monkeypatch.setenv(unset, KEY)
                fake.script(fo.text_reply("Now", " it", " works"))
                frames = await run_turn(client, session_id, "keyless", "and now?")
                assert not of_type(frames, "error")
                contents = [f.data["content"] for f in of_type(frames, "agent_choice")]
                assert contents == ["Now", " it", " works"]
                assert frames[-1].data["reason"] == "normal"
                (request,) = fake.requests
                assert request.headers["authorization"] == f"Bearer {KEY}"

                session = await get_session(client, session_id)
                assert (session["input_tokens"], session["output_tokens"]) == (12, 5)
                assert chat(session) == [
                    ("user", "hello?"),
                    ("user", "and now?"),
                    ("assistant", "Now it works"),
                ]
            nursery.cancel_scope.cancel()


async def test_validate_reports_a_broken_file_with_its_line(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(
        'version: "2"\n'
        "agents:\n"
        "  root:\n"
        "    model: nowhere\n"  # line 4: no model of that name, and not provider/model
        "    instruction: hi\n"
    )
    with trio.fail_after(DEADLINE):
        result = await trio.run_process(
            [sys.executable, "-m", "greenroom.cli", "validate", str(broken)],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    out = result.stdout.decode() + result.stderr.decode()
    assert result.returncode == 1, out
    assert f"{broken}:4: agents.root.model: unknown model 'nowhere'" in out, out
