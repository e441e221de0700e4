"""The model endpoints' HTTP clients: one long-lived, pooled client per endpoint, shared.

Building an SDK client builds an ``httpx2`` client, and that builds an SSL context (even for an
``http://`` endpoint): about a millisecond of CPU, and no connection survives it. So a server
keeps one :class:`ModelClients` for its whole life (``serve`` opens it around the registry, the
runtime factory hands it to every provider) and each model call *leases* the client of its
endpoint: keep-alive connections to the model server are reused across calls and sessions.

An endpoint is an API kind plus a base URL; it has one ``httpx2.AsyncClient`` (its connection
pool) and, per API key, one SDK client over it (an SDK client holds no connection of its own).
Sharing is safe under trio: the pool is ``httpcore``'s, which waits and locks through anyio; a
call cancelled mid-stream closes its own connection, never a neighbour's (tested with many
concurrent, partly cancelled turns on one client).

Every size is bounded: at most ``max_endpoints`` endpoints (the least recently used one that no
call holds is closed to make room; one still in use is closed when its last call ends), at
most ``MAX_KEYS`` SDK clients per endpoint, and each endpoint's connections by ``LIMITS``.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import attrs
import httpx2
import trio

from greenroom.errors import ModelError
from greenroom.observe import inject_request_hook

if TYPE_CHECKING:  # each SDK is imported by the first lease of its kind
    import anthropic as anthropic_sdk
    import openai as openai_sdk
    from google import genai

Api = Literal["openai", "anthropic", "google", "http"]
T = TypeVar("T")

MAX_ENDPOINTS = 64
MAX_KEYS = 8
"""SDK clients kept per endpoint (one per API key seen); more keys than this replace the
least recently used one (an SDK client over our HTTP client owns nothing to close)."""
CONNECT_TIMEOUT = 30.0
LIMITS = httpx2.Limits(max_connections=256, max_keepalive_connections=64, keepalive_expiry=60.0)
"""Per endpoint: connections open at once (more calls wait for one), idle ones kept."""
CLOSE_BUDGET = 5.0
"""Seconds closing one endpoint's connections may take (shielded)."""


@attrs.frozen
class ClientStatistics:
    """What the pool holds now, and what it has built since it opened."""

    endpoints: int
    leases: int
    http_clients_built: int
    sdk_clients_built: int
    closed: bool


@attrs.define(eq=False)
class _Endpoint:
    http: httpx2.AsyncClient
    sdks: collections.OrderedDict[str, Any] = attrs.Factory(collections.OrderedDict)
    leases: int = 0
    evicted: bool = False


