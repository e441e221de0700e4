"""OpenTelemetry traces: the tracer, the span helper every layer calls, and turning it on.

Off by default, and then free: :func:`span` returns one shared no-op span (no OpenTelemetry
module is even imported), :func:`capture` returns None and :func:`attached` does nothing. It is
on once :func:`setup_tracing` found the standard ``OTEL_*`` variables (or ``greenroom serve
--otel``) and built the SDK's tracer provider, or a test or an embedder handed one to
:func:`install_provider`. The SDK and its exporters are imported only then.

A call site is one line: ``with span("chat gpt-4o", {...}) as s:``; ``s`` takes
``set_attribute``/``set_attributes``/``add_event`` on and off alike. A span ends with an error
status when its block raises (``error.type``: a GreenroomError's code, else the exception's
class); a trio cancellation is not an error (``greenroom.cancelled``).

Context crosses task boundaries the way contextvars do (a trio task starts with a copy of its
spawner's context); where work moves to another task by message (an actor's mailbox), the
sender :func:`capture`\\ s its context and the receiver runs under :func:`attached`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, Literal, Protocol

from greenroom.errors import GreenroomError

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import SpanContext, Tracer

SpanKind = Literal["internal", "server", "client", "producer", "consumer"]
TRACER_NAME = "greenroom"
SERVICE_NAME = "greenroom"
NODE_ATTRIBUTE = "greenroom.node.id"
FLUSH_BUDGET_MS = 5000
"""Milliseconds the server's shutdown waits for the last spans to be exported."""


class Span(Protocol):
    """What a call site may do with the span it opened (an OpenTelemetry span, or nothing)."""

    def set_attribute(self, key: str, value: Any) -> Any: ...

    def set_attributes(self, attributes: Mapping[str, Any]) -> Any: ...

    def add_event(self, name: str, attributes: Mapping[str, Any] | None = None) -> Any: ...

    def update_name(self, name: str) -> Any: ...

    def is_recording(self) -> bool: ...


class _NoopSpan:
    """The span of every ``with span(...)`` while tracing is off: one object, no work."""

    __slots__ = ()

    def __enter__(self) -> _NoopSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def set_attribute(self, key: str, value: Any) -> None:
        return None

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        return None

    def add_event(self, name: str, attributes: Mapping[str, Any] | None = None) -> None:
        return None

    def update_name(self, name: str) -> None:
        return None

    def is_recording(self) -> bool:
        return False


NOOP_SPAN = _NoopSpan()


class _State:
    """The tracer while tracing is on (None: off), and the provider this module built."""

    tracer: Tracer | None = None
    owned: TracerProvider | None = None


_state = _State()


def tracing_enabled() -> bool:
    return _state.tracer is not None


def span(
    name: str,
    attributes: Mapping[str, Any] | None = None,
    *,
    kind: SpanKind = "internal",
    context: Context | None = None,
    links: Sequence[SpanContext] = (),
    expected: tuple[type[BaseException], ...] = (),
) -> AbstractContextManager[Span]:
    """A span around the block, current inside it (its children nest under it).

    ``context``: the parent's context (an extracted ``traceparent``, a captured context);
    None: the current one. ``links``: span contexts this span relates to without being their
    child (a commit batch links the writes it carries). ``expected``: exceptions that end
    the block without being an error (``greenroom.outcome`` names them)."""
    tracer = _state.tracer
    if tracer is None:
        return NOOP_SPAN
    return _live(tracer, name, attributes, kind, context, links, expected)


@contextmanager
def _live(
    tracer: Tracer,
    name: str,
    attributes: Mapping[str, Any] | None,
    kind: SpanKind,
    context: Context | None,
    links: Sequence[SpanContext],
    expected: tuple[type[BaseException], ...] = (),
) -> Iterator[Span]:
    from opentelemetry import context as context_api, trace

    otel_links = [trace.Link(link) for link in links if link.is_valid]
    current = tracer.start_span(
        name,
        context=context,
        kind=_KINDS[kind](),
        attributes=attributes,
        links=otel_links or None,
        record_exception=False,
        set_status_on_exception=False,
    )
    token = context_api.attach(trace.set_span_in_context(current, context))
    try:
        yield current
    except expected as exc:
        current.set_attribute("greenroom.outcome", type(exc).__name__)
        raise
    except BaseException as exc:
        _failed(current, exc)
        raise
    finally:
        context_api.detach(token)
        current.end()


