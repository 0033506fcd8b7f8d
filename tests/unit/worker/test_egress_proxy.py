"""The egress proxy: forwards what the guard allows to the address it checked, refuses the
rest with a 403, and tells the route's holder what it refused (docs/worker.md, "Threat
model"). Everything here runs on 127.0.0.0/8."""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import AsyncIterator

import pytest
from scrapeq_worker.egress_proxy import EgressProxy, Refusal, Route
from scrapeq_worker.network_guard import IPAddress, NetworkGuard, parse_networks

pytestmark = pytest.mark.timeout(20)

ALLOWED_HOST = "127.0.0.2"


class Origin:
    """A tiny TCP server on one loopback address that answers every request with its name."""

    def __init__(self, host: str, name: bytes) -> None:
        self.host = host
        self.name = name
        self.connections = 0
        self.requests: list[bytes] = []
        self.port = 0
        self.server: asyncio.Server | None = None

    async def start(self, port: int = 0) -> None:
        self.server = await asyncio.start_server(self._serve, self.host, port)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.requests.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: keep-alive\r\n\r\n%s"
            % (len(self.name), self.name)
        )
        await writer.drain()
        writer.close()


@pytest.fixture
async def origin() -> AsyncIterator[Origin]:
    server = Origin(ALLOWED_HOST, b"allowed")
    await server.start()
    yield server
    assert server.server is not None
    server.server.close()


async def through(route: Route, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", route.port)
    writer.write(request)
    await writer.drain()
    answer = await reader.read()
    writer.close()
    return answer


def guard() -> NetworkGuard:
    return NetworkGuard(allow_networks=parse_networks(f"{ALLOWED_HOST}/32"))


async def test_an_allowed_plain_http_request_is_forwarded_once_and_closed(origin: Origin) -> None:
    proxy = EgressProxy(guard())
    route = await proxy.open_route()
    try:
        answer = await through(
            route,
            f"GET http://{ALLOWED_HOST}:{origin.port}/a?b=c HTTP/1.1\r\n"
            f"Host: {ALLOWED_HOST}:{origin.port}\r\nProxy-Connection: keep-alive\r\n\r\n".encode(),
        )
    finally:
        await proxy.close()

    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK")
    assert b"Connection: close" in head
    assert b"keep-alive" not in head
    assert body == b"allowed"
    [request] = origin.requests
    assert request.startswith(b"GET /a?b=c HTTP/1.1\r\n")
    assert b"Proxy-Connection" not in request
    assert b"Connection: close" in request


async def test_a_tunnel_to_a_loopback_address_is_refused_and_reported_to_the_holder() -> None:
    secret = Origin("127.0.0.1", b"secret")
    await secret.start()
    proxy = EgressProxy(guard())
    route = await proxy.open_route()
    refusals: list[Refusal] = []
    route.holder = refusals.append
    try:
        answer = await through(route, f"CONNECT 127.0.0.1:{secret.port} HTTP/1.1\r\n\r\n".encode())
    finally:
        await proxy.close()
        assert secret.server is not None
        secret.server.close()

    assert answer.startswith(b"HTTP/1.1 403 Forbidden")
    assert secret.connections == 0
    [refusal] = refusals
    assert refusal.target == f"127.0.0.1:{secret.port}"
    assert refusal.reason == "blocked_address"
    assert "loopback" in refusal.error


async def test_an_allowed_tunnel_carries_bytes_both_ways(origin: Origin) -> None:
    proxy = EgressProxy(guard())
    route = await proxy.open_route()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", route.port)
        writer.write(f"CONNECT {ALLOWED_HOST}:{origin.port} HTTP/1.1\r\n\r\n".encode())
        established = await reader.readuntil(b"\r\n\r\n")
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = await reader.read()
        writer.close()
    finally:
        await proxy.close()

    assert established.startswith(b"HTTP/1.1 200")
    assert answer.endswith(b"allowed")


async def test_a_refuse_all_route_lets_nothing_out(origin: Origin) -> None:
    proxy = EgressProxy(guard())
    route = await proxy.open_route(refuse_all=True)
    try:
        answer = await through(
            route, f"CONNECT {ALLOWED_HOST}:{origin.port} HTTP/1.1\r\n\r\n".encode()
        )
    finally:
        await proxy.close()

    assert answer.startswith(b"HTTP/1.1 403")
    assert origin.connections == 0


async def test_the_proxy_connects_to_the_address_it_checked_even_when_the_name_moves(
    origin: Origin, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The resolver answers the allowed address once, then the secret's: the proxy asks once
    per connection and connects to that checked answer, never by name."""
    secret = Origin("127.0.0.1", b"secret")
    await secret.start(origin.port)  # same port number: a lookup by name would land here
    answers: list[IPAddress] = []

    async def rebinding(self: NetworkGuard, host: str, port: int) -> tuple[IPAddress, ...]:
        answer = ipaddress.ip_address(ALLOWED_HOST if not answers else "127.0.0.1")
        answers.append(answer)
        return (answer,)

    monkeypatch.setattr(NetworkGuard, "_lookup", rebinding)
    proxy = EgressProxy(guard())
    route = await proxy.open_route()
    try:
        first = await through(
            route, f"GET http://rebind.test:{origin.port}/ HTTP/1.1\r\nHost: r\r\n\r\n".encode()
        )
    finally:
        await proxy.close()
        assert secret.server is not None
        secret.server.close()

    assert answers == [ipaddress.ip_address(ALLOWED_HOST)]
    assert first.endswith(b"allowed")
    assert secret.connections == 0


async def test_a_request_that_is_not_absolute_http_is_refused() -> None:
    proxy = EgressProxy(guard())
    route = await proxy.open_route()
    try:
        answer = await through(route, b"GET ftp://example.com/ HTTP/1.1\r\n\r\n")
    finally:
        await proxy.close()

    assert answer.startswith(b"HTTP/1.1 403")
