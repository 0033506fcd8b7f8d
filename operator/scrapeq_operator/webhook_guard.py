"""The address guard of webhooks: the operator posts only to addresses a worker could fetch.

A ScrapeJob's author chooses the endpoint, and the operator runs inside the cluster with the
cloud metadata endpoint and every internal service in reach, so an endpoint is resolved once,
every address checked with the worker's rules (`scrapeq_queue.addresses`), and the request
connects only to those checked addresses (`PinnedResolver`): no second lookup, no DNS
rebinding. Networks in `webhook_allow_networks` are exempt (tests, a demo on localhost).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver, ResolveResult
from scrapeq_queue.addresses import IPAddress, IPNetwork, denial_reason, inside_networks

# A name that does not resolve within this long is treated as a failed attempt (retried).
RESOLVE_TIMEOUT_SECONDS = 5.0


class WebhookRefused(Exception):
    """The endpoint may never be posted to (scheme, user information, forbidden address)."""


class WebhookUnreachable(Exception):
    """The endpoint's name did not resolve now; a later attempt may succeed."""


@dataclass(frozen=True)
class CheckedEndpoint:
    """An endpoint whose every address passed the guard."""

    host: str
    port: int
    addresses: tuple[IPAddress, ...]


@dataclass(frozen=True)
class WebhookGuard:
    """Checks endpoints against the address rules, with an allow-list."""

    allow_networks: Sequence[IPNetwork] = ()

    async def check(self, url: str) -> CheckedEndpoint:
        """Resolve `url`'s host and check every address. Raises WebhookRefused (never send)
        or WebhookUnreachable (the name did not resolve)."""
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as error:
            raise WebhookRefused(f"{url!r} is not a valid URL: {error}") from error
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https"):
            raise WebhookRefused(f"scheme {scheme or '(none)'!r} is not allowed, only http(s)")
        if parts.username is not None or parts.password is not None:
            raise WebhookRefused("the URL carries user information (user:password@)")
        host = parts.hostname
        if not host:
            raise WebhookRefused("the URL has no host name")
        port = port or (443 if scheme == "https" else 80)
        addresses = await self._resolve(host, port)
        for address in addresses:
            if inside_networks(address, self.allow_networks):
                continue
            reason = denial_reason(address)
            if reason is not None:
                raise WebhookRefused(
                    f"{host} resolves to {address}, a {reason} address; webhooks go to public "
                    "addresses only"
                )
        return CheckedEndpoint(host, port, addresses)

    async def _resolve(self, host: str, port: int) -> tuple[IPAddress, ...]:
        try:
            return (ipaddress.ip_address(host),)
        except ValueError:
            pass
        try:
            async with asyncio.timeout(RESOLVE_TIMEOUT_SECONDS):
                infos = await asyncio.get_running_loop().getaddrinfo(
                    host, port, type=socket.SOCK_STREAM
                )
        except (OSError, TimeoutError) as error:
            raise WebhookUnreachable(f"{host} did not resolve: {error or 'timed out'}") from error
        # A link-local IPv6 answer carries its zone ("fe80::1%eth0"), which ip_address refuses;
        # the address without it is what the rules judge (and refuse).
        addresses = tuple(
            dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos)
        )
        if not addresses:
            raise WebhookUnreachable(f"{host} resolved to no address")
        return addresses


class PinnedResolver(AbstractResolver):
    """An aiohttp resolver that answers only with one endpoint's checked addresses: aiohttp
    connects to exactly these (TLS still verifies the host name)."""

    def __init__(self, endpoint: CheckedEndpoint) -> None:
        self._endpoint = endpoint

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        if host.strip("[]").lower() != self._endpoint.host.lower():
            # A redirect is never followed, so no other host is ever asked for.
            raise OSError(f"{host} is not the checked webhook host")
        return [
            {
                "hostname": host,
                "host": str(address),
                "port": port,
                "family": socket.AF_INET6 if address.version == 6 else socket.AF_INET,
                "proto": 0,
                "flags": socket.AI_NUMERICHOST,
            }
            for address in self._endpoint.addresses
        ]

    async def close(self) -> None:
        return None
