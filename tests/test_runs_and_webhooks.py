"""Run records and webhooks over the real server (issue 25): the in-process greenroom with a
scripted agent and a real webhook receiver on 127.0.0.1:0, all in one trio run on the mock
clock (the deliverer's backoff passes in virtual time; the memory store)."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import trio

from greenroom.serve import WebhookPolicy
from greenroom.testing import Greenroom, ScriptedAgent, open_greenroom
from tests.webhook_receiver import Receiver, verify

SECRET = "s3cret-for-tests"
AGENT = ScriptedAgent(
    turns=[[{"text": ["Hel", "lo", "!"]}, {"usage": {"input_tokens": 12, "output_tokens": 3}}]],
    loop=True,
)
FAILING = ScriptedAgent(turns=[[{"error": "rate_limited"}]], loop=True)
POLICY = WebhookPolicy(max_attempts=4, base_delay=1.0, max_delay=2.0, timeout=5.0, poll=30.0)


@asynccontextmanager
async def receiver_and_server(
    receiver: Receiver, agent: ScriptedAgent = AGENT, *, allow: str = ""
) -> AsyncIterator[tuple[Greenroom, httpx.AsyncClient]]:
    async with trio.open_nursery() as nursery:
        url = await nursery.start(receiver.serve)
        prefix = allow or f"{url}/hooks/"
        async with (
            open_greenroom(
                agent, webhook_allow=(prefix,), webhook_secret=SECRET, webhook_policy=POLICY
            ) as gr,
            httpx.AsyncClient(base_url=gr.url, timeout=30) as http,
        ):
            yield gr, http
        receiver.stop()


async def new_session(http: httpx.AsyncClient) -> str:
    response = await http.post("/api/sessions", json={"title": "runs"})
    assert response.status_code == 200, response.text
    return str(response.json()["id"])


def body(text: str = "hi", **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}], **extra}


async def stream_run(
    http: httpx.AsyncClient, sid: str, payload: Any
) -> tuple[httpx.Response, list[dict[str, Any]]]:
    events = []
    async with http.stream("POST", f"/api/sessions/{sid}/agent/default", json=payload) as resp:
        async for line in resp.aiter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    return resp, events


# --- run records ---------------------------------------------------------------------------


async def test_a_run_has_an_id_in_its_header_and_first_stream_started(
    autojump_clock: trio.abc.Clock,
) -> None:
    receiver = Receiver()
    with trio.fail_after(60):
        async with receiver_and_server(receiver) as (_, http):
            sid = await new_session(http)
            response, events = await stream_run(http, sid, body())
            run_id = response.headers["Greenroom-Run-Id"]
            started = [e for e in events if e["type"] == "stream_started"]
            assert started[0]["run_id"] == run_id
            assert len(run_id) == 32

            listed = (await http.get(f"/api/sessions/{sid}/runs")).json()["runs"]
            record = (await http.get(f"/api/sessions/{sid}/runs/{run_id}")).json()
    assert [r["id"] for r in listed] == [run_id]
    assert record == listed[0]
    assert record["status"] == "completed"
    assert record["session_id"] == sid
    assert (record["agent"], record["agent_name"]) == ("default", "root")
    assert record["model"]  # the scripted model that answered
    assert (record["input_tokens"], record["output_tokens"]) == (12, 3)
    assert record["error"] is None and record["webhook"] is None
    times = [record[k] for k in ("created_at", "started_at", "first_token_at", "ended_at")]
    assert all(times) and times == sorted(times)


async def test_runs_are_listed_newest_first_and_unknown_ones_are_404(
    autojump_clock: trio.abc.Clock,
) -> None:
    receiver = Receiver()
    with trio.fail_after(60):
        async with receiver_and_server(receiver) as (_, http):
            sid = await new_session(http)
            ids = []
            for text in ("one", "two", "three"):
                response, _ = await stream_run(http, sid, body(text))
                ids.append(response.headers["Greenroom-Run-Id"])
            newest = (await http.get(f"/api/sessions/{sid}/runs", params={"limit": 2})).json()
            unknown = await http.get(f"/api/sessions/{sid}/runs/nope")
            no_session = await http.get("/api/sessions/missing/runs")
            bad_limit = await http.get(f"/api/sessions/{sid}/runs", params={"limit": 0})
    assert [r["id"] for r in newest["runs"]] == [ids[2], ids[1]]
    assert unknown.status_code == 404 and unknown.json()["code"] == "run_not_found"
    assert no_session.status_code == 404
    assert bad_limit.status_code == 400 and bad_limit.json()["path"] == "query.limit"


async def test_a_failed_run_records_its_error(autojump_clock: trio.abc.Clock) -> None:
    receiver = Receiver()
    with trio.fail_after(60):
        async with receiver_and_server(receiver, FAILING) as (_, http):
            sid = await new_session(http)
            response = await http.post(
                f"/api/sessions/{sid}/agent/default", json=body(), params={"wait": "true"}
            )
    record = response.json()["run"]
    assert record["status"] == "failed"
    assert record["error"]["code"] == "rate_limited"
    assert record["first_token_at"] is None


async def test_a_running_run_shows_its_progress_and_a_cancelled_one_why(
    autojump_clock: trio.abc.Clock,
) -> None:
    slow_agent = ScriptedAgent(turns=[[{"text": ["first "]}, {"delay": 100}, {"text": "late"}]])
    receiver = Receiver()
    with trio.fail_after(60):
        async with receiver_and_server(receiver, slow_agent) as (_, http):
            sid = await new_session(http)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(stream_run, http, sid, body())
                while True:  # virtual time: the scripted model is in its delay
                    runs = (await http.get(f"/api/sessions/{sid}/runs")).json()["runs"]
                    if runs and runs[0]["first_token_at"]:
                        break
                    await trio.sleep(1)  # virtual time (autojump clock)
                running = runs[0]
                cancelled = await http.post(f"/api/sessions/{sid}/cancel")
            record = (await http.get(f"/api/sessions/{sid}/runs/{running['id']}")).json()
    assert running["status"] == "running"
    assert running["ended_at"] is None
    assert cancelled.json() == {"cancelled": True}
    assert (record["status"], record["reason"]) == ("cancelled", "cancelled by a client")
    assert record["ended_at"]


async def test_wait_true_and_accept_json_answer_with_the_record_and_final_message(
    autojump_clock: trio.abc.Clock,
) -> None:
    receiver = Receiver()
    with trio.fail_after(60):
        async with receiver_and_server(receiver) as (_, http):
            sid = await new_session(http)
            path = f"/api/sessions/{sid}/agent/default"
            waited = await http.post(path, json=body(), params={"wait": "true"})
            accepted = await http.post(
                path, json=body("again"), headers={"Accept": "application/json"}
            )
            streamed = await http.post(
                path, json=body("sse"), headers={"Accept": "application/json, text/event-stream"}
            )
    for response in (waited, accepted):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/json")
        answer = response.json()
        assert answer["run"]["status"] == "completed"
        assert answer["run"]["id"] == response.headers["Greenroom-Run-Id"]
        assert answer["message"]["role"] == "assistant"
        assert answer["message"]["content"] == "Hello!"
    assert waited.json()["run"]["id"] != accepted.json()["run"]["id"]
    assert streamed.headers["content-type"].startswith("text/event-stream")


async def test_the_websocket_run_names_its_run_on_stream_started_and_can_wait(
    autojump_clock: trio.abc.Clock,
) -> None:
    from trio_websocket import open_websocket_url

    receiver = Receiver()
    with trio.fail_after(60):
        async with receiver_and_server(receiver) as (gr, http):
            sid = await new_session(http)
            ws_url = gr.url.replace("http://", "ws://") + "/api/ws"
            async with open_websocket_url(ws_url) as ws:
                frame = {"id": 1, "op": "run", "session_id": sid, "agent": "default"}
                await ws.send_message(json.dumps({**frame, **body()}))
                frames: list[dict[str, Any]] = []
                while not frames or not frames[-1].get("end"):
                    frames.append(json.loads(await ws.get_message()))
                await ws.send_message(json.dumps({"id": 2, "op": "list_runs", "session_id": sid}))
                listed = json.loads(await ws.get_message())
                waited = {**frame, "id": 3, "wait": True, **body("again")}
                await ws.send_message(json.dumps(waited))
                answer = json.loads(await ws.get_message())
    assert frames[0]["result"] == {"streaming": True}
    started = [f["event"] for f in frames if f.get("event", {}).get("type") == "stream_started"]
    run_id = started[0]["run_id"]
    assert listed["result"]["runs"][0]["id"] == run_id
    assert answer["result"]["run"]["status"] == "completed"
    assert answer["result"]["message"]["content"] == "Hello!"


# --- webhooks ------------------------------------------------------------------------------


async def test_a_webhook_arrives_once_signed_and_verifiable(autojump_clock: trio.abc.Clock) -> None:
    receiver = Receiver()
    with trio.fail_after(600):
        async with receiver_and_server(receiver) as (_, http):
            sid = await new_session(http)
            hook = f"{receiver.url}/hooks/run-ended"
            response, _ = await stream_run(http, sid, body(webhook=hook))
            run_id = response.headers["Greenroom-Run-Id"]
            (hit,) = await receiver.wait_for(1)
            await trio.sleep(60)  # virtual: nothing else comes
            record = (await http.get(f"/api/sessions/{sid}/runs/{run_id}")).json()
    assert len(receiver.hits) == 1
    assert verify(SECRET, hit.headers, hit.body, time.time(), tolerance=300)
    assert not verify("another secret", hit.headers, hit.body, time.time(), tolerance=300)
    assert not verify(SECRET, hit.headers, hit.body + b" ", time.time(), tolerance=300)
    assert not verify(SECRET, hit.headers, hit.body, time.time() + 3600, tolerance=300)
    assert hit.headers["content-type"] == "application/json"
    assert hit.headers["greenroom-event"] == "run.ended"
    summary = hit.json
    assert summary["type"] == "run.ended"
    assert summary["delivery_id"] == hit.delivery_id
    assert summary["run"]["id"] == run_id
    assert summary["run"]["status"] == "completed"
    assert summary["run"]["output_tokens"] == 3
    assert record["webhook"]["url"] == hook
    assert record["webhook"]["delivery_id"] == hit.delivery_id
    assert (record["webhook"]["status"], record["webhook"]["attempts"]) == ("delivered", 1)


async def test_a_receiver_failing_forever_is_retried_with_backoff_then_failed(
    autojump_clock: trio.abc.Clock,
) -> None:
    receiver = Receiver(status=500)
    with trio.fail_after(600):
        async with receiver_and_server(receiver) as (_, http):
            sid = await new_session(http)
            hook = f"{receiver.url}/hooks/x"
            started = trio.current_time()
            answer = await http.post(
                f"/api/sessions/{sid}/agent/default",
                json=body(webhook=hook),
                params={"wait": "true"},
            )
            ended = trio.current_time()
            run_id = answer.json()["run"]["id"]
            hits = await receiver.wait_for(POLICY.max_attempts)
            await trio.sleep(60)  # virtual: the cap holds
            record = (await http.get(f"/api/sessions/{sid}/runs/{run_id}")).json()
            scraped = (await http.get("/metrics")).text
    assert ended - started < 1.0  # the turn did not wait for its webhook
    assert len(receiver.hits) == POLICY.max_attempts
    gaps = [round(b.at - a.at, 1) for a, b in itertools.pairwise(hits)]
    assert gaps == [1.0, 2.0, 2.0]  # 1 s, doubling, capped at 2 s
    assert len({h.delivery_id for h in hits}) == 1  # one delivery, attempted four times
    webhook = record["webhook"]
    assert (webhook["status"], webhook["attempts"]) == ("failed", POLICY.max_attempts)
    assert webhook["last_error"] == "HTTP 500"
    assert webhook["finished_at"]
    retries = POLICY.max_attempts - 1
    assert f'greenroom_webhook_attempts_total{{outcome="retry"}} {retries}.0' in scraped
    assert 'greenroom_webhook_attempts_total{outcome="failed"} 1.0' in scraped


async def test_an_unanswering_receiver_never_slows_a_turn(autojump_clock: trio.abc.Clock) -> None:
    receiver = Receiver(hold=trio.Event())
    with trio.fail_after(600):
        async with receiver_and_server(receiver) as (_, http):
            sid = await new_session(http)
            hook = f"{receiver.url}/hooks/slow"
            path = f"/api/sessions/{sid}/agent/default"
            first = await http.post(path, json=body(webhook=hook), params={"wait": "true"})
            await receiver.wait_for(1)  # the deliverer is stuck on it now
            started = trio.current_time()
            second = await http.post(path, json=body("again"), params={"wait": "true"})
            took = trio.current_time() - started
            run_id = first.json()["run"]["id"]
            await receiver.wait_for(2)  # the first attempt timed out; the retry came
            pending = (await http.get(f"/api/sessions/{sid}/runs/{run_id}")).json()["webhook"]
            assert receiver.hold is not None
            receiver.hold.set()
    assert first.json()["run"]["status"] == "completed"
    assert second.json()["run"]["status"] == "completed"
    assert took < 1.0
    assert pending["status"] == "pending"
    assert pending["last_error"].startswith("no answer within")


async def test_a_webhook_outside_the_allow_list_is_a_400_naming_it_and_runs_nothing(
    autojump_clock: trio.abc.Clock,
) -> None:
    receiver = Receiver()
    with trio.fail_after(60):
        async with receiver_and_server(receiver) as (_, http):
            sid = await new_session(http)
            host = receiver.url.removeprefix("http://")
            refused = []
            for hook in (
                f"http://{host}@evil.example/hooks/x",  # userinfo: the host is evil.example
                f"{receiver.url}.evil.example/hooks/x",
                f"{receiver.url}/hooksevil",
                f"{receiver.url}/hooks/../admin",
                "http://169.254.169.254/latest/meta-data/",
            ):
                refused.append(
                    await http.post(f"/api/sessions/{sid}/agent/default", json=body(webhook=hook))
                )
            runs = (await http.get(f"/api/sessions/{sid}/runs")).json()["runs"]
    for response in refused:
        assert response.status_code == 400, response.text
        assert response.json()["path"] == "$.webhook"
    assert runs == []
    assert receiver.hits == []
