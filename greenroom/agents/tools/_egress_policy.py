"""The egress policy's value: which addresses network tools may reach (issue 23; decision
0021). The check itself, inside the connection, is ``_egress.py``'s; this module imports no HTTP
client, so that a server (and ``greenroom validate``) can carry a policy without loading httpx.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


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
