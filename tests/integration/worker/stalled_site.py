"""A site on the allowed test address that stops sending and never lets go first: it ignores
its client's end of stream (as a slowloris or a dead server does), so only a client that closes
its socket ends a connection. `sockets_to` counts what the worker's process still holds.

`/page/<n>` is an HTML page whose image, script and stylesheet each go to one kind of stall:
`/silent/...` reads the request and answers nothing, `/short/...` sends a head whose
Content-Length it never fills, `/trickle/...` sends one body byte every 100 ms forever. Those
three paths can also be fetched as documents. `/after-load/<n>` loads at once and only then
starts stalled requests (after_load_page).
"""

from __future__ import annotations

import asyncio
import collections
import ipaddress
import os
from collections.abc import Iterator

from .site import SITE_HOST, ThreadedServer

STALLS = ("silent", "short", "trickle")


def stalled_page(n: str) -> bytes:
    body = (
        "<!doctype html><html><head><title>stalled</title>"
        f'<link rel="stylesheet" href="/short/{n}.css">'
        f'<script src="/trickle/{n}.js"></script></head>'
        f'<body><h1>stalled {n}</h1><img src="/silent/{n}.png"></body></html>'
    ).encode()
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nConnection: close\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )


def after_load_page(n: str) -> bytes:
    """Loads at once; then opens a silent and a trickling request, shows `#started` a little
    later, and tries a new silent request every 200 ms for as long as the document lives."""
    body = (
        "<!doctype html><html><head><title>after load</title></head><body><script>"
        "addEventListener('load', () => {"
        f" fetch('/silent/{n}-fetch'); fetch('/trickle/{n}-stream');"
        " let tries = 0;"
        f" setInterval(() => fetch('/silent/{n}-again-' + (tries++)), 200);"
        " setTimeout(() => { const p = document.createElement('p'); p.id = 'started';"
        " p.textContent = 'started'; document.body.appendChild(p); }, 500);"
        "});</script></body></html>"
    ).encode()
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nConnection: close\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )


class StalledSite(ThreadedServer):
    """The running site: `url(path)`; `accepted` counts connections per stall, `open` those
    not ended yet (a silent or short one ends only when the site stops)."""

    def __init__(self) -> None:
        super().__init__()
        self.port = 0
        self.open: collections.Counter[str] = collections.Counter()
        self.accepted: collections.Counter[str] = collections.Counter()
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()

    def url(self, path: str) -> str:
        return f"http://{SITE_HOST}:{self.port}{path}"

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._serve, SITE_HOST, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for handler in list(self._handlers):
            handler.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handler = asyncio.current_task()
        if handler is not None:
            self._handlers.add(handler)
            handler.add_done_callback(self._handlers.discard)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            writer.close()
            return
        path = head.split(b" ", 2)[1].decode("latin-1") if head.count(b" ") >= 2 else "/"
        kind = path.split("/")[1] if "/" in path[1:] else ""
        if kind not in STALLS:
            page = after_load_page if kind == "after-load" else stalled_page
            writer.write(page(path.rsplit("/", 1)[-1]))
            await writer.drain()
            writer.close()
            return
        self.accepted[kind] += 1
        self.open[kind] += 1
        try:
            if kind == "short":
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\nonly this")
            elif kind == "trickle":
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
            while True:
                if kind == "trickle":
                    writer.write(b"/")  # fails once the client's socket is gone
                    await writer.drain()
                await asyncio.sleep(0.1)
        except OSError:
            pass
        finally:
            self.open[kind] -= 1
            writer.close()


def running_stalled_site() -> Iterator[StalledSite]:
    server = StalledSite()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def sockets_to(host: str, port: int) -> int:
    """How many sockets this process holds whose far end is `host:port` (IPv4), in any state
    but TIME_WAIT: the connections a worker running in the test's process still keeps."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    wanted = f"{int(ipaddress.IPv4Address(host)).to_bytes(4, 'little').hex().upper()}:{port:04X}"
    held = 0
    with open("/proc/net/tcp") as table:
        next(table)
        for line in table:
            columns = line.split()
            remote, state, inode = columns[2], columns[3], columns[9]
            if remote == wanted and state != "06" and inode in inodes:
                held += 1
    return held
