"""What an operator sees of a running server: Prometheus metrics, OpenTelemetry traces and
structured logs.

The lowest layer beside ``domain``: every server layer may record into it, and it imports no
other greenroom layer (only ``greenroom.errors``). Heavy parts (the OpenTelemetry SDK and its
exporters) are imported only when an operator turns them on, so a plain ``greenroom serve``
starts as light as before.
"""

# Metrics (decision 0024): one registry per server, bounded labels.
# Logs (decision 0024): the JSON line format and the ids a line carries.
from ._logs import (
    LOG_FORMATS as LOG_FORMATS,
    JsonFormatter as JsonFormatter,
    LogFormat as LogFormat,
    configure_logging as configure_logging,
    log_context as log_context,
    tag_logs as tag_logs,
)
from ._metrics import (
    OTHER as OTHER,
    LiveCounts as LiveCounts,
    Metrics as Metrics,
    ModelCall as ModelCall,
    metrics as metrics,
    metrics_scope as metrics_scope,
    model_call as model_call,
    reset_metrics as reset_metrics,
    use_metrics as use_metrics,
)

# Traces (decision 0025): OpenTelemetry, a shared no-op until turned on.
from ._propagation import (
    extract as extract,
    extract_field as extract_field,
    inject as inject,
    inject_request_hook as inject_request_hook,
)
from ._spans import (
    FirstToken as FirstToken,
    approval_span as approval_span,
    command_span as command_span,
    commit_span as commit_span,
    forward_span as forward_span,
    mcp_call_span as mcp_call_span,
    model_call_span as model_call_span,
    record_model_response as record_model_response,
    server_span as server_span,
    store_write_span as store_write_span,
    tool_span as tool_span,
    turn_span as turn_span,
)
from ._tracing import (
    NOOP_SPAN as NOOP_SPAN,
    Span as Span,
    TracingUnavailable as TracingUnavailable,
    annotate as annotate,
    attached as attached,
    capture as capture,
    current_span_context as current_span_context,
    detached as detached,
    install_provider as install_provider,
    setup_tracing as setup_tracing,
    shutdown_tracing as shutdown_tracing,
    span as span,
    tracing_enabled as tracing_enabled,
    tracing_problem as tracing_problem,
)
