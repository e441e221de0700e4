"""A webhook survives ``kill -9`` (issue 25): a real ``greenroom serve`` on a real file is
killed while its deliverer waits for the receiver's answer; the server started again on the
same file sends the same delivery (same delivery id, a fresh valid signature), and the run
record says it was delivered. Real clock (separate processes); every wait is bounded."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio

from tests.agents import fake_openai as fo
from tests.agents.fake_sse import Recorded, Reply
from tests.crash_support import ServerFiles, client, fake_model, servers, start_server, user
from tests.slowness import slow
from tests.webhook_receiver import Receiver, verify

pytestmark = pytest.mark.slow

SECRET = "crash-test-secret"


def answer(request: Recorded) -> Reply:
    return fo.text_reply("Hello ", "again.")


async def test_a_delivery_in_flight_at_kill_9_arrives_after_the_restart(tmp_path: Path) -> None:
    receiver = Receiver(hold=trio.Event())  # the first attempt gets no answer
    async with trio.open_nursery() as nursery, fake_model(answer) as model:
        await nursery.start(receiver.serve)
        files = ServerFiles(tmp_path, model.url)
        flags = ["--webhook-allow", f"{receiver.url}/hooks/", "--webhook-secret", SECRET]
        async with servers() as started:
            first = await start_server(files, flags)
            started.append(first)
            async with client(first) as http:
                sid = (await http.post("/api/sessions", json={"title": "hook"})).json()["id"]
                run = await http.post(
                    f"/api/sessions/{sid}/agent/crash",
                    json={**user("hi"), "webhook": f"{receiver.url}/hooks/ended"},
                    params={"wait": "true"},
                )
                assert run.status_code == 200, run.text
                run_id = run.json()["run"]["id"]
            with trio.fail_after(slow(30)):
                await receiver.wait_for(1)  # in flight: the receiver holds its answer
            await first.kill()
            assert receiver.hold is not None
            receiver.hold.set()  # from now on it answers 200 at once

            second = await start_server(files, flags)
            started.append(second)
            with trio.fail_after(slow(30)):
                hits = await receiver.wait_for(2)
            async with client(second) as http:
                with trio.fail_after(slow(30)):
                    while True:
                        record = (await http.get(f"/api/sessions/{sid}/runs/{run_id}")).json()
                        if record["webhook"]["status"] == "delivered":
                            break
                        await trio.sleep(0.05)  # real clock: the deliverer records it
        receiver.stop()
    assert hits[0].delivery_id == hits[1].delivery_id == record["webhook"]["delivery_id"]
    assert hits[0].body == hits[1].body
    assert all(verify(SECRET, h.headers, h.body, time.time(), tolerance=300) for h in hits)
    assert hits[1].json["run"]["id"] == run_id
    assert record["webhook"]["attempts"] == 1  # the attempt cut off by the kill left no record
