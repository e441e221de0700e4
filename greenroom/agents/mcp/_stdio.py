"""The stdio transport of a local MCP server: a child process speaking JSON-RPC, one message a
line, on its stdin and stdout.

Ours rather than the SDK's ``stdio_client``, because a server must not be able to hurt the
session: a line longer than :data:`MAX_LINE` ends the connection instead of growing a buffer
without bound, stderr is drained into a small tail (kept for the start-failure warning) so a
chatty server never blocks on a full pipe, and the server runs in its own process group, so
stopping it stops its children too. Stopping is bounded and shielded: close stdin, wait, SIGTERM
the group, wait, SIGKILL the group, wait (which reaps it).

The SDK's :class:`~mcp.ClientSession` reads :class:`~mcp.shared.message.SessionMessage` values
(or the exception a bad line produced) from the read stream and writes to the write stream.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import attrs
import mcp_types
import trio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from ..tools import _watchdog

log = logging.getLogger(__name__)

MAX_LINE = 8 * 1024 * 1024
"""Bytes one JSON-RPC line may take; a longer one ends the connection."""
STDERR_TAIL = 4096
"""Bytes of the server's stderr kept (the last ones), for the warning when it fails."""
EXIT_GRACE = 2.0
"""Seconds a server gets to exit after its stdin closes, and again after SIGTERM."""
STREAM_BUFFER = 16


class LineTooLong(Exception):
    """The server wrote a line longer than MAX_LINE (the connection ends)."""


@attrs.define(eq=False)
class StdioChannel:
    """An open connection to a server process."""

    read: MemoryObjectReceiveStream[SessionMessage | Exception]
    write: MemoryObjectSendStream[SessionMessage]
    process: trio.Process
    closed: trio.Event = attrs.field(factory=trio.Event)
    """Set when the server's stdout ended (it exited or closed it): the connection is over."""
    stderr: bytearray = attrs.field(factory=bytearray)

    def stderr_tail(self) -> str:
        text = self.stderr.decode(errors="replace").strip()
        return text.splitlines()[-1] if text else ""


def parse_line(line: bytes) -> SessionMessage | Exception:
    """One line of the server's stdout as a message, or the exception that says why not."""
    try:
        message = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except (ValidationError, ValueError) as exc:
        return exc
    return SessionMessage(message)


def _signal_group(process: trio.Process, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


async def stop_process(process: trio.Process, grace: float = EXIT_GRACE) -> None:
    """Close stdin, then SIGTERM and at last SIGKILL the process group; waits (and so reaps).

    Shielded and bounded: safe to await in a cancelled task.
    """
    with trio.CancelScope(shield=True):
        if process.stdin is not None:
            with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError, OSError):
                await process.stdin.aclose()
        with trio.move_on_after(grace):
            await process.wait()
        if process.returncode is None:
            _signal_group(process, signal.SIGTERM)
            with trio.move_on_after(grace):
                await process.wait()
        if process.returncode is None:
            _signal_group(process, signal.SIGKILL)
            with trio.move_on_after(grace):
                await process.wait()
        else:
            # The server is gone; children it left in its group go too.
            _signal_group(process, signal.SIGKILL)
        if process.returncode is None:
            log.warning("MCP server process %d survived SIGKILL", process.pid)
        _watchdog.release(process.pid)


async def spawn(
    command: str, args: Sequence[str], *, env: Mapping[str, str], cwd: str | Path
) -> trio.Process:
    """Start a server process in its own process group, all three pipes connected.

    Enter :func:`open_stdio` with it at once (no ``await`` between): it stops the process.

    Raises:
        OSError: the command could not be started (not found, not executable, bad directory).
    """
    process = await trio.lowlevel.open_process(
        [command, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=str(cwd),
        env=dict(env),
        start_new_session=True,
    )
    _watchdog.watch(process.pid)  # killed with its group if this server dies (issue 23)
    return process


@asynccontextmanager
async def open_stdio(
    process: trio.Process, *, max_line: int = MAX_LINE
) -> AsyncIterator[StdioChannel]:
    """Yield the channel of a spawned server; on exit the server is stopped (see module doc)."""
    read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](
        STREAM_BUFFER
    )
    write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](STREAM_BUFFER)
    channel = StdioChannel(read_recv, write_send, process)

    async def read_stdout() -> None:
        stream = process.stdout
        assert stream is not None
        pending = bytearray()
        try:
            async with read_send:
                while chunk := await stream.receive_some(65536):
                    pending.extend(chunk)
                    while (end := pending.find(b"\n")) >= 0:
                        line = bytes(pending[:end])
                        del pending[: end + 1]
                        if line.strip():
                            await read_send.send(parse_line(line))
                    if len(pending) > max_line:
                        await read_send.send(LineTooLong(f"a line longer than {max_line} bytes"))
                        return
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass  # the session is gone
        except (trio.ClosedResourceError, trio.BrokenResourceError, OSError):
            pass  # our own shutdown closed the pipe
        finally:
            channel.closed.set()

    async def write_stdin() -> None:
        stream = process.stdin
        assert stream is not None
        try:
            async with write_recv:
                async for message in write_recv:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await stream.send_all(data.encode() + b"\n")
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            # The server stopped reading: end the read side too, so no request waits forever.
            await read_send.aclose()

    async def drain_stderr() -> None:
        stream = process.stderr
        assert stream is not None
        with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError, OSError):
            while chunk := await stream.receive_some(65536):
                channel.stderr.extend(chunk)
                del channel.stderr[:-STDERR_TAIL]

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read_stdout)
            nursery.start_soon(write_stdin)
            nursery.start_soon(drain_stderr)
            try:
                yield channel
            finally:
                await stop_process(process)
                nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            for stream in (process.stdout, process.stderr):
                if stream is not None:
                    with contextlib.suppress(trio.ClosedResourceError, OSError):
                        await stream.aclose()
