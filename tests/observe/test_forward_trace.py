"""A request forwarded between two cluster nodes is one trace: the entry node's server span,
its ``forward`` span, and the owner's server span (and actor command) under it, through the
``traceparent`` the forwarder sends. Two in-process nodes on a fake cluster, as in
tests/cluster/test_forwarding.py (real clock: live sockets)."""

from __future__ import annotations

import pytest
import trio
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.cluster.test_forwarding import DEADLINE, owned_by, two_nodes
from tests.observe.support import (
    PARENT_ID,
    TRACE_ID,
    TRACEPARENT,
    child,
    named,
    parent_id,
    span_id,
    trace_id,
)

pytestmark = pytest.mark.slow
ROUTE = "PATCH /api/sessions/{session_id}/title"


async def test_a_forwarded_request_continues_its_trace_on_the_owner(
    spans: InMemorySpanExporter,
) -> None:
    with trio.fail_after(DEADLINE):
        async with two_nodes() as (_, a, b, client):
            sid = await owned_by(b, client)
            spans.clear()
            reply = await client.patch(
                f"{a.url}/api/sessions/{sid}/title",
                json={"title": "via a"},
                headers={"traceparent": TRACEPARENT},
            )
            assert reply.status_code == 200
    traced = [s for s in spans.get_finished_spans() if trace_id(s) == TRACE_ID]
    (entry,) = [s for s in named(traced, ROUTE) if parent_id(s) == PARENT_ID]
    forward = child(traced, entry, "forward PATCH")
    assert forward.attributes is not None
    assert forward.attributes["greenroom.forward.node"] == b.url
    assert forward.attributes["http.response.status_code"] == 200
    owner = child(traced, forward, ROUTE)  # node b's server span
    command = child(traced, owner, "actor SetTitle")
    assert command.attributes is not None and command.attributes["greenroom.session.id"] == sid
    assert span_id(owner) != span_id(entry)
