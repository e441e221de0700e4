"""Forwarding a session-scoped request to the node that owns the session (a cluster).

A handler that meets :class:`~greenroom.errors.OwnedElsewhere` has not changed anything: the
claim comes before any command. The request is sent as it came (method, path, query, JSON body,
``Idempotency-Key``, ``Last-Event-ID``) to the owner's advertised URL with ``Greenroom-Hop:
<node>:<incarnation>``, and the answer comes back chunk by chunk (a run's SSE stream too).

- A request that already carries ``Greenroom-Hop`` is never forwarded again: the handler's
  OwnedElsewhere answers 421 ``owned_elsewhere`` with ``owner``. The header grants nothing (it
  only stops forwarding), so it needs no trust of its own.
- A 421 from the peer (ownership moved): look the owner up again and retry once, then 503.
- The owner does not answer (refused, reset, no answer in time): its lease has not expired →
  503 ``owner_unavailable`` with Retry-After = the lease's remaining seconds; it has (or the
  session is free) → the caller runs the request here (:class:`ClaimHere`).

Auth: every node of a cluster has the same bearer token, and the hop carries it (a WebSocket
authenticated by its subprotocol has no Authorization header to pass on). The peer's Host
check passes because each node also answers to the host of its own advertised URL.
"""

from __future__ import annotations

import collections
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Protocol, TypeVar

import attrs
import trio

from greenroom.actors import LogEntry
from greenroom.errors import GreenroomError, OwnedElsewhere, OwnerUnavailable
from greenroom.observe import forward_span, inject

if TYPE_CHECKING:  # httpx is imported when a cluster node builds its Forwarder
    import httpx

T = TypeVar("T")
HOP_HEADER = "Greenroom-Hop"
PASSED_HEADERS = (
    "content-type",
    "idempotency-key",
    "last-event-id",
    "accept",
    "traceparent",  # replaced by this node's forward span while it traces
    "tracestate",
)
RETURNED_HEADERS = (
    "content-type",
    "retry-after",
    "cache-control",
    "www-authenticate",
    "x-accel-buffering",
    "greenroom-run-id",  # a run's id (issue 25)
)
MAX_PEER_CONNECTIONS = 64
MAX_FRAME = 16 * 1024 * 1024  # one SSE frame of a peer's run stream: peers are bounded too


class ClaimHere(Exception):
    """The owner is gone for good (its lease expired): serve the request on this node."""


async def served_here(handler: Callable[[], Awaitable[T]]) -> T:
    """Run the request here after :class:`ClaimHere`; a node that claimed the session in
    between makes it a 503 (retry) rather than a 421 a client cannot act on."""
    try:
        return await handler()
    except OwnedElsewhere:
        raise OwnerUnavailable("the session's ownership is moving between nodes; retry") from None


class OwnerLookup(Protocol):
    """What forwarding needs of the cluster: who owns a session now, and who we are."""

    @property
    def node_id(self) -> str: ...

    @property
    def hop(self) -> str: ...

    async def owner(self, session_id: str) -> tuple[str, str, float] | None:
        """(node id, advertised URL, lease seconds left) of the live owner; None: none."""


@attrs.frozen
class Upstream:
    """A peer's answer: status, headers to pass on, and its body as it arrives."""

    status: int
    headers: Mapping[str, str]
    response: httpx.Response

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self.response.aiter_raw():
                yield chunk
        finally:
            await self.aclose()

    async def read(self, deadline: float) -> bytes:
        try:
            with trio.fail_after(deadline):
                return await self.response.aread()
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True), trio.move_on_after(1):
            await self.response.aclose()


