"""greenroom's Python client: the HTTP API as async methods, event logs that resume.

It talks to a server only through the public HTTP API, runs on trio or asyncio (anyio), and
is what ``greenroom chat`` and :mod:`greenroom.testing` are built on::

    async with GreenroomClient("http://127.0.0.1:8080") as client:
        session = await client.create_session()
        async with client.events(session["id"], 0) as events:
            await client.run(session["id"], "hello")
            for event in await events.until("stream_stopped"):
                print(event.type, event.data)
"""

from ._client import GreenroomClient as GreenroomClient
from ._errors import (
    ApiError as ApiError,
    ClientError as ClientError,
    Unreachable as Unreachable,
)
from ._events import (
    ConnectionState as ConnectionState,
    Event as Event,
    EventStream as EventStream,
)

__all__ = [
    "ApiError",
    "ClientError",
    "ConnectionState",
    "Event",
    "EventStream",
    "GreenroomClient",
    "Unreachable",
]
