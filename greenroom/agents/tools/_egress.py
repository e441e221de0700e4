"""The egress policy of network tools: no loopback, private, link-local, multicast or other
non-public address, unless the operator allows a network (issue 23; decision 0021).

The check is made on the *resolved* address, inside the connection: :class:`GuardedTransport`
is an httpx transport whose network backend resolves the host itself, checks every address the
name resolves to (one refused address refuses the name: a DNS answer mixing a public and a
private address is how rebinding attacks start), and connects to a checked address literal, so
nothing resolves the name a second time (no time-of-check/time-of-use gap). Each redirect hop
opens its own connection, so each hop is checked; TLS still verifies the URL's host name.
Spellings do not matter: ``2130706433``, ``0177.0.0.1``, ``0x7f.1``, ``[::ffff:127.0.0.1]`` all
resolve to 127.0.0.1 first. IPv4-mapped, NAT64 (64:ff9b::/96) and 6to4 IPv6 addresses are
judged by the IPv4 address inside. Environment proxies are not used (a proxy would resolve
the name itself).

A refusal raises :class:`EgressRefused` (an ``httpx.ConnectError``): the tool's result says
which address was refused, why, and how to allow it.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable
from typing import Any

import anyio
import httpcore
import httpx

from ._egress_policy import (
    PUBLIC_ONLY as PUBLIC_ONLY,
    EgressPolicy as EgressPolicy,
    parse_networks as parse_networks,
    toolset_policy as toolset_policy,
)


class EgressRefused(httpx.ConnectError):
    """A network tool tried to reach an address the egress policy refuses."""


class _GuardedBackend:
    """An httpcore (or httpcore2) network backend that connects only where the policy allows.

    ``inner``: the library's own backend; ``connect_errors``: its connect exceptions (the next
    address is tried); ``fail``: makes the exception a refusal or a resolution failure is
    raised as (the client library's ``ConnectError`` family)."""

    def __init__(
        self,
        policy: EgressPolicy,
        inner: Any,
        connect_errors: tuple[type[Exception], ...],
        fail: Any,
    ) -> None:
        self._policy = policy
        self._backend = inner
        self._connect_errors = connect_errors
        self._fail = fail

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> Any:
        try:
            infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise self._fail(f"cannot resolve {host}: {exc}", False) from None
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
        for address in addresses:
            why = self._policy.refusal(address)
            if why:
                raise self._fail(why, True)
        if not addresses:
            raise self._fail(f"cannot resolve {host}", False)
        problem: Exception | None = None
        for address in addresses:  # the checked literals: nothing resolves the name again
            try:
                return await self._backend.connect_tcp(
                    address, port, timeout, local_address, socket_options
                )
            except self._connect_errors as exc:
                problem = exc
        assert problem is not None
        raise problem

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: Any = None,
    ) -> Any:
        raise self._fail("refused by the egress policy: unix sockets are not reachable", True)

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


def _httpx_failure(text: str, refused: bool) -> Exception:
    return EgressRefused(text) if refused else httpx.ConnectError(text)


class GuardedTransport(httpx.AsyncHTTPTransport):
    """An httpx transport that connects only where ``policy`` allows (see the module doc)."""

    def __init__(self, policy: EgressPolicy, **kwargs: Any) -> None:
        kwargs.setdefault("retries", 0)
        super().__init__(trust_env=False, **kwargs)
        # httpx has no parameter for it: the pool's backend is swapped before any connection.
        self._pool._network_backend = _GuardedBackend(  # type: ignore[assignment]
            policy,
            httpcore.AnyIOBackend(),
            (httpcore.ConnectError, httpcore.ConnectTimeout),
            _httpx_failure,
        )


def guarded_client(policy: EgressPolicy, **kwargs: Any) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` over a :class:`GuardedTransport` (no environment proxies)."""
    return httpx.AsyncClient(transport=GuardedTransport(policy), trust_env=False, **kwargs)


def guarded_httpx2_client(policy: EgressPolicy, **kwargs: Any) -> Any:
    """The same guard for an ``httpx2.AsyncClient`` (the MCP SDK's client: remote MCP)."""
    import httpcore2
    import httpx2

    def failure(text: str, refused: bool) -> Exception:
        return httpx2.ConnectError(text)

    transport = httpx2.AsyncHTTPTransport(retries=0, trust_env=False)
    transport._pool._network_backend = _GuardedBackend(  # type: ignore[assignment]
        policy,
        httpcore2.AnyIOBackend(),
        (httpcore2.ConnectError, httpcore2.ConnectTimeout),
        failure,
    )
    return httpx2.AsyncClient(transport=transport, trust_env=False, **kwargs)
