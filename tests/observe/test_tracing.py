"""The tracing core: off is a no-op, on nests spans and marks failures, a context crosses to
another task by capture and attach, traceparent goes in and out, and the switch reads the
standard OTEL_* variables."""

from __future__ import annotations

import pytest
import trio
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from greenroom.errors import ModelRateLimited
from greenroom.observe import (
    NOOP_SPAN,
    attached,
    capture,
    extract,
    extract_field,
    inject,
    span,
    tracing_enabled,
)
from greenroom.observe._tracing import protocol, tracing_problem, wanted
from tests.observe.support import (
    PARENT_ID,
    TRACE_ID,
    TRACEPARENT,
    child,
    header_ids,
    one,
    parent_id,
    span_id,
    trace_id,
)


def test_off_everything_is_the_shared_no_op() -> None:
    assert not tracing_enabled()
    with span("anything", {"k": 1}) as current:
        assert current is NOOP_SPAN
        current.set_attribute("k", 2)
        current.add_event("e")
        assert not current.is_recording()
    assert capture() is None
    headers: dict[str, str] = {}
    inject(headers)
    assert headers == {}
    assert extract({"traceparent": TRACEPARENT}) is None
    assert extract_field(TRACEPARENT) is None
    with attached(None):
        pass


async def test_spans_nest_and_say_how_they_ended(spans: InMemorySpanExporter) -> None:
    class Parked(Exception):
        pass

    with span("outer", {"a": 1}):
        with pytest.raises(ModelRateLimited), span("refused"):
            raise ModelRateLimited("slow down")
        with pytest.raises(ValueError, match="bad"), span("broken"):
            raise ValueError("bad")
        with trio.move_on_after(0), span("cancelled"):
            await trio.sleep_forever()
        with pytest.raises(Parked), span("parked", expected=(Parked,)):
            raise Parked()
    done = spans.get_finished_spans()
    outer = one(done, "outer")
    assert parent_id(outer) is None
    assert outer.attributes == {"a": 1}
    assert outer.status.status_code is StatusCode.UNSET
    refused = child(done, outer, "refused")
    assert refused.status.status_code is StatusCode.ERROR
    assert refused.attributes is not None
    assert refused.attributes["error.type"] == "rate_limited"
    broken = child(done, outer, "broken")
    assert broken.status.status_code is StatusCode.ERROR
    assert [e.name for e in broken.events] == ["exception"]
    assert broken.attributes is not None and broken.attributes["error.type"] == "ValueError"
    cancelled = child(done, outer, "cancelled")
    assert cancelled.status.status_code is StatusCode.UNSET
    assert cancelled.attributes == {"greenroom.cancelled": True}
    parked = child(done, outer, "parked")
    assert parked.status.status_code is StatusCode.UNSET
    assert parked.attributes == {"greenroom.outcome": "Parked"}


async def test_a_context_crosses_to_another_task_by_message(
    spans: InMemorySpanExporter,
) -> None:
    """An actor's way: the task that does the work was started before (outside any span); the
    sender's context travels with the message, and a task started under it inherits it."""
    send, receive = trio.open_memory_channel[object](1)

    async def actor() -> None:
        async with receive:
            async for context in receive:
                with span("not traced here"):
                    pass
                with attached(context), span("handled"):  # type: ignore[arg-type]
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(spawned)

    async def spawned() -> None:
        with span("spawned"):
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(actor)
        with span("request"):
            await send.send(capture())
        await send.aclose()
    done = spans.get_finished_spans()
    request = one(done, "request")
    handled = child(done, request, "handled")
    child(done, handled, "spawned")
    assert parent_id(one(done, "not traced here")) is None
    assert trace_id(one(done, "not traced here")) != trace_id(request)


async def test_traceparent_in_and_out(spans: InMemorySpanExporter) -> None:
    context = extract({"TraceParent": TRACEPARENT})  # any case
    with span("served", kind="server", context=context):
        headers: dict[str, str] = {}
        inject(headers)
    served = one(spans.get_finished_spans(), "served")
    assert (trace_id(served), parent_id(served)) == (TRACE_ID, PARENT_ID)
    assert header_ids(headers["traceparent"]) == (TRACE_ID, span_id(served))

    # A WebSocket op's field; a malformed or missing one starts a new trace.
    for context in (
        extract_field(TRACEPARENT),
        extract_field("00-not-a-trace-01"),
        extract_field(42),
        extract({}),
    ):
        spans.clear()
        with span("op", context=context):
            pass
        op = one(spans.get_finished_spans(), "op")
        continued = trace_id(op) == TRACE_ID
        assert continued == (context is not None and parent_id(op) == PARENT_ID)
    assert trace_id(one(spans.get_finished_spans(), "op")) != TRACE_ID


def test_the_switch_reads_the_standard_variables() -> None:
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}
    assert not wanted({})
    assert wanted({}, flag=True)
    assert wanted(endpoint)
    assert wanted({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"})
    assert wanted({"OTEL_TRACES_EXPORTER": "otlp"})
    assert wanted({"OTEL_TRACES_EXPORTER": "console"})
    assert not wanted({**endpoint, "OTEL_TRACES_EXPORTER": "none"}, flag=True)
    assert not wanted({**endpoint, "OTEL_SDK_DISABLED": "true"}, flag=True)
    assert protocol({}) == "http/protobuf"
    assert protocol({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}) == "grpc"
    both = {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http"}
    assert protocol(both) == "http"
    # The SDK and both exporters are installed here (the dev extra).
    assert tracing_problem({}, flag=True) == ""
    assert tracing_problem({**endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}) == ""
    assert tracing_problem({"OTEL_TRACES_EXPORTER": "zipkin"}) == (
        "OTEL_TRACES_EXPORTER='zipkin' is not supported (otlp, console or none)"
    )
    assert tracing_problem({"OTEL_TRACES_EXPORTER": "zipkin", "OTEL_SDK_DISABLED": "true"}) == ""


def test_a_commit_carrying_no_traced_write_has_no_span(spans: InMemorySpanExporter) -> None:
    from greenroom.observe import commit_span, current_span_context, span

    with commit_span("db", 0, 40, [None, None]):  # write-behind event rows only
        pass
    assert spans.get_finished_spans() == ()
    with span("store write"):
        link = current_span_context()
    with commit_span("db", 1, 40, [None, link]):
        pass
    (write, commit) = spans.get_finished_spans()
    assert write.name == "store write"
    assert commit.name == "store commit" and commit.parent is None
    assert link is not None and [k.context.span_id for k in commit.links] == [link.span_id]
    assert commit.attributes is not None and commit.attributes["greenroom.batch.events"] == 40
