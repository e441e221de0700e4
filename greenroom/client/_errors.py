"""What the client raises: the server's JSON errors, and a server it cannot reach."""

from __future__ import annotations

from typing import Any


class ClientError(Exception):
    """Base of the client's errors."""


class ApiError(ClientError):
    """The server answered with an error status; ``code`` is its stable machine code
    (``session_busy``, ``session_not_found``, ...), ``path`` the offending field if any."""

    def __init__(self, status: int, body: Any) -> None:
        body = body if isinstance(body, dict) else {}
        self.status = status
        self.code: str = str(body.get("code", ""))
        self.path: str = str(body.get("path", ""))
        message = str(body.get("message") or f"HTTP {status}")
        super().__init__(f"{status} {self.code or 'error'}: {message}")
        self.message = message


class Unreachable(ClientError):
    """The server could not be reached (refused, reset, timed out)."""
