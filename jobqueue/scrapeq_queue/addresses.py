"""Which network addresses scrapeq may connect to for a user: the one set of address rules.

Users choose the URLs a worker fetches and the webhook endpoints the operator posts to, and both
run inside the cluster network, next to the cloud metadata endpoint (169.254.169.254), the
Kubernetes API and every internal service. Both components refuse, after DNS resolution, every
address that is not globally routable unless it lies inside a network the operator of the
cluster allowed explicitly (`SCRAPEQ_ALLOW_NETWORKS`, `SCRAPEQ_OPERATOR_WEBHOOK_ALLOW_NETWORKS`).
The rules are pure (standard library only) so that the worker's guard and the operator's webhook
delivery share them without importing each other.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Named deny ranges, checked before the generic "not globally routable" rule so that the error
# message can say *why* an address is refused. Order matters only for the message.
_NAMED_DENIED: tuple[tuple[IPNetwork, str], ...] = tuple(
    (ipaddress.ip_network(cidr), label)
    for cidr, label in (
        ("169.254.0.0/16", "link-local (cloud metadata)"),
        ("fe80::/10", "link-local"),
        ("127.0.0.0/8", "loopback"),
        ("::1/128", "loopback"),
        ("10.0.0.0/8", "private"),
        ("172.16.0.0/12", "private"),
        ("192.168.0.0/16", "private"),
        ("fc00::/7", "private (unique local)"),
        # Carrier-grade NAT: Python's `is_private` does not include it, clusters use it.
        ("100.64.0.0/10", "carrier-grade NAT"),
        ("0.0.0.0/8", "unspecified"),
        ("::/128", "unspecified"),
        ("224.0.0.0/4", "multicast"),
        ("ff00::/8", "multicast"),
    )
)

# NAT64 addresses embed the IPv4 address a gateway will connect to: check the embedded one too.
# (6to4, 2002::/16, is recognised by `IPv6Address.sixtofour`; Python calls 2002::/16 global, so
# without unwrapping 2002:c0a8:0101:: would pass as public while it reaches 192.168.1.1.)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def parse_networks(text: str | Iterable[str]) -> tuple[IPNetwork, ...]:
    """Parse comma-separated (or listed) CIDRs such as "127.0.0.0/8, ::1/128".

    Raises ValueError naming the first entry that is not a network.
    """
    items = text.split(",") if isinstance(text, str) else list(text)
    networks: list[IPNetwork] = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError as error:
            raise ValueError(f"not a network in the allow-list: {item!r} ({error})") from error
    return tuple(networks)


def unwrap(address: IPAddress) -> IPAddress:
    """Return the IPv4 address a v4-mapped/NAT64/6to4 IPv6 address really reaches."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address in _NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if address.sixtofour is not None:
            return address.sixtofour
    return address


def denial_reason(address: IPAddress) -> str | None:
    """Why `address` is forbidden before any allow-list is applied, or None if it is public."""
    real = unwrap(address)
    for network, label in _NAMED_DENIED:
        if real.version == network.version and real in network:
            return label
    if not real.is_global or real.is_multicast or real.is_reserved:
        return "not globally routable"
    return None


def inside_networks(address: IPAddress, networks: Sequence[IPNetwork]) -> bool:
    """True when `address` (or the IPv4 address it wraps) lies inside one of `networks`."""
    candidates = {address, unwrap(address)}
    return any(
        candidate.version == network.version and candidate in network
        for candidate in candidates
        for network in networks
    )


def describe(networks: Sequence[IPNetwork]) -> str:
    """Human form of an allow-list for logs."""
    return ", ".join(str(network) for network in networks) or "(none)"


__all__: list[str] = [
    "IPAddress",
    "IPNetwork",
    "denial_reason",
    "describe",
    "inside_networks",
    "parse_networks",
    "unwrap",
]
