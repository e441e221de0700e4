"""The LSP base protocol (Content-Length framing), the JSON-RPC connection and text edits, on
in-memory streams: no process, virtual time."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trio.testing

from greenroom.agents.tools._lsp_edits import (
    EditError,
    apply_edits,
    changes_of,
    utf16_column,
)
from greenroom.agents.tools._lsp_rpc import Connection, ConnectionLost, LspError
from greenroom.agents.tools._lsp_wire import MAX_HEADER, FrameError, Reader, encode


def frame(message: Any) -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


async def read_all(data: bytes, *, chunk: int = 1, max_message: int = 1 << 20) -> list[Any]:
    send, receive = trio.testing.memory_stream_one_way_pair()
    reader = Reader(receive, max_message=max_message)
    found: list[Any] = []

    async def feed() -> None:
        for start in range(0, len(data), chunk):
            await send.send_all(data[start : start + chunk])
        await send.aclose()

    broken: FrameError | None = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(feed)
        try:
            while (message := await reader.next()) is not None:
                found.append(message)
        except FrameError as exc:
            broken = exc
            nursery.cancel_scope.cancel()
    if broken is not None:
        raise broken
    return found


async def test_messages_split_anywhere_are_read_whole() -> None:
    first, second = {"id": 1, "result": "é"}, {"method": "x", "params": [1]}
    data = frame(first) + b"Content-Type: x\r\n" + frame(second)
    assert await read_all(data, chunk=1) == [first, second]
    assert await read_all(encode(first) + encode(second), chunk=7) == [first, second]


async def test_a_body_that_is_not_an_object_is_dropped() -> None:
    data = frame([1, 2]) + b"Content-Length: 3\r\n\r\n{x}" + frame({"id": 2})
    assert await read_all(data, chunk=5) == [{"id": 2}]


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"Content-Length: 999999999\r\n\r\n{}", "a message of 999999999 bytes"),
        (b"X-Other: 1\r\n\r\n{}", "without Content-Length"),
        (b"Content-Length: ten\r\n\r\n{}", "bad Content-Length"),
        (b"Content-Length: 10\r\n\r\n{}", "ended inside a message"),
        (b"X: " + b"a" * (MAX_HEADER + 10), "headers longer than"),
    ],
)
async def test_broken_framing_ends_the_connection(data: bytes, why: str) -> None:
    with pytest.raises(FrameError, match=why):
        await read_all(data, chunk=4096)


async def test_requests_answers_and_the_servers_own_requests() -> None:
    to_server_send, to_server_receive = trio.testing.memory_stream_one_way_pair()
    to_client_send, to_client_receive = trio.testing.memory_stream_one_way_pair()
    seen: list[tuple[str, Any]] = []
    conn = Connection(
        to_server_send,
        to_client_receive,
        on_notification=lambda method, params: seen.append((method, params)),
        root_uri="file:///w",
    )
    answers: list[Any] = []

    async def server() -> None:
        reader = Reader(to_server_receive)
        request = await reader.next()
        assert request is not None and request["method"] == "textDocument/hover"
        await to_client_send.send_all(
            frame({"jsonrpc": "2.0", "method": "window/logMessage", "params": {"m": 1}})
            + frame({"jsonrpc": "2.0", "id": 50, "method": "workspace/configuration",
                     "params": {"items": [{}, {}]}})
            + frame({"jsonrpc": "2.0", "id": 51, "method": "workspace/applyEdit", "params": {}})
            + frame({"jsonrpc": "2.0", "id": 52, "method": "custom/thing"})
        )  # fmt: skip
        for _ in range(3):
            answers.append(await reader.next())
        await to_client_send.send_all(frame({"jsonrpc": "2.0", "id": request["id"], "result": 7}))
        second = await reader.next()
        assert second is not None
        error = {"code": -32601, "message": "nope"}
        await to_client_send.send_all(frame({"jsonrpc": "2.0", "id": second["id"], "error": error}))

    with trio.fail_after(5):  # real clock, but nothing here waits on another process
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn.run)
            nursery.start_soon(server)
            assert await conn.request("textDocument/hover", {}) == 7
            with pytest.raises(LspError, match="LSP error -32601: nope"):
                await conn.request("textDocument/definition", {})
            nursery.cancel_scope.cancel()
    assert seen == [("window/logMessage", {"m": 1})]
    assert answers[0]["id"] == 50 and answers[0]["result"] == [None, None]
    assert answers[1]["result"]["applied"] is False
    assert answers[2]["error"]["code"] == -32601


async def test_a_closed_connection_fails_waiting_requests_at_once(autojump_clock: object) -> None:
    to_server_send, _ = trio.testing.memory_stream_one_way_pair()
    to_client_send, to_client_receive = trio.testing.memory_stream_one_way_pair()
    conn = Connection(to_server_send, to_client_receive, on_notification=lambda m, p: None)

    async def die() -> None:
        await trio.sleep(1)  # virtual time (autojump): after the request is sent
        await to_client_send.aclose()

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn.run)
            nursery.start_soon(die)
            with pytest.raises(ConnectionLost):
                await conn.request("textDocument/hover", {})
    with pytest.raises(ConnectionLost):
        await conn.notify("initialized", {})


def test_columns_are_counted_in_utf16_units() -> None:
    text = "a = '😀x'\r\nb\n"
    assert utf16_column(text, 0, 5) == 5
    assert utf16_column(text, 0, 6) == 7  # the emoji takes two UTF-16 units
    assert utf16_column(text, 1, 0) == 0
    assert utf16_column(text, 9, 3) == 3  # past the end: as given


def edit(line: int, start: int, end_line: int, end: int, new: str) -> dict[str, Any]:
    return {
        "range": {
            "start": {"line": line, "character": start},
            "end": {"line": end_line, "character": end},
        },
        "newText": new,
    }


def test_edits_apply_from_last_to_first_on_the_original_text() -> None:
    text = "s = '😀ab'\r\nprint(s)\r\n"
    edits = [edit(0, 0, 0, 1, "name"), edit(1, 6, 1, 7, "name"), edit(0, 7, 0, 8, "X")]
    assert apply_edits(text, edits) == "name = '😀Xb'\r\nprint(name)\r\n"
    assert apply_edits("a\n", [edit(5, 0, 9, 0, "tail\n")]) == "a\ntail\n"


def test_bad_edits_are_refused() -> None:
    with pytest.raises(EditError, match="overlap"):
        apply_edits("abcdef", [edit(0, 0, 0, 3, "x"), edit(0, 2, 0, 4, "y")])
    with pytest.raises(EditError, match="bad position"):
        apply_edits("abc", [edit(-1, 0, 0, 1, "x")])
    with pytest.raises(EditError, match="creates, renames or deletes"):
        changes_of({"documentChanges": [{"kind": "delete", "uri": "file:///x"}]})
    found = changes_of(
        {"documentChanges": [{"textDocument": {"uri": "file:///a", "version": 1}, "edits": []}]}
    )
    assert found == {"file:///a": []}
