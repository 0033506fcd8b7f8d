"""A local site that serves sitemaps, made on request: an index of sitemaps (gzip-compressed
or not, whatever their names say), their pages, and hostile documents.

Paths (on 127.0.0.2, in a thread with its own event loop):
- /index.xml?n=N&m=M: a sitemap index of N sitemaps; sitemap i is /sitemaps/i.xml?m=M,
  gzip-compressed for odd i (its name still says .xml).
- /sitemaps/I.xml?m=M: a urlset of M pages /page/I/J, J < M, each with a lastmod of
  2026-01-J+1 (so a lastmodAfter filter keeps a known part); streamed in pieces, never whole.
- /robots.txt: its Sitemap: line names /index.xml?n=2&m=3.
- /hostile/NAME: a named hostile document (HOSTILE); /redirect-private: a redirect to
  169.254.169.254.
- /page/...: a small HTML page.
It counts the requests of every sitemap path.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import zlib
from collections.abc import Iterator
from typing import Final

from aiohttp import web

HOST: Final = "127.0.0.2"
XMLNS: Final = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
HOSTILE: Final = {
    "entities.xml": (
        b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;'
        b'&lol;&lol;&lol;&lol;&lol;&lol;">]><urlset><url><loc>&lol2;</loc></url></urlset>',
        "application/xml",
    ),
    "not-xml.xml": (b"this is not a sitemap at all", "application/xml"),
    "html.xml": (b"<html><body><a href='/a'>a</a></body></html>", "text/html"),
    "broken.xml.gz": (b"\x1f\x8b\x08\x00 not deflate at all", "application/gzip"),
}


def page_url(base: str, sitemap: int, page: int) -> str:
    return f"{base}/page/{sitemap}/{page}"


class SitemapSite:
    def __init__(self) -> None:
        self.port = 0
        self.requests: collections.Counter[str] = collections.Counter()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None

    @property
    def base(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/index.xml", self._index)
        app.router.add_get("/sitemaps/{number:\\d+}.xml", self._sitemap)
        app.router.add_get("/robots.txt", self._robots)
        app.router.add_get("/hostile/{name}", self._hostile)
        app.router.add_get("/redirect-private", self._redirect_private)
        app.router.add_get("/page/{rest:.*}", self._page)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, HOST, 0)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _index(self, request: web.Request) -> web.Response:
        self.requests["/index.xml"] += 1
        count, pages = int(request.query["n"]), int(request.query["m"])
        entries = "".join(
            f"<sitemap><loc>{self.base}/sitemaps/{number}.xml?m={pages}</loc></sitemap>"
            for number in range(count)
        )
        body = f'<?xml version="1.0"?><sitemapindex {XMLNS}>{entries}</sitemapindex>'
        return web.Response(body=body.encode(), content_type="application/xml")

    async def _sitemap(self, request: web.Request) -> web.StreamResponse:
        number = int(request.match_info["number"])
        pages = int(request.query["m"])
        self.requests[f"/sitemaps/{number}.xml"] += 1
        compress = number % 2 == 1
        response = web.StreamResponse(
            headers={"Content-Type": "application/octet-stream" if compress else "text/xml"}
        )
        await response.prepare(request)
        compressor = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)

        async def send(data: bytes) -> None:
            await response.write(compressor.compress(data) if compress else data)

        await send(f'<?xml version="1.0" encoding="UTF-8"?><urlset {XMLNS}>'.encode())
        piece: list[str] = []
        for page in range(pages):
            day = page % 28 + 1
            piece.append(
                f"<url><loc>{page_url(self.base, number, page)}</loc>"
                f"<lastmod>2026-01-{day:02d}</lastmod></url>"
            )
            if len(piece) == 1000:
                await send("".join(piece).encode())
                piece = []
        await send(("".join(piece) + "</urlset>").encode())
        if compress:
            await response.write(compressor.flush())
        await response.write_eof()
        return response

    async def _robots(self, request: web.Request) -> web.Response:
        text = f"User-agent: *\nAllow: /\nSitemap: {self.base}/index.xml?n=2&m=3\n"
        return web.Response(text=text, content_type="text/plain")

    async def _hostile(self, request: web.Request) -> web.Response:
        body, content_type = HOSTILE[request.match_info["name"]]
        return web.Response(body=body, content_type=content_type)

    async def _redirect_private(self, request: web.Request) -> web.Response:
        raise web.HTTPFound("http://169.254.169.254/latest/meta-data/sitemap.xml")

    async def _page(self, request: web.Request) -> web.Response:
        return web.Response(
            text="<html><body><h1>page</h1></body></html>", content_type="text/html"
        )


def running_sitemap_site() -> Iterator[SitemapSite]:
    site = SitemapSite()
    site.start()
    try:
        yield site
    finally:
        site.stop()
