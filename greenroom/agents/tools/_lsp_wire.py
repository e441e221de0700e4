"""The base protocol of a language server: JSON-RPC messages framed by ``Content-Length`` headers.

Each message is ``Content-Length: N\\r\\n`` (other headers allowed and ignored), an empty line,
then N bytes of UTF-8 JSON. Written by hand on trio streams (decision 0030): the maintained
Python clients (pygls) run on asyncio. A server cannot hurt the session through the framing:
headers longer than :data:`MAX_HEADER` or a body longer than :data:`MAX_MESSAGE` end the
connection instead of growing a buffer; a body that is not a JSON object is dropped.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import trio

log = logging.getLogger(__name__)

MAX_HEADER = 8 * 1024
"""Bytes the headers of one message may take."""
MAX_MESSAGE = 32 * 1024 * 1024
"""Bytes one message body may take (a workspace's symbols can be large)."""
CHUNK = 65536


class FrameError(Exception):
    """The server broke the framing; the connection ends."""


def encode(message: dict[str, Any]) -> bytes:
    """One message, framed."""
    body = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


class Reader:
    """Reads framed messages from a stream."""

    def __init__(self, stream: trio.abc.ReceiveStream, *, max_message: int = MAX_MESSAGE) -> None:
        self._stream = stream
        self._buffer = bytearray()
        self._max = max_message
        self._eof = False

    async def _fill(self) -> bool:
        """Read more into the buffer; False at end of stream."""
        if self._eof:
            return False
        chunk = await self._stream.receive_some(CHUNK)
        if not chunk:
            self._eof = True
            return False
        self._buffer.extend(chunk)
        return True

    async def _headers(self) -> int | None:
        """The body length of the next message; None at a clean end of stream."""
        while (end := self._buffer.find(b"\r\n\r\n")) < 0:
            if len(self._buffer) > MAX_HEADER:
                raise FrameError(f"headers longer than {MAX_HEADER} bytes")
            if not await self._fill():
                if self._buffer.strip():
                    raise FrameError("the stream ended inside a message's headers")
                return None
        if end > MAX_HEADER:
            raise FrameError(f"headers longer than {MAX_HEADER} bytes")
        head = bytes(self._buffer[:end]).decode("ascii", errors="replace")
        del self._buffer[: end + 4]
        length: int | None = None
        for line in head.split("\r\n"):
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                try:
                    length = int(value.strip())
                except ValueError:
                    raise FrameError(f"bad Content-Length {value.strip()!r}") from None
        if length is None or length < 0:
            raise FrameError("a message without Content-Length")
        if length > self._max:
            raise FrameError(f"a message of {length} bytes (at most {self._max})")
        return length

    async def next(self) -> dict[str, Any] | None:
        """The next message that is a JSON object; None when the stream ended.

        Raises:
            FrameError: the framing is broken (the caller ends the connection).
        """
        while True:
            length = await self._headers()
            if length is None:
                return None
            while len(self._buffer) < length:
                if not await self._fill():
                    raise FrameError("the stream ended inside a message")
            body = bytes(self._buffer[:length])
            del self._buffer[:length]
            try:
                message = json.loads(body)
            except ValueError as exc:
                log.warning("LSP server sent a body that is not JSON: %s", exc)
                continue
            if isinstance(message, dict):
                return message
            log.warning("LSP server sent a message that is not an object")
