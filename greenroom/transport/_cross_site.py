"""The edge checks of every request, as pure functions of its method and headers, so the HTTP
app and the WebSocket endpoint apply the same code: the bearer token, and refusing what a
browser sends on another site's behalf (docs/security.md).

A greenroom on loopback with no token trusts whoever can reach it, and a web page the user
visits can reach it too. Three rules close that door:

- ``Host`` must name a host this server answers to (421): stops DNS rebinding, where a page's
  own domain is re-pointed at 127.0.0.1 and so becomes same-origin with the server.
- A request that changes state, and every WebSocket upgrade (browsers apply no CORS to
  WebSockets), must not carry a foreign ``Origin`` (403). Non-browser clients send none.
- A JSON body must say it is JSON (415): a cross-site ``text/plain`` POST needs no preflight.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Mapping

import attrs

from greenroom.errors import (
    CrossSiteRequest,
    HostNotAllowed,
    Unauthorized,
    UnsupportedMediaType,
)

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARD_BINDS = frozenset({"0.0.0.0", "::", ""})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_DEFAULT_PORTS = {"http": "80", "https": "443", "ws": "80", "wss": "443"}


@attrs.frozen
class SitePolicy:
    """Which hosts the server answers to and which other origins may use it.

    ``bind_host`` is the address the server listens on; ``allowed_hosts`` adds names (``*``
    turns the Host check off); ``cors_origins`` are origins allowed besides the server's own
    (``*`` allows any).
    """

    bind_host: str = "127.0.0.1"
    allowed_hosts: tuple[str, ...] = ()
    cors_origins: tuple[str, ...] = ()

    def origin_allowed(self, origin: str) -> bool:
        return "*" in self.cors_origins or origin in self.cors_origins

    def host_allowed(self, host: str) -> bool:
        name = host_name(host)
        allowed = {host_name(h) for h in self.allowed_hosts}
        if "*" in allowed or name in allowed or name in LOOPBACK_NAMES:
            return True
        bind = self.bind_host.strip("[]").lower()
        if name == bind:
            return True
        # Bound to every interface: clients may use any of its addresses. An IP literal cannot
        # be re-pointed by DNS, so it is safe; names must be listed with --allowed-host.
        return bind in WILDCARD_BINDS and _is_ip(name)


def host_name(host: str) -> str:
    """The host of a ``Host`` header value, lower-case, without port or IPv6 brackets."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    if host.count(":") == 1:
        return host.partition(":")[0]
    return host


def _netloc(host: str, scheme: str) -> str:
    """``host[:port]`` with the scheme's default port made explicit."""
    host = host.strip().lower()
    has_port = host.rpartition(":")[2].isdigit() and (
        not host.startswith("[") or host.rfind("]") < host.rfind(":")
    )
    if has_port:
        return host
    return f"{host}:{_DEFAULT_PORTS.get(scheme, '80')}"


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def same_origin(origin: str, host: str) -> bool:
    """Whether ``origin`` (``scheme://host[:port]``) names the host the request was sent to."""
    scheme, sep, rest = origin.strip().lower().partition("://")
    if not sep or scheme not in ("http", "https") or not rest or "/" in rest:
        return False
    if scheme == "https" and _is_loopback(host_name(host)):
        return False  # greenroom speaks plain HTTP: on loopback no TLS proxy stands in front
    return _netloc(rest, scheme) in (_netloc(host, "http"), _netloc(host, "https"))


def _is_loopback(name: str) -> bool:
    name = name.strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_request(
    policy: SitePolicy, method: str, headers: Mapping[str, str], *, websocket: bool = False
) -> None:
    """Raise HostNotAllowed (421) or CrossSiteRequest (403) for a request a browser may have
    sent on another site's behalf. ``headers`` has lower-case names."""
    host = headers.get("host", "")
    if host and not policy.host_allowed(host):
        raise HostNotAllowed(
            f"Host {host!r} is not a name this server answers to; if it is, start greenroom "
            f"with --allowed-host {host_name(host)}"
        )
    origin = headers.get("origin")
    if origin is None or (method.upper() in SAFE_METHODS and not websocket):
        return
    if policy.origin_allowed(origin) or (host and same_origin(origin, host)):
        return
    what = "WebSocket connections" if websocket else f"{method.upper()} requests"
    raise CrossSiteRequest(
        f"{what} from origin {origin!r} are refused; allow it with --cors-origin {origin}"
    )


def check_json_content_type(content_type: str | None) -> None:
    """Raise UnsupportedMediaType (415) unless the media type is JSON."""
    media = (content_type or "").partition(";")[0].strip().lower()
    json_like = media.startswith("application/") and media.endswith("+json")
    if media == "application/json" or json_like:
        return
    shown = f"{media!r}" if media else "none"
    raise UnsupportedMediaType(
        f"request bodies must be JSON: send Content-Type: application/json (got {shown})"
    )


def check_bearer(header: str, token: str) -> None:
    """Raise Unauthorized unless ``header`` is ``Bearer <token>`` (constant-time compare)."""
    if not header:
        raise Unauthorized("missing Authorization header")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not given:
        raise Unauthorized("invalid Authorization header format")
    if not hmac.compare_digest(given.strip().encode(), token.encode()):
        raise Unauthorized("invalid token")
