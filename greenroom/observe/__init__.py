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
