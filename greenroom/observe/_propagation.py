"""W3C trace context on the wire: ``traceparent`` (and ``tracestate``) in and out.

In: a REST request's headers, or a WebSocket op's ``traceparent`` field, become the parent
context of the server span (:func:`extract`). Out: the current span's context goes into the
headers of a request greenroom sends on a turn's behalf (:func:`inject`): the model's HTTP
request (an ``httpx2`` request hook on the model clients, :func:`inject_request_hook`), a
remote MCP server's, and a request forwarded to another cluster node. The propagators are
OpenTelemetry's global ones (W3C trace context and baggage, or what ``OTEL_PROPAGATORS``
names). While tracing is off nothing is read or written.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import TYPE_CHECKING, Any

from ._tracing import tracing_enabled

if TYPE_CHECKING:
    from opentelemetry.context import Context

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"


def extract(carrier: Mapping[str, str]) -> Context | None:
    """The context a request's headers (in any case) carry; a new trace's (empty) context
    when they carry none or a malformed one; None while tracing is off."""
    if not tracing_enabled():
        return None
    from opentelemetry import propagate
    from opentelemetry.context import Context

    folded = {key.lower(): value for key, value in carrier.items()}
    return propagate.extract(folded, context=Context())


def extract_field(value: object, tracestate: object = None) -> Context | None:
    """The context of a WebSocket op's ``traceparent`` (and ``tracestate``) fields; see
    :func:`extract`. A value that is not a string counts as absent."""
    if not tracing_enabled():
        return None
    carrier: dict[str, str] = {}
    if isinstance(value, str):
        carrier[TRACEPARENT] = value
        if isinstance(tracestate, str):
            carrier[TRACESTATE] = tracestate
    return extract(carrier)


def inject(headers: MutableMapping[str, str]) -> None:
    """Add the current span's ``traceparent`` (and ``tracestate``, baggage) to ``headers``;
    nothing while tracing is off or outside any span."""
    if not tracing_enabled():
        return
    from opentelemetry import propagate

    propagate.inject(headers)


async def inject_request_hook(request: Any) -> None:
    """An ``httpx``/``httpx2`` request event hook: :func:`inject` into the request's headers.
    It runs in the task that sends the request, so the span is the sender's (a model call's,
    an MCP call's)."""
    if tracing_enabled():
        inject(request.headers)
