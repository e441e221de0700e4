"""ChunkReader: the bytes of a Chat Completions event stream, in any split, to typed chunks."""

from __future__ import annotations

import json

import pytest

from greenroom.agents.providers._openai_stream import Chunk, ChunkReader, StreamMalformed


def chunk(content: str) -> bytes:
    payload = {"model": "m", "choices": [{"index": 0, "delta": {"content": content}}]}
    return f"data: {json.dumps(payload)}\n\n".encode()


STREAM = b": keep-alive comment\n\n" + chunk("a") + chunk("b\nc") + b"data: [DONE]\n\n"


def contents(chunks: list[Chunk]) -> list[str | None]:
    return [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta]


@pytest.mark.parametrize("size", [1, 2, 7, 64, len(STREAM)])
def test_any_split_of_the_bytes_gives_the_same_chunks(size: int) -> None:
    reader = ChunkReader()
    got: list[Chunk] = []
    for start in range(0, len(STREAM), size):
        got += reader.feed(STREAM[start : start + size])
    assert contents(got) == ["a", "b\nc"]
    assert reader.done


def test_crlf_lines_multi_line_data_and_other_fields() -> None:
    reader = ChunkReader()
    text = (
        b"event: message\r\nid: 7\r\n"
        b'data: {"choices": [{"delta":\r\ndata: {"content": "x"}}],\r\n'
        b'data: "usage": {"prompt_tokens": 3, "completion_tokens": 1}, "extra": [1]}\r\n\r\n'
    )
    (got,) = reader.feed(text)
    assert contents([got]) == ["x"]
    assert got.usage is not None
    assert (got.usage.prompt_tokens, got.usage.completion_tokens) == (3, 1)
    assert not reader.done


def test_nothing_is_read_after_done() -> None:
    reader = ChunkReader()
    assert reader.feed(b"data: [DONE]\n\n" + chunk("late")) == []
    assert reader.done
    assert reader.feed(chunk("later")) == []


def test_lenient_where_servers_differ() -> None:
    reader = ChunkReader()
    odd = {
        "choices": [
            {
                "delta": {
                    "content": None,
                    "reasoning": {"summary": "an object, not text"},
                    "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}],
                },
                "finish_reason": None,
            },
            {"index": 0, "delta": None},
        ],
        "error": None,
    }
    (got,) = reader.feed(f"data: {json.dumps(odd)}\n\n".encode())
    assert got.choices is not None and got.choices[0].delta is not None
    (call,) = got.choices[0].delta.tool_calls or []
    assert call.index is None and call.function is not None and call.function.name == "f"


@pytest.mark.parametrize(
    "data",
    [b"data: {not json\n\n", b'data: {"choices": "many"}\n\n', b"data: [1, 2]\n\n"],
)
def test_data_that_is_not_a_chunk_is_malformed(data: bytes) -> None:
    with pytest.raises(StreamMalformed):
        ChunkReader().feed(data)
