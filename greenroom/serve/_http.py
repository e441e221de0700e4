"""The HTTP server's side of ``greenroom serve``: hypercorn's configuration, and its listening
sockets, bound before anything else starts (a port in use is a configuration error) and tuned
so a client that stops reading cannot hold a task forever."""

from __future__ import annotations

import logging
import socket

from hypercorn.config import Config, Sockets

from greenroom.errors import ConfigError

from ._config import ServeConfig

# A client that stops reading is dropped by the kernel after this long with unacknowledged
# data (hypercorn shields its writes, so no deadline in Python can free such a task).
TCP_USER_TIMEOUT_MS = 30_000
SEND_BUFFER = 256 * 1024
WS_MAX_MESSAGE = 4 * 1024 * 1024  # larger frames than the API's 1 MiB get an error reply first


class HypercornConfig(Config):
    """hypercorn's configuration, with its sockets bound early and tuned (see the constants)."""

    _bound: Sockets | None = None

    def bound_url(self, host: str) -> str:
        """``http://host:port`` of the first socket :meth:`bind_now` bound (port 0 resolved)."""
        assert self._bound is not None and self._bound.insecure_sockets
        port = self._bound.insecure_sockets[0].getsockname()[1]
        host = host.strip("[]")
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def bind_now(self) -> None:
        """Create the listening sockets before serving, so a port in use is reported at once
        (as a ConfigError) instead of from inside the server's task tree."""
        try:
            self._bound = self.create_sockets()
        except OSError as exc:
            raise ConfigError(
                f"cannot listen on {', '.join(self.bind)}: {exc.strerror or exc} "
                "(another server on that port? choose one with --port, or --port 0 for any)"
            ) from None

    def release(self) -> None:
        """Close sockets bound by :meth:`bind_now` that the server never took (a later
        startup step failed, e.g. the database is locked)."""
        bound, self._bound = self._bound, None
        if bound is not None:
            for sock in (*bound.secure_sockets, *bound.insecure_sockets, *bound.quic_sockets):
                sock.close()

    def create_sockets(self) -> Sockets:
        if self._bound is not None:
            bound, self._bound = self._bound, None
            return bound
        sockets = super().create_sockets()
        for sock in sockets.insecure_sockets:
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                if hasattr(socket, "TCP_USER_TIMEOUT"):
                    sock.setsockopt(
                        socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, TCP_USER_TIMEOUT_MS
                    )
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        return sockets


def hypercorn_config(cfg: ServeConfig) -> HypercornConfig:
    config = HypercornConfig()
    host = f"[{cfg.host}]" if ":" in cfg.host and not cfg.host.startswith("[") else cfg.host
    config.bind = [f"{host}:{cfg.port}"]
    config.graceful_timeout = cfg.graceful_timeout
    # --log-level debug: one access-log line per request.
    config.accesslog = logging.getLogger("hypercorn.access") if cfg.access_log else None
    config.errorlog = logging.getLogger("hypercorn.error")
    config.websocket_max_message_size = WS_MAX_MESSAGE
    # Also the time a new connection has to complete its request headers (hypercorn's idle
    # timer runs until a request starts): slow-header clients are cut off after it.
    config.keep_alive_timeout = cfg.keep_alive_timeout
    config.h11_max_incomplete_size = 64 * 1024
    return config
