"""The partition proxy on its own: it forwards, holds bytes while paused, closes on a cut."""

from __future__ import annotations

import pytest
import trio

from tests.cluster._proxy import Proxy
from tests.slowness import slow

pytestmark = pytest.mark.cluster


async def echo(stream: trio.SocketStream) -> None:
    async with stream:
        try:
            while data := await stream.receive_some(1024):
                await stream.send_all(data)
        except trio.BrokenResourceError:
            pass


async def test_forward_pause_resume_cut() -> None:
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(trio.serve_tcp, echo, 0)
        upstream_port = listeners[0].socket.getsockname()[1]
        proxy = Proxy("127.0.0.1", upstream_port)
        port = await nursery.start(proxy.serve)
        with trio.fail_after(slow(10)):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            await stream.send_all(b"one")
            assert await stream.receive_some(1024) == b"one"
            proxy.pause()
            await stream.send_all(b"two")
            # real clock: nothing may arrive while paused
            with trio.move_on_after(slow(0.3)) as held:
                await stream.receive_some(1024)
            assert held.cancelled_caught
            proxy.resume()
            assert await stream.receive_some(1024) == b"two"
            proxy.cut()
            assert await stream.receive_some(1024) == b""  # closed by the proxy
            await stream.aclose()
        nursery.cancel_scope.cancel()
