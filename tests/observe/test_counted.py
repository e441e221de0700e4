"""What the metrics count besides a turn's own model calls (issue 24's known gaps): a title's
and a compaction's model calls, a turn cut off from outside (the registry closing under it),
and the subscribers of a session this cluster node does not own (served from its mirror)."""

from __future__ import annotations

import json
import threading

import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from greenroom.actors import RegistryConfig
from greenroom.domain import Usage, Warning
from greenroom.observe import Metrics, metrics, metrics_scope
from greenroom.testing import ScriptedAgent, Tool, ToolCallContext, open_greenroom
from tests.agents.loop_support import FakeIO, FakeProvider, make_runtime, text
from tests.agents.test_compaction import long_history, small_window_yaml
from tests.observe.test_metrics import PricedAgent, scrape, total, value
from tests.slowness import slow

MODEL = "default.script.json"
TITLES = "default.titles.json"


def rendered(found: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(found.render()[0].decode()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


async def test_a_titles_model_call_is_counted_with_its_tokens(
    autojump_clock: trio.abc.Clock,
) -> None:
    agent = PricedAgent(turns=["Hello."], loop=True, title="A short title")
    with trio.fail_after(60):
        async with open_greenroom(agent) as gr:
            sid = (await gr.client.create_session())["id"]  # no title: one is generated
            async with gr.client.events(sid, 0) as events:
                await gr.client.run(sid, "hi")
                seen = await events.until("stream_stopped")
                if "session_title" not in [e.type for e in seen]:
                    await events.next_of("session_title")
            found = await scrape(gr.url)

    assert value(found, "greenroom_model_calls_total", provider="scripted", model=TITLES,
                 outcome="ok") == 1  # fmt: skip
    assert value(found, "greenroom_model_calls_total", provider="scripted", model=MODEL,
                 outcome="ok") == 1  # fmt: skip
    assert total(found, "greenroom_model_tokens_total", model=TITLES, direction="input") > 0
    assert total(found, "greenroom_model_tokens_total", model=TITLES, direction="output") > 0
    assert total(found, "greenroom_model_call_duration_seconds_count", model=TITLES) == 1


async def test_a_compactions_model_call_is_counted_with_its_tokens_and_cost() -> None:
    provider = FakeProvider(text("short", usage=Usage(300, 20)))
    io = long_history(FakeIO(), 2)
    with metrics_scope() as counted:
        await make_runtime(provider, small_window_yaml(100_000)).compact(io, "")
    found = rendered(counted)
    labels = {"provider": "openai", "model": "my-small-model"}
    assert value(found, "greenroom_model_calls_total", outcome="ok", **labels) == 1
    assert value(found, "greenroom_model_tokens_total", direction="input", **labels) == 300
    assert value(found, "greenroom_model_tokens_total", direction="output", **labels) == 20
    cost = value(found, "greenroom_model_cost_usd_total", **labels)
    assert cost == pytest.approx((300 * 1.0 + 20 * 2.0) / 1e6)
    assert value(found, "greenroom_compactions_total", outcome="done") == 1


class Stop(Exception):
    """The test body failing while a turn runs: the server is torn down under it."""


async def test_a_turn_cut_off_by_the_registry_closing_is_counted_cancelled() -> None:
    started = trio.Event()
    release = threading.Event()

    async def stuck(ctx: ToolCallContext) -> str:
        started.set()
        # A tool in a thread that does not give up on cancellation: the turn's own cancel
        # cannot end it within the shutdown grace, so the registry's nursery cancels it.
        await trio.to_thread.run_sync(release.wait)
        return "late"

    agent = ScriptedAgent(
        turns=[[{"tool_call": {"name": "stuck", "arguments": {}}}], "Done."],
        tools=[Tool("stuck", stuck)],
    )
    counted: Metrics | None = None
    stopped = False
    config = RegistryConfig(shutdown_grace=0.05)
    with trio.fail_after(slow(30)):  # real clock: a live server, a thread
        try:
            async with open_greenroom(agent, registry_config=config) as gr:
                counted = metrics()  # the server's (open_greenroom made it current here)
                sid = (await gr.client.create_session(title="t"))["id"]
                await gr.client.run(sid, "go")
                await started.wait()
                # The thread lets go well after the grace (real clock).
                threading.Timer(slow(0.5), release.set).start()
                # Leaving the block by an exception skips the graceful stop (cancel_turns);
                # the registry cancels the turn, waits its grace, then cancels the actors.
                raise Stop
        except* Stop:
            stopped = True
        finally:
            release.set()
    assert stopped and counted is not None
    found = rendered(counted)
    assert value(found, "greenroom_turns_total", agent="root", outcome="cancelled") == 1
    assert total(found, "greenroom_turns_total") == 1
    assert total(found, "greenroom_turn_duration_seconds_count") == 1


@pytest.mark.slow
async def test_subscribers_of_a_session_another_node_owns_are_counted_where_they_follow() -> None:
    from tests.cluster.test_forwarding import AUTH, DEADLINE, owned_by, two_nodes

    with trio.fail_after(DEADLINE):
        async with two_nodes() as (_, a, b, client):
            sid = await owned_by(b, client)
            b.registry.append_event(sid, Warning("first"))
            url = f"{a.url}/api/sessions/{sid}/events?since=0"
            async with client.stream("GET", url) as streamed:
                assert streamed.status_code == 200
                async for line in streamed.aiter_lines():
                    if line.startswith("data: ") and json.loads(line[6:]).get("type") == "warning":
                        break
                on_a = await scrape(a.url, AUTH["Authorization"].removeprefix("Bearer "))
            assert a.registry.live_ids() == []  # served from a's mirror of b's session
    assert value(on_a, "greenroom_subscribers") == 1
    assert value(on_a, "greenroom_live_actors") == 0
