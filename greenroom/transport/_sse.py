"""Server-Sent Events bodies: a turn's run stream and a session's event log.

Both are async generators with only synchronous cleanup in ``finally`` (they are closed by
quart when the client leaves), and they never yield inside a cancel scope or nursery.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import trio

from greenroom.actors import LogEntry, RunStream, Subscription

PING = b": ping\n\n"
# Frames already waiting are written as one chunk: one trip through quart, hypercorn and the
# kernel per batch instead of per event (most of the server's CPU per token otherwise).
BATCH = 64
# A subscription's reader takes everything that waits (its whole buffer): committed events
# arrive in bursts, and a reader that pauses between writes must still keep up with them.
LOG_BATCH = 4096
# After a write, a stream waits this long before the next one, so that the events a fast
# model streams meanwhile go out together. The first event after a pause goes out at once.
FLUSH_INTERVAL = 0.002


def frame(entry: LogEntry) -> bytes:
    head = b"id: %d\n" % entry.seq if entry.seq > 0 else b""
    return head + b"data: " + entry.data + b"\n\n"


async def run_events(stream: RunStream) -> AsyncIterator[bytes]:
    """The turn's events; leaving early (client gone) closes the stream, which cancels the
    turn unless it was started with on_disconnect=continue."""
    try:
        async for entry in stream:
            yield b"".join([frame(entry), *map(frame, stream.ready(BATCH))])
            await trio.sleep(FLUSH_INTERVAL)
    finally:
        stream.close()


async def log_events(
    subscription: Subscription, heartbeat: float, stop: trio.Event
) -> AsyncIterator[bytes]:
    """Replay then tail, with a ``: ping`` comment after every ``heartbeat`` seconds of
    silence. Ends after ``session_exited``, when the subscriber is dropped (no
    session_exited: the client resumes with its last id) or when the server stops."""
    try:
        yield b": connected\n\n"
        while not stop.is_set():
            entry = None
            with trio.move_on_after(heartbeat):
                try:
                    entry = await subscription.__anext__()
                except StopAsyncIteration:
                    return
            if entry is None:
                yield PING
            else:
                yield b"".join([frame(entry), *map(frame, subscription.ready(LOG_BATCH))])
                await trio.sleep(FLUSH_INTERVAL)
    finally:
        subscription.close()
