"""What the HTTP tools share: the User-Agent, a body read with a byte limit, URL checks."""

from __future__ import annotations

import platform
import urllib.parse

import httpx

from greenroom import __version__

BODY_LIMIT = 1024 * 1024
USER_AGENT = f"greenroom/{__version__} ({platform.system().lower()}; {platform.machine()})"
ROBOTS_AGENT = "greenroom"


class BadURL(Exception):
    pass


def check_url(url: str) -> str:
    """``url`` if it is an absolute http(s) URL. Raises BadURL with upstream's texts."""
    parts = urllib.parse.urlsplit(url)
    if not parts.scheme or not parts.netloc:
        raise BadURL("invalid URL: missing scheme or host")
    if parts.scheme not in ("http", "https"):
        raise BadURL("only HTTP and HTTPS URLs are supported")
    return url


async def read_limited(response: httpx.Response, limit: int = BODY_LIMIT) -> tuple[bytes, bool]:
    """The first ``limit`` bytes of the body, and whether there was more."""
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body.extend(chunk)
        if len(body) > limit:
            return bytes(body[:limit]), True
    return bytes(body), False
