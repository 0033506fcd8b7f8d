"""The egress proxy: forwards what the guard allows to the address it checked, refuses the
rest with a 403, and tells the route's holder what it refused (docs/worker.md, "Threat
model"). Everything here runs on 127.0.0.0/8."""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import AsyncIterator

import pytest
from scrapeq_worker.egress_proxy import EgressProxy, Refusal, Route, UpstreamProxy
from scrapeq_worker.network_guard import IPAddress, NetworkGuard, parse_networks

from tests.waiting import eventually

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


# --- no connection outlives its client, its job or its time ---------------------------------


class StalledOrigin:
    """A site that stops sending: after the request head it answers nothing (`silent`), a head
    whose Content-Length it never fills (`short`), or one byte every 50 ms forever (`trickle`).
    `open` counts the connections whose client has not gone yet (seen from the site)."""

    def __init__(self, behaviour: str) -> None:
        self.behaviour = behaviour
        self.accepted = 0
        self.open = 0
        self.port = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, ALLOWED_HOST, 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self.open += 1
        try:
            await reader.readuntil(b"\r\n\r\n")
            if self.behaviour == "short":
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\nonly this")
            elif self.behaviour == "trickle":
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
            gone = asyncio.ensure_future(reader.read())  # the client's end of stream
            while not gone.done():
                if self.behaviour == "trickle":
                    writer.write(b".")
                await asyncio.wait({gone}, timeout=0.05)
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            self.open -= 1
            writer.close()


@pytest.fixture
async def stalled(request: pytest.FixtureRequest) -> AsyncIterator[StalledOrigin]:
    server = StalledOrigin(getattr(request, "param", "silent"))
    await server.start()
    yield server
    await server.stop()


def request_for(origin: StalledOrigin, tunnel: bool) -> bytes:
    target = f"{ALLOWED_HOST}:{origin.port}"
    if tunnel:
        return f"CONNECT {target} HTTP/1.1\r\n\r\n".encode()
    return f"GET http://{target}/ HTTP/1.1\r\nHost: {target}\r\n\r\n".encode()


