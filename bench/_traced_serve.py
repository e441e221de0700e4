"""``greenroom serve`` with tracing on and spans dropped at export: the benchmarks' traced server.

    python bench/_traced_serve.py serve AGENTS --port 0 ...   # the same arguments as greenroom

Installs the OpenTelemetry SDK's tracer provider with a ``BatchSpanProcessor`` (the processor
``greenroom serve --otel`` uses, default queue and batch sizes) in front of an exporter that
drops every batch, then runs greenroom's command line. So the server process pays for what
tracing costs greenroom itself (creating, attributing and ending every span, the context
attach/detach, ``traceparent`` on every model request, the processor's queue and its worker
thread) but not for encoding spans as OTLP and posting them, which is the exporter's cost and
depends on the collector (``bench/side_by_side.py --tracing sdk`` uses this).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any


def install() -> None:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    from greenroom.observe import install_provider

    class Dropped(SpanExporter):
        """Takes every batch and keeps nothing (counts them, for the curious)."""

        spans = 0

        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            Dropped.spans += len(spans)
            return SpanExportResult.SUCCESS

        def shutdown(self) -> None:
            print(f"traced server: {Dropped.spans} spans exported", file=sys.stderr, flush=True)

    provider = TracerProvider(resource=Resource.create({"service.name": "greenroom-bench"}))
    provider.add_span_processor(BatchSpanProcessor(Dropped()))
    install_provider(provider)
    import atexit

    atexit.register(provider.shutdown)


if __name__ == "__main__":
    del sys.path[0]  # bench/ holds modules (store.py, transport.py...) no library should see
    install()
    from greenroom.cli import main

    sys.exit(main())
