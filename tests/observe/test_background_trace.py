"""A background agent task runs as a service of the runtime, started before any turn; its
spans still belong to the turn whose tool call started it (the context travels on the task)."""

from __future__ import annotations

from typing import Any

import trio
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from greenroom.observe import span
from tests.agents.loop_support import text
from tests.agents.test_background_agents import Recalls, approved, run_task, team
from tests.agents.test_delegation import Providers
from tests.observe.support import child, one, trace_id


async def test_a_background_task_is_traced_under_the_call_that_started_it(
    spans: InMemorySpanExporter, autojump_clock: Any
) -> None:
    providers = Providers(root=[run_task(), text("Started it.")], worker=[text("3 files.")])
    runtime, recalls = team(providers)
    assert isinstance(recalls, Recalls)
    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.serve)  # the services: outside any trace
        with span("turn"):
            await runtime.run_stream(approved("count in the background"))
        await recalls.done.wait()
        nursery.cancel_scope.cancel()
    done = spans.get_finished_spans()
    turn = one(done, "turn")
    started = child(done, turn, "execute_tool run_background_agent")
    task = child(done, started, "background_agent worker")
    work = child(done, task, "chat worker")
    assert trace_id(work) == trace_id(turn)
    assert work.attributes is not None and work.attributes["gen_ai.agent.name"] == "worker"
