"""The SSRF guard: decides, after DNS resolution, whether the worker may talk to an address.

Users choose the URLs a worker fetches, and a worker pod sits inside the cluster network, next
to the cloud metadata endpoint (169.254.169.254), the Kubernetes API and every internal
service. So every request — the user's URL, each redirect hop, each sub-resource a page loads —
is checked here, and only http/https to globally routable addresses passes unless the address
lies inside an explicitly allowed network (`SCRAPEQ_ALLOW_NETWORKS`, `--allow-networks`).

Checking the URL's host name once is not enough: a name can resolve to an internal address, so
the check runs on the resolved addresses; the plain-HTTP engine connects only to addresses this
guard returned (`GuardedResolver`), which also closes the DNS-rebinding gap for it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver, ResolveResult
from scrapeq_queue.urls import BAD_URL_REASON, target_problem

from .errors import BlockedRequest, RetryLater

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

ALLOWED_SCHEMES = frozenset({"http", "https"})

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

# How long a resolution is trusted. Short, so a name that moves is re-checked soon.
DNS_CACHE_SECONDS = 30.0
_DNS_CACHE_ENTRIES = 4096


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


def _unwrap(address: IPAddress) -> IPAddress:
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
    real = _unwrap(address)
    for network, label in _NAMED_DENIED:
        if real.version == network.version and real in network:
            return label
    if not real.is_global or real.is_multicast or real.is_reserved:
        return "not globally routable"
    return None


@dataclass
class NetworkGuard:
    """Checks URLs and addresses; holds the allow-list and a short DNS cache.

    `enabled=False` turns the guard off entirely (only for benchmarks against loopback sites
    that do not want the allow-list; never the default).
    """

    allow_networks: Sequence[IPNetwork] = ()
    enabled: bool = True
    resolve_timeout_seconds: float = 5.0
    _cache: dict[tuple[str, int], tuple[float, tuple[IPAddress, ...]]] = field(
        default_factory=dict, repr=False
    )

    def allowed_explicitly(self, address: IPAddress) -> bool:
        """True when `address` (or the IPv4 address it wraps) is inside the allow-list."""
        candidates = {address, _unwrap(address)}
        return any(
            candidate.version == network.version and candidate in network
            for candidate in candidates
            for network in self.allow_networks
        )

    def check_address(self, address: IPAddress, *, url: str) -> None:
        """Raise BlockedRequest when the worker must not connect to `address` for `url`."""
        if not self.enabled or self.allowed_explicitly(address):
            return
        reason = denial_reason(address)
        if reason is not None:
            raise BlockedRequest(
                f"blocked request to {url}: {address} is a {reason} address; the worker only "
                "fetches public addresses (allow a network with SCRAPEQ_ALLOW_NETWORKS)",
                reason="blocked_address",
            )

    def check_scheme(self, url: str) -> tuple[str, str, int]:
        """Return (scheme, host, port) of an http/https URL or raise BlockedRequest."""
        # The rule a row's URL is held to at claim time, whatever a page's requests' length.
        problem = target_problem(url, max_chars=None)
        if problem is not None:
            raise BlockedRequest(f"blocked request: {problem}", reason=BAD_URL_REASON)
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as error:
            raise BlockedRequest(
                f"blocked request to {url!r}: {error}", reason="bad_url"
            ) from error
        scheme = parts.scheme.lower()
        if scheme not in ALLOWED_SCHEMES:
            raise BlockedRequest(
                f"blocked request to {url}: scheme {scheme or '(none)'!r} is not allowed, "
                "only http and https",
                reason="blocked_scheme",
            )
        host = parts.hostname
        if not host:
            raise BlockedRequest(f"blocked request to {url}: no host name", reason="bad_url")
        return scheme, host, port or (443 if scheme == "https" else 80)

    async def check_url(self, url: str) -> tuple[IPAddress, ...]:
        """Check scheme and every address `url`'s host resolves to; return the addresses.

        Raises BlockedRequest (forbidden scheme/address) or RetryLater (the name did not
        resolve: DNS failures are usually temporary).
        """
        _, host, port = self.check_scheme(url)
        addresses = await self.resolve(host, port)
        if self.enabled:
            for address in addresses:
                self.check_address(address, url=url)
        return addresses

    async def resolve(self, host: str, port: int) -> tuple[IPAddress, ...]:
        """Resolve `host` to addresses (an IP literal resolves to itself), with a short cache."""
        try:
            return (ipaddress.ip_address(host.strip("[]")),)
        except ValueError:
            pass
        key = (host.lower(), port)
        now = time.monotonic()
        cached = self._cache.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            async with asyncio.timeout(self.resolve_timeout_seconds):
                addresses = await self._lookup(host, port)
        except (OSError, TimeoutError) as error:
            raise RetryLater(
                f"could not resolve {host}: {error or 'timed out'}", reason="dns_error"
            ) from error
        if len(self._cache) >= _DNS_CACHE_ENTRIES:
            self._cache.clear()
        self._cache[key] = (now + DNS_CACHE_SECONDS, addresses)
        return addresses

    async def _lookup(self, host: str, port: int) -> tuple[IPAddress, ...]:
        """Ask the system resolver (one place, so tests can stand in a resolver they control)."""
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        return tuple(dict.fromkeys(ipaddress.ip_address(info[4][0]) for info in infos))


class GuardedResolver(AbstractResolver):
    """An aiohttp resolver that only ever hands out addresses the guard allows.

    aiohttp connects to exactly the addresses a resolver returns, so the plain-HTTP engine can
    never reach an address that was not checked, even if the name resolves differently later.
    """

    def __init__(self, guard: NetworkGuard) -> None:
        self._guard = guard

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        addresses = await self._guard.check_url(f"http://{_bracket(host)}:{port or 80}/")
        results: list[ResolveResult] = []
        for address in addresses:
            results.append(
                {
                    "hostname": host,
                    "host": str(address),
                    "port": port,
                    "family": socket.AF_INET6 if address.version == 6 else socket.AF_INET,
                    "proto": 0,
                    "flags": socket.AI_NUMERICHOST,
                }
            )
        return results

    async def close(self) -> None:
        return None


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def describe(networks: Sequence[IPNetwork]) -> str:
    """Human form of an allow-list for logs."""
    return ", ".join(str(network) for network in networks) or "(none)"


__all__: list[str] = [
    "ALLOWED_SCHEMES",
    "GuardedResolver",
    "IPAddress",
    "IPNetwork",
    "NetworkGuard",
    "denial_reason",
    "describe",
    "parse_networks",
]
