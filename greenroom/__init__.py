"""greenroom: an agent session server (docker-agent compatible HTTP API, WebSocket streaming)."""

__version__ = "0.1.0"