async def open_through(
    route: Route, origin: StalledOrigin, *, tunnel: bool
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A client connection through `route` that has reached `origin` (a request sent)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", route.port)
    writer.write(request_for(origin, tunnel))
    if tunnel:
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        writer.write(f"GET / HTTP/1.1\r\nHost: {ALLOWED_HOST}\r\n\r\n".encode())
    await writer.drain()
    await eventually(lambda: origin.open == 1, within=5, what="the site to see the connection")
    return reader, writer


@pytest.mark.parametrize("stalled", ["silent", "short", "trickle"], indirect=True)
@pytest.mark.parametrize("tunnel", [False, True], ids=["forwarded", "tunnel"])
async def test_the_site_connection_ends_within_a_second_of_the_browser_side_closing(
    stalled: StalledOrigin, tunnel: bool
) -> None:
    """The proxy's default timeouts (60 s idle, 600 s in all) are far away: only noticing the
    browser's side closing ends the site's connection this soon."""
    proxy = EgressProxy(guard())
    route = await proxy.open_route()
    try:
        _, writer = await open_through(route, stalled, tunnel=tunnel)
        writer.close()
        await eventually(lambda: stalled.open == 0, within=1.0, what="the site connection to end")
        await eventually(lambda: not route.live, within=1.0, what="the proxy to let go of it")
    finally:
        await proxy.close()
    assert stalled.accepted == 1


@pytest.mark.parametrize("tunnel", [False, True], ids=["forwarded", "tunnel"])
async def test_a_connection_with_no_bytes_either_way_is_closed_on_both_sides_after_the_idle_timeout(
    stalled: StalledOrigin, tunnel: bool
) -> None:
    proxy = EgressProxy(guard(), idle_timeout_seconds=0.5)
    route = await proxy.open_route()
    try:
        loop = asyncio.get_running_loop()
        started = loop.time()
        reader, writer = await open_through(route, stalled, tunnel=tunnel)
        async with asyncio.timeout(3):
            assert await reader.read() == b""  # the browser's side sees the end
        took = loop.time() - started
        await eventually(lambda: stalled.open == 0, within=1.0, what="the site connection to end")
        writer.close()
    finally:
        await proxy.close()
    assert 0.5 <= took <= 1.5


@pytest.mark.parametrize("stalled", ["trickle"], indirect=True)
async def test_a_site_that_trickles_forever_is_cut_after_the_connection_time_limit(
    stalled: StalledOrigin,
) -> None:
    """Never idle (a byte every 50 ms), so only the total limit ends it."""
    proxy = EgressProxy(guard(), idle_timeout_seconds=0.5, max_connection_seconds=1.5)
    route = await proxy.open_route()
    try:
        loop = asyncio.get_running_loop()
        started = loop.time()
        reader, writer = await open_through(route, stalled, tunnel=False)
        received = b""
        async with asyncio.timeout(5):
            while chunk := await reader.read(1024):
                received += chunk
        took = loop.time() - started
        await eventually(lambda: stalled.open == 0, within=1.0, what="the site connection to end")
        writer.close()
    finally:
        await proxy.close()
    assert received.startswith(b"HTTP/1.1 200 OK")
    assert received.count(b".") >= 10
    assert 1.0 <= took <= 2.5


async def test_a_released_route_cuts_its_connections_and_lets_nothing_out_until_held_again(
    stalled: StalledOrigin, origin: Origin
) -> None:
    proxy = EgressProxy(guard())
    route = await proxy.open_route()
    route.holder = [].append
    request = f"GET http://{ALLOWED_HOST}:{origin.port}/ HTTP/1.1\r\nHost: x\r\n\r\n".encode()
    try:
        reader, writer = await open_through(route, stalled, tunnel=True)
        await route.release()
        assert route.holder is None
        assert not route.live
        await eventually(lambda: stalled.open == 0, within=1.0, what="the site connection to end")
        async with asyncio.timeout(2):
            assert await reader.read() == b""
        writer.close()
        between_jobs = await through(route, request)
        refusals: list[Refusal] = []
        route.holder = refusals.append  # the next job
        next_job = await through(route, request)
    finally:
        await proxy.close()
    assert between_jobs.startswith(b"HTTP/1.1 403")
    assert b"between its jobs" in between_jobs
    assert origin.connections == 1
    assert next_job.endswith(b"allowed")
    assert refusals == []


async def test_closing_a_route_cuts_its_open_connections(stalled: StalledOrigin) -> None:
    proxy = EgressProxy(guard())
    route = await proxy.open_route()
    try:
        _, writer = await open_through(route, stalled, tunnel=False)
        await route.close()
        assert not route.live
        await eventually(lambda: stalled.open == 0, within=1.0, what="the site connection to end")
        writer.close()
    finally:
        await proxy.close()


async def test_a_response_head_larger_than_the_proxy_reads_ends_both_sides(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A site that sends an endless header line: the proxy stops reading at its limit and
    closes both sides, with nothing raised into the event loop's error log."""
    closed = asyncio.Event()

    async def endless_head(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nX-Long: ")
        try:
            while True:
                writer.write(b"a" * 65536)
                await writer.drain()
        except OSError:
            closed.set()
        finally:
            writer.close()

    server = await asyncio.start_server(endless_head, ALLOWED_HOST, 0)
    port = server.sockets[0].getsockname()[1]
    proxy = EgressProxy(guard())
    route = await proxy.open_route()
    try:
        answer = await asyncio.wait_for(
            through(
                route, f"GET http://{ALLOWED_HOST}:{port}/ HTTP/1.1\r\nHost: x\r\n\r\n".encode()
            ),
            5,
        )
        await asyncio.wait_for(closed.wait(), 5)
    finally:
        await proxy.close()
        server.close()
    assert answer == b""
    assert not route.live
    assert not [record for record in caplog.records if record.levelname == "ERROR"]


class RecordingSocks5:
    """A SOCKS5 responder for one test (the real proxy, microsocks, is in
    tests/integration/worker/test_socks5_upstream.py): records the login and the CONNECT it
    was asked for, then answers "connection refused"."""

    def __init__(self) -> None:
        self.logins: list[bytes] = []
        self.connects: list[bytes] = []
        self.port = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        _, count = await reader.readexactly(2)
        await reader.readexactly(count)
        writer.write(b"\x05\x02")  # username/password
        _, user_length = await reader.readexactly(2)
        user = await reader.readexactly(user_length)
        (password_length,) = await reader.readexactly(1)
        self.logins.append(user + b":" + await reader.readexactly(password_length))
        writer.write(b"\x01\x00")
        self.connects.append(await reader.readexactly(4 + 4 + 2))
        writer.write(b"\x05\x05\x00\x01" + bytes(6))
        await writer.drain()
        writer.close()


async def test_a_socks5_upstream_is_asked_for_the_checked_address_never_the_name(
    origin: Origin, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def resolved(self: NetworkGuard, host: str, port: int) -> tuple[IPAddress, ...]:
        return (ipaddress.ip_address(ALLOWED_HOST),)

    monkeypatch.setattr(NetworkGuard, "_lookup", resolved)
    socks = RecordingSocks5()
    await socks.start()
    proxy = EgressProxy(
        guard(), upstream=UpstreamProxy.parse(f"socks5://me:s3cret-pw@127.0.0.1:{socks.port}")
    )
    route = await proxy.open_route()
    refusals: list[Refusal] = []
    route.holder = refusals.append
    try:
        answer = await through(route, f"CONNECT shop.test:{origin.port} HTTP/1.1\r\n\r\n".encode())
    finally:
        await proxy.close()
        assert socks.server is not None
        socks.server.close()

    assert socks.logins == [b"me:s3cret-pw"]
    # CONNECT, IPv4 (ATYP 1), the checked address and the port: no name for it to resolve.
    assert socks.connects == [
        b"\x05\x01\x00\x01"
        + ipaddress.ip_address(ALLOWED_HOST).packed
        + origin.port.to_bytes(2, "big")
    ]
    assert answer.startswith(b"HTTP/1.1 502")
    assert [(refusal.reason, refusal.retryable) for refusal in refusals] == [
        ("upstream_proxy_error", True)
    ]
    assert "connection refused" in refusals[0].error
    assert "s3cret-pw" not in refusals[0].error
