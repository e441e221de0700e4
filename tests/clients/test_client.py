"""The client core's pieces on their own: the SSE parser, errors, an unreachable server, the
exported names. (Its behaviour against a real server is in test_harness.py.)"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio

from greenroom.client import ApiError, GreenroomClient, Unreachable
from greenroom.client._sse import Frame, SSEParser  # white-box: the parser on its own
from tests.slowness import slow


async def lines(*items: str) -> AsyncIterator[str]:
    for item in items:
        await trio.lowlevel.checkpoint()
        yield item


async def parse(*items: str) -> list[Frame]:
    return [frame async for frame in SSEParser(lines(*items))]


async def test_frames_with_ids_comments_and_retry_only() -> None:
    frames = await parse(
        ": connected",
        "",
        "retry: 1000",
        "",
        "id: 7",
        'data: {"type": "agent_choice",',
        'data:  "content": "hi"}',
        "",
        "id: 8\r",
        'data: {"type": "stream_stopped"}\r',
        "\r",
        ": ping",
        "",
    )
    assert frames == [
        Frame(None, None),
        Frame(None, None),  # retry-only: no data, never a JSON error
        Frame(7, {"type": "agent_choice", "content": "hi"}),
        Frame(8, {"type": "stream_stopped"}),
        Frame(None, None),
    ]


async def test_a_last_frame_without_its_blank_line_is_kept() -> None:
    assert await parse("id: 1", 'data: {"type": "gap"}') == [Frame(1, {"type": "gap"})]


async def test_data_that_is_not_json_is_no_event() -> None:
    assert await parse("data: {not json", "") == [Frame(None, None)]


def test_api_error_keeps_status_code_and_path() -> None:
    error = ApiError(400, {"message": "bad", "code": "invalid_request", "path": "$.x"})
    assert (error.status, error.code, error.path, error.message) == (
        400,
        "invalid_request",
        "$.x",
        "bad",
    )
    assert str(error) == "400 invalid_request: bad"
    assert ApiError(502, "not json").message == "HTTP 502"


async def test_unreachable_server() -> None:
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    await listener.aclose()  # nothing listens there now
    async with GreenroomClient(f"http://127.0.0.1:{port}") as client:
        with trio.fail_after(slow(10)), pytest.raises(Unreachable):
            await client.sessions()
