"""A long session never dies of its context (issue 20): end to end through ``greenroom serve``.

A fake OpenAI-compatible model with a 3,000-character window answers every request whose
messages fit and refuses the others with OpenAI's real ``context_length_exceeded`` error. Thirty
long turns in one session: every one must answer, the history must have been compacted
(reactively: the model's window is unknown to greenroom, so only the refusal tells), and
every message must still be in storage.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

from greenroom.domain import Summary
from greenroom.persistence import open_sqlite_store
from tests.agents import fake_openai as fo
from tests.agents.fake_sse import Recorded, Reply
from tests.test_end_to_end import (
    KEY,
    KEY_VAR,
    create_session,
    get_session,
    of_type,
    openai_model,
    run_turn,
    serving,
    write_agent,
)

pytestmark = pytest.mark.slow

WINDOW = 3000  # characters of message content the fake model accepts
TURNS = 30
DEADLINE = 120  # seconds (real clock) for the 30 turns and their compactions


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


class SmallWindow:
    """Answers like a model whose context window is :data:`WINDOW` characters."""

    def __init__(self) -> None:
        self.refused = 0
        self.summaries = 0
        self.answers = 0

    def __call__(self, record: Recorded) -> Reply:
        messages = record.json.get("messages", [])
        size = sum(len(_text(m.get("content"))) for m in messages)
        if size > WINDOW:
            self.refused += 1
            return fo.context_overflow_reply(WINDOW // 4, size // 4)
        system = _text(messages[0].get("content")) if messages else ""
        if system.startswith("You summarise"):
            self.summaries += 1
            return fo.text_reply(f"Summary {self.summaries}: the user asked long questions.")
        if record.json.get("max_tokens") == 20:  # the title call
            return fo.text_reply("Long session")
        self.answers += 1
        return fo.text_reply(f"Answer {self.answers}: " + "b" * 500, usage=(size // 4, 130))


@pytest.mark.parametrize("window_known", [False, True], ids=["reactive", "proactive"])
async def test_thirty_long_turns_against_a_3000_character_window_all_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, window_known: bool
) -> None:
    """Reactive: greenroom does not know the window, the refusals tell it. Proactive: the file
    says ``limit: {context: 750}`` (3,000 characters at 4 a token), so greenroom compacts before
    the model would refuse, and it never does."""
    monkeypatch.setenv(KEY_VAR, KEY)
    model = SmallWindow()
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            fake: fo.FakeOpenAI = await nursery.start(fo.FakeOpenAI().serve)
            fake.responder = model
            settings: dict[str, Any] = openai_model(fake)
            if window_known:
                settings["limit"] = {"context": WINDOW // 4}
            agent = write_agent(tmp_path, "long", settings)
            async with serving(agent, tmp_path / "db.sqlite3") as server:
                client = server.client
                session_id = await create_session(client)
                compactions = 0
                for turn in range(TURNS):
                    question = f"Question {turn}: " + "a" * 700
                    frames = await run_turn(client, session_id, "long", question)
                    assert not of_type(frames, "error"), [f.data for f in of_type(frames, "error")]
                    answers = "".join(f.data["content"] for f in of_type(frames, "agent_choice"))
                    assert answers.startswith("Answer "), (turn, answers[:80])
                    assert frames[-1].data["reason"] == "normal"
                    statuses = [f.data["status"] for f in of_type(frames, "session_compaction")]
                    assert statuses in ([], ["started", "completed"])
                    compactions += bool(statuses)

                session = await get_session(client, session_id)
            nursery.cancel_scope.cancel()

    if window_known:
        assert model.refused == 0  # compacted in time, every time
    else:
        assert model.refused > 0  # the window was hit ...
    assert compactions >= 5  # ... over and over, and each time compacted
    assert model.answers == TURNS
    # Storage keeps every question and answer: the summaries only stand in for them in prompts.
    chats = [item["message"] for item in session["messages"]]
    assert [m["role"] for m in chats] == ["user", "assistant"] * TURNS
    assert all(len(m["content"]) > 500 for m in chats)
    async with open_sqlite_store(tmp_path / "db.sqlite3") as store:
        stored = await store.get_session(session_id)
    summaries = [item for item in stored.items if isinstance(item, Summary)]
    assert len(summaries) == compactions
    assert all(s.summary.startswith("Summary ") and s.first_kept_entry > 0 for s in summaries)
    # Every turn request the model answered fitted its window (the refused ones did not).
    assert model.answers + model.summaries + model.refused + 1 == len(fake.requests)


async def test_token_usage_of_gpt_4o_mini_carries_its_cost_and_context_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_VAR, KEY)
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            fake: fo.FakeOpenAI = await nursery.start(fo.FakeOpenAI().serve)
            fake.responder = lambda _: fo.text_reply("Fine.", usage=(1000, 100))
            model = {**openai_model(fake), "model": "gpt-4o-mini"}
            agent = write_agent(tmp_path, "priced", model)
            async with serving(agent, tmp_path / "db.sqlite3", titles=False) as server:
                session_id = await create_session(server.client)
                frames = await run_turn(server.client, session_id, "priced", "How are you?")
                session = await get_session(server.client, session_id)
            nursery.cancel_scope.cancel()
    (usage,) = [f.data["usage"] for f in of_type(frames, "token_usage")]
    assert usage["context_limit"] == 128000
    assert usage["cost"] > 0
    assert usage["last_message"]["Cost"] == usage["cost"]
    assert usage["last_message"]["Model"] == "fake-gpt"  # as the endpoint reported it
    (answer,) = [m["message"] for m in session["messages"] if m["message"]["role"] == "assistant"]
    assert answer["cost"] == usage["cost"]


async def test_compact_on_demand_through_the_server_stores_a_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_VAR, KEY)
    model = SmallWindow()
    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            fake: fo.FakeOpenAI = await nursery.start(fo.FakeOpenAI().serve)
            fake.responder = model
            agent = write_agent(tmp_path, "short", openai_model(fake))
            async with serving(agent, tmp_path / "db.sqlite3", titles=False) as server:
                client = server.client
                session_id = await create_session(client)
                await run_turn(client, session_id, "short", "First question")
                response = await client.post(
                    f"/api/sessions/{session_id}/compact", json={"instructions": "be terse"}
                )
                assert response.status_code == 202, response.text
                assert response.json() == {"status": "compacting"}
                events: list[dict[str, Any]] = []
                async with client.stream(
                    "GET", f"/api/sessions/{session_id}/events", params={"since": 0}
                ) as stream:
                    async for line in stream.aiter_lines():
                        if line.startswith("data:"):
                            events.append(json.loads(line[5:]))
                            if events[-1].get("status") == "completed":
                                break
                # The compaction ends like a turn: the session is free again right after.
                for _ in range(500):  # real clock: the server persists, then ends it
                    status = await client.get(f"/api/sessions/{session_id}/status")
                    if not status.json()["streaming"]:
                        break
                    await trio.sleep(0.02)  # real clock: a server process
                await run_turn(client, session_id, "short", "Second question")
            nursery.cancel_scope.cancel()
    kinds = [(e["type"], e.get("status", "")) for e in events]
    assert kinds[-3:] == [
        ("session_compaction", "started"),
        ("session_summary", ""),
        ("session_compaction", "completed"),
    ]
    (summary_request,) = [r.json for r in fake.requests if "be terse" in r.body.decode()]
    assert summary_request["messages"][0]["content"].startswith("You summarise")
    async with open_sqlite_store(tmp_path / "db.sqlite3") as store:
        stored = await store.get_session(session_id)
    (summary,) = [item for item in stored.items if isinstance(item, Summary)]
    assert summary.summary.startswith("Summary 1")