class ModelClients:
    """The pooled clients of every model endpoint; see the module docstring.

    Use it through :func:`open_model_clients` (or call :meth:`aclose`); each provider leases
    with ``async with clients.openai(base_url, key) as client:`` (and ``anthropic``,
    ``google``, ``http`` likewise) around one model call, retries included.
    """

    def __init__(self, *, max_endpoints: int = MAX_ENDPOINTS, limits: httpx2.Limits = LIMITS):
        if max_endpoints < 1:
            raise ValueError("max_endpoints must be at least 1")
        self._max_endpoints = max_endpoints
        self._limits = limits
        self._endpoints: collections.OrderedDict[tuple[Api, str], _Endpoint] = (
            collections.OrderedDict()
        )
        self._leases = 0
        self._http_built = 0
        self._sdk_built = 0
        self._closed = False

    def statistics(self) -> ClientStatistics:
        return ClientStatistics(
            endpoints=len(self._endpoints),
            leases=self._leases,
            http_clients_built=self._http_built,
            sdk_clients_built=self._sdk_built,
            closed=self._closed,
        )

    # --- leases -----------------------------------------------------------------------

    def openai(
        self, base_url: str, key: str
    ) -> contextlib.AbstractAsyncContextManager[openai_sdk.AsyncOpenAI]:
        """Lease the ``openai.AsyncOpenAI`` of ``base_url`` with ``key`` (SDK retries off)."""
        import openai as openai_sdk

        def build(http: httpx2.AsyncClient) -> openai_sdk.AsyncOpenAI:
            return openai_sdk.AsyncOpenAI(
                base_url=base_url, api_key=key, max_retries=0, http_client=http
            )

        return self._lease("openai", base_url, key, build)

    def anthropic(
        self, base_url: str, key: str
    ) -> contextlib.AbstractAsyncContextManager[anthropic_sdk.AsyncAnthropic]:
        """Lease the ``anthropic.AsyncAnthropic`` of ``base_url`` with ``key``."""
        import anthropic as anthropic_sdk

        def build(http: httpx2.AsyncClient) -> anthropic_sdk.AsyncAnthropic:
            return anthropic_sdk.AsyncAnthropic(
                base_url=base_url, api_key=key, max_retries=0, http_client=http
            )

        return self._lease("anthropic", base_url, key, build)

    def google(
        self, base_url: str, key: str
    ) -> contextlib.AbstractAsyncContextManager[genai.Client]:
        """Lease the ``genai.Client`` of ``base_url`` with ``key`` (its retries off).

        The Gemini SDK keeps a connection pool per asyncio loop unless it is handed an async
        client, and builds a sync one (with its own SSL context) unless handed one too: it gets
        ours for async calls and a never-used sync client made once per SDK client.
        """
        from google import genai
        from google.genai import types as genai_types

        def build(http: httpx2.AsyncClient) -> genai.Client:
            options = genai_types.HttpOptions(
                base_url=base_url,
                httpx_async_client=http,
                httpx_client=_unused_sync_client(),
                retry_options=genai_types.HttpRetryOptions(attempts=1),
            )
            return genai.Client(api_key=key, vertexai=False, http_options=options)

        return self._lease("google", base_url, key, build)

    def http(self, base_url: str) -> contextlib.AbstractAsyncContextManager[httpx2.AsyncClient]:
        """Lease the plain ``httpx2.AsyncClient`` of ``base_url`` (Bedrock signs its own)."""
        return self._lease("http", base_url, "", lambda http: http)

    @contextlib.asynccontextmanager
    async def _lease(
        self, api: Api, base_url: str, key: str, build: Callable[[httpx2.AsyncClient], T]
    ) -> AsyncIterator[T]:
        # Synchronous from lookup to lease: no other task can evict or close it in between.
        endpoint, evicted = self._acquire(api, base_url)
        try:
            client = self._sdk(endpoint, key, build)
            for old in evicted:
                await _close(old)
            yield client
        finally:
            endpoint.leases -= 1
            self._leases -= 1
            if endpoint.evicted and endpoint.leases == 0:
                await _close(endpoint)

    def _acquire(self, api: Api, base_url: str) -> tuple[_Endpoint, list[_Endpoint]]:
        if self._closed:
            raise ModelError("the model clients are closed: the server is shutting down")
        endpoint = self._endpoints.get((api, base_url))
        evicted: list[_Endpoint] = []
        if endpoint is None:
            evicted = list(self._make_room())
            timeout = httpx2.Timeout(None, connect=CONNECT_TIMEOUT)
            hooks = {"request": [inject_request_hook]}  # traceparent (decision 0025)
            client = httpx2.AsyncClient(timeout=timeout, limits=self._limits, event_hooks=hooks)
            endpoint = _Endpoint(client)
            self._http_built += 1
            self._endpoints[(api, base_url)] = endpoint
        else:
            self._endpoints.move_to_end((api, base_url))
        endpoint.leases += 1
        self._leases += 1
        return endpoint, evicted

    def _make_room(self) -> Iterator[_Endpoint]:
        """Evict least recently used endpoints until one more fits; yields the idle ones
        (to close now: one still leased is closed by its last lease)."""
        while len(self._endpoints) >= self._max_endpoints:
            _, old = self._endpoints.popitem(last=False)
            old.evicted = True
            if old.leases == 0:
                yield old

    def _sdk(self, endpoint: _Endpoint, key: str, build: Callable[[httpx2.AsyncClient], T]) -> T:
        client: T | None = endpoint.sdks.get(key)
        if client is None:
            client = build(endpoint.http)
            self._sdk_built += 1
            endpoint.sdks[key] = client
            while len(endpoint.sdks) > MAX_KEYS:
                endpoint.sdks.popitem(last=False)
        else:
            endpoint.sdks.move_to_end(key)
        return client

    # --- lifetime ---------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close every idle endpoint now; one still leased closes when its last call ends.
        Leasing afterwards raises ModelError."""
        self._closed = True
        endpoints = list(self._endpoints.values())
        self._endpoints.clear()
        for endpoint in endpoints:
            endpoint.evicted = True
            if endpoint.leases == 0:
                await _close(endpoint)


async def _close(endpoint: _Endpoint) -> None:
    endpoint.sdks.clear()
    with trio.move_on_after(CLOSE_BUDGET, shield=True):
        await endpoint.http.aclose()


class _NoSyncCalls(httpx2.BaseTransport):
    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        raise RuntimeError("greenroom calls the Gemini SDK's async API only")


_SYNC_CLIENT: httpx2.Client | None = None


def _unused_sync_client() -> httpx2.Client:
    """The sync client every Gemini SDK client holds and never uses: made once, with a
    transport that refuses requests (so no TLS setup) and no proxy lookups."""
    global _SYNC_CLIENT
    if _SYNC_CLIENT is None:
        _SYNC_CLIENT = httpx2.Client(transport=_NoSyncCalls(), trust_env=False)
    return _SYNC_CLIENT


@contextlib.asynccontextmanager
async def lease(
    clients: ModelClients | None,
    pick: Callable[[ModelClients], contextlib.AbstractAsyncContextManager[T]],
) -> AsyncIterator[T]:
    """``pick(clients)``'s lease; with no pool, the same from a pool of one call's own."""
    if clients is not None:
        async with pick(clients) as client:
            yield client
        return
    async with open_model_clients(max_endpoints=1) as own, pick(own) as client:
        yield client


@contextlib.asynccontextmanager
async def open_model_clients(
    *, max_endpoints: int = MAX_ENDPOINTS, limits: httpx2.Limits = LIMITS
) -> AsyncIterator[ModelClients]:
    """A :class:`ModelClients` for the duration of the block, closed on the way out."""
    clients = ModelClients(max_endpoints=max_endpoints, limits=limits)
    try:
        yield clients
    finally:
        await clients.aclose()
