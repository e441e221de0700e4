"""Tracing on for one test: greenroom traces into an in-memory exporter (the SDK's), read back
as finished spans. One provider for the whole run: OpenTelemetry sets its global provider once
per process (the MCP SDK traces into that one)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from greenroom.observe import install_provider, shutdown_tracing

EXPORTER = InMemorySpanExporter()
PROVIDER = TracerProvider(resource=Resource.create({"service.name": "greenroom-tests"}))
PROVIDER.add_span_processor(SimpleSpanProcessor(EXPORTER))
trace.set_tracer_provider(PROVIDER)  # before any test: a provider set up by one is not global


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    EXPORTER.clear()
    install_provider(PROVIDER)
    try:
        yield EXPORTER
    finally:
        shutdown_tracing()
        EXPORTER.clear()