def _failed(current: Any, exc: BaseException) -> None:
    from opentelemetry.trace import Status, StatusCode

    if _is_cancellation(exc) or isinstance(exc, GeneratorExit):
        current.set_attribute("greenroom.cancelled", True)
        return
    if isinstance(exc, GreenroomError):
        current.set_attribute("error.type", exc.code)
        current.set_status(Status(StatusCode.ERROR, exc.message))
        return
    current.record_exception(exc)
    current.set_attribute("error.type", type(exc).__qualname__)
    current.set_status(Status(StatusCode.ERROR, str(exc) or type(exc).__name__))


def _is_cancellation(exc: BaseException) -> bool:
    import trio

    if isinstance(exc, trio.Cancelled):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return all(_is_cancellation(inner) for inner in exc.exceptions)
    return False


def _kind(name: str) -> Callable[[], Any]:
    def make() -> Any:
        from opentelemetry.trace import SpanKind as OtelKind

        return OtelKind[name]

    return make


_KINDS: dict[SpanKind, Callable[[], Any]] = {
    "internal": _kind("INTERNAL"),
    "server": _kind("SERVER"),
    "client": _kind("CLIENT"),
    "producer": _kind("PRODUCER"),
    "consumer": _kind("CONSUMER"),
}


def current_span_context() -> SpanContext | None:
    """The current span's context (for a link), None while tracing is off or outside a span."""
    if _state.tracer is None:
        return None
    from opentelemetry import trace

    found = trace.get_current_span().get_span_context()
    return found if found.is_valid else None


def annotate(name: str = "", attributes: Mapping[str, Any] | None = None) -> None:
    """Rename the current span and/or add attributes to it (a server span learns its route
    after it started); nothing while tracing is off."""
    if _state.tracer is None:
        return
    from opentelemetry import trace

    current = trace.get_current_span()
    if name:
        current.update_name(name)
    if attributes:
        current.set_attributes(attributes)


# --- crossing to another task by message ----------------------------------------------------


def capture() -> Context | None:
    """The current context, to run work another task does for this one under it
    (:func:`attached`); None while tracing is off."""
    if _state.tracer is None:
        return None
    from opentelemetry import context as context_api

    return context_api.get_current()


class _Attached:
    __slots__ = ("_context", "_token")

    def __init__(self, context: Context) -> None:
        self._context = context
        self._token: Any = None

    def __enter__(self) -> None:
        from opentelemetry import context as context_api

        self._token = context_api.attach(self._context)

    def __exit__(self, *exc: object) -> None:
        from opentelemetry import context as context_api

        context_api.detach(self._token)


def detached() -> AbstractContextManager[Any]:
    """No span is current in the block (a long-lived task started from inside some request,
    whose own work is not that request's); nothing while tracing is off."""
    if _state.tracer is None:
        return NOOP_SPAN
    from opentelemetry.context import Context

    return _Attached(Context())


def attached(context: Context | None) -> AbstractContextManager[Any]:
    """Make ``context`` (from :func:`capture`) current for the block; None: change nothing.
    A trio task started inside the block starts with it too."""
    if context is None:
        return NOOP_SPAN
    return _Attached(context)


# --- turning it on --------------------------------------------------------------------------


class TracingUnavailable(Exception):
    """Tracing was asked for, but the SDK or the chosen exporter is not installed."""


