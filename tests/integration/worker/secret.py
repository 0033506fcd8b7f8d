"""A 'secret' service on loopback that counts every TCP connection and UDP datagram it gets.

It stands for an internal service (a database, the cloud metadata endpoint) a hostile page
wants to reach. It listens on 127.0.0.1 and ::1 — outside the tests' allow-list (127.0.0.2/32)
— on one port number for TCP and UDP alike, and answers nothing useful: a test passes when it
counted zero. It runs in its own thread so it counts even while the test's loop is busy.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

from .site import ThreadedServer

HOSTS = ("127.0.0.1", "::1")


class SecretServer(ThreadedServer):
    """`port`: listen on this port (TCP and UDP, on 127.0.0.1 only) instead of a free one."""

    def __init__(self, port: int = 0) -> None:
        super().__init__()
        self._wanted_port = port
        self.tcp_connections = 0
        self.udp_datagrams = 0
        self.port = 0
        self._closers: list[object] = []

    @property
    def hits(self) -> int:
        return self.tcp_connections + self.udp_datagrams

    def url(self, path: str = "/", *, scheme: str = "http", host: str = "127.0.0.1") -> str:
        shown = f"[{host}]" if ":" in host else host
        return f"{scheme}://{shown}:{self.port}{path}"

    async def _start(self) -> None:
        if self._wanted_port:
            await self._listen(self._wanted_port, HOSTS[:1])
            self.port = self._wanted_port
            return
        # One port number free for TCP and UDP on both addresses: try until one is.
        for _ in range(50):
            probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            probe.bind((HOSTS[0], 0))
            port = probe.getsockname()[1]
            probe.close()
            try:
                await self._listen(port, HOSTS)
            except OSError:
                await self._stop()
                continue
            self.port = port
            return
        raise RuntimeError("no port free for the secret server on 127.0.0.1 and ::1")

    async def _listen(self, port: int, hosts: tuple[str, ...]) -> None:
        loop = asyncio.get_running_loop()
        for host in hosts:
            server = await asyncio.start_server(self._accepted, host, port)
            self._closers.append(server)
            transport, _ = await loop.create_datagram_endpoint(
                lambda: _Datagrams(self), local_addr=(host, port)
            )
            self._closers.append(transport)

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.tcp_connections += 1
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 6\r\n"
            b"Access-Control-Allow-Origin: *\r\nConnection: close\r\n\r\nSECRET"
        )
        writer.close()

    async def _stop(self) -> None:
        for closer in self._closers:
            closer.close()  # type: ignore[attr-defined]
        self._closers.clear()


class _Datagrams(asyncio.DatagramProtocol):
    def __init__(self, server: SecretServer) -> None:
        self.server = server

    def datagram_received(self, data: bytes, addr: tuple[str | object, ...]) -> None:
        self.server.udp_datagrams += 1


def running_secret(port: int = 0) -> Iterator[SecretServer]:
    secret = SecretServer(port)
    secret.start()
    try:
        yield secret
    finally:
        secret.stop()
