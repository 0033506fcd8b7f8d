"""The SSRF guard: decides, after DNS resolution, whether the worker may talk to an address.

Users choose the URLs a worker fetches, and a worker pod sits inside the cluster network, next
to the cloud metadata endpoint (169.254.169.254), the Kubernetes API and every internal
service. So every request — the user's URL, each redirect hop, each sub-resource a page loads —
is checked here, and only http/https to globally routable addresses passes unless the address
lies inside an explicitly allowed network (`SCRAPEQ_ALLOW_NETWORKS`, `--allow-networks`). The
address rules themselves are `scrapeq_queue.addresses`, shared with the operator's webhooks.

Checking the URL's host name once is not enough: a name can resolve to an internal address, so
the check runs on the resolved addresses; the plain-HTTP engine connects only to addresses this
guard returned (`GuardedResolver`), which also closes the DNS-rebinding gap for it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver, ResolveResult
from scrapeq_queue.addresses import (
    IPAddress,
    IPNetwork,
    denial_reason,
    describe,
    inside_networks,
    parse_networks,
)
from scrapeq_queue.urls import BAD_URL_REASON, target_problem

from .errors import BlockedRequest, RetryLater

ALLOWED_SCHEMES = frozenset({"http", "https"})

# How long a resolution is trusted. Short, so a name that moves is re-checked soon.
DNS_CACHE_SECONDS = 30.0
_DNS_CACHE_ENTRIES = 4096


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
        return inside_networks(address, self.allow_networks)

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
