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

import ipaddress
import socket
from collections.abc import Iterable, Mapping
from typing import Any

import anyio
import attrs
import httpcore
import httpx

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


class EgressRefused(httpx.ConnectError):
    """A network tool tried to reach an address the egress policy refuses."""


def parse_networks(values: Iterable[str], where: str = "") -> tuple[Network, ...]:
    """CIDRs (or single addresses) as networks. Raises ValueError naming the bad one."""
    found = []
    for value in values:
        try:
            found.append(ipaddress.ip_network(str(value).strip(), strict=False))
        except ValueError:
            raise ValueError(f"{where}{value!r} is not an IP network (CIDR)") from None
    return tuple(found)


def _embedded_v4(address: Address) -> Address:
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address in _NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if address.sixtofour is not None:
            return address.sixtofour
    return address


def _kind(address: Address) -> str:
    """Why ``address`` is not public ("" when it is)."""
    if address.is_unspecified:
        return "an unspecified address"
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_multicast:
        return "a multicast address"
    if address.is_private:
        return "a private address"
    if not address.is_global or address.is_reserved:
        return "not a public address"
    return ""


@attrs.frozen
class EgressPolicy:
    """Public addresses only, plus ``allowed`` networks (``--allow-private-network``)."""

    allowed: tuple[Network, ...] = ()

    def also(self, networks: Iterable[Network]) -> EgressPolicy:
        return EgressPolicy((*self.allowed, *networks))

    def refusal(self, address: str) -> str:
        """Why ``address`` may not be reached ("" when it may)."""
        try:
            ip = ipaddress.ip_address(address.split("%", 1)[0])
        except ValueError:
            return f"{address} is not an IP address"
        if any(ip in net or _embedded_v4(ip) in net for net in self.allowed):
            return ""
        inner = _embedded_v4(ip)  # an address carrying an IPv4 one is judged by it
        kind = _kind(inner)
        if not kind:
            return ""
        shown = f"{ip} ({inner})" if inner != ip else str(ip)
        return (
            f"refused by the egress policy: {shown} is {kind} (an operator can allow it "
            "with --allow-private-network CIDR)"
        )


PUBLIC_ONLY = EgressPolicy()
"""The default: public addresses only."""


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


def toolset_policy(options: Mapping[str, Any], base: EgressPolicy) -> EgressPolicy:
    """``base`` (the server's) plus a toolset's ``allow_private_network`` CIDRs.

    Raises:
        ValueError: the option is not a list of CIDRs.
    """
    raw = options.get("allow_private_network")
    if raw is None:
        return base
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list | tuple):
        raise ValueError("allow_private_network must be a list of CIDRs")
    return base.also(parse_networks(raw, "allow_private_network: "))


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
