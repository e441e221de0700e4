"""The chat page: static files (HTML, ES modules, CSS) served at ``/`` by the transport.

Nothing here runs on the server: the page is plain files with no build step, and it talks to
greenroom only through the public HTTP and WebSocket API, as any other client.
"""

from __future__ import annotations

from importlib.resources import files
from importlib.resources.abc import Traversable

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}


def static_files() -> dict[str, tuple[bytes, str]]:
    """Every file of the page by name: its bytes and content type (read once, at start)."""
    root: Traversable = files(__name__) / "static"
    found: dict[str, tuple[bytes, str]] = {}
    for entry in root.iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if entry.is_file() and suffix in CONTENT_TYPES:
            found[entry.name] = (entry.read_bytes(), CONTENT_TYPES[suffix])
    return found


__all__ = ["CONTENT_TYPES", "static_files"]
