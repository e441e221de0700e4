"""Decoding a Chat Completions event stream: SSE lines to typed chunks, with msgspec.

The ``openai`` SDK builds a pydantic model for every chunk (about a fifth of the server's CPU
per streamed token, measured in issue 13); this decodes each ``data:`` line straight into the
small :mod:`msgspec` structs below, which hold only the fields the provider reads. Unknown
fields are ignored. Fields whose type differs between servers (``reasoning`` is a string on
most, an object on some; a tool call's ``index`` may be missing) are typed ``Any`` and checked
where they are read. Pure and synchronous: no I/O here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx2
import msgspec


class FunctionDelta(msgspec.Struct):
    name: Any = None
    arguments: Any = None


class ToolCallDelta(msgspec.Struct):
    index: Any = None
    id: Any = None
    function: FunctionDelta | None = None


class Delta(msgspec.Struct):
    content: str | None = None
    reasoning_content: Any = None
    reasoning: Any = None
    tool_calls: list[ToolCallDelta] | None = None


class Choice(msgspec.Struct):
    index: Any = 0
    delta: Delta | None = None
    finish_reason: str | None = None


class PromptDetails(msgspec.Struct):
    cached_tokens: int | None = None
    cache_write_tokens: int | None = None


class CompletionDetails(msgspec.Struct):
    reasoning_tokens: int | None = None


class ChunkUsage(msgspec.Struct):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_tokens_details: PromptDetails | None = None
    completion_tokens_details: CompletionDetails | None = None


class Chunk(msgspec.Struct):
    """One ``chat.completion.chunk`` (or an error object sent inside the stream)."""

    model: str | None = None
    choices: list[Choice] | None = None
    usage: ChunkUsage | None = None
    error: Any = None


_DECODER = msgspec.json.Decoder(Chunk)


class StreamMalformed(ValueError):
    """A ``data:`` line that is not a chunk; the message says why."""


class ChunkReader:
    """Turns the bytes of an event stream, as they arrive, into chunks.

    Only ``data:`` lines matter to Chat Completions (comments, ``event:`` and ``id:`` lines
    are skipped); ``data: [DONE]`` ends the stream (:attr:`done`). An event's data spread over
    several ``data:`` lines is joined with newlines, as the SSE format says.
    """

    def __init__(self) -> None:
        self._pending = b""
        self._data: list[bytes] = []
        self.done = False

    def feed(self, data: bytes) -> list[Chunk]:
        """The chunks completed by ``data``.

        Raises:
            StreamMalformed: an event's data is not a JSON chunk.
        """
        if self.done:
            return []
        buffer = self._pending + data if self._pending else data
        lines = buffer.split(b"\n")
        self._pending = lines.pop()
        chunks: list[Chunk] = []
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:  # an empty line ends an event
                if not self._data:
                    continue
                data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
                self._data = []
                if data.startswith(b"[DONE]"):
                    self.done = True
                    break
                try:
                    chunks.append(_DECODER.decode(data))
                except msgspec.DecodeError as exc:
                    raise StreamMalformed(str(exc)) from exc
            elif line.startswith(b"data:"):
                value = line[5:]
                self._data.append(value[1:] if value.startswith(b" ") else value)
        return chunks


def body_pieces(response: httpx2.Response) -> AsyncIterator[bytes]:
    """The response body as it arrives. Without a content coding, the transport's own byte
    stream: ``aiter_bytes`` would add two generator layers, a decoder and two re-chunkers per
    piece, and a fast model sends a piece per token (decision 0038). With a coding (a gzip'd
    stream), ``aiter_bytes`` decodes it."""
    coding = response.headers.get("content-encoding", "").strip().lower()
    stream = response.stream
    if coding in ("", "identity") and isinstance(stream, httpx2.AsyncByteStream):
        return aiter(stream)
    return aiter(response.aiter_bytes())
