"""Turning tracing on the way an operator does: the OTEL_* variables (OTLP over HTTP, and over
gRPC) and ``greenroom serve --otel``, each exporting to a fake collector on 127.0.0.1:0 that
speaks the real protocol (protobuf ``ExportTraceServiceRequest``). The server's shutdown
exports what is left, so no wait is needed after it."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from greenroom.cli import build_parser
from greenroom.observe import setup_tracing, shutdown_tracing, span, tracing_enabled
from greenroom.serve import ServeConfig, serve
from tests.observe.support import PARENT_ID, TRACE_ID, TRACEPARENT
from tests.slowness import slow

EXPORTED_LOCK = threading.Lock()
CLEARED = (
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_SDK_DISABLED",
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
    "all_proxy",
)


@attrs.frozen
class Exported:
    """One exported span, with its resource's attributes."""

    name: str
    trace_id: int
    parent_id: int
    attributes: dict[str, Any]
    resource: dict[str, Any]


def decode(bodies: list[bytes]) -> list[Exported]:
    found = []
    for body in bodies:
        request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for s in scope_spans.spans:
                    parent = int.from_bytes(s.parent_span_id, "big") if s.parent_span_id else 0
                    found.append(
                        Exported(
                            s.name,
                            int.from_bytes(s.trace_id, "big"),
                            parent,
                            _attributes(s.attributes),
                            resource,
                        )
                    )
    return found


def _attributes(pairs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        kind = pair.value.WhichOneof("value")
        out[pair.key] = getattr(pair.value, kind) if kind else None
    return out


@contextmanager
def http_collector() -> Iterator[tuple[str, list[bytes]]]:
    """An OTLP/HTTP collector on 127.0.0.1:0: (its base URL, the bodies POSTed to /v1/traces)."""
    bodies: list[bytes] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            status = 404
            if self.path == "/v1/traces":
                assert self.headers["Content-Type"] == "application/x-protobuf"
                with EXPORTED_LOCK:
                    bodies.append(body)
                status = 200
            answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
            self.send_response(status)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", bodies
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@contextmanager
def grpc_collector() -> Iterator[tuple[str, list[bytes]]]:
    """An OTLP/gRPC collector (the TraceService) on 127.0.0.1:0."""
    import grpc  # type: ignore[import-untyped]

    bodies: list[bytes] = []

    class Service(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:
            with EXPORTED_LOCK:
                bodies.append(request.SerializeToString())
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Service(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"http://127.0.0.1:{port}", bodies
    finally:
        server.stop(None)


@pytest.fixture
def otel_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in CLEARED:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.parametrize("wire", ["http/protobuf", "grpc"])
def test_the_otel_variables_export_over_otlp(otel_env: pytest.MonkeyPatch, wire: str) -> None:
    collector = grpc_collector if wire == "grpc" else http_collector
    with collector() as (url, bodies):
        otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
        otel_env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", wire)
        otel_env.setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
        try:
            assert setup_tracing("node-7")
            with span("outer"), span("inner", {"k": "v"}):
                pass
        finally:
            shutdown_tracing()  # exports what the batch processor holds
        assert not tracing_enabled()
        exported = {s.name: s for s in decode(bodies)}
    assert set(exported) == {"outer", "inner"}
    inner = exported["inner"]
    assert inner.attributes == {"k": "v"}
    assert inner.trace_id == exported["outer"].trace_id
    assert inner.resource["service.name"] == "greenroom"
    assert inner.resource["greenroom.node.id"] == "node-7"
    assert inner.resource["service.instance.id"] == "node-7"


def test_without_the_variables_or_the_flag_nothing_starts(otel_env: pytest.MonkeyPatch) -> None:
    otel_env.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    assert not setup_tracing("n")
    assert not tracing_enabled()


def test_the_serve_flag() -> None:
    args = build_parser().parse_args(["serve", "--otel"])
    assert args.otel is True
    assert build_parser().parse_args(["serve"]).otel is False


@pytest.mark.slow
async def test_serve_with_otel_exports_its_request_spans(
    otel_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``--otel`` (ServeConfig.otel) with an endpoint from the environment: a request that
    carries ``traceparent`` is a server span of that trace, named by its route, exported with
    the node's resource; the server's shutdown flushes it."""
    with http_collector() as (url, bodies):
        otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
        otel_env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        cfg = ServeConfig(port=0, db=str(tmp_path / "db.sqlite3"), graceful_timeout=1, otel=True)
        with trio.fail_after(slow(30)):
            async with trio.open_nursery() as nursery:
                base: str = await nursery.start(serve, cfg)
                async with httpx.AsyncClient(base_url=base) as client:
                    headers = {"traceparent": TRACEPARENT}
                    created = await client.post("/api/sessions", json={}, headers=headers)
                    assert created.status_code == 200, created.text
                nursery.cancel_scope.cancel()
        assert not tracing_enabled()
        exported = decode(bodies)
    (request,) = [s for s in exported if s.name == "POST /api/sessions"]
    assert (request.trace_id, request.parent_id) == (TRACE_ID, PARENT_ID)
    assert request.attributes["http.route"] == "/api/sessions"
    assert request.attributes["http.response.status_code"] == 200
    assert request.resource["service.name"] == "greenroom"
    assert request.resource["greenroom.node.id"] == socket.gethostname()


def test_asking_for_tracing_without_the_sdk_is_a_config_error(
    otel_env: pytest.MonkeyPatch,
) -> None:
    """``check_config`` (what ``greenroom serve`` runs before loading anything) names the
    package to install; the lookup imports nothing."""
    import importlib.util

    from greenroom.errors import ConfigError
    from greenroom.serve import check_config

    real = importlib.util.find_spec
    missing = {"opentelemetry.sdk"}
    otel_env.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name in missing else real(name, *a)
    )
    otel_env.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    check_config(ServeConfig())  # not asked for: no check
    with pytest.raises(ConfigError, match=r"pip install 'greenroom\[otel\]'"):
        check_config(ServeConfig(otel=True))
    missing = {"opentelemetry.exporter.otlp.proto.grpc"}
    otel_env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    with pytest.raises(ConfigError, match=r"OTLP over gRPC needs its exporter: .*otel-grpc"):
        check_config(ServeConfig(otel=True))
    otel_env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    check_config(ServeConfig(otel=True))  # the HTTP exporter is there
