"""The webhook allow-list (issue 25, decision 0027), a pure check the transport applies to
a run's body and the deliverer before every attempt: a run's ``webhook`` must be under one of the
operator's ``--webhook-allow`` prefixes, compared as parsed, normalised URLs — never as raw
strings, so ``http://allowed.example@evil/`` (userinfo) or ``http://allowed.example.evil/``
(another host) cannot pass.

A URL is refused unless it is ``http``/``https`` with a plain host name or IP address, no
userinfo, no whitespace, control characters or backslashes, and a path without dot segments
(``..``, ``.``) or their percent-encodings (``%2e``, ``%2f``, ``%5c``). It then passes when
scheme, host and port (the default one filled in) equal a prefix's and its path is the
prefix's path or below it at a segment boundary. The normalised URL is what is stored and
called; the deliverer checks it again before each attempt and never follows redirects.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from urllib.parse import urlsplit

import attrs

from greenroom.errors import ConfigError, InvalidRequest

MAX_URL = 2048
_PORTS = {"http": 80, "https": 443}
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_HOST = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*$")
_ENCODED = re.compile(r"%(?:2e|2f|5c)", re.IGNORECASE)  # an encoded ".", "/" or "\"


@attrs.frozen
class WebhookPrefix:
    """A parsed, normalised URL (an allowed prefix, or a checked target)."""

    scheme: str
    host: str  # lower case, no trailing dot; an IPv6 address in brackets
    port: int
    path: str
    query: str = ""

    @property
    def url(self) -> str:
        netloc = self.host if _PORTS[self.scheme] == self.port else f"{self.host}:{self.port}"
        return f"{self.scheme}://{netloc}{self.path}" + (f"?{self.query}" if self.query else "")

    def covers(self, target: WebhookPrefix) -> bool:
        if (self.scheme, self.host, self.port) != (target.scheme, target.host, target.port):
            return False
        base = self.path if self.path.endswith("/") else self.path + "/"
        return target.path == self.path or target.path.startswith(base)


def _host(name: str | None) -> str:
    if not name:
        raise ValueError("it names no host")
    name = name.lower()
    if name.endswith(".") and not name.endswith(".."):
        name = name[:-1]
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        if not _HOST.match(name):
            raise ValueError(f"host {name!r} is not a plain host name") from None
        return name
    return f"[{address.compressed}]" if address.version == 6 else address.compressed


def parse_url(url: str) -> WebhookPrefix:
    """``url`` normalised; ValueError saying why it cannot be a webhook."""
    if not url or len(url) > MAX_URL:
        raise ValueError(f"it must be 1 to {MAX_URL} characters")
    if any(ch <= " " or ch == "\x7f" or ch == "\\" for ch in url):
        raise ValueError("it holds whitespace, control characters or backslashes")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in _PORTS:
        raise ValueError("it must be an http:// or https:// URL")
    if "@" in parts.netloc:
        raise ValueError("it must not carry a user name or password")
    host = _host(parts.hostname)
    try:
        port = parts.port or _PORTS[scheme]
    except ValueError:
        raise ValueError("its port is not a number from 1 to 65535") from None
    path = parts.path or "/"
    if _ENCODED.search(path) or any(s in (".", "..") for s in path.split("/")):
        raise ValueError("its path holds dot segments or encoded separators")
    return WebhookPrefix(scheme, host, port, path, parts.query)


def parse_webhook_allow(prefixes: Iterable[str]) -> tuple[WebhookPrefix, ...]:
    """The operator's ``--webhook-allow`` prefixes; ConfigError names an unusable one."""
    parsed = []
    for prefix in prefixes:
        try:
            allowed = parse_url(prefix.strip())
        except ValueError as exc:
            raise ConfigError(f"--webhook-allow {prefix!r}: {exc}") from None
        if allowed.query:
            raise ConfigError(f"--webhook-allow {prefix!r}: a prefix has no query")
        parsed.append(allowed)
    return tuple(parsed)


def check_webhook(url: str, allow: tuple[WebhookPrefix, ...]) -> str:
    """The normalised ``url`` when an allowed prefix covers it; else InvalidRequest naming
    ``$.webhook`` (400)."""
    if not allow:
        raise InvalidRequest(
            "$.webhook: this server sends no webhooks (its operator allowed none with "
            "--webhook-allow)",
            path="$.webhook",
        )
    try:
        target = parse_url(url)
    except ValueError as exc:
        message = f"$.webhook: not a usable webhook URL: {exc}"
        raise InvalidRequest(message, path="$.webhook") from None
    if not any(prefix.covers(target) for prefix in allow):
        raise InvalidRequest(
            "$.webhook: the URL is not under any prefix this server allows (--webhook-allow)",
            path="$.webhook",
        )
    return target.url


__all__ = ["WebhookPrefix", "check_webhook", "parse_url", "parse_webhook_allow"]
