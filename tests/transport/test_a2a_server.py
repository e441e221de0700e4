"""``greenroom serve a2a`` (decision 0035) against echo and scripted agents, on 127.0.0.1:0:
the agent card, ``message/send``, ``message/stream``, a context continuing its session,
``tasks/get`` and ``tasks/cancel``, a busy context, tool approvals rejected, the bearer token,
and malformed JSON-RPC answered with A2A's error codes. The wire shapes are checked against the
official ``a2a-sdk``'s types (A2A 0.3).

REAL clock: every wait is bounded by ``trio.fail_after``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from a2a import types as a2a

from greenroom import __version__
from greenroom.domain import visible_messages
from greenroom.serve import open_store

from .a2a_support import (
    LIMIT,
    a2a_server,
    artifact_text,
    call,
    config,
    echo_agent,
    rpc,
    scripted_agent,
    sse_results,
    user_message,
)

pytestmark = pytest.mark.slow


async def test_the_agent_card_says_what_docker_agent_says(tmp_path: Path) -> None:
    async with (
        a2a_server(config(tmp_path, echo_agent(tmp_path))) as url,
        httpx.AsyncClient(timeout=LIMIT) as client,
    ):
        found = await client.get(f"{url}/.well-known/agent-card.json")
        older = await client.get(f"{url}/.well-known/agent.json")
    assert found.status_code == 200 and found.headers["content-type"] == "application/json"
    card = found.json()
    assert older.json() == card
    a2a.AgentCard.model_validate(card)  # the SDK's own type accepts it
    assert card["name"] == "helper"  # the file's name, as docker-agent's card
    assert card["description"] == "Answers with your words"
    assert card["url"] == f"{url}/invoke"
    assert card["version"] == __version__
    assert card["preferredTransport"] == "JSONRPC"
    assert card["capabilities"]["streaming"] is True
    assert card["skills"] == [
        {
            "id": "helper_root",
            "name": "root",
            "description": "Answers with your words",
            "tags": ["llm", "greenroom"],
        }
    ]
    assert "securitySchemes" not in card


async def test_message_send_answers_with_the_finished_task(tmp_path: Path) -> None:
    async with (
        a2a_server(config(tmp_path, echo_agent(tmp_path))) as url,
        httpx.AsyncClient(timeout=LIMIT) as client,
    ):
        sent = await rpc(client, f"{url}/invoke", call("message/send", {"message": user_message(
            "hello over there")}, "req-1"))  # fmt: skip
        a2a.SendMessageResponse.model_validate(sent)
        assert sent["id"] == "req-1"
        task = sent["result"]
        assert task["kind"] == "task" and task["status"]["state"] == "completed"
        [artifact] = task["artifacts"]
        assert artifact["parts"] == [{"kind": "text", "text": "Echo: hello over there"}]
        assert task["history"][0]["parts"][0]["text"] == "hello over there"
        got = await rpc(client, url, call("tasks/get", {"id": task["id"], "historyLength": 0}))
        a2a.GetTaskResponse.model_validate(got)
        assert got["result"]["artifacts"] == task["artifacts"]
        assert got["result"]["history"] == []
        body = call("tasks/resubscribe", {"id": task["id"]})
        with trio.fail_after(LIMIT):
            async with client.stream("POST", url, json=body) as response:
                [again] = [frame async for frame in sse_results(response)]
        assert again["result"]["status"]["state"] == "completed"  # finished: the task, then the end


async def test_text_and_data_parts_are_the_user_message(tmp_path: Path) -> None:
    message = user_message("look at")
    message["parts"].append({"kind": "data", "data": {"x": 1}})
    async with (
        a2a_server(config(tmp_path, echo_agent(tmp_path))) as url,
        httpx.AsyncClient(timeout=LIMIT) as client,
    ):
        sent = await rpc(client, url, call("message/send", {"message": message}))
    assert sent["result"]["artifacts"][0]["parts"][0]["text"] == 'Echo: look at {"x": 1}'


async def test_a_failing_turn_fails_its_task_with_the_error(tmp_path: Path) -> None:
    turns = [[{"text": "Let me"}, {"error": {"code": "model_error", "message": "the model broke"}}]]
    async with (
        a2a_server(config(tmp_path, scripted_agent(tmp_path, turns))) as url,
        httpx.AsyncClient(timeout=LIMIT) as client,
    ):
        body = call("message/stream", {"message": user_message("try")})
        with trio.fail_after(LIMIT):
            async with client.stream("POST", url, json=body) as response:
                frames = [frame async for frame in sse_results(response)]
    last = frames[-1]["result"]
    a2a.SendStreamingMessageResponse.model_validate(frames[-1])
    assert (last["status"]["state"], last["final"]) == ("failed", True)
    assert "the model broke" in last["status"]["message"]["parts"][0]["text"]
    assert last["status"]["message"]["role"] == "agent"


async def test_message_stream_sends_the_task_its_updates_and_the_end(tmp_path: Path) -> None:
    async with (
        a2a_server(config(tmp_path, echo_agent(tmp_path))) as url,
        httpx.AsyncClient(timeout=LIMIT) as client,
    ):
        body = call("message/stream", {"message": user_message("one two three")}, 7)
        frames = []
        with trio.fail_after(LIMIT):
            async with client.stream("POST", f"{url}/invoke", json=body) as response:
                assert response.status_code == 200
                assert response.headers["content-type"].startswith("text/event-stream")
                frames = [frame async for frame in sse_results(response)]
    for frame in frames:
        a2a.SendStreamingMessageResponse.model_validate(frame)
        assert frame["id"] == 7
    events = [f["result"] for f in frames]
    first, working, *updates, last = events
    assert (first["kind"], first["status"]["state"]) == ("task", "submitted")
    assert (working["kind"], working["status"]["state"], working["final"]) == (
        "status-update",
        "working",
        False,
    )
    assert {e["kind"] for e in updates} == {"artifact-update"}
    assert artifact_text(updates) == "Echo: one two three"
    assert [e["append"] for e in updates][:2] == [False, True]
    assert updates[-1]["lastChunk"] is True
    assert (last["kind"], last["status"]["state"], last["final"]) == (
        "status-update",
        "completed",
        True,
    )
    assert {e.get("taskId", e.get("id")) for e in events} == {first["id"]}
    assert {e["contextId"] for e in events} == {first["contextId"]}


async def test_a_context_continues_its_session(tmp_path: Path) -> None:
    agent = scripted_agent(tmp_path, ["first answer", "second answer", "third answer"])
    cfg = config(tmp_path, agent)
    async with (
        a2a_server(cfg) as url,
        httpx.AsyncClient(timeout=LIMIT) as client,
    ):

        async def send(text: str, **fields: Any) -> Any:
            params = {"message": user_message(text, **fields)}
            return (await rpc(client, url, call("message/send", params)))["result"]

        one = await send("hi")
        context = one["contextId"]
        two = await send("and then?", contextId=context)
        other = await send("hi", contextId="my-own-context")
    assert one["artifacts"][0]["parts"][0]["text"] == "first answer"
    # the same session (its runtime goes on with the script), a new one for a new context
    assert two["contextId"] == context
    assert two["artifacts"][0]["parts"][0]["text"] == "second answer"
    assert other["artifacts"][0]["parts"][0]["text"] == "first answer"
    async with open_store(cfg.db) as persistence:  # kept: the context is a stored session
        session = await persistence.store.get_session(context)
        mine = await persistence.store.get_session("my-own-context")
    said = [(m.role, m.message.content) for m in visible_messages(session.items)]
    assert said == [
        ("user", "hi"),
        ("assistant", "first answer"),
        ("user", "and then?"),
        ("assistant", "second answer"),
    ]
    assert mine.agent_file == "scripted"


async def test_cancel_ends_a_running_task_and_a_busy_context_refuses(tmp_path: Path) -> None:
    agent = echo_agent(tmp_path, token_delay=60)  # never finishes on its own within the test
    async with (
        a2a_server(config(tmp_path, agent)) as url,
        httpx.AsyncClient(timeout=LIMIT) as client,
    ):
        body = call("message/stream", {"message": user_message("slow words")})
        with trio.fail_after(LIMIT):
            async with client.stream("POST", url, json=body) as response:
                frames = sse_results(response)
                task = (await anext(frames))["result"]
                assert (await anext(frames))["result"]["status"]["state"] == "working"
                busy = await rpc(client, url, call("message/send", {"message": user_message(
                    "me too", contextId=task["contextId"])}))  # fmt: skip
                canceled = await rpc(client, url, call("tasks/cancel", {"id": task["id"]}))
                rest = [frame["result"] async for frame in frames]
        again = await rpc(client, url, call("tasks/cancel", {"id": task["id"]}))
        unknown = await rpc(client, url, call("tasks/get", {"id": "no-such-task"}))
        later = user_message("still there", contextId=task["contextId"])
        params = {"message": later, "configuration": {"blocking": False}}
        after = await rpc(client, url, call("message/send", params))
    assert busy["error"]["code"] == -32000
    assert busy["error"]["data"] == {"taskId": task["id"], "contextId": task["contextId"]}
    a2a.CancelTaskResponse.model_validate(canceled)
    assert canceled["result"]["status"]["state"] == "canceled"
    assert (rest[-1]["status"]["state"], rest[-1]["final"]) == ("canceled", True)
    assert again["error"]["code"] == -32002  # TaskNotCancelableError
    assert unknown["error"]["code"] == -32001  # TaskNotFoundError
    # the context is free again; a non-blocking send answers before the turn ends
    assert after["result"]["status"]["state"] in ("submitted", "working")
    assert after["result"]["contextId"] == task["contextId"]


async def test_a_tool_call_that_asks_is_rejected(tmp_path: Path) -> None:
    turns = [
        [{"tool_call": {"name": "shell", "arguments": {"cmd": "touch made-by-a2a"}}}],
        "I could not run it.",
    ]
    agent = scripted_agent(tmp_path, turns, "    toolsets:\n      - type: shell\n")
    cfg = config(tmp_path, agent)
    async with (
        a2a_server(cfg, working_dir=str(tmp_path)) as url,  # where the command would run
        httpx.AsyncClient(timeout=LIMIT) as client,
    ):
        sent = await rpc(client, url, call("message/send", {"message": user_message("do it")}))
    task = sent["result"]
    assert task["status"]["state"] == "completed"
    assert task["artifacts"][0]["parts"][0]["text"] == "I could not run it."
    assert not (tmp_path / "made-by-a2a").exists()
    async with open_store(cfg.db) as persistence:
        session = await persistence.store.get_session(task["contextId"])
    [approval] = session.approvals
    assert (approval.tool, approval.decision, approval.decided_by) == ("shell", "reject", "a2a")


async def test_a_token_guards_the_calls_not_the_card(tmp_path: Path) -> None:
    cfg = config(tmp_path, echo_agent(tmp_path), auth_token="s3cret")
    async with (
        a2a_server(cfg) as url,
        httpx.AsyncClient(timeout=LIMIT) as client,
    ):
        card = (await client.get(f"{url}/.well-known/agent-card.json")).json()
        body = call("message/send", {"message": user_message("hi")})
        refused = await client.post(card["url"], json=body)
        wrong = await client.post(card["url"], json=body, headers={"Authorization": "Bearer x"})
        ok = await client.post(card["url"], json=body, headers={"Authorization": "Bearer s3cret"})
    assert card["securitySchemes"] == {"bearer": {"type": "http", "scheme": "bearer"}}
    assert card["security"] == [{"bearer": []}]
    assert refused.status_code == 401 and refused.json()["error"]["code"] == -32600
    assert wrong.status_code == 401
    assert ok.status_code == 200 and ok.json()["result"]["status"]["state"] == "completed"


JSON = {"Content-Type": "application/json"}


@pytest.mark.parametrize(
    ("body", "code", "request_id"),
    [
        (b"{not json", -32700, None),
        (b"[]", -32600, None),
        (b'{"jsonrpc": "1.0", "id": 3, "method": "message/send"}', -32600, 3),
        (b'{"jsonrpc": "2.0", "id": 4}', -32600, 4),
        (b'{"jsonrpc": "2.0", "id": {"x": 1}, "method": "tasks/get"}', -32600, None),
        (b'{"jsonrpc": "2.0", "id": 5, "method": "tasks/get", "params": [1]}', -32600, 5),
        (b'{"jsonrpc": "2.0", "id": 6, "method": "agent/dance"}', -32601, 6),
        (b'{"jsonrpc": "2.0", "id": 7, "method": "message/send", "params": {}}', -32602, 7),
        (b'{"jsonrpc": "2.0", "id": 8, "method": "tasks/get", "params": {"id": 1}}', -32602, 8),
        (
            b'{"jsonrpc": "2.0", "id": 9, "method": "tasks/cancel", "params": {"id": "x"}}',
            -32001,
            9,
        ),
        (
            b'{"jsonrpc": "2.0", "id": 10, "method": "tasks/pushNotificationConfig/set",'
            b' "params": {}}',
            -32003,
            10,
        ),
    ],
)
async def test_malformed_calls_get_json_rpc_errors(
    tmp_path: Path, body: bytes, code: int, request_id: Any
) -> None:
    async with (
        a2a_server(config(tmp_path, echo_agent(tmp_path))) as url,
        httpx.AsyncClient(timeout=LIMIT) as client,
    ):
        headers = {"Content-Type": "application/json"}
        with trio.fail_after(LIMIT):
            response = await client.post(f"{url}/invoke", content=body, headers=headers)
    assert response.status_code == 200
    answer = response.json()
    a2a.JSONRPCErrorResponse.model_validate(answer)
    assert (answer["error"]["code"], answer["id"]) == (code, request_id)


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ({"role": "agent", "messageId": "m", "parts": [{"kind": "text", "text": "x"}]}, -32602),
        ({"role": "user", "parts": [{"kind": "text", "text": "x"}]}, -32602),
        ({"role": "user", "messageId": "m", "parts": []}, -32602),
        ({"role": "user", "messageId": "m", "parts": [{"kind": "text", "text": "  "}]}, -32602),
        (
            {"role": "user", "messageId": "m", "parts": [{"kind": "text", "text": "x"}],
             "contextId": "../../etc"},
            -32602,
        ),
        (
            {"role": "user", "messageId": "m", "parts": [{"kind": "file", "file": {
                "uri": "file:///etc/passwd"}}]},
            -32005,  # ContentTypeNotSupportedError
        ),
        (
            {"role": "user", "messageId": "m", "parts": [{"kind": "text", "text": "x"}],
             "taskId": "no-such-task"},
            -32001,
        ),
    ],
)  # fmt: skip
async def test_bad_messages_are_refused_before_any_turn(
    tmp_path: Path, message: dict[str, Any], code: int
) -> None:
    cfg = config(tmp_path, echo_agent(tmp_path))
    async with (
        a2a_server(cfg) as url,
        httpx.AsyncClient(timeout=LIMIT) as client,
    ):
        answer = await rpc(client, url, call("message/send", {"message": message}))
        wrong_type = await client.post(url, content=b"{}", headers={"Content-Type": "text/plain"})
        huge = await client.post(url, content=b" " * (1024 * 1024 + 1), headers=JSON)
    assert answer["error"]["code"] == code, answer
    assert wrong_type.status_code == 415 and wrong_type.json()["error"]["code"] == -32600
    assert huge.status_code == 413 and huge.json()["error"]["code"] == -32600
    async with open_store(cfg.db) as persistence:
        assert await persistence.store.list_sessions() == []
