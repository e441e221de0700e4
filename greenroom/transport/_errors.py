"""Mapping errors to statuses, bodies and headers: the one place it happens."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from greenroom.errors import GreenroomError, Unauthorized
from greenroom.observe import metrics

from ._json import error_body

if TYPE_CHECKING:
    from ._ops import Operation


def map_error(
    exc: GreenroomError, op: Operation | None = None
) -> tuple[int, dict[str, Any], dict[str, str]]:
    """(status, JSON body, headers) for ``exc`` raised by ``op``."""
    status, code = exc.status, None
    if op is not None:
        for cls, (override_status, override_code) in op.overrides.items():
            if isinstance(exc, cls):
                status, code = override_status, override_code
                break
    headers = {}
    if exc.retry_after is not None:
        headers["Retry-After"] = str(exc.retry_after)
    if isinstance(exc, Unauthorized):  # RFC 6750: say which scheme to use
        headers["WWW-Authenticate"] = 'Bearer realm="greenroom"'
    body = error_body(exc, code=code)
    metrics().errors.labels(str(body.get("code", ""))).inc()
    return status, body, headers
