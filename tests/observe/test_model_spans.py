"""Model calls that are not the turn's own are ``chat`` spans too: a proactive compaction's
summary call comes before the turn's call, under the same parent, told apart by
``greenroom.model.purpose``; a reactive one (the model said the context overflowed) nests in
the call that overflowed, which is an error only if the retry fails. The loop runs over the
scripted provider of tests/agents/loop_support.py."""

from __future__ import annotations

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from greenroom.domain import Usage
from greenroom.errors import ModelContextOverflow
from greenroom.observe import span
from tests.agents.loop_support import FakeIO, FakeProvider, Step, make_runtime, text
from tests.agents.test_compaction import long_history, small_window_yaml
from tests.observe.support import children, named, one, span_id


async def test_a_proactive_compaction_is_a_chat_span_before_the_turns(
    spans: InMemorySpanExporter,
) -> None:
    provider = FakeProvider(text("the summary", usage=Usage(300, 20)), text("fresh answer"))
    io = long_history(FakeIO(), 3, size=300)
    io.add_user("the question now " + "z" * 1300)  # over 90 % of the 900-token window
    with span("turn"):
        await make_runtime(provider, small_window_yaml(900)).run_stream(io)
    done = spans.get_finished_spans()
    calls = sorted(children(done, one(done, "turn")), key=lambda s: s.start_time or 0)
    assert [s.name for s in calls] == ["chat my-small-model"] * 2
    purposes = [(s.attributes or {})["greenroom.model.purpose"] for s in calls]
    assert purposes == ["compaction", "turn"]
    summary = calls[0].attributes or {}
    assert (summary["gen_ai.usage.input_tokens"], summary["gen_ai.usage.output_tokens"]) == (
        300,
        20,
    )


async def test_a_reactive_compaction_nests_in_the_call_that_overflowed(
    spans: InMemorySpanExporter,
) -> None:
    overflow = ModelContextOverflow("openai/x: context window exceeded (HTTP 400): ...")
    provider = FakeProvider(Step(error=overflow), text("summary"), text("answered"))
    io = long_history(FakeIO(), 2)
    io.add_user("now")
    with span("turn"):
        await make_runtime(provider).run_stream(io)
    done = spans.get_finished_spans()
    (call,) = children(done, one(done, "turn"))
    assert call.status.status_code is StatusCode.UNSET  # the retry answered
    (inner,) = children(done, call)
    assert (inner.attributes or {})["greenroom.model.purpose"] == "compaction"
    assert len(named(done, call.name)) == 2 and span_id(inner) != span_id(call)
