"""The chat page: ``GET /`` and ``GET /ui/<name>`` from the files of :mod:`greenroom.web`.

The page needs no token to load (it asks for one and sends it with its API calls). Every file
is served with a strict Content-Security-Policy (no inline script or style, same-origin
connections only) and ``nosniff``; the files are read once, on the page's first request.
"""

from __future__ import annotations

import functools

from quart import Response
from quart_trio import QuartTrio

from greenroom.web import static_files

UI_PREFIX = "/ui/"
CSP = "; ".join(
    [
        "default-src 'self'",
        "connect-src 'self'",
        "img-src 'self' data:",
        "style-src 'self'",
        "script-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)
PAGE_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def is_page_path(path: str) -> bool:
    """Paths of the page itself, served without a token."""
    return path == "/" or path.startswith(UI_PREFIX)


def register_page(app: QuartTrio) -> None:
    files = functools.cache(static_files)

    def serve(name: str) -> Response:
        found = files().get(name)
        if found is None:
            body = b'{"message": "no such file", "code": "route_not_found"}'
            return Response(body, 404, content_type="application/json")
        data, content_type = found
        return Response(data, 200, PAGE_HEADERS, content_type=content_type)

    @app.get("/")
    async def index() -> Response:
        return serve("index.html")

    @app.get(UI_PREFIX + "<name>")
    async def ui_file(name: str) -> Response:
        return serve(name)
