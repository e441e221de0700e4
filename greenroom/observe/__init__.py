"""What an operator sees of a running server: Prometheus metrics, OpenTelemetry traces and
structured logs.

The lowest layer beside ``domain``: every server layer may record into it, and it imports no
other greenroom layer (only ``greenroom.errors``). Heavy parts (the OpenTelemetry SDK and its
exporters) are imported only when an operator turns them on, so a plain ``greenroom serve``
starts as light as before.
"""

from ._propagation import extract, extract_field, inject, inject_request_hook
from ._spans import (
    FirstToken,
    approval_span,
    command_span,
    commit_span,
    forward_span,
    mcp_call_span,
    model_call_span,
    record_model_response,
    server_span,
    store_write_span,
    tool_span,
    turn_span,
)
from ._tracing import (
    NOOP_SPAN,
    Span,
    TracingUnavailable,
    annotate,
    attached,
    capture,
    current_span_context,
    detached,
    install_provider,
    setup_tracing,
    shutdown_tracing,
    span,
    tracing_enabled,
    tracing_problem,
)

__all__ = [
    "NOOP_SPAN",
    "FirstToken",
    "Span",
    "TracingUnavailable",
    "annotate",
    "approval_span",
    "attached",
    "capture",
    "command_span",
    "commit_span",
    "current_span_context",
    "detached",
    "extract",
    "extract_field",
    "forward_span",
    "inject",
    "inject_request_hook",
    "install_provider",
    "mcp_call_span",
    "model_call_span",
    "record_model_response",
    "server_span",
    "setup_tracing",
    "shutdown_tracing",
    "span",
    "store_write_span",
    "tool_span",
    "tracing_enabled",
    "tracing_problem",
    "turn_span",
]