def wanted(env: Mapping[str, str] = os.environ, *, flag: bool = False) -> bool:
    """Whether the environment (or ``--otel``) turns tracing on: an OTLP endpoint, or a
    traces exporter other than ``none``; ``OTEL_SDK_DISABLED=true`` wins over everything."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none":
        return False
    if flag or exporter:
        return True
    return bool(
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
        or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    )


def protocol(env: Mapping[str, str] = os.environ) -> str:
    """The OTLP protocol the environment asks for (``http/protobuf`` unless it says
    ``grpc``)."""
    chosen = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "").strip()
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "").strip()
        or "http/protobuf"
    )
    return chosen.lower()


def tracing_problem(env: Mapping[str, str] = os.environ, *, flag: bool = False) -> str:
    """Why tracing, asked for by ``env`` or ``flag``, could not start ("" when it can, or is
    not asked for); looks the packages up without importing them."""
    if not wanted(env, flag=flag):
        return ""
    from importlib.util import find_spec

    if find_spec("opentelemetry.sdk") is None:
        return "tracing (--otel, OTEL_*) needs the OpenTelemetry SDK: pip install 'greenroom[otel]'"
    kind = (env.get("OTEL_TRACES_EXPORTER", "").strip().lower() or "otlp").split(",")[0]
    if kind not in ("otlp", "console"):
        return f"OTEL_TRACES_EXPORTER={kind!r} is not supported (otlp, console or none)"
    if kind == "otlp":
        grpc = protocol(env) == "grpc"
        module = f"opentelemetry.exporter.otlp.proto.{'grpc' if grpc else 'http'}"
        extra = "otel-grpc" if grpc else "otel"
        try:
            missing = find_spec(module) is None
        except ModuleNotFoundError:
            missing = True
        if missing:
            over = "over gRPC " if grpc else ""
            return f"OTLP {over}needs its exporter: pip install 'greenroom[{extra}]'"
    return ""


def setup_tracing(
    node_id: str = "", *, flag: bool = False, env: Mapping[str, str] = os.environ
) -> bool:
    """Turn tracing on when the environment or ``flag`` asks for it; whether it is on.

    The provider: resource ``service.name`` greenroom (``OTEL_SERVICE_NAME`` and
    ``OTEL_RESOURCE_ATTRIBUTES`` are honoured), ``greenroom.node.id`` and
    ``service.instance.id`` the node; a batch processor in front of the exporter that
    ``OTEL_TRACES_EXPORTER`` names (``otlp``, the default, or ``console``), OTLP over the
    protocol :func:`protocol` reads (its endpoint, headers and timeouts are the exporter's own
    ``OTEL_EXPORTER_OTLP_*`` variables). It becomes the global provider too, so libraries
    that trace (the MCP SDK) nest their spans under greenroom's.

    Raises:
        TracingUnavailable: the SDK, or the exporter asked for, is not installed.
    """
    if not wanted(env, flag=flag):
        return False
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise TracingUnavailable(
            "tracing needs the OpenTelemetry SDK: pip install 'greenroom[otel]'"
        ) from exc
    attributes: dict[str, str] = {}
    if not env.get("OTEL_SERVICE_NAME", "").strip():
        attributes["service.name"] = SERVICE_NAME
    if node_id:
        attributes[NODE_ATTRIBUTE] = node_id
        attributes["service.instance.id"] = node_id
    provider = TracerProvider(resource=Resource.create(attributes))
    provider.add_span_processor(BatchSpanProcessor(_exporter(env)))
    install_provider(provider)
    _state.owned = provider
    return True


def _exporter(env: Mapping[str, str]) -> Any:
    kind = env.get("OTEL_TRACES_EXPORTER", "").strip().lower() or "otlp"
    kind = kind.split(",")[0].strip()
    if kind == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if kind != "otlp":
        raise TracingUnavailable(
            f"OTEL_TRACES_EXPORTER={kind!r} is not supported (otlp, console or none)"
        )
    if protocol(env) == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GrpcExporter,
            )
        except ImportError as exc:
            raise TracingUnavailable(
                "OTLP over gRPC needs its exporter: pip install 'greenroom[otel-grpc]'"
            ) from exc
        return GrpcExporter()
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as exc:
        raise TracingUnavailable(
            "tracing needs the OTLP exporter: pip install 'greenroom[otel]'"
        ) from exc
    return OTLPSpanExporter()


def install_provider(provider: Any) -> None:
    """Trace into ``provider`` (an SDK ``TracerProvider``: a test's, with an in-memory
    exporter, or an embedder's). It becomes the global provider unless one was set before
    (OpenTelemetry sets it once per process)."""
    from opentelemetry import trace

    if not _global_set():
        trace.set_tracer_provider(provider)
    _state.tracer = provider.get_tracer(TRACER_NAME)


def _global_set() -> bool:
    from opentelemetry import trace

    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def shutdown_tracing() -> None:
    """Stop tracing; a provider :func:`setup_tracing` built exports what it holds first
    (bounded by :data:`FLUSH_BUDGET_MS`) and shuts down."""
    _state.tracer = None
    owned, _state.owned = _state.owned, None
    if owned is not None:
        owned.force_flush(FLUSH_BUDGET_MS)
        owned.shutdown()
