"""What an operator sees of a running server: Prometheus metrics, OpenTelemetry traces and
structured logs.

The lowest layer beside ``domain``: every server layer may record into it, and it imports no
other greenroom layer (only ``greenroom.errors``). Heavy parts (the OpenTelemetry SDK and its
exporters) are imported only when an operator turns them on, so a plain ``greenroom serve``
starts as light as before.
"""
