"""Metrics (issue 24): what a few real turns leave in ``GET /metrics``, servers that keep
apart counts, and labels that a hostile client or model cannot blow up."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import httpx
import trio
from prometheus_client.parser import text_string_to_metric_families

from greenroom.observe import OTHER, LiveCounts, Metrics
from greenroom.testing import ScriptedAgent, Tool, ToolCallContext, open_greenroom

SHELL = {"tool_call": {"name": "shell", "arguments": {"cmd": "ls"}}}
RM = {"tool_call": {"name": "rm", "arguments": {"path": "/"}}}
MADE_UP = {"tool_call": {"name": "no-such-tool-7f3a", "arguments": {}}}


@attrs.frozen
class PricedAgent(ScriptedAgent):
    """A scripted agent whose model has a price (USD per 1M tokens), so turns cost money."""

    def write(self, directory: Path, source: str) -> Path:
        path = super().write(directory, source)
        config = json.loads(path.read_text())
        config["models"]["main"]["cost"] = {"input": 1000.0, "output": 2000.0}
        path.write_text(json.dumps(config))
        return path


async def _ls(ctx: ToolCallContext) -> str:
    await trio.lowlevel.checkpoint()
    return "a.txt"


AGENT = PricedAgent(
    turns=[
        [{"text": "Let me look."}, SHELL],
        [RM],
        [MADE_UP],
        "Done.",
    ],
    tools=[Tool("shell", _ls, confirm=True), Tool("rm", confirm=True)],
    loop=True,
)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape: (name, sorted labels) -> value."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(found: dict[Any, float], name: str, **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


def total(found: dict[Any, float], name: str, **labels: str) -> float:
    """The sum over every sample of ``name`` whose labels include ``labels``."""
    return sum(
        v
        for (n, got), v in found.items()
        if n == name and all(dict(got).get(k) == want for k, want in labels.items())
    )


async def scrape(url: str, token: str = "") -> dict[Any, float]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient() as http:
        response = await http.get(f"{url}/metrics", headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return samples(response.text)


async def test_a_few_turns_show_in_metrics(autojump_clock: trio.abc.Clock) -> None:
    with trio.fail_after(60):
        async with open_greenroom(AGENT) as gr:
            session = await gr.client.create_session(title="t", permissions={"deny": ["rm"]})
            sid = session["id"]
            async with gr.client.events(sid, 0) as events:
                await gr.client.run(sid, "list the files")
                await events.next_of("tool_call_confirmation")
                await gr.client.approve(sid)
                await events.until("stream_stopped")
            await gr.client.session(sid)
            found = await scrape(gr.url)
            text_of_scrape = "\n".join(n + str(labels) for n, labels in found)

    assert value(found, "greenroom_turns_total", agent="root", outcome="done") == 1
    assert total(found, "greenroom_turn_duration_seconds_count", agent="root") == 1
    model = "default.script.json"
    assert value(found, "greenroom_model_calls_total", provider="scripted", model=model,
                 outcome="ok") == 4  # fmt: skip
    tokens_in = value(found, "greenroom_model_tokens_total", provider="scripted", model=model,
                      direction="input")  # fmt: skip
    tokens_out = value(found, "greenroom_model_tokens_total", provider="scripted", model=model,
                       direction="output")  # fmt: skip
    assert tokens_in > 0 and tokens_out > 0
    cost = value(found, "greenroom_model_cost_usd_total", provider="scripted", model=model)
    assert cost == (tokens_in * 1000.0 + tokens_out * 2000.0) / 1e6
    assert total(found, "greenroom_model_time_to_first_token_seconds_count") >= 1
    # Tools: run after approval, denied by the session's rule, and a name the model made up.
    assert value(found, "greenroom_tool_calls_total", tool="shell", outcome="ok") == 1
    assert value(found, "greenroom_tool_calls_total", tool="rm", outcome="denied") == 1
    assert value(found, "greenroom_tool_calls_total", tool="unknown", outcome="invalid") == 1
    assert "no-such-tool" not in text_of_scrape
    assert value(found, "greenroom_approvals_total", decision="approve") == 1
    assert total(found, "greenroom_tool_duration_seconds_count", tool="shell") == 1
    # HTTP requests by route template, never by raw path (no session id in any label).
    assert value(found, "greenroom_http_requests_total", operation="/api/sessions",
                 method="POST", status="200") == 1  # fmt: skip
    assert value(found, "greenroom_http_requests_total",
                 operation="/api/sessions/{session_id}/agent/{agent}", method="POST",
                 status="200") == 1  # fmt: skip
    assert sid not in text_of_scrape
    assert total(found, "greenroom_events_written_total") > 5
    assert value(found, "greenroom_live_actors") == 1
    assert value(found, "greenroom_running_turns") == 0
    assert value(found, "greenroom_node_info", node="") == 1


async def test_each_server_counts_its_own(autojump_clock: trio.abc.Clock) -> None:
    with trio.fail_after(60):
        async with (
            open_greenroom(ScriptedAgent(turns=["One."], loop=True)) as first,
            open_greenroom(ScriptedAgent(turns=["Two."], loop=True)) as second,
        ):
            for _ in range(2):
                sid = (await first.client.create_session(title="t"))["id"]
                async with first.client.events(sid, 0) as events:
                    await first.client.run(sid, "hi")
                    await events.until("stream_stopped")
            found_first = await scrape(first.url)
            found_second = await scrape(second.url)
    assert total(found_first, "greenroom_turns_total") == 2
    assert total(found_second, "greenroom_turns_total") == 0
    assert total(found_second, "greenroom_http_requests_total", operation="/api/sessions") == 0


def test_capped_labels_fold_new_values_into_other() -> None:
    metrics = Metrics(cap=5)
    for n in range(1000):  # a hostile model inventing tool names, a client inventing codes
        metrics.tool_ended(f"tool-{n}", "ok", 0.01)
        metrics.errors.labels(f"code-{n}").inc()
    metrics.tool_ended("tool-3", "ok")  # a value seen before the cap keeps its own series
    body, _ = metrics.render()
    found = samples(body.decode())
    tools = {dict(labels)["tool"] for name, labels in found if name == "greenroom_tool_calls_total"}
    assert tools == {"tool-0", "tool-1", "tool-2", "tool-3", "tool-4", OTHER}
    assert value(found, "greenroom_tool_calls_total", tool=OTHER, outcome="ok") == 995
    assert value(found, "greenroom_tool_calls_total", tool="tool-3", outcome="ok") == 2
    codes = {dict(labels)["code"] for name, labels in found if name == "greenroom_errors_total"}
    assert len(codes) == 6
    assert len(body) < 20_000  # bounded, whatever the traffic


async def test_raw_paths_never_become_labels(autojump_clock: trio.abc.Clock) -> None:
    with trio.fail_after(60):
        async with open_greenroom() as gr:
            async with httpx.AsyncClient(base_url=gr.url) as http:
                for n in range(300):
                    await http.get(f"/no/such/route/{n}")
                    await http.get(f"/api/sessions/not-a-session-{n}")
            found = await scrape(gr.url)
    operations = {
        dict(labels)["operation"]
        for name, labels in found
        if name == "greenroom_http_requests_total"
    }
    assert operations == {"unmatched", "/api/sessions/{session_id}"}
    assert value(found, "greenroom_http_requests_total", operation="unmatched", method="GET",
                 status="404") == 300  # fmt: skip
    assert value(found, "greenroom_errors_total", code="session_not_found") == 300


def test_a_cluster_node_says_which_node_it_is_and_whether_it_holds_its_lease() -> None:
    from types import SimpleNamespace

    from greenroom.actors import SessionStatistics, StreamState
    from greenroom.transport._metrics_route import live_counts

    stats = {
        "a": SessionStatistics(live=True, state=StreamState.RUNNING, subscribers=2),
        "b": SessionStatistics(live=True, building=True, queued_follow_ups=3),
    }
    registry = SimpleNamespace(
        live_ids=lambda: list(stats),
        statistics=stats.__getitem__,
        persistence=SimpleNamespace(membership=SimpleNamespace(node_id="node-1")),
        fenced=False,
        logs=SimpleNamespace(total_subscribers=lambda: 2),
    )
    ctx: Any = SimpleNamespace(
        registry=registry, mirrors=SimpleNamespace(total_subscribers=lambda: 1)
    )
    metrics = Metrics()
    metrics.watch(lambda: live_counts(ctx))
    found = samples(metrics.render()[0].decode())
    assert value(found, "greenroom_node_info", node="node-1") == 1
    assert value(found, "greenroom_cluster_lease_held") == 1
    assert value(found, "greenroom_cluster_owned_sessions") == 2
    assert value(found, "greenroom_running_turns") == 1
    assert value(found, "greenroom_building_runtimes") == 1
    assert value(found, "greenroom_subscribers") == 3  # its logs' 2 and its mirrors' 1
    assert value(found, "greenroom_queued_follow_ups") == 3
    registry.fenced = True  # read again at the next scrape, never kept in step by hand
    found = samples(metrics.render()[0].decode())
    assert value(found, "greenroom_cluster_lease_held") == 0


def test_mcp_servers_are_counted_by_state_while_they_live() -> None:
    class Server:
        def __init__(self, state: str) -> None:
            self.state = state

    metrics = Metrics()
    metrics.watch(lambda: LiveCounts())
    servers = [Server("ready"), Server("ready"), Server("failed"), Server("idle")]
    for server in servers:
        metrics.mcp_servers.add(server)
    found = samples(metrics.render()[0].decode())
    assert value(found, "greenroom_mcp_servers", state="up") == 2
    assert value(found, "greenroom_mcp_servers", state="down") == 1
    del servers[:2]  # gone with their runtime
    found = samples(metrics.render()[0].decode())
    assert value(found, "greenroom_mcp_servers", state="up") == 0
    assert "greenroom_cluster_lease_held" not in {name for name, _ in found}  # a single node