class Forwarder:
    """Sends requests to peers over one keep-alive client (a pool per peer)."""

    def __init__(
        self,
        lookup: OwnerLookup,
        *,
        auth_token: str = "",
        connect_timeout: float = 2.0,
        answer_timeout: float = 30.0,
    ) -> None:
        self.lookup = lookup
        self.auth_token = auth_token
        self.answer_timeout = answer_timeout
        import httpx

        limits = httpx.Limits(max_connections=MAX_PEER_CONNECTIONS)
        # The TCP connect alone has its own bound (a peer that drops SYNs is "down" soon);
        # everything else is bounded by the callers' trio deadlines.
        timeout = httpx.Timeout(None, connect=connect_timeout)
        self._client = httpx.AsyncClient(timeout=timeout, limits=limits, follow_redirects=False)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def send(
        self,
        session_id: str,
        exc: OwnedElsewhere,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes,
    ) -> Upstream:
        """Send the request (``target``: path and query) to the owner ``exc`` names; retry once
        on a 421 with the owner looked up again. Raises OwnerUnavailable, ClaimHere, or
        OwnedElsewhere (421: this node is the owner's own forward target)."""
        owner_url = exc.owner_url
        for attempt in range(2):
            if not owner_url:
                owner_url = await self._refresh(session_id)
            upstream = await self._try(session_id, owner_url, method, target, headers, body)
            if upstream.status != 421 or attempt == 1:
                if upstream.status == 421:
                    await upstream.aclose()
                    raise OwnerUnavailable(
                        "the session's ownership is moving between nodes; retry", retry_after=1
                    )
                return upstream
            await upstream.aclose()
            owner_url = await self._refresh(session_id)
        raise AssertionError("unreachable")

    async def _refresh(self, session_id: str) -> str:
        owner = await self.lookup.owner(session_id)
        if owner is None or owner[0] == self.lookup.node_id:
            raise ClaimHere()
        return owner[1]

    async def _try(
        self,
        session_id: str,
        owner_url: str,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes,
    ) -> Upstream:
        sent = {k: v for k, v in headers.items() if k.lower() in PASSED_HEADERS}
        sent[HOP_HEADER] = self.lookup.hop
        if self.auth_token:
            sent["Authorization"] = f"Bearer {self.auth_token}"
        import httpx

        with forward_span(method, owner_url, target) as traced:
            inject(sent)  # the peer's spans continue this trace (decision 0025)
            request = self._client.build_request(
                method, owner_url.rstrip("/") + target, headers=sent, content=body or None
            )
            try:
                with trio.fail_after(self.answer_timeout):  # until the peer's response headers
                    response = await self._client.send(request, stream=True)
            except (httpx.TransportError, trio.TooSlowError) as error:
                raise await self._unavailable(session_id, error) from None
            traced.set_attribute("http.response.status_code", response.status_code)
        returned = {k: v for k, v in response.headers.items() if k.lower() in RETURNED_HEADERS}
        return Upstream(response.status_code, returned, response)

    async def _unavailable(self, session_id: str, error: Exception) -> GreenroomError:
        owner = await self.lookup.owner(session_id)
        if owner is None or owner[0] == self.lookup.node_id:
            raise ClaimHere()
        retry = max(1, math.ceil(owner[2]))
        return OwnerUnavailable(
            f"node {owner[0]} owns this session and does not answer "
            f"({type(error).__name__}); retry after its lease runs out",
            retry_after=retry,
        )


class RemoteRun:
    """A run stream read from a peer's SSE answer: the entries of ``POST .../agent/...`` as
    the WebSocket's run op sends them (the same iteration as a local RunStream)."""

    def __init__(self, upstream: Upstream) -> None:
        self._chunks = upstream.response.aiter_raw()
        self._buffer = b""
        self._pending: collections.deque[LogEntry] = collections.deque()

    def __aiter__(self) -> RemoteRun:
        return self

    async def __anext__(self) -> LogEntry:
        while not self._pending:
            chunk = await self._chunks.__anext__()  # StopAsyncIteration: the run ended
            self._feed(chunk)
        return self._pending.popleft()

    def ready(self, limit: int) -> list[LogEntry]:
        return [self._pending.popleft() for _ in range(min(limit, len(self._pending)))]

    def close(self) -> None:
        """The caller closes the upstream response."""

    def _feed(self, chunk: bytes) -> None:
        self._buffer += chunk
        *frames, self._buffer = self._buffer.split(b"\n\n")
        if len(self._buffer) > MAX_FRAME:
            raise GreenroomError(f"a peer's run stream sent a frame over {MAX_FRAME} bytes")
        for frame in frames:
            seq, data = 0, b""
            for line in frame.split(b"\n"):
                if line.startswith(b"id: "):
                    seq = int(line[4:])
                elif line.startswith(b"data: "):
                    data = line[6:]
            if data:
                self._pending.append(LogEntry(seq, "", data))
