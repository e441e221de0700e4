"""An in-test TCP proxy (trio, no dependency) between one node and PostgreSQL, to cut the node
off from the database while everything else keeps working: a database-only partition.

``pause()`` stops forwarding in both directions and holds every connection open (new ones are
accepted and held too), as a network that silently drops packets would; ``resume()`` lets the
held bytes through; ``cut()`` closes every connection (the node sees its sockets reset).
"""

from __future__ import annotations

import trio


class Proxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self._flowing = trio.Event()
        self._flowing.set()
        self._scopes: set[trio.CancelScope] = set()

    @property
    def paused(self) -> bool:
        return not self._flowing.is_set()

    def pause(self) -> None:
        if self._flowing.is_set():
            self._flowing = trio.Event()

    def resume(self) -> None:
        self._flowing.set()

    def cut(self) -> None:
        for scope in list(self._scopes):
            scope.cancel()

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on 127.0.0.1 (any free port, in ``port``) until cancelled."""
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            task_status.started(self.port)
            await trio.serve_listeners(self._connection, listeners, handler_nursery=nursery)

    async def _connection(self, client: trio.SocketStream) -> None:
        scope = trio.CancelScope()
        self._scopes.add(scope)
        try:
            with scope:
                await self._flowing.wait()  # a paused proxy holds new connections too
                upstream = await trio.open_tcp_stream(*self.upstream)
                async with upstream, client, trio.open_nursery() as nursery:
                    nursery.start_soon(self._pump, client, upstream, nursery.cancel_scope)
                    nursery.start_soon(self._pump, upstream, client, nursery.cancel_scope)
        except OSError:
            pass  # upstream refused or a side reset: the connection just ends
        finally:
            self._scopes.discard(scope)
            await trio.aclose_forcefully(client)

    async def _pump(
        self, source: trio.SocketStream, sink: trio.SocketStream, both: trio.CancelScope
    ) -> None:
        try:
            while data := await source.receive_some(65536):
                await self._flowing.wait()  # paused: the bytes wait here, the socket stays open
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        both.cancel()  # one side ended: end the other
